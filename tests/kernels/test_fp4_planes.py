"""E2M1 weights (MXFP4, NVFP4) in nibble planes over layout.FP4_SPAN columns, the layout the
Triton backend stores them in where K allows: the same values as the checkpoint's adjacent
order, under the interpreter (the bit-field decode) and, on a CUDA sm80+ GPU, through the PTX
decode (`_fp4_planes`) bit for bit against the bit-field one."""

from __future__ import annotations

import functools
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from moecert.kernels.triton_moe import interpret, kinds, layout

E, N, TOPK = 3, 64, 2


def _fm():
    from moecert.kernels.triton_moe import fused_moe

    return fused_moe


# Interpreter tests in a process that also runs the compiled ones (a CUDA sm80+ GPU): each runs
# in a child process of its own, the whole child interpreted, so this process's Triton never
# defines a kernel for the interpreter and the compiled tests below start from a clean state
# (reloading moecert's modules back was not enough: on an H100 the compiled tests failed with
# CompilationError after the interpreter tests, 25 of 26). MOECERT_INTERPRETER_IN_CHILD=1
# takes the same path on a CPU; the child marks itself with MOECERT_INTERPRETER_CHILD=1.
_CHILD = "MOECERT_INTERPRETER_CHILD"
_ROOT = Path(__file__).resolve().parents[2]


def _in_child_process() -> bool:
    if os.environ.get(_CHILD) == "1":
        return False
    return _sm80() or os.environ.get("MOECERT_INTERPRETER_IN_CHILD") == "1"


def _interpreter_works() -> bool:
    """Triton 3.6's interpreter fails on numpy >= 2.3 ("only 0-dimensional arrays can be
    converted to Python scalars", NOTES.md; the H200 of tools/gpu_ci.sh, 2026-11-28)."""
    import numpy
    import triton

    def version(v):
        return tuple(int(p) for p in v.split(".")[:2] if p.isdigit())

    return version(triton.__version__) >= (3, 9) or version(numpy.__version__) < (2, 3)


def interpreted(test):
    """Run `test` (which takes the `fm` fixture) under the interpreter: here, or in a child
    pytest process of its own (`_in_child_process`), whose result is this test's."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        if not _in_child_process():
            return test(*args, **kwargs)
        if not _interpreter_works():
            pytest.skip("Triton < 3.9's interpreter needs numpy < 2.3 (NOTES.md), which this "
                        "GPU machine lacks: the interpreter tests run on the CPU CI")
        node = os.environ["PYTEST_CURRENT_TEST"].rsplit(" (", 1)[0]
        env = {**os.environ, _CHILD: "1", "TRITON_INTERPRET": "1"}
        done = subprocess.run([sys.executable, "-m", "pytest", node, "-q", "-p",
                               "no:cacheprovider", "-p", "no:randomly"], cwd=_ROOT, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0 and " passed" in done.stdout, (
            f"{node} in a child process (exit {done.returncode}):\n{done.stdout[-4000:]}"
            f"{done.stderr[-2000:]}")

    return run


@pytest.fixture
def fm(monkeypatch):
    """The interpreted fused_moe module; None where the test runs in a child (nothing is
    defined for the interpreter in this process)."""
    if _in_child_process():
        return None
    interpret.load_interpreted_kernels()
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    return _fm()


def _run(fm, weights, a, ids, config):
    from moecert.kernels.triton_moe.align import align_assignments

    sorted_ids, block_expert, num_padded = align_assignments(ids, E, config["BLOCK_M"],
                                                             n=ids.numel())
    c = torch.empty(ids.numel(), weights["N"], dtype=torch.float32, device=a.device)
    fm.moe_gemm(a, None, None, weights, c, sorted_ids, block_expert, num_padded, None,
                a_row_div=TOPK, act=kinds.A16, config=config)
    return c


def _assignments(m, gen):
    """Expert ids of m tokens, TOPK distinct experts each, flattened."""
    return torch.stack([torch.randperm(E, generator=gen)[:TOPK] for _ in range(m)]).reshape(-1)


def _fp4(fm, scale_kind, K, gen):
    """Random e2m1 bytes (every code, both signs) and scales: E8M0 bytes near 2^0 per 32
    columns, or e4m3 bytes of both signs per 16 (a negative block scale must negate)."""
    q = torch.randint(0, 256, (E, N, K // 2), dtype=torch.uint8, generator=gen)
    if scale_kind == kinds.S_E8M0:
        cols = 32
        s = torch.randint(120, 134, (E, N, K // cols), dtype=torch.uint8, generator=gen)
    else:
        cols = 16
        s = torch.randint(0x20, 0x58, (E, N, K // cols), dtype=torch.uint8, generator=gen)
        s |= (torch.rand(s.shape, generator=gen) < 0.2).to(torch.uint8) << 7
    return q, s, cols


@pytest.mark.parametrize("scale", ["e8m0", "e4m3"])
@pytest.mark.parametrize("swap", [False, True], ids=["plain", "swap-ab"])
@pytest.mark.parametrize(("unroll", "split_k"), [(1, 1), (2, 1), (1, 2)])
@interpreted
def test_fp4_planes_compute_the_adjacent_layouts_values(fm, scale, swap, unroll, split_k):
    """K = 192 (three spans, so an unrolled step's second tile runs past K), tiled 16 x 32
    bytes; the same products summed per plane: equal up to fp32 reassociation."""
    kind = kinds.S_E8M0 if scale == "e8m0" else kinds.S_E4M3
    gen = torch.Generator().manual_seed(3 + unroll + 5 * split_k + 7 * swap)
    K = 192
    q, s, cols = _fp4(fm, kind, K, gen)
    a = torch.randn(5, K, generator=gen).to(torch.bfloat16)
    ids = _assignments(5, gen)
    config = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64, "num_warps": 4, "num_stages": 2,
              "K_UNROLL": unroll, "SPLIT_K": split_k, "SWAP_AB": swap}
    plain = fm.describe_weights(kinds.W_FP4, q, torch.bfloat16, s=s, scale_cols=cols,
                                scale_kind=kind)
    span = layout.FP4_SPAN
    planes = fm.describe_weights(kinds.W_FP4, layout.tile_weights(layout.plane_nibbles(q, span),
                                                           *layout.FP4_TILE),
                                 torch.bfloat16, s=s, scale_cols=cols, scale_kind=kind,
                                 nib_span=span)
    want = _run(fm, plain, a, ids, {**config, "K_UNROLL": 1, "SPLIT_K": 1})
    got = _run(fm, planes, a, ids, config)
    assert torch.isfinite(want).all() and want.abs().max() > 1
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-4)


@interpreted
def test_fp4_planes_fit_per_scale_kind(fm):
    # gpt-oss-120b's K
    assert layout.nib_span_fits(kinds.W_FP4, 2880, 32, False, layout.FP4_SPAN, kinds.S_E8M0)
    assert layout.nib_span_fits(kinds.W_FP4, 256, 16, False, layout.FP4_SPAN, kinds.S_E4M3)
    assert not layout.nib_span_fits(kinds.W_FP4, 256, 16, False, layout.FP4_SPAN, kinds.S_E8M0)
    assert not layout.nib_span_fits(kinds.W_FP4, 96, 32, False, layout.FP4_SPAN, kinds.S_E8M0)  # K
    q = torch.zeros(2, 32, 48, dtype=torch.uint8)  # K = 96: no whole span
    with pytest.raises(ValueError, match="nibble planes over 64 columns"):
        fm.describe_weights(kinds.W_FP4, q, torch.bfloat16, s=torch.zeros(2, 32, 3,
                                                                        dtype=torch.uint8),
                            scale_cols=32, scale_kind=kinds.S_E8M0, nib_span=64)


@pytest.mark.parametrize(("scheme", "attrs", "span"), [
    ("mxfp4", {}, 64), ("nvfp4", {}, 64), ("mxfp4", {"activation": "mxfp8"}, 0),
], ids=["mxfp4", "nvfp4", "mxfp4-a-mxfp8-adjacent"])
@interpreted
def test_backend_stores_fp4_planes_that_compute_the_reference(fm, scheme, attrs, span):
    """The whole layer (bias, router weight) in planes against the float64 reference, the
    triton backend tests' bound; the export reads the checkpoint's bytes back. MXFP8
    activations (a scale per 32-column tile) keep the adjacent order (a GPU ci run caught
    planes applying one activation scale to 64 columns)."""
    from moecert.kernels.triton_moe.backend import TritonBackend
    from moecert.reference import MoEProblem, make_inputs, moe, synthesize

    P = MoEProblem(M=3, K=256, N=128, E=3, topk=2, bias=scheme == "mxfp4")
    ckpt = synthesize(scheme, P, seed=1, **attrs)
    backend = TritonBackend()
    layer = backend.create_layer(ckpt, P)
    backend.process_weights_after_loading(layer)
    assert (layer.meta["w13_nib_span"], layer.meta["w2_nib_span"]) == (span, span)
    assert layer.get("w13_w").dim() == (5 if span else 3)
    x, w, ids = make_inputs(P, seed=2)
    out = backend.apply(layer, x, w, ids)
    ref = moe(ckpt, x, w, ids, P)
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= 2.0**-8, f"relative error {err:.3e}"
    plain = TritonBackend()
    plain_layer = plain.create_layer(ckpt, P)
    from moecert.kernels.convert import convert_to_kernel_format

    convert_to_kernel_format(plain_layer)
    for p in ("w13", "w2"):
        got = backend.canonical_weights(layer)[p]
        assert torch.equal(_stored(layer, p), plain_layer.get(f"{p}_w"))
        assert torch.isfinite(got.codes).all()


def _stored(layer, p):
    from moecert.kernels.triton_moe.backend import _stored_fp4

    return _stored_fp4(layer, p)


# --- the PTX decode on a GPU ------------------------------------------------------------------

def _sm80() -> bool:
    return (torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
            and torch.cuda.get_device_capability() >= (8, 0))


@pytest.fixture
def compiled():
    fused_moe = _fm()
    if interpret._is_interpreted(fused_moe):
        for name in interpret._MODULES:
            importlib.reload(importlib.import_module(f"moecert.kernels.triton_moe.{name}"))
    fused_moe = _fm()
    assert not kinds.INTERPRET
    return fused_moe


def _ptx_matches_the_general_decode(fm, monkeypatch, planes, a, ids, config):
    """The GEMM with the PTX decode off, then on (`int4_pairs_run_on`): a non-trivial output,
    the same bit for bit."""
    outs = {}
    for ptx in (False, True):
        monkeypatch.setattr(fm, "int4_pairs_run_on", lambda device, on=ptx: on)
        outs[ptx] = _run(fm, planes, a, ids, config)
    assert torch.isfinite(outs[False]).all() and outs[False].abs().max() > 1
    assert torch.equal(outs[True], outs[False])


@pytest.mark.skipif(not _sm80(), reason="needs a CUDA sm80+ GPU, compiled Triton")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("scale", ["e8m0", "e4m3"])
@pytest.mark.parametrize("swap", [False, True], ids=["plain", "swap-ab"])
def test_ptx_fp4_decode_matches_the_bit_fields_bit_for_bit(compiled, monkeypatch, dtype,
                                                           scale, swap):
    fm = compiled
    kind = kinds.S_E8M0 if scale == "e8m0" else kinds.S_E4M3
    gen = torch.Generator().manual_seed(9)
    K = 2880 if scale == "e8m0" else 1024
    q, s, cols = _fp4(fm, kind, K, gen)
    a = torch.randn(37, K, generator=gen).to(dtype).cuda()
    ids = _assignments(37, gen).cuda()
    span = layout.FP4_SPAN
    planes = fm.describe_weights(kinds.W_FP4, layout.tile_weights(layout.plane_nibbles(q, span),
                                                           *layout.FP4_TILE).cuda(),
                                 dtype, s=s.cuda(), scale_cols=cols, scale_kind=kind,
                                 nib_span=span)
    config = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3,
              "K_UNROLL": 2, "SWAP_AB": swap}
    _ptx_matches_the_general_decode(fm, monkeypatch, planes, a, ids, config)


@pytest.mark.skipif(not _sm80(), reason="needs a CUDA sm80+ GPU, compiled Triton")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_ptx_awq_zero_point_decode_matches_the_general_path(compiled, monkeypatch, dtype):
    """int4 planes with zero points (AWQ): `_int4_planes_zero` against the per-element
    codes - zero, bit for bit (both exact)."""
    fm = compiled
    gen = torch.Generator().manual_seed(13)
    K = 512
    q = torch.randint(0, 256, (E, N, K // 2), dtype=torch.uint8, generator=gen)
    s = torch.rand(E, N, K // 128, generator=gen) + 0.5
    z = torch.randint(0, 16, (E, N, K // 128), dtype=torch.uint8, generator=gen)
    a = torch.randn(21, K, generator=gen).to(dtype).cuda()
    ids = _assignments(21, gen).cuda()
    planes = fm.describe_weights(kinds.W_INT4, layout.tile_weights(layout.plane_nibbles(q, 128),
                                                            *layout.INT4_TILE).cuda(),
                                 dtype, s=s.cuda(), zp=z.cuda(), scale_cols=128, sym_zero=8,
                                 nib_span=128)
    config = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3,
              "FAST_I4": True}
    _ptx_matches_the_general_decode(fm, monkeypatch, planes, a, ids, config)
