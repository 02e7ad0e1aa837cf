"""The vllm backends: the adapter's glue without vLLM (import guard, checkpoint mapping), and
vLLM's own layer where vLLM is importable (CI has none: those tests skip there)."""

from __future__ import annotations

import subprocess
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from moecert.kernels import Variant, vllm_backend
from moecert.kernels.vllm_backend import VllmBackend, VllmCpuForcedBackend
from moecert.kernels.vllm_checkpoint import expert_tensors, file_config, quantization_config
from moecert.reference import SCHEME_NAMES, MoEProblem, moe, synthesize
from moecert.reference.schemes import scheme_variants

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
    assert backend.supports(Variant.of("bf16"), SMALL) == why
    assert backend.version == "vllm -" + (" (CPU AMX gate forced)" if backend.forced_amx else "")


@pytest.mark.parametrize("scheme,attrs", [("gptq-int4", {"group_size": 32}),
                                          ("awq-int4", {"group_size": 32}),
                                          ("ct-int4", {"group_size": 32, "sym": False}),
                                          ("bf16", {}),
                                          ("fp8-w8a16", {"weight_strategy": "block"})])
def test_expert_tensors_split_gate_and_up_per_expert(scheme, attrs):
    P = MoEProblem(M=1, K=256, N=256, E=2, topk=1, bias=True)
    ckpt = synthesize(scheme, P, seed=3, **attrs)
    quant = Variant.of(ckpt)
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


@pytest.mark.parametrize("scheme", ["bf16", "gptq-int4"])
def test_expert_tensors_of_a_non_gated_layer_are_one_projection(scheme):
    # relu2 (no up projection): w13 holds N rows, all of them the file's gate_proj; an
    # up_proj would land past the end of vLLM's w13 (seen with vLLM 0.25.1 on an H200)
    P = MoEProblem(M=1, K=256, N=128, E=2, topk=1, activation="relu2")
    ckpt = synthesize(scheme, P, seed=5)
    quant = Variant.of(ckpt)
    got = dict(expert_tensors(quant, ckpt.tensors, P.N, gated=P.gated))
    assert not [n for n in got if ".up_proj." in n]
    weight = "qweight" if quant.layout == "gptq" else "weight"
    for e in range(P.E):
        assert torch.equal(got[f"{e}.gate_proj.{weight}"], ckpt.tensors[f"w13_{weight}"][e])


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


def test_quantization_config_states_the_checkpoint():
    gptq = quantization_config(Variant("gptq-int4", group_size=64, sym=True,
                                           checkpoint_format="gptq_v2"))
    assert (gptq["quant_method"], gptq["bits"], gptq["group_size"], gptq["checkpoint_format"]) \
        == ("gptq", 4, 64, "gptq_v2")
    assert quantization_config(Variant.of("bf16")) is None


@pytest.mark.parametrize("scheme", SCHEME_NAMES)
def test_every_scheme_variant_has_a_producers_config(scheme):
    """No variant is refused by moecert: each gets the quantization_config a model file of
    its kind carries (vLLM then decides), and its tensors all map to per-expert names."""
    for quant in scheme_variants(scheme):
        row = file_config(quant)
        d = quantization_config(quant)
        assert (d is None) == (scheme in ("bf16", "fp16")), quant.describe()
        assert d is None or d["quant_method"] in _METHODS, (quant.describe(), d)
        assert row.producer
        P = MoEProblem(M=1, K=256, N=256, E=2, topk=1, bias=True)
        ckpt = synthesize(scheme, P, seed=0, **{k: v for k, v in quant.__dict__.items()
                                                if k not in ("scheme", "mx_scale_rule")})
        names = dict(expert_tensors(quant, ckpt.tensors, P.N))
        assert len(names) == P.E * (2 * sum(n.startswith("w13_") for n in ckpt.tensors)
                                    + sum(n.startswith("w2_") for n in ckpt.tensors))


_METHODS = ("gptq", "awq", "compressed-tensors", "fp8", "quark", "modelopt", "mxfp4")


@pytest.mark.parametrize("quant,method,key,want", [
    (Variant("int8-w8a8", activation="static-tensor"), "quark",
     ("global_quant_config", "input_tensors", "qscheme"), "per_tensor"),
    (Variant("int8-w8a8"), "quark",
     ("global_quant_config", "input_tensors", "is_dynamic"), True),
    (Variant("fp8-w8a8"), "fp8", ("weight_block_size",), [128, 128]),
    (Variant("fp8-w8a8", weight_strategy="channel", activation="dynamic-token"),
     "compressed-tensors", ("config_groups", "group_0", "input_activations", "strategy"),
     "token"),
    (Variant("nvfp4", checkpoint_format="ct"), "compressed-tensors", ("format",),
     "nvfp4-pack-quantized"),
    (Variant("nvfp4"), "modelopt", ("quant_algo",), "NVFP4"),
    (Variant("mxfp8", activation="mxfp8"), "modelopt", ("quant_algo",), "MXFP8"),
    (Variant("mxfp4"), "mxfp4", ("quant_method",), "mxfp4"),
])
def test_the_producers_keys(quant, method, key, want):
    d = quantization_config(quant)
    assert d["quant_method"] == method
    for k in key:
        d = d[k]
    assert d == want


def test_quark_per_channel_scales_are_one_dimensional_per_expert():
    P = MoEProblem(M=1, K=128, N=128, E=2, topk=1)
    quant = Variant("int8-w8a8")
    ckpt = synthesize("int8-w8a8", P, seed=0)
    names = dict(expert_tensors(quant, ckpt.tensors, P.N))
    assert names["0.gate_proj.weight_scale"].shape == (P.N,)
    assert torch.equal(torch.cat([names["1.gate_proj.weight_scale"],
                                  names["1.up_proj.weight_scale"]]),
                       ckpt.tensors["w13_weight_scale"][1].reshape(-1))


# --- with vLLM ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def vllm():
    return pytest.importorskip("vllm")


def test_vllm_bf16_layer_matches_the_reference(vllm):
    b = VllmBackend()
    assert b.supports(Variant.of("bf16"), SMALL) is None
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


@pytest.mark.parametrize("native", [False, True])
def test_forced_mode_refuses_an_amx_kernel_only_where_the_cpu_lacks_amx(vllm, monkeypatch,
                                                                        native):
    """bf16 gets vLLM's AMX grouped GEMM whenever the gate answers True: the forced mode
    refuses it on a CPU without AMX (SIGILL) and claims it on one with AMX. Only the claim
    is asked (the refused kernel never runs), so both answers are testable on any CPU."""
    vb = vllm_backend
    monkeypatch.setattr(vb, "NATIVE_AMX_GATE", lambda: native)
    monkeypatch.setattr(vb, "_selections", {})  # claims are kept per process: a host's answer
    gate = torch.cpu._is_amx_tile_supported
    why = VllmCpuForcedBackend().supports(Variant.of("bf16"), SMALL)
    if native:
        assert why is None
    else:
        assert why is not None and "SIGILL" in why
    assert torch.cpu._is_amx_tile_supported is gate  # the override ends with the call
    assert vb.amx_gate_backends() == (("vllm-cpu-forced", "vllm") if native
                                      else ("vllm-cpu-forced",))


def test_the_vllm_amx_group_expands_in_an_expected_failure_list(vllm, monkeypatch, tmp_path):
    from moecert.conformance.harness.xfail import XfailList

    text = ('[[xfail]]\nbackend = "vllm-amx"\nscheme = "bf16"\nstatus = ["fail"]\n'
            'message = "x"\nreason = "r"\n')
    path = tmp_path / "list.toml"
    path.write_text(text)
    for native, backends in ((False, ("vllm-cpu-forced",)),
                             (True, ("vllm-cpu-forced", "vllm"))):
        monkeypatch.setattr(vllm_backend, "NATIVE_AMX_GATE", lambda answer=native: answer)
        (entry,) = XfailList.load(path).entries
        assert dict(entry.fields)["backend"] == backends


def test_describe_names_the_experts_class_vllm_built(vllm):
    b = VllmBackend()
    layer = b.create_layer(synthesize("bf16", SMALL, seed=1), SMALL)
    b.process_weights_after_loading(layer)
    # vLLM 0.32 picks its AMX grouped GEMM where the CPU has AMX, its vector one elsewhere
    amx = torch.cpu._is_amx_tile_supported()
    assert b.describe(layer) == ("CPU (X86CPUUnquantizedExperts)" if amx
                                 else "CPU (CPUUnquantizedExperts)")


FIRST_AMX_USE = """
import torch
from moecert.kernels.vllm_backend import VllmBackend
from moecert.reference import MoEProblem, synthesize
P = MoEProblem(M=5, K=128, N=128, E=4, topk=2)
b = VllmBackend()
layer = b.create_layer(synthesize("bf16", P, seed=1), P)
b.process_weights_after_loading(layer)
x = torch.randn(5, 128, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
ids = torch.tensor([[0, 1]] * 5, dtype=torch.int32)
print(b.describe(layer), tuple(b.apply(layer, x, torch.full((5, 2), 0.5), ids).shape))
"""


def test_an_amx_kernel_runs_as_the_first_amx_use_of_a_fresh_process(vllm):
    """On a CPU with AMX, vLLM's AMX grouped GEMM as the process's first AMX instruction:
    without the tile permission a served model's other layers would have asked for, it dies
    with SIGILL (the adapter asks: `_request_amx_tiles`)."""
    if not torch.cpu._is_amx_tile_supported():
        pytest.skip("this CPU has no AMX")
    run = subprocess.run([sys.executable, "-c", FIRST_AMX_USE], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, f"exit {run.returncode}: {run.stderr[-800:]}"
    assert "X86CPUUnquantizedExperts" in run.stdout and "(5, 128)" in run.stdout


def test_describe_in_forced_mode_says_so(vllm):
    b = VllmCpuForcedBackend()
    P = MoEProblem(M=5, K=128, N=128, E=3, topk=2)
    quant = Variant("gptq-int4", group_size=32, sym=True, checkpoint_format="gptq")
    if b.supports(quant, P) is not None:
        pytest.skip(f"vLLM does not run gptq int4 here: {b.supports(quant, P)}")
    layer = b.create_layer(synthesize("gptq-int4", P, seed=1, group_size=32), P)
    b.process_weights_after_loading(layer)
    host = " (this CPU has AMX)" if torch.cpu._is_amx_tile_supported() else ""
    assert b.describe(layer) == f"CPU (CPUExpertsInt4); CPU AMX gate forced{host}"


def test_numerics_are_read_from_the_kernel_call_vllm_makes(vllm):
    """CPUExpertsInt4 hands its compiled kernel CPUQuantMethod.INT4_W4A8: int8 activations
    per token, declared; the scales are kept in the dtype vLLM's loader allocated."""
    b = VllmCpuForcedBackend()
    P = MoEProblem(M=5, K=128, N=128, E=3, topk=2, dtype="fp16")
    quant = Variant("gptq-int4", group_size=32, sym=True, checkpoint_format="gptq")
    if b.supports(quant, P) is not None:
        pytest.skip(f"vLLM does not run gptq int4 here: {b.supports(quant, P)}")
    layer = b.create_layer(synthesize("gptq-int4", P, seed=1, group_size=32), P)
    b.process_weights_after_loading(layer)
    assert b.numerics(layer) == {"activation": "dynamic-token", "weight_scale_dtype": "float16"}
    assert layer.kernel_method == "INT4_W4A8"


def test_refusals_are_vllms_own(vllm):
    """A variant vLLM cannot build is refused with vLLM's exception, a bare assert with
    where it fired."""
    why = VllmBackend().supports(Variant("int8-w8a16"),
                                 MoEProblem(M=5, K=128, N=128, E=3, topk=2))
    assert why is not None and why.startswith(f"vLLM {vllm.__version__} refuses it: ")
    assert "compressed_tensors.py" in why or ":" in why.split("refuses it: ", 1)[1]


# --- model folders: vLLM's own loader path (kernels/vllm_folder.py) --------------------------

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"


def test_the_loader_marks_a_whole_unchanged_layer_with_its_folder():
    from moecert.reference import load_checkpoint

    folder = FIXTURES / "deepseekv3-fp8-release"
    whole = load_checkpoint(folder, layer=1).checkpoint
    assert whole.origin == (str(folder.resolve()), 1)
    assert load_checkpoint(folder, layer=1, experts=range(2)).checkpoint.origin is None
    assert whole.slice_experts(0, 2).origin is None  # changed tensors: not the folder's


def test_a_model_folder_goes_to_vllm_as_its_loader_reads_it(vllm):
    """The folder's own tensors, under the file's names through vLLM's expert mapping, land
    in vLLM's parameters byte for byte (gate rows then up rows of w13, per expert)."""
    from moecert.reference import load_checkpoint
    from safetensors import safe_open

    folder = FIXTURES / "deepseekv3-fp8-release"
    loaded = load_checkpoint(folder, layer=1)
    P = loaded.problem(M=3)
    b = VllmCpuForcedBackend()
    why = b.supports_model_layer(str(folder.resolve()), 1, Variant.of(loaded.checkpoint), P)
    if why is not None:
        pytest.skip(f"vLLM does not take the folder here: {why}")
    layer = b.create_layer(loaded.checkpoint, P)
    assert layer.origin == (str(folder.resolve()), 1)
    w13 = layer.experts.w13_weight.view(torch.uint8)
    w2 = layer.experts.w2_weight.view(torch.uint8)
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        for e in range(P.E):
            name = f"model.layers.1.mlp.experts.{e}.{{}}.weight"
            gate, up, down = (f.get_tensor(name.format(p)).view(torch.uint8)
                              for p in ("gate_proj", "up_proj", "down_proj"))
            assert torch.equal(w13[e, :P.N], gate) and torch.equal(w13[e, P.N:], up)
            assert torch.equal(w2[e], down)
    b.process_weights_after_loading(layer)
    assert b.describe(layer).startswith("CPU (CPUExpertsFp8)")


def test_a_folder_claim_is_vllms_on_the_folders_config(vllm):
    """GPTQModel's act-order file: vLLM's GPTQ config refuses desc_act itself."""
    from moecert.reference import load_checkpoint

    folder = FIXTURES / "gptqmodel-gptq-descact-qwen3moe"
    loaded = load_checkpoint(folder, layer=0)
    why = VllmBackend().supports_model_layer(str(folder.resolve()), 0,
                                             Variant.of(loaded.checkpoint),
                                             loaded.problem(M=1))
    assert why is not None and "refuses the config of" in why and "desc_act" in why


def test_llm_compressor_mixtral_names_map_through_vllms_mixtral_loader(vllm):
    """llm-compressor writes Mixtral experts as gate_proj/up_proj/down_proj; vLLM 0.32's
    MixtralModel.hf_to_vllm_mapper renames them to w1/w3/w2 before FusedMoE's w1/w2/w3
    mapping, so every expert tensor of the file finds a parameter (without the mapper, none
    would: that was the research note's concern)."""
    from moecert.kernels import vllm_folder
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts
    from vllm.model_executor.models.mixtral import MixtralModel

    folder = str(FIXTURES / "ct-w4a16-sym-mixtral-sharded")
    assert vllm_folder.ckpt_names(folder) == ("w1", "w2", "w3")
    names = [n for n, _ in vllm_folder.expert_tensors(folder, 0)]
    assert names and all(".gate_proj." in n or ".up_proj." in n or ".down_proj." in n
                         for n in names)
    mapping = RoutedExperts.build_expert_params_mapping("w1", "w2", "w3", num_experts=4)

    def param(name):
        return next((name.replace(w, p) for p, w, _, _ in mapping if w in name), None)
    assert all(param(n) is None for n in names)  # the file's names as written
    mapped = MixtralModel.hf_to_vllm_mapper.apply_list(names)
    assert all(param(n) is not None for n in mapped)


@pytest.mark.parametrize("fields,mode", [
    ({"quant_dtype": None}, "none"),
    ({"quant_dtype": "mxfp8"}, "mxfp8"),
    ({"quant_dtype": "mxfp4"}, "mxfp4"),  # vLLM's MXFP4 W4A4 (ocp_mx / mxfp4 quant config)
    ({"quant_dtype": "nvfp4"}, "nvfp4"),
    ({"quant_dtype": torch.float8_e4m3fn, "block_shape": [128, 128]}, "dynamic-group"),
    ({"quant_dtype": torch.float8_e4m3fn, "a1_scale": torch.ones(1)}, "static-tensor"),
    ({"quant_dtype": torch.int8, "per_act_token_quant": True}, "dynamic-token"),
    ({"quant_dtype": torch.int8, "per_act_token_quant": False}, "dynamic-tensor"),
])
def test_the_activation_mode_a_vllm_quant_config_states(fields, mode):
    """vLLM's FusedMoEQuantConfig read back as the facts' activation modes (the string
    quant dtypes through the adapter's table, torch dtypes by their scales)."""
    from types import SimpleNamespace
    qc = SimpleNamespace(**{"block_shape": None, "a1_scale": None,
                            "per_act_token_quant": False, **fields})
    assert vllm_backend._quant_config_activation(qc) == mode
    assert vllm_backend._quant_config_activation(None) is None


def test_the_w4a4_row_states_the_llm_compressor_mxfp4_preset_as_the_tool_writes_it():
    """The file vLLM is handed for mxfp4 with MXFP4 activations is llm-compressor's `MXFP4`
    preset: every key vLLM's compressed-tensors config reads, as the real tool wrote it
    (tests/fixtures/checkpoints/ct-mxfp4-w4a4-qwen3moe, llm-compressor 0.14.0.1)."""
    import json

    real = json.loads((FIXTURES / "ct-mxfp4-w4a4-qwen3moe" / "config.json").read_text())
    real = real["quantization_config"]
    ours = quantization_config(Variant("mxfp4", activation="mxfp4"))
    assert ours["quant_method"] == real["quant_method"] and ours["format"] == real["format"]
    keys = ("num_bits", "type", "strategy", "group_size", "dynamic", "symmetric")
    for part in ("weights", "input_activations"):
        want = {k: real["config_groups"]["group_0"][part][k] for k in keys}
        got = {k: ours["config_groups"]["group_0"][part][k] for k in keys}
        assert got == want, part



@pytest.mark.parametrize("folder,rule", [("ct-mxfp4-w4a4-qwen3moe", "floor"),
                                         ("quark-mxfp4-w4a4-qwen3moe", "even")])
def test_a_w4a4_mxfp4_file_is_the_producers_whose_file_states_its_input_rule(folder, rule):
    """An MXFP4 W4A4 variant goes to vLLM as the file of the producer that can state its
    inputs' MX rule, with that producer's tensor names and MX keys, as the real file has them:
    on 2026-11-30 the exact tier of Quark's folder (rule "even") went as llm-compressor's
    preset under moecert's names, and vLLM's loader found no parameter 'w13_weight'
    (compressed-tensors' is w13_weight_packed) on the H200."""
    import json

    from safetensors import safe_open

    quant = Variant("mxfp4", activation="mxfp4", mx_scale_rule=rule)
    real = json.loads((FIXTURES / folder / "config.json").read_text())["quantization_config"]
    ours = quantization_config(quant)
    assert ours["quant_method"] == real["quant_method"]
    if real["quant_method"] == "quark":
        keys = ("dtype", "qscheme", "group_size", "is_dynamic", "scale_format",
                "scale_calculation_mode")
        for part in ("weight", "input_tensors"):
            want = {k: real["global_quant_config"][part][k] for k in keys}
            got = {k: ours["global_quant_config"][part][k] for k in keys}
            assert got == want, part
    held = set()
    for f in (FIXTURES / folder).glob("*.safetensors"):
        with safe_open(f, "pt") as s:
            held |= {k.split(".experts.", 1)[1] for k in s.keys() if ".experts." in k}
    P = MoEProblem(M=1, K=128, N=64, E=2, topk=1)
    ckpt = synthesize("mxfp4", P, seed=0, activation="mxfp4")
    names = set(dict(expert_tensors(quant, ckpt.tensors, P.N)))
    assert names <= held, sorted(names - held)


@pytest.mark.parametrize("rule", ["floor", "even", "ceil", "rceil"])
def test_no_w4a4_file_states_an_input_rule_other_than_the_variants(rule):
    """A rule no W4A4 producer's file states goes as the gpt-oss file, which states no
    activations (vLLM's kernel chooses them and the adapter declares what it ran); never as a
    file that states another rule."""
    quant = Variant("mxfp4", activation="mxfp4", mx_scale_rule=rule)
    row, d = file_config(quant), quantization_config(quant)
    assert row.mx_scale_rules is None or rule in row.mx_scale_rules
    inputs = (d.get("global_quant_config") or {}).get("input_tensors")
    assert inputs is None or inputs["scale_calculation_mode"] == rule
    if d["quant_method"] == "compressed-tensors":
        assert rule == "floor"


def _apply_stand_in(monkeypatch, runner, scheme):
    """The adapter's apply on a stand-in runner (vLLM-free): the input and the output."""
    import contextlib

    monkeypatch.setattr(VllmBackend, "_running",
                        lambda self, layer=None: contextlib.nullcontext())
    P = MoEProblem(M=2, K=128, N=64, E=3, topk=2)
    layer = vllm_backend.VllmLayer("vllm", runner, Variant.of(scheme), P)
    x = torch.randn(P.M, P.K, dtype=P.torch_dtype)
    ids = torch.tensor([[0, 1], [1, 2]], dtype=torch.int32)
    return x, VllmBackend().apply(layer, x, torch.full((P.M, P.topk), 0.5), ids)


def test_apply_makes_the_kernel_config_as_vllms_runner_does(monkeypatch):
    """vLLM's runner makes the quant method's kernel config before the experts run; the
    adapter, entering below the runner, must too (vLLM-free: a stand-in for the experts)."""

    class Experts:
        quant_config = None

        def _ensure_moe_quant_config_init(self):
            if self.quant_config is None:
                self.quant_config = "made"

        def forward_modular(self, x, topk_weights, topk_ids):
            assert self.quant_config == "made", "the experts ran before their config was made"
            return torch.zeros_like(x)

    class Runner:
        routed_experts = Experts()

        def _maybe_pad_hidden_states(self, shared, x):
            return x, None, None

    x, out = _apply_stand_in(monkeypatch, Runner(), "bf16")
    assert torch.equal(out, torch.zeros_like(x))
    assert Runner.routed_experts.quant_config == "made"


@pytest.mark.parametrize("hidden_dim", [128, 256])
def test_apply_pads_the_hidden_states_as_vllms_runner_does(monkeypatch, hidden_dim):
    """Where the quant method rounded the layer's hidden size up (Marlin MXFP4 at hidden 128
    or 160 on an H200), vLLM's runner pads the input to it and strips the output back; the
    adapter, entering below the runner, calls that step (vLLM-free: a stand-in runner whose
    step pads as 0.25.1's does; without the call the experts see 128 columns and assert)."""

    class Experts:
        def _ensure_moe_quant_config_init(self):
            pass

        def forward_modular(self, x, topk_weights, topk_ids):
            assert x.shape[-1] == hidden_dim, "Hidden size mismatch w1"
            return x * 2

    class Runner:
        routed_experts = Experts()

        def _maybe_pad_hidden_states(self, shared, x):
            if x.shape[-1] == hidden_dim:
                return x, None, None
            return torch.nn.functional.pad(x, (0, hidden_dim - x.shape[-1])), None, x.shape[-1]

    x, out = _apply_stand_in(monkeypatch, Runner(), "mxfp4")
    assert torch.equal(out, x * 2)


def test_a_biased_layer_whose_method_makes_no_bias_parameters_is_not_claimed(monkeypatch):
    """vLLM built the layer with has_bias, but its quant method made no w13_bias: its loader
    fails on the first bias, so the adapter does not claim the case (vLLM-free stand-in)."""
    import contextlib

    class Method:
        pass

    class Experts:
        quant_method = Method()

    class Runner:
        routed_experts = Experts()

    monkeypatch.setattr(VllmBackend, "_running",
                        lambda self, layer=None: contextlib.nullcontext())
    monkeypatch.setattr(VllmBackend, "_runner", lambda self, quant, problem, origin=None: Runner())
    monkeypatch.setattr(vllm_backend, "_vllm", lambda: {"version": "0.25.1"})
    biased = MoEProblem(M=2, K=128, N=64, E=3, topk=2, bias=True)
    why, _ = VllmBackend()._select(Variant.of("gptq-int4"), biased)
    assert why == ("vLLM 0.25.1's Method makes no expert bias parameters (a biased layer does "
                   "not load)")
    why, _ = VllmBackend()._select(Variant.of("gptq-int4"), replace(biased, bias=False))
    assert why is None or "bias" not in why


def test_describe_names_a_method_that_calls_its_kernel_itself():
    """A quant method with no oracle choice and no modular kernel (0.25.1's Quark int8 calls
    fused_experts in its apply): the row names the method, not "? (?)"."""
    class QuarkW8A8Int8MoEMethod:
        pass

    class Experts:
        quant_method = QuarkW8A8Int8MoEMethod()

    class Runner:
        routed_experts = Experts()

    layer = vllm_backend.VllmLayer("vllm", Runner(), Variant.of("int8-w8a8"),
                                   MoEProblem(M=2, K=128, N=128, E=3, topk=2))
    assert VllmBackend().describe(layer) == "QuarkW8A8Int8MoEMethod (no modular kernel)"


@pytest.mark.parametrize("device,held,declared", [
    ("cuda", torch.float16, "float16"), ("cuda", torch.float32, True),
    ("cpu", torch.float16, True)])
def test_w13_requantization_is_declared_in_the_dtype_vllm_dequantizes_to(
        monkeypatch, device, held, declared):
    """vLLM requantizes per-tensor w1 / w3 through per_tensor_dequantize, whose float16 result
    (on CUDA, the scale cast to it first) moves codes near a half by one: the adapter asks
    that function for its dtype on cuda; on a CPU the exact reading stands (vLLM-free: the
    function stood in)."""
    import sys
    import types

    name = "vllm.model_executor.layers.quantization.utils.w8a8_utils"
    fake = types.ModuleType(name)
    fake.per_tensor_dequantize = lambda t, s: (t.to(held) * s).to(held)
    monkeypatch.setitem(sys.modules, name, fake)
    monkeypatch.setattr(vllm_backend, "_engine_device", lambda: torch.device(device))
    assert vllm_backend._requantized_via() == declared


def _declared(problem, scheme="bf16") -> dict:
    """The adapter's numerics for a layer of `problem` with no processed scales to read
    (vLLM-free: a stand-in runner; the tests stand in the kernel's activation mode)."""
    class Runner:
        routed_experts = torch.nn.Module()

    layer = vllm_backend.VllmLayer("vllm", Runner(), Variant.of(scheme), problem)
    return VllmBackend().numerics(layer)


@pytest.mark.parametrize("e8m0", [True, False])
def test_block_fp8_declares_power_of_two_group_scales_where_vllm_says_deep_gemm_uses_them(
        monkeypatch, e8m0):
    """vLLM 0.25.1 on an H200 quantizes block-fp8 activations with UE8M0 group scales (its
    is_deep_gemm_e8m0_used(), on by default where DeepGEMM loads): the adapter asks vLLM and
    declares that reading (vLLM-free: the answer and the kernel's mode stood in)."""
    monkeypatch.setattr(vllm_backend, "_deep_gemm_e8m0", lambda: e8m0)
    monkeypatch.setattr(VllmBackend, "_kernel_activation", lambda self, layer: "dynamic-group")
    got = _declared(MoEProblem(M=2, K=256, N=256, E=3, topk=2), "fp8-w8a8")
    assert got.get("activation_scale_pow2", False) is e8m0
    assert got["activation"] == "dynamic-group"


@pytest.mark.parametrize("on_input,modular", [(True, True), (False, True), (True, False)])
def test_router_weight_on_the_input_declares_vllms_cast_to_the_activation_dtype(
        monkeypatch, on_input, modular):
    """Every vLLM prepare step scales the input by topk_weights.to(a1.dtype) (0.25.1 and 0.32,
    no_dp_ep.py): the adapter declares that reading for a layer that runs one, and only there.
    A quant method that calls fused_experts itself (0.25.1's Quark int8) runs no prepare step:
    its Triton kernel multiplies GEMM1's float32 output by the weight, declared so."""
    monkeypatch.setattr(VllmBackend, "_kernel_activation", lambda self, layer: "none")
    monkeypatch.setattr(VllmBackend, "_experts_class",
                        lambda self, layer: object() if modular else None)
    got = _declared(MoEProblem(M=2, K=128, N=128, E=3, topk=1,
                               apply_router_weight_on_input=on_input))
    assert got.get("router_weight_in_activation_dtype", False) is (on_input and modular)
    assert got.get("router_weight_on_gemm1_output", False) is (on_input and not modular)


@pytest.mark.parametrize("device,activation,declared", [
    ("cuda", "silu", True), ("cuda", "gelu", True), ("cuda", "relu2", False),
    ("cuda", "swigluoai", False), ("cpu", "silu", False)])
def test_the_cuda_gated_activation_declares_the_gate_rounded_before_the_product(
        monkeypatch, device, activation, declared):
    """vLLM's GPU MoE kernels call the CUDA silu_and_mul / gelu_and_mul, whose activation
    returns the element type before it multiplies up (csrc/activation_kernels.cu); its CPU
    experts compute act * up in fp32: declared on cuda for the gated silu / gelu only."""
    monkeypatch.setattr(VllmBackend, "_kernel_activation", lambda self, layer: "none")
    monkeypatch.setattr(vllm_backend, "_engine_device", lambda: torch.device(device))
    got = _declared(MoEProblem(M=2, K=128, N=128, E=3, topk=2, activation=activation))
    assert got.get("gate_activation_in_activation_dtype", False) is declared


def test_the_layers_parameters_are_made_in_filled_memory(monkeypatch):
    """A parameter vLLM makes with torch.empty and never loads reads the same on every run
    (NaN, the integer maximum), so a kernel reading it fails the same way each time; the
    process's deterministic settings are as they were afterwards (vLLM-free stand-in)."""
    import contextlib
    import types

    made = {}

    def runner(self, quant, problem, origin=None):
        made["w13"] = torch.empty(4, 8, dtype=torch.int8)
        made["scale"] = torch.empty(4, dtype=torch.float32)
        return types.SimpleNamespace(routed_experts=types.SimpleNamespace(quant_method=None))

    monkeypatch.setattr(VllmBackend, "_running",
                        lambda self, layer=None: contextlib.nullcontext())
    monkeypatch.setattr(VllmBackend, "_runner", runner)
    monkeypatch.setattr(VllmBackend, "supports", lambda self, quant, problem: None)
    monkeypatch.setattr(VllmBackend, "load_weights", lambda self, layer, ckpt: None)
    monkeypatch.setattr(vllm_backend, "check_engine_checkpoint", lambda *a: None)
    monkeypatch.setattr(vllm_backend, "_scale_param_dtype", lambda layer, quant: None)
    ckpt = types.SimpleNamespace(scheme="int8-w8a8", attrs={}, tensors={}, origin=None)
    int8 = Variant.of("int8-w8a8")
    monkeypatch.setattr(vllm_backend.Variant, "of", staticmethod(lambda c: int8))
    monkeypatch.setattr(vllm_backend, "folder_origin", lambda c: None)
    before = torch.are_deterministic_algorithms_enabled()
    VllmBackend().create_layer(ckpt, MoEProblem(M=2, K=128, N=64, E=3, topk=2))
    assert torch.equal(made["w13"], torch.full((4, 8), 127, dtype=torch.int8))
    assert made["scale"].isnan().all()
    assert torch.are_deterministic_algorithms_enabled() == before


@pytest.mark.parametrize("device,scheme,experts,method,declared", [
    ("cuda", "int8-w8a8", None, "QuarkW8A8Int8MoEMethod", True),
    ("cuda", "int8-w8a8", "TritonExperts", None, True),
    ("cuda", "int8-w8a8", "MarlinExperts", None, False),
    ("cuda", "int8-w8a8", None, "SomeOtherMethod", False),
    ("cuda", "fp8-w8a8[a-dynamic-token]", "TritonExperts", None, False),
    ("cpu", "int8-w8a8", None, "QuarkW8A8Int8MoEMethod", False)])
def test_per_token_int8_on_the_triton_path_declares_vllms_half_away_rounding(
        monkeypatch, device, scheme, experts, method, declared):
    """vLLM's fused_experts and Triton experts quantize dynamic per-token int8 activations
    with per_token_quant_int8 (x * (127 / amax) in float32, rounded half away from zero):
    declared there on CUDA only; fp8 tokens, Marlin and the CPU experts declare nothing
    (vLLM-free stand-ins)."""
    monkeypatch.setattr(VllmBackend, "_kernel_activation", lambda self, layer: None)
    monkeypatch.setattr(vllm_backend, "_engine_device", lambda: torch.device(device))
    monkeypatch.setattr(VllmBackend, "_experts_class", lambda self, layer: (
        None if experts is None else type(experts, (), {})()))

    class Runner:
        routed_experts = torch.nn.Module()

    if method is not None:
        Runner.routed_experts.quant_method = type(method, (), {})()
    quant = (Variant.of("fp8-w8a8").replace(activation="dynamic-token") if scheme.startswith("fp8")
             else Variant.of(scheme))
    layer = vllm_backend.VllmLayer("vllm", Runner(), quant,
                                   MoEProblem(M=2, K=128, N=128, E=4, topk=2))
    got = VllmBackend().numerics(layer)
    assert got.get("activation_round_half_away", False) is declared


@pytest.mark.parametrize("device,mode,quant_dtype,declared", [
    ("cuda", "dynamic-tensor", torch.float8_e4m3fn, True),
    ("cuda", "static-tensor", torch.float8_e4m3fn, True),
    ("cuda", "dynamic-token", torch.float8_e4m3fn, True),
    ("cuda", "dynamic-group", torch.float8_e4m3fn, False),
    ("cuda", "dynamic-token", torch.int8, False),
    ("cuda", "dynamic-tensor", None, False),
    ("cpu", "dynamic-tensor", torch.float8_e4m3fn, False)])
def test_fp8_activations_through_scaled_fp8_quant_declare_its_float32_arithmetic(
        monkeypatch, device, mode, quant_dtype, declared):
    """vLLM's modular kernels quantize non-block fp8 activations with its CUDA
    scaled_fp8_quant (float32 ratio from a float32 scale): declared on CUDA where the experts'
    quant config says float8_e4m3fn and the mode is per tensor or per token; block scales,
    int8 and the CPU declare nothing (vLLM-free stand-ins)."""
    monkeypatch.setattr(VllmBackend, "_kernel_activation", lambda self, layer: mode)
    monkeypatch.setattr(vllm_backend, "_engine_device", lambda: torch.device(device))
    experts = type("TritonExperts", (), {
        "quant_config": types.SimpleNamespace(quant_dtype=quant_dtype)})()
    monkeypatch.setattr(VllmBackend, "_experts_class", lambda self, layer: experts)

    class Runner:
        routed_experts = torch.nn.Module()

    layer = vllm_backend.VllmLayer("vllm", Runner(), Variant.of("fp8-w8a8"),
                                   MoEProblem(M=2, K=128, N=128, E=4, topk=2))
    got = VllmBackend().numerics(layer)
    assert got.get("activation_fp8_float32", False) is declared


# --- vLLM's forward context ---------------------------------------------------------------

class _Compilation:
    """vLLM's compilation config as its MoERunner registers into it."""

    def __init__(self):
        self.static_forward_context = {"model.layers.0.self_attn.attn": object()}
        self.static_all_moe_layers = []


def _registering_runner(compilation):
    """A stand-in factory: a runner that registers itself as vLLM's MoERunner does
    (`register_layer_for_moe_forward_op`: its layer name into static_forward_context and
    static_all_moe_layers), with a parameter to free."""
    import types

    def factory(*args, prefix, **kwargs):
        runner = torch.nn.Module()
        runner.layer_name = prefix
        runner.weight = torch.nn.Parameter(torch.zeros(4))
        runner.routed_experts = types.SimpleNamespace(quant_method=types.SimpleNamespace())
        compilation.static_forward_context[prefix] = runner
        compilation.static_all_moe_layers.append(prefix)
        return runner
    return factory


@pytest.fixture
def forward_context(monkeypatch):
    """The adapter on a stand-in of vLLM (vLLM-free): its config's compilation config, and
    a factory whose runners register there."""
    import contextlib
    import types

    compilation = _Compilation()
    config = types.SimpleNamespace(compilation_config=compilation)
    monkeypatch.setattr(vllm_backend, "_vllm", lambda: {
        "version": "0.25.1", "config": config, "factory": _registering_runner(compilation),
        "quant_config": None})
    monkeypatch.setattr(VllmBackend, "_running",
                        lambda self, layer=None: contextlib.nullcontext())
    return compilation


def test_a_layer_vllm_builds_only_with_a_model_config_gets_one_and_keeps_it(
        forward_context, monkeypatch):
    """vLLM 0.25.1's MXFP4 oracle and Quark OCP-MX method read the served model's config
    while the layer is built ("'NoneType' object has no attribute 'quantization_config'"
    without one: every mxfp4 / mxfp6 case refused on the H200). The adapter builds such a
    layer again under vLLM's ModelConfig of the layer's model (the folder's, else the
    default Qwen3-MoE), keeps it for the layer's later calls and takes it off the current
    config after each; a layer that does not ask gets none, and other AttributeErrors stay
    refusals (vLLM-free stand-ins)."""
    config = vllm_backend._vllm()["config"]
    config.model_config = None
    factory = vllm_backend._vllm()["factory"]
    seen = []

    def asking(*args, **kwargs):
        seen.append(config.model_config)
        if config.model_config is None:
            raise AttributeError("'NoneType' object has no attribute 'quantization_config'")
        return factory(*args, **kwargs)
    monkeypatch.setattr(vllm_backend, "_vllm", lambda: {
        "version": "0.25.1", "config": config, "factory": asking, "quant_config": None})
    made = []
    monkeypatch.setattr(vllm_backend, "_model_config",
                        lambda folder, dtype: made.append((folder, dtype)) or "the model config")
    runner = VllmBackend()._runner(Variant.of("bf16"), SMALL)
    assert seen == [None, "the model config"] and made == [(None, SMALL.torch_dtype)]
    assert runner.moecert_model_config == "the model config"
    assert config.model_config is None  # taken off again
    assert _moe_entries(forward_context) == [runner.layer_name]  # the failed build's is gone
    with vllm_backend._model_config_set(runner.moecert_model_config):
        assert config.model_config == "the model config"
    assert config.model_config is None

    def other(*args, **kwargs):
        raise AttributeError("'NoneType' object has no attribute 'w13_weight'")
    monkeypatch.setattr(vllm_backend, "_vllm", lambda: {
        "version": "0.25.1", "config": config, "factory": other, "quant_config": None})
    with pytest.raises(AttributeError, match="w13_weight"):
        VllmBackend()._runner(Variant.of("bf16"), SMALL)
    assert made == [(None, SMALL.torch_dtype)]
    monkeypatch.setattr(vllm_backend, "_vllm", lambda: {
        "version": "0.25.1", "config": config, "factory": factory, "quant_config": None})
    assert not hasattr(VllmBackend()._runner(Variant.of("bf16"), SMALL),
                       "moecert_model_config")


def _moe_entries(compilation) -> list[str]:
    return [n for n in compilation.static_forward_context if n.endswith(".mlp.experts")]


def test_a_released_layer_leaves_vllms_forward_context(forward_context, monkeypatch):
    """vLLM's runner registers itself in the compilation config and vLLM never removes it: the
    adapter does once the harness lets go of the layer, so that its parameters are freed
    (before, every layer of a worker's process stayed there: on an H200 a model-size case
    held the parameters of the ones before it)."""
    import gc
    import types
    import weakref

    monkeypatch.setattr(VllmBackend, "supports", lambda self, quant, problem: None)
    monkeypatch.setattr(VllmBackend, "load_weights", lambda self, layer, ckpt: None)
    monkeypatch.setattr(vllm_backend, "check_engine_checkpoint", lambda *a: None)
    monkeypatch.setattr(vllm_backend, "_scale_param_dtype", lambda layer, quant: None)
    monkeypatch.setattr(vllm_backend, "folder_origin", lambda c: None)
    ckpt = types.SimpleNamespace(scheme="bf16", attrs={}, tensors={}, origin=None)
    monkeypatch.setattr(vllm_backend.Variant, "of", staticmethod(lambda c: Variant("bf16")))
    layers = [VllmBackend().create_layer(ckpt, SMALL) for _ in range(2)]
    names = [layer.runner.layer_name for layer in layers]
    assert _moe_entries(forward_context) == names == forward_context.static_all_moe_layers
    runner = weakref.ref(layers[0].runner)
    del layers[0]
    gc.collect()
    assert _moe_entries(forward_context) == names[1:] == forward_context.static_all_moe_layers
    assert runner() is None  # its parameters went with it
    assert "model.layers.0.self_attn.attn" in forward_context.static_forward_context
    layers.clear()
    gc.collect()
    assert _moe_entries(forward_context) == [] == forward_context.static_all_moe_layers


def test_a_layer_built_to_answer_a_claim_leaves_vllms_forward_context(forward_context):
    """The claim builds vLLM's layer to read its oracle's choice: out of the forward context
    once read, whatever the answer."""
    vllm_backend._selections.clear()
    quant = Variant.of("bf16")
    why, choice = VllmBackend()._select(quant, SMALL)
    assert (why, choice) == (None, "? (?)")
    why, _ = VllmBackend()._select(quant, replace(SMALL, bias=True))  # refused after the build
    assert "bias" in why
    assert _moe_entries(forward_context) == [] == forward_context.static_all_moe_layers


def test_a_layer_vllm_refuses_after_registering_leaves_its_forward_context(forward_context,
                                                                          monkeypatch):
    factory = vllm_backend._vllm()["factory"]

    def refusing(*args, **kwargs):
        factory(*args, **kwargs)
        raise ValueError("refused after the runner registered")
    config = vllm_backend._vllm()["config"]
    monkeypatch.setattr(vllm_backend, "_vllm", lambda: {
        "version": "0.25.1", "config": config, "factory": refusing, "quant_config": None})
    with pytest.raises(ValueError, match="refused"):
        VllmBackend()._runner(Variant.of("bf16"), SMALL)
    assert _moe_entries(forward_context) == [] == forward_context.static_all_moe_layers


def test_vllms_own_registration_goes_with_the_layer(vllm):
    """With vLLM itself: its runner's registration is where the adapter looks, and goes, and
    its parameters with it. (The claim above imports vLLM first: vLLM 0.32's CPU build keeps
    an import exception, `_torchcodec_import_exc`, whose frames pin the locals of whatever
    call first imported vLLM, create_layer's layer included.)"""
    import gc
    import weakref

    compilation = vllm_backend._vllm()["config"].compilation_config
    before = set(compilation.static_forward_context)
    b = VllmBackend()
    assert b.supports(Variant.of("bf16"), replace(SMALL, N=128)) is None  # a claim's layer
    assert set(compilation.static_forward_context) == before
    layer = b.create_layer(synthesize("bf16", SMALL, seed=1), SMALL)
    name = layer.runner.layer_name
    assert compilation.static_forward_context[name] is layer.runner
    assert name in compilation.static_all_moe_layers
    weight = weakref.ref(layer.runner.routed_experts.w13_weight)
    del layer
    gc.collect()
    gc.collect()  # the runner is cyclic: garbage once the finalizer took it out (worker.py)
    assert set(compilation.static_forward_context) == before
    assert name not in compilation.static_all_moe_layers
    assert weight() is None


@pytest.mark.parametrize("quant_dtype,mode", [(None, "none"), (torch.int8, "dynamic-token")])
def test_a_method_without_modular_kernel_declares_its_own_quant_configs_activation(
        monkeypatch, quant_dtype, mode):
    """A quant method that calls fused_experts itself (no modular kernel: 0.25.1's MoeWNA16,
    where Marlin refuses a w4a8-int8 layer) runs the activations its own moe_quant_config
    states: MoeWNA16's int4_w4a16 config quantizes none, so a W4A8 file runs as W4A16 and is
    declared so; Quark int8's states int8 per token (vLLM-free stand-ins)."""
    monkeypatch.setattr(vllm_backend, "_engine_device", lambda: torch.device("cuda"))
    monkeypatch.setattr(VllmBackend, "_experts_class", lambda self, layer: None)

    class Runner:
        routed_experts = torch.nn.Module()

    Runner.routed_experts.quant_method = type("MoeWNA16Method", (), {
        "moe_quant_config": types.SimpleNamespace(
            quant_dtype=quant_dtype, block_shape=None, a1_scale=None,
            per_act_token_quant=True)})()
    layer = vllm_backend.VllmLayer("vllm", Runner(), Variant.of("w4a8-int8"),
                                   MoEProblem(M=2, K=128, N=128, E=4, topk=2))
    layer.kernel_method = None
    monkeypatch.setattr(VllmBackend, "_one_token", lambda self, layer: True)
    got = VllmBackend().numerics(layer)
    assert got.get("activation", "dynamic-token") == mode
    # the file's own int8 tokens are read with vLLM's rounding only where they are quantized
    assert got.get("activation_round_half_away", False) is (mode == "dynamic-token")


def test_the_model_config_given_to_vllm_is_vllms_own_of_the_layers_model(vllm):
    """With vLLM itself: `_model_config` is vLLM's ModelConfig of the layer's model folder
    (its model type, the case's dtype, no quantization override), else of transformers'
    default Qwen3-MoE config (the table layers' per-expert gate / up)."""
    folder = vllm_backend._model_config(str(FIXTURES / "quark-mxfp4-w4a4-qwen3moe"),
                                        torch.float16)
    assert folder.hf_config.model_type == "qwen3_moe" and folder.dtype == torch.float16
    table = vllm_backend._model_config(None, torch.bfloat16)
    assert table.hf_config.model_type == vllm_backend.DEFAULT_MODEL_TYPE
    assert table.dtype == torch.bfloat16
    assert getattr(table, "quantization_config", None) is None


@pytest.mark.parametrize("activation", ["silu", "gelu", "relu2"])
def test_an_mxfp4a16_layer_of_another_model_goes_as_llm_compressors_file(activation):
    """The gpt-oss release's format is the gpt-oss model's: vLLM's method for it applies
    gpt-oss's swiglu limit (7.0) to a SiLU layer on CUDA, where moecert's K = 160 ci row and
    the llm-compressor MXFP4 folder's exact rows read 3e-2 to 1.0 on the H200 (2026-11-30).
    A layer of another activation goes as llm-compressor's MXFP4A16 file, keys and tensor
    names as the real tool wrote them (tests/fixtures/checkpoints/ct-mxfp4-qwen3moe)."""
    import json

    from safetensors import safe_open

    folder = FIXTURES / "ct-mxfp4-qwen3moe"
    real = json.loads((folder / "config.json").read_text())["quantization_config"]
    quant = Variant("mxfp4")
    row, ours = file_config(quant, activation), quantization_config(quant, activation)
    assert row.producer == "llm-compressor MXFP4A16"
    assert ours["quant_method"] == real["quant_method"] and ours["format"] == real["format"]
    keys = ("num_bits", "type", "strategy", "group_size", "symmetric")
    want = {k: real["config_groups"]["group_0"]["weights"][k] for k in keys}
    assert {k: ours["config_groups"]["group_0"]["weights"][k] for k in keys} == want
    assert real["config_groups"]["group_0"].get("input_activations") is None
    assert ours["config_groups"]["group_0"].get("input_activations") is None
    held = set()
    for f in folder.glob("*.safetensors"):
        with safe_open(f, "pt") as s:
            held |= {k.split(".experts.", 1)[1] for k in s.keys() if ".experts." in k}
    P = MoEProblem(M=1, K=128, N=64, E=2, topk=1)
    ckpt = synthesize("mxfp4", P, seed=0)
    names = set(dict(expert_tensors(quant, ckpt.tensors, P.N, activation=activation)))
    assert names <= held, sorted(names - held)


@pytest.mark.parametrize("activation", ["swigluoai-split", None])
def test_gpt_oss_layers_and_a_caller_naming_no_activation_get_the_gpt_oss_file(activation):
    """gpt-oss's own activation keeps the gpt-oss release's file (its method's limit is the
    model's), and a caller that names no activation (transformers' quantizers) the first
    row, as before the rows knew activations."""
    quant = Variant("mxfp4")
    assert file_config(quant, activation).producer == "gpt-oss release (mxfp4)"
    assert quantization_config(quant, activation) == {"quant_method": "mxfp4",
                                                      "modules_to_not_convert": []}


@pytest.mark.parametrize("rule", ["ceil", "rceil"])
def test_a_w4a4_rule_no_file_states_goes_weights_only_in_a_silu_layer(rule):
    """An MXFP4 W4A4 variant whose input rule no producer's file states goes, in a SiLU layer,
    as llm-compressor's weights-only file (vLLM's kernel chooses the activations and the
    adapter declares them), never as a file that states another rule."""
    d = quantization_config(Variant("mxfp4", activation="mxfp4", mx_scale_rule=rule), "silu")
    assert d["format"] == "mxfp4-pack-quantized"
    assert d["config_groups"]["group_0"].get("input_activations") is None
