"""Two launch-time constants of the grouped GEMM's scale reads (issue 44, round eleven), under
the Triton interpreter: SCALE_COLS (a power-of-two scale block as a compile-time constant, so
the K loop shifts where it divided) and E8M0_NORMAL (every E8M0 weight-scale byte of the
layer in 1..254, so a scale is its exponent field alone). Each must give the bits of the
path without it, on every scheme whose tiles read scales in the K loop; the host checks
that choose them are pinned on the bytes that must refuse them."""

from __future__ import annotations

import pytest
import torch
from moecert.kernels.triton_moe.interpret import load_interpreted_kernels

load_interpreted_kernels()  # before the kernel modules are bound below

from moecert.kernels.triton_moe import fused_moe  # noqa: E402
from moecert.kernels.triton_moe.backend import TritonBackend  # noqa: E402
from moecert.reference import MoEProblem, make_inputs, synthesize  # noqa: E402

BACKEND = TritonBackend()


pytestmark = pytest.mark.usefixtures("interpreted")


@pytest.mark.parametrize(("cols", "K", "constant"), [
    (32, 4096, 32), (16, 256, 16), (128, 4096, 128), (64, 192, 64),
    (4096, 4096, 0),  # per channel: one column, K stays a runtime value
    (96, 4096, 0),  # not a power of two: the division stays
    (256, 128, 0),  # wider than K
])
def test_scale_cols_constant_only_for_a_power_of_two_block_narrower_than_k(cols, K,
                                                                            constant):
    assert fused_moe.scale_cols_constexpr(cols, K) == constant


def test_e8m0_normal_refuses_the_bytes_whose_exponent_field_is_not_the_scale():
    normal = torch.arange(1, 255, dtype=torch.uint8).reshape(2, 127)
    assert fused_moe.e8m0_normal(normal)
    for byte in (0, 255):  # 2^-127 (a subnormal fp32) and NaN
        s = normal.clone()
        s[1, 5] = byte
        assert not fused_moe.e8m0_normal(s), byte
    assert not fused_moe.e8m0_normal(None)
    assert not fused_moe.e8m0_normal(torch.ones(4, dtype=torch.bfloat16))
    assert not fused_moe.e8m0_normal(torch.empty(0, dtype=torch.uint8))


SCHEMES = [
    ("mxfp8", "mxfp8", {}, True),
    ("mxfp6-e2m3", "mxfp6-e2m3", {}, True),
    ("mxfp4", "mxfp4", {}, None),  # bf16: its scales load as bf16; fp16: E8M0 bytes
    ("gptq4-g128", "gptq-int4", {"group_size": 128}, False),
    ("awq4-g64", "awq-int4", {"group_size": 64}, False),
    ("fp8w8a8-block", "fp8-w8a8", {}, False),
    ("nvfp4", "nvfp4", {}, False),
    ("w4a8", "w4a8-int8", {}, None),
]


def _layer_out(scheme, attrs, problem, spy_launches, monkeypatch, constants: bool = True):
    """The layer's output and each GEMM launch's (SCALE_COLS, E8M0_NORMAL), so a test fails
    if neither constant applied; without `constants` the host chooses neither."""
    with monkeypatch.context() as m:
        if not constants:
            m.setattr(fused_moe, "scale_cols_constexpr", lambda cols, K: 0)
            m.setattr(fused_moe, "e8m0_normal", lambda s: False)
        ckpt = synthesize(scheme, problem, seed=3, **attrs)
        layer = BACKEND.create_layer(ckpt, problem)
        BACKEND.process_weights_after_loading(layer)
        x, w, ids = make_inputs(problem, seed=4)
        launches = spy_launches("SCALE_COLS", "E8M0_NORMAL")
        return BACKEND.apply(layer, x, w, ids), list(launches.seen)


@pytest.mark.parametrize(("scheme", "attrs", "normal"), [c[1:] for c in SCHEMES],
                         ids=[c[0] for c in SCHEMES])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_the_constants_give_the_runtime_reads_bits(scheme, attrs, normal, dtype, spy_launches,
                                                   monkeypatch):
    problem = MoEProblem(M=9, K=256, N=256, E=4, topk=2, dtype=dtype)
    out, launched = _layer_out(scheme, attrs, problem, spy_launches, monkeypatch)
    base, base_launched = _layer_out(scheme, attrs, problem, spy_launches, monkeypatch,
                                     constants=False)
    assert all(c == 0 and not n for c, n in base_launched)
    # a block narrower than K (256) is a constant
    assert any(c for c, _ in launched), launched
    assert normal is None or any(n for _, n in launched) == normal, launched
    assert torch.isfinite(out).all()
    assert torch.equal(out, base)


def test_a_zero_block_keeps_the_full_decode(spy_launches, monkeypatch):
    """A quantizer writes E8M0 byte 0 for an all-zero block: the layer then reads its
    scales with the compare and select."""
    problem = MoEProblem(M=9, K=256, N=192, E=4, topk=2)
    ckpt = synthesize("mxfp8", problem, seed=3)
    ckpt.tensors["w13_weight_scale"][0, 0, 0] = 0
    layer = BACKEND.create_layer(ckpt, problem)
    BACKEND.process_weights_after_loading(layer)
    x, w, ids = make_inputs(problem, seed=4)
    launches = spy_launches("E8M0_NORMAL")
    out = BACKEND.apply(layer, x, w, ids)
    assert (False,) in launches.seen and (True,) in launches.seen  # w13 full, w2 normal
    assert torch.isfinite(out).all()
