"""The reference against AutoAWQ (pinned 0.2.9, installed --no-deps; needs accelerate and
datasets to import).

* AutoAWQ's own quantizer (AwqQuantizer.pseudo_quantize_tensor, zero_point=True) and packer
  (WQLinear_GEMM.from_linear) make qweight / qzeros / scales for random fp16 linears, exactly
  as its _apply_quant does. We read those tensors with Checkpoint(scheme="awq-int4") (E = 1)
  and compare: the codes and zeros with AutoAWQ's (unpacked by its packing_utils), and our
  float64 dequantize, rounded to fp16, with its dequantize_gemm, bit for bit.
* quantize_int_groups(rule="awq") vs pseudo_quantize_tensor: bit-exact in float64.
"""

from __future__ import annotations

import warnings

import pytest
import torch

# AutoAWQ announces its deprecation on import (and resets the DeprecationWarning filter to
# "default" itself): record that warning here rather than repeat it in every report
with warnings.catch_warnings(record=True):
    awq = pytest.importorskip("awq")

from awq.modules.linear.gemm import WQLinear_GEMM
from awq.quantize.quantizer import AwqQuantizer
from awq.utils.packing_utils import dequantize_gemm, reverse_awq_order, unpack_awq
from moecert.reference.canonical import dequantize_canonical
from moecert.reference.checkpoint import Checkpoint
from moecert.reference.dequantize import canonicalize, dequantize
from moecert.reference.quantize import quantize_int_groups

pytestmark = pytest.mark.crosscheck


def test_version_pinned():
    assert awq.__version__ == "0.2.9", awq.__version__


def _quantizer(group_size: int, zero_point: bool = True) -> AwqQuantizer:
    """AwqQuantizer with only what pseudo_quantize_tensor reads (no model, no calibration)."""
    q = AwqQuantizer.__new__(AwqQuantizer)
    q.w_bit, q.group_size, q.zero_point = 4, group_size, zero_point
    return q


def _random_linear(gen, n_out, n_in):
    w = torch.randn(n_out, n_in, generator=gen, dtype=torch.float64)
    w = w * torch.exp2(torch.randint(-3, 3, (n_out, 1), generator=gen).double())
    w = w + 0.3 * torch.randn(n_out, 1, generator=gen, dtype=torch.float64)
    return (w / n_in**0.5).to(torch.float16)


def _awq_pack(w: torch.Tensor, group_size: int):
    """What AutoAWQ's _apply_quant does to one fp16 linear (version "gemm")."""
    linear = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=torch.float16)
    fq, scales, zeros = _quantizer(group_size).pseudo_quantize_tensor(w.clone())
    linear.weight.data = fq
    q = WQLinear_GEMM.from_linear(linear, 4, group_size, init_only=False,
                                  scales=scales.t().contiguous(), zeros=zeros.t().contiguous())
    # the codes pseudo_quantize_tensor rounded to (in fp16, as it computes them)
    s, z = scales.repeat_interleave(group_size, -1), zeros.repeat_interleave(group_size, -1)
    pq = torch.clamp(torch.round(w / s) + z, 0, 15).to(torch.int32)
    return q, zeros, pq


def _awq_codes(q: WQLinear_GEMM):
    """AutoAWQ's own unpacking: [in, out] codes and [groups, out] zeros, logical order."""
    iw, iz = reverse_awq_order(*unpack_awq(q.qweight, q.qzeros, 4), 4)
    return torch.bitwise_and(iw, 15).to(torch.int32), torch.bitwise_and(iz, 15).to(torch.int32)


@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_gemm_pack_and_dequantize(group_size, xc_counts):
    K, N = 256, 128
    gen = torch.Generator().manual_seed(group_size)
    tensors, expect, codes = {}, {}, {}
    for p, (n_out, n_in) in {"w13": (2 * N, K), "w2": (K, N)}.items():
        q, zeros, pq = _awq_pack(_random_linear(gen, n_out, n_in), group_size)
        assert q.qweight.shape == (n_in, n_out // 8) and q.qweight.dtype == torch.int32
        assert q.qzeros.shape == (n_in // group_size, n_out // 8)
        assert q.scales.shape == (n_in // group_size, n_out) and q.scales.dtype == torch.float16
        tensors[f"{p}_qweight"] = q.qweight.unsqueeze(0)
        tensors[f"{p}_qzeros"] = q.qzeros.unsqueeze(0)
        tensors[f"{p}_scales"] = q.scales.unsqueeze(0)
        expect[p] = dequantize_gemm(q.qweight, q.qzeros, q.scales, 4, group_size)  # [in, out]
        codes[p] = (*_awq_codes(q), zeros.to(torch.int32), pq)
    ckpt = Checkpoint(scheme="awq-int4", tensors=tensors, group_size=group_size, sym=False)
    ours = dequantize(ckpt)
    canon = canonicalize(ckpt)
    repacked = 0
    for p in ("w13", "w2"):
        assert expect[p].dtype == torch.float16
        assert torch.equal(ours[p][0].t().to(torch.float16), expect[p])
        iw, iz, zeros, pq = codes[p]
        # our canonical form is signed: code = u - 8, zero = z - 8 (true zeros, no -1)
        assert torch.equal(canon[p].codes[0] + 8, iw.t())
        assert torch.equal(canon[p].zeros[0] + 8, iz.t())
        assert torch.equal(iz.t(), zeros)  # the stored zero is pseudo_quantize's zero
        # from_linear recomputes the codes as round((fq + z*s) / s) from the fake-quantized
        # fp16 weight; count where that is not the code pseudo_quantize_tensor chose
        repacked += int((iw.t() != pq).sum())
    xc_counts(elements=sum(t.numel() for t in expect.values()), mismatches=0,
              awq_repack_vs_pseudo_quantize_code_diff=repacked)


@pytest.mark.parametrize("sym", [False, True], ids=["asym", "sym"])
@pytest.mark.parametrize("group_size", [32, 128, -1])
def test_quantize_rule_float64(group_size, sym, xc_counts):
    """quantize_int_groups(rule="awq") vs pseudo_quantize_tensor, both in float64: same
    scales, zeros and codes. asym: s = max(max - min, 1e-5)/15, z = clamp(-round(min/s)),
    no clip of the range to 0; sym (zero_point=False): s = amax/7 (not GPTQ's amax/7.5)."""
    gen = torch.Generator().manual_seed(17 + group_size)
    n_out, n_in = 64, 256
    w = _random_linear(gen, n_out, n_in).double() * 7.0 + 0.1
    quantizer = _quantizer(group_size if group_size > 0 else 0, zero_point=not sym)
    fq, s, z = quantizer.pseudo_quantize_tensor(w.clone())
    ours = quantize_int_groups(w.unsqueeze(0), 4, group_size, sym, "awq", torch.float64)
    cols = n_in if group_size == -1 else group_size
    assert torch.equal(ours.scales[0], s)
    assert torch.equal(dequantize_canonical(ours)[0], fq)
    s_full = s.repeat_interleave(cols, -1)
    if sym:
        assert z is None and ours.zeros is None
        assert torch.equal(s, w.abs().unflatten(-1, (-1, cols)).amax(-1) / 7)
        q = torch.clamp(torch.round(w / s_full), -8, 7)
    else:
        assert torch.equal(ours.zeros[0] + 8, z.to(torch.int32))
        q = torch.clamp(torch.round(w / s_full) + z.repeat_interleave(cols, -1), 0, 15) - 8
    assert torch.equal(ours.codes[0], q.to(torch.int32))
    xc_counts(codes=q.numel(), mismatches=0)
