"""The Triton GEMM's packed int4 decode (`_int4_pairs`, PTX, CUDA sm80+) gives the same bits
as the per-element decode it replaces: both produce exact small integers, so the layer's
output must not move at all. CUDA only; on the CPU the host never selects it."""

from __future__ import annotations

import importlib
import os

import pytest
import torch
from _gemm import record_launches
from moecert.kernels.triton_moe import fused_moe, interpret, kinds
from moecert.reference import MoEProblem, make_inputs, random_checkpoint


def test_the_host_never_selects_it_off_cuda():
    assert not fused_moe.int4_pairs_run_on(torch.device("cpu"))


def _sm80() -> bool:
    return (torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
            and torch.cuda.get_device_capability() >= (8, 0))


def _with_and_without_pairs(monkeypatch, backend, layer, x, w, ids):
    """The layer's output with the PTX decode allowed and not ({pairs: output}), and the
    (FAST_I4, ACT, activations' dtype) of each launch ({pairs: [...]}); the layer's plan is
    built again for each (it chooses the dtype W4A8's codes are quantized into)."""
    decodes, outs = {}, {}
    # the decode each launch compiled
    seen = record_launches(monkeypatch, lambda args, kw: (kw["FAST_I4"], kw["ACT"],
                                                          args[0].dtype))
    for pairs in (False, True):
        monkeypatch.setattr(fused_moe, "int4_pairs_run_on", lambda device, on=pairs: on)
        seen.clear()
        layer.meta.pop("triton_plan", None)
        outs[pairs] = backend.apply(layer, x, w, ids, out=torch.empty_like(x))
        decodes[pairs] = list(seen)
    return outs, decodes


@pytest.fixture
def compiled():
    """The kernel modules defined compiled: a CPU harness run earlier in this process
    (run_case on "cpu") redefines them for the interpreter (triton_moe/interpret.py)."""
    if interpret._is_interpreted(fused_moe):
        for name in interpret._MODULES:
            importlib.reload(importlib.import_module(f"moecert.kernels.triton_moe.{name}"))
    assert not kinds.INTERPRET


@pytest.mark.skipif(not _sm80(), reason="needs a CUDA sm80+ GPU, compiled Triton")
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("M, K, N, E, topk", [
    (1, 2048, 768, 128, 8),     # Qwen3-30B-A3B, decode: SWAP_AB tiles
    (64, 4096, 1024, 8, 2),     # 16+ rows per expert
    (37, 384, 224, 4, 2),       # N off the 128-column tile, group 32
])
def test_packed_decode_matches_the_per_element_one_bit_for_bit(compiled, monkeypatch, dtype, M,
                                                              K, N, E, topk):
    from moecert.kernels.triton_moe.backend import TritonBackend

    P = MoEProblem(M=M, K=K, N=N, E=E, topk=topk, dtype=dtype)
    group = 128 if K % 128 == 0 and N % 128 == 0 else 32
    ckpt = random_checkpoint("gptq-int4", P, seed=3, device="cuda", group_size=group)
    backend = TritonBackend()
    layer = backend.create_layer(ckpt, P)
    backend.process_weights_after_loading(layer)
    x, w, ids = (t.cuda() for t in make_inputs(P, seed=4))
    outs, decodes = _with_and_without_pairs(monkeypatch, backend, layer, x, w, ids)
    for pairs, want in ((False, kinds.I4_MAGIC), (True, kinds.I4_PAIRS)):
        # both GEMMs took that decode
        assert decodes[pairs] and {d for d, _, _ in decodes[pairs]} == {want}, decodes
    assert torch.isfinite(outs[True]).all()
    assert torch.equal(outs[True], outs[False])


@pytest.mark.skipif(not _sm80(), reason="needs a CUDA sm80+ GPU, compiled Triton")
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("M, K, N, E, topk", [
    (1, 2048, 768, 128, 8),     # Qwen3-30B-A3B, decode: SWAP_AB tiles
    (64, 4096, 1024, 8, 2),     # 16+ rows per expert
])
@pytest.mark.parametrize("fmt", ["awq", "gptq"])  # zero points in planes, and symmetric codes
def test_w4a8_planes_take_the_packed_decode_with_the_same_bits(compiled, monkeypatch, dtype,
                                                              M, K, N, E, topk, fmt):
    """W4A8 (int4 weights, int8 activations) in nibble planes: the PTX decode hands the
    weights over in the 16-bit dtype and the int8 codes join them there (`_planes_part`);
    the per-element decode runs the int8 dot. Both sums are exact integers per quarter, so
    the layer's output must be the same bits."""
    from moecert.kernels.triton_moe import configs
    from moecert.kernels.triton_moe.backend import TritonBackend

    P = MoEProblem(M=M, K=K, N=N, E=E, topk=topk, dtype=dtype)
    ckpt = random_checkpoint("w4a8-int8", P, seed=3, device="cuda", group_size=128,
                             checkpoint_format=fmt)
    monkeypatch.setenv(configs.NIB_SPAN_ENV, "128")
    backend = TritonBackend()
    layer = backend.create_layer(ckpt, P)
    backend.process_weights_after_loading(layer)
    assert layer.meta["w13_nib_span"] == 128 and layer.meta["w2_nib_span"] == 128
    x, w, ids = (t.cuda() for t in make_inputs(P, seed=4))
    outs, decodes = _with_and_without_pairs(monkeypatch, backend, layer, x, w, ids)
    # the PTX decode multiplies the int8 codes in the compute dtype, which they are
    # quantized into (fused_moe.int8_codes_dtype: no 8-bit tensor reaches the dot)
    for pairs, want, codes in ((False, kinds.I4_OFF, torch.int8),
                               (True, kinds.I4_PAIRS, P.torch_dtype)):
        assert decodes[pairs] and set(decodes[pairs]) == {(want, kinds.A_INT8, codes)}, decodes
    assert torch.isfinite(outs[True]).all() and outs[True].abs().max() > 0
    assert torch.equal(outs[True], outs[False])
