"""The vllm backends: the adapter's glue without vLLM (import guard, checkpoint mapping), and
vLLM's own layer where vLLM is importable (CI has none: those tests skip there)."""

from __future__ import annotations

import pytest
import torch
from moecert.kernels import QuantConfig, vllm_backend
from moecert.kernels.vllm_backend import VllmBackend, VllmCpuForcedBackend
from moecert.kernels.vllm_checkpoint import expert_tensors, quantization_config
from moecert.reference import MoEProblem, moe, synthesize

SMALL = MoEProblem(M=5, K=128, N=64, E=3, topk=2)


@pytest.fixture
def no_vllm(monkeypatch):
    """vLLM's import failing, whether or not it is installed."""
    def missing():
        raise ImportError("No module named 'vllm'")
    monkeypatch.setattr(vllm_backend, "_vllm", missing)
    vllm_backend._import_error.cache_clear()
    yield
    vllm_backend._import_error.cache_clear()


@pytest.mark.parametrize("backend", [VllmBackend(), VllmCpuForcedBackend()])
def test_without_vllm_available_and_supports_say_why(no_vllm, backend):
    why = backend.available()
    assert why is not None and "vllm is not importable" in why and "No module" in why
    assert backend.supports(QuantConfig.of("bf16"), SMALL) == why
    assert backend.version == "vllm -" + (" (CPU AMX gate forced)" if backend.forced_amx else "")


@pytest.mark.parametrize("scheme,attrs", [("gptq-int4", {"group_size": 32}),
                                          ("awq-int4", {"group_size": 32}),
                                          ("ct-int4", {"group_size": 32, "sym": False}),
                                          ("bf16", {}),
                                          ("fp8-w8a16", {"weight_strategy": "block"})])
def test_expert_tensors_split_gate_and_up_per_expert(scheme, attrs):
    P = MoEProblem(M=1, K=256, N=256, E=2, topk=1, bias=True)
    ckpt = synthesize(scheme, P, seed=3, **attrs)
    quant = QuantConfig.of(ckpt)
    got = dict(expert_tensors(quant, ckpt.tensors, P.N))
    w13 = [n for n in ckpt.tensors if n.startswith("w13_")]
    assert len(got) == P.E * (2 * len(w13) + len(ckpt.tensors) - len(w13))
    weight = {"gptq": "qweight", "awq": "qweight", "ct": "weight_packed"}.get(quant.layout,
                                                                               "weight")
    full = _bits(ckpt.tensors[f"w13_{weight}"])
    for e in range(P.E):
        gate, up = _bits(got[f"{e}.gate_proj.{weight}"]), _bits(got[f"{e}.up_proj.{weight}"])
        # gate then up, whole, in order: concatenated again they are the expert's w13
        axis = 0 if quant.layout in ("ct", "dense") else -1
        assert torch.equal(torch.cat([gate, up], axis), full[e])
        assert gate.shape == up.shape
        assert torch.equal(_bits(got[f"{e}.down_proj.{weight}"]),
                           _bits(ckpt.tensors[f"w2_{weight}"][e]))
        b = ckpt.tensors["w13_bias"][e]
        assert torch.equal(torch.cat([got[f"{e}.gate_proj.bias"], got[f"{e}.up_proj.bias"]]), b)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


def test_quantization_config_states_the_checkpoint_and_refuses_what_vllm_cannot_read():
    gptq = quantization_config(QuantConfig("gptq-int4", group_size=64, sym=True,
                                           checkpoint_format="gptq_v2"))
    assert (gptq["quant_method"], gptq["bits"], gptq["group_size"], gptq["checkpoint_format"]) \
        == ("gptq", 4, 64, "gptq_v2")
    assert quantization_config(QuantConfig.of("bf16")) is None
    with pytest.raises(ValueError, match="mxfp8"):
        quantization_config(QuantConfig.of("mxfp8"))


# --- with vLLM ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def vllm():
    return pytest.importorskip("vllm")


def test_vllm_bf16_layer_matches_the_reference(vllm):
    b = VllmBackend()
    assert b.supports(QuantConfig.of("bf16"), SMALL) is None
    ckpt = synthesize("bf16", SMALL, seed=1)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(SMALL.M, SMALL.K, generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(SMALL.E, generator=g)[:SMALL.topk]
                       for _ in range(SMALL.M)]).to(torch.int32)
    w = torch.rand(SMALL.M, SMALL.topk, generator=g)
    layer = b.create_layer(ckpt, SMALL)
    b.process_weights_after_loading(layer)
    y = b.apply(layer, x, w, ids)
    ref = moe(ckpt, x, w, ids, SMALL)
    assert float((y.double() - ref).norm() / ref.norm()) < 1e-2
    assert b.version.startswith(f"vllm {vllm.__version__}")


def test_forced_mode_refuses_an_amx_kernel(vllm):
    if torch.cpu._is_amx_tile_supported():
        pytest.skip("this CPU has AMX: the forced gate changes nothing")
    why = VllmCpuForcedBackend().supports(QuantConfig.of("bf16"), SMALL)
    assert why is not None and "SIGILL" in why
    assert torch.cpu._is_amx_tile_supported() is False  # the override ends with the call


def test_describe_names_the_experts_class_vllm_built(vllm):
    b = VllmBackend()
    layer = b.create_layer(synthesize("bf16", SMALL, seed=1), SMALL)
    b.process_weights_after_loading(layer)
    assert b.describe(layer) == "CPU (CPUUnquantizedExperts)"


def test_describe_in_forced_mode_says_so(vllm):
    b = VllmCpuForcedBackend()
    P = MoEProblem(M=5, K=128, N=128, E=3, topk=2)
    quant = QuantConfig("gptq-int4", group_size=32, sym=True, checkpoint_format="gptq")
    if b.supports(quant, P) is not None:
        pytest.skip(f"vLLM does not run gptq int4 here: {b.supports(quant, P)}")
    layer = b.create_layer(synthesize("gptq-int4", P, seed=1, group_size=32), P)
    b.process_weights_after_loading(layer)
    assert b.describe(layer) == "CPU (CPUExpertsInt4); CPU AMX gate forced"
