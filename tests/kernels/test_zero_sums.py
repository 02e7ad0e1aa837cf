"""Int4 zero points (AWQ) from the rows' activation sums (gemm_kernel's ZERO_SUMS, issue 44
round thirteen): the tile decodes the codes as symmetric ones, sum_k a_k (q_k - 8), and takes
(zero - 8) * sum_k a_k off per weight column, the zero point read from the fp32 scale word's
4 low mantissa bits (`fused_moe.zero_point_words`), where a 16-bit checkpoint scale leaves
them zero. Each GEMM against the zero points inside the decode (MOECERT_TRITON_ZERO_SUMS=0)
on the same inputs, within the tuner's reorder bound (its magnitudes count the (q - 8) and
(zero - 8) terms); the host's choice; the scale words. Under the interpreter here; compiled,
on the tiles a GPU runs, in test_zero_sums_cuda.py."""

from __future__ import annotations

import pytest
import torch
from moecert.kernels.triton_moe.interpret import load_interpreted_kernels

load_interpreted_kernels()  # before the kernel modules are bound below

from _zero_sums import assert_agree, assert_doubled_sums_caught  # noqa: E402
from moecert.kernels.triton_moe import configs, fused_moe, kinds  # noqa: E402
from moecert.kernels.triton_moe.backend import TritonBackend  # noqa: E402
from moecert.reference import MoEProblem, synthesize  # noqa: E402

pytestmark = pytest.mark.usefixtures("interpreted")


@pytest.mark.parametrize("tile", ["decode", "split"])  # (the interpreter: minutes for more)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_zero_sums_give_the_decodes_sum(monkeypatch, dtype, tile):
    assert_agree(monkeypatch, MoEProblem(M=24, K=512, N=384, E=4, topk=2, dtype=dtype), tile,
                 "cpu")


def test_a_wrong_activation_sum_is_caught(monkeypatch):
    """The comparison above can fail: each row's activation sums doubled move GEMM1 and GEMM2
    past the bound."""
    assert_doubled_sums_caught(monkeypatch, MoEProblem(M=8, K=256, N=256, E=4, topk=2),
                               "decode", "cpu")


def test_zero_point_words_carry_both_exactly():
    gen = torch.Generator().manual_seed(0)
    s = (torch.rand(3, 8, 4, generator=gen) + 0.1).to(torch.float16).to(torch.float32)
    s[0, 0, 0] = -s[0, 0, 0]  # a negative scale keeps its sign bit
    z = torch.randint(0, 16, (3, 8, 4), generator=gen, dtype=torch.uint8)
    words = fused_moe.zero_point_words(s, z)
    assert words.dtype == torch.int32 and words.shape == s.shape
    assert torch.equal(words & 0xF, z.to(torch.int32))
    assert torch.equal((words & ~0xF).view(torch.float32), s)
    assert (words & 0xF).any() and not torch.equal(words.view(torch.float32), s)


@pytest.mark.parametrize("case", ["fp32-scale", "zero-16", "bf16-tensor", "shapes"])
def test_zero_point_words_refuse_what_they_cannot_carry(case):
    s = torch.full((2, 4, 3), 0.5)
    z = torch.full((2, 4, 3), 7, dtype=torch.uint8)
    if case == "fp32-scale":
        s[1, 2, 0] = 0.1  # its low mantissa bits are taken
    elif case == "zero-16":
        z[0, 0, 0] = 16
    elif case == "bf16-tensor":
        s = s.to(torch.bfloat16)
    else:
        z = z[:, :, :2]
    assert fused_moe.zero_point_words(s, z) is None


@pytest.mark.parametrize("scheme, attrs, want", [
    ("awq-int4", {"group_size": 128}, True),
    ("w4a8-int8", {"group_size": 128, "checkpoint_format": "awq"}, False),  # int8 activations
    ("gptq-int4", {"group_size": 128}, False),  # no zero points
])
def test_zero_sums_only_for_int4_planes_with_zero_points_and_16_bit_activations(
        monkeypatch, scheme, attrs, want):
    from moecert.kernels.triton_moe import backend

    P = MoEProblem(M=4, K=256, N=128, E=4, topk=2)
    monkeypatch.setenv(configs.NIB_SPAN_ENV, "128")
    b = TritonBackend()
    layer = b.create_layer(synthesize(scheme, P, seed=5, **attrs), P)
    b.process_weights_after_loading(layer)
    act = backend.activation_kind(layer.quant)
    for p in ("w13", "w2"):
        w = backend._weights(layer, p)
        assert (w["zero_words"] is not None) is want
        if want:  # the scale words in the scales' strides
            assert w["zero_words"].stride() == w["args"][1].stride()
        for config, runs in (({}, want), ({"ZERO_SUMS": True}, want),
                             ({"ZERO_SUMS": False}, False)):
            assert fused_moe.zero_sums_run(w, act, config) is runs
        monkeypatch.setenv(configs.ZERO_SUMS_ENV, "0")
        assert backend._weights(layer, p)["zero_words"] is None
        monkeypatch.delenv(configs.ZERO_SUMS_ENV)
        assert backend._weights(layer, p, nib_span=0)["zero_words"] is None
    assert act == kinds.A16 or not want


def test_the_variable_refuses_other_values():
    assert configs.zero_sums_allowed({}) and configs.zero_sums_allowed({configs.ZERO_SUMS_ENV: "1"})
    assert not configs.zero_sums_allowed({configs.ZERO_SUMS_ENV: "0"})
    with pytest.raises(ValueError, match="MOECERT_TRITON_ZERO_SUMS='yes'"):
        configs.zero_sums_allowed({configs.ZERO_SUMS_ENV: "yes"})
