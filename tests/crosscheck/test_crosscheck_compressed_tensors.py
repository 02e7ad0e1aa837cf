"""The reference against compressed-tensors (pinned 0.20.0, dense int32 packing since 0.18).

* pack_to_int32 / unpack_from_int32 vs moecert.reference.packing with packing="dense":
  bit-exact words and codes, bits 1..8, packed_dim 0/1, 2-D and 3-D (MoE) tensors.
* PackedQuantizationCompressor: compress random MoE weights, read the tensors it writes with
  Checkpoint(scheme="ct-int4"/"ct-int8") + dequantize, compare with its decompress bit for bit.
* calculate_qparams + quantize vs quantize_int_groups(rule="ct"): bit-exact in float64; in the
  model dtype compressed-tensors computes x/s + zp (and, asymmetric, max - min) in that dtype,
  so codes may differ by 1 exactly where its own rounded value sits on a .5 tie, and
  asymmetric scales by 1 ulp. Both are counted, and anything else fails.

Our pack functions take unsigned codes: the signed int8 value plus 2^(b-1).
"""

from __future__ import annotations

import pytest
import torch

ct = pytest.importorskip("compressed_tensors")
pytest.importorskip("hypothesis")

from compressed_tensors.compressors.pack_quantized.base import (  # noqa: E402
    PackedQuantizationCompressor,
)
from compressed_tensors.compressors.pack_quantized.helpers import (  # noqa: E402
    pack_to_int32,
    unpack_from_int32,
)
from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme  # noqa: E402
from compressed_tensors.quantization.lifecycle.forward import quantize as ct_quantize  # noqa: E402
from compressed_tensors.quantization.utils import calculate_qparams  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from moecert.reference.canonical import dequantize_canonical  # noqa: E402
from moecert.reference.checkpoint import Checkpoint  # noqa: E402
from moecert.reference.dequantize import canonicalize, dequantize  # noqa: E402
from moecert.reference.layouts import read_linear  # noqa: E402
from moecert.reference.packing import pack_int32, packed_length, unpack_int32  # noqa: E402
from moecert.reference.quantize import quantize_int_groups  # noqa: E402

pytestmark = pytest.mark.crosscheck

SHAPES = [(3, 64), (5, 37), (33, 7), (64, 3), (40, 96), (4, 17, 70), (2, 70, 6), (3, 9, 33)]


def test_version_pinned():
    assert ct.__version__.startswith("0.20.0"), ct.__version__


def _random_signed(shape, bits, gen):
    half = 1 << (bits - 1)
    return torch.randint(-half, half, shape, generator=gen, dtype=torch.int8)


def _ct_unpack_raises(bits, packed_dim, packed):
    """compressed-tensors 0.20.0 cannot unpack int4 along dim 0 when that dim packs into a
    single word (<= 8 rows) of a row-major [1, C > 1] tensor (what its packer returns): its
    4-bit fast path views the transposed [C, 1] tensor, whose last stride is C, as bytes and
    torch raises (see test_ct_int4_unpack_dim0_single_word_raises). The same words held
    column-major unpack fine."""
    return (bits == 4 and packed_dim == 0 and packed.shape[-2] == 1 and packed.shape[-1] > 1
            and packed.stride(-2) != 1)


def _check_ct_unpack(words, bits, q, packed_dim):
    """Their unpacker returns q, or raises exactly where the known limitation says."""
    if _ct_unpack_raises(bits, packed_dim, words):
        with pytest.raises(RuntimeError, match="stride"):
            unpack_from_int32(words, bits, q.shape, packed_dim=packed_dim)
    else:
        assert torch.equal(unpack_from_int32(words, bits, q.shape, packed_dim=packed_dim), q)


# --- pack_to_int32 / unpack_from_int32 ------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("packed_dim", [0, 1])
@pytest.mark.parametrize("bits", range(1, 9))
def test_pack_bit_exact(bits, packed_dim, shape):
    gen = torch.Generator().manual_seed(1000 * bits + 10 * packed_dim + len(shape))
    q = _random_signed(shape, bits, gen)
    half = 1 << (bits - 1)
    dim = packed_dim + q.dim() - 2  # ct packs 3-D tensors slice by slice along dim 0
    theirs = pack_to_int32(q, bits, packed_dim=packed_dim)
    ours = pack_int32(q.to(torch.int32) + half, bits, dim=dim, packing="dense")
    assert theirs.dtype == ours.dtype == torch.int32
    assert theirs.shape == ours.shape
    assert theirs.shape[dim] == packed_length(q.shape[dim], bits, "dense")
    assert torch.equal(theirs, ours)
    # our unpacker reads their words; theirs reads ours (same words, so checks their unpacker)
    back = unpack_int32(theirs, bits, q.shape[dim], dim=dim, packing="dense") - half
    assert torch.equal(back.to(torch.int8), q)
    _check_ct_unpack(theirs, bits, q, packed_dim)
    _check_ct_unpack(ours, bits, q, packed_dim)


@settings(max_examples=200, deadline=None)
@given(bits=st.integers(1, 8), rows=st.integers(1, 40), cols=st.integers(1, 130),
       experts=st.integers(0, 3), packed_dim=st.integers(0, 1), seed=st.integers(0, 2**31))
def test_pack_property(bits, rows, cols, experts, packed_dim, seed):
    shape = (rows, cols) if experts == 0 else (experts, rows, cols)
    q = _random_signed(shape, bits, torch.Generator().manual_seed(seed))
    half = 1 << (bits - 1)
    dim = packed_dim + q.dim() - 2
    theirs = pack_to_int32(q, bits, packed_dim=packed_dim)
    assert torch.equal(theirs, pack_int32(q.to(torch.int32) + half, bits, dim=dim,
                                          packing="dense"))
    back = unpack_int32(theirs, bits, q.shape[dim], dim=dim, packing="dense") - half
    assert torch.equal(back.to(torch.int8), q)
    _check_ct_unpack(theirs, bits, q, packed_dim)


def test_ct_int4_unpack_dim0_single_word_raises():
    """Library limitation, not ours: int4, packed_dim=0, <= 8 rows (one packed word per
    column) raises in compressed-tensors 0.20.0; our unpacker reads the same words. In the
    pack-quantized format this is the zero point of an asymmetric int4 layer with <= 8 output
    rows (see test_compressor_small_out_int4_asym_decompress_raises)."""
    q = _random_signed((8, 40), 4, torch.Generator().manual_seed(0))
    words = pack_to_int32(q, 4, packed_dim=0)
    assert words.shape == (1, 40)
    with pytest.raises(RuntimeError, match="stride"):
        unpack_from_int32(words, 4, q.shape, packed_dim=0)
    assert torch.equal(unpack_int32(words, 4, 8, dim=0, packing="dense").to(torch.int8) - 8, q)


@pytest.mark.parametrize("bits", range(1, 9))
def test_dense_vs_padded_layout(bits):
    """Named rule (research 1.1): since 0.18 compressed-tensors packs a dense bitstream; the
    pre-0.18 padded layout (floor(32/b) codes per word) is the same only for b in 1, 2, 4, 8."""
    q = _random_signed((4, 64), bits, torch.Generator().manual_seed(bits))
    theirs = pack_to_int32(q, bits)
    padded = pack_int32(q.to(torch.int32) + (1 << (bits - 1)), bits, packing="padded")
    if bits in (1, 2, 4, 8):
        assert torch.equal(theirs, padded)
    else:
        assert theirs.shape[1] == 64 * bits // 32 < padded.shape[1]


# --- the pack-quantized compressor round trip ---------------------------------------------

def _ct_args(bits, sym, group_size):
    if group_size == -1:
        return QuantizationArgs(num_bits=bits, type="int", symmetric=sym, strategy="channel")
    return QuantizationArgs(num_bits=bits, type="int", symmetric=sym, strategy="group",
                            group_size=group_size)


def _ct_qparams(w, args, group_size):
    """compressed-tensors' scale and zero point from the min/max of each group (or row)."""
    g = w.unflatten(-1, (-1, w.shape[-1] if group_size == -1 else group_size))
    return calculate_qparams(g.amin(-1), g.amax(-1), args)


def _random_weights(gen, E, n_out, n_in, dtype):
    """Per-row magnitudes over a few octaves plus row offsets (non-trivial zero points)."""
    w = torch.randn(E, n_out, n_in, generator=gen, dtype=torch.float64)
    w = w * torch.exp2(torch.randint(-4, 4, (E, n_out, 1), generator=gen).double())
    w = w + 0.5 * torch.randn(E, n_out, 1, generator=gen, dtype=torch.float64)
    return w.to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32],
                         ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("sym", [True, False], ids=["sym", "asym"])
@pytest.mark.parametrize("group_size", [32, 64, 128, -1])
@pytest.mark.parametrize("bits", [4, 8])
def test_compressor_round_trip(bits, group_size, sym, dtype, xc_counts):
    E, N, K = 3, 128, 256
    gen = torch.Generator().manual_seed(bits * 100 + group_size + sym)
    args = _ct_args(bits, sym, group_size)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    tensors, expect, codes = {}, {}, {}
    for p, (n_out, n_in) in {"w13": (2 * N, K), "w2": (K, N)}.items():
        w = _random_weights(gen, E, n_out, n_in, dtype)
        scale, zp = _ct_qparams(w, args, group_size)
        state = {"weight": w, "weight_scale": scale, "weight_zero_point": zp}
        packed = PackedQuantizationCompressor.compress(state, scheme)
        assert ("weight_zero_point" in packed) == (not sym)
        assert tuple(packed["weight_shape"].tolist()) == (E, n_out, n_in)
        for name, t in packed.items():
            if name == "weight_shape":  # vLLM's MoE layer holds one (out, in) row per expert
                t = torch.tensor([[n_out, n_in]] * E, dtype=torch.int64)
            tensors[f"{p}_{name}"] = t
        expect[p] = PackedQuantizationCompressor.decompress(packed, scheme)["weight"]
        codes[p] = (ct_quantize(w, scale, zp, args, dtype=torch.int8), zp)
    scheme_name = f"ct-int{bits}"
    for fmt in ("ct-0.18", "ct-0.17"):  # b = 4, 8: the padded (<0.18) layout reads the same
        ckpt = Checkpoint(scheme=scheme_name, tensors=tensors, group_size=group_size, sym=sym,
                          checkpoint_format=fmt)
        ours = dequantize(ckpt)
        canon = canonicalize(ckpt)
        for p in ("w13", "w2"):
            assert expect[p].dtype == dtype
            assert torch.equal(ours[p].to(dtype), expect[p]), (fmt, p)
            q, zp = codes[p]
            assert torch.equal(canon[p].codes, q.to(torch.int32))
            if sym:
                assert canon[p].zeros is None
            else:
                assert torch.equal(canon[p].zeros, zp.to(torch.int32))
    xc_counts(elements=sum(t.numel() for t in expect.values()), mismatches=0)


def test_compressor_small_out_int4_asym_decompress_raises():
    """compressed-tensors 0.20.0 cannot decompress an asymmetric int4 layer with <= 8 output
    rows (its zero point packs along dim 0 into one word; test above). We read it."""
    args = _ct_args(4, False, 32)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    w = _random_weights(torch.Generator().manual_seed(3), 1, 8, 64, torch.float32)
    scale, zp = _ct_qparams(w, args, 32)
    packed = PackedQuantizationCompressor.compress(
        {"weight": w, "weight_scale": scale, "weight_zero_point": zp}, scheme)
    assert packed["weight_zero_point"].shape == (1, 1, 2)
    with pytest.raises(RuntimeError, match="stride"):
        PackedQuantizationCompressor.decompress(packed, scheme)
    # what decompress would compute: (q - zp) * s, from their own quantize
    q = ct_quantize(w, scale, zp, args, dtype=torch.int8).double()
    expect = (q - zp.double().repeat_interleave(32, -1)) * scale.double().repeat_interleave(32, -1)
    tensors = {f"w13_{n}": t for n, t in packed.items() if n != "weight_shape"}
    ckpt = Checkpoint(scheme="ct-int4", tensors=tensors, group_size=32, sym=False)
    assert torch.equal(dequantize_canonical(read_linear(ckpt, "w13")), expect)


# --- calculate_qparams + quantize vs quantize_int_groups(rule="ct") ------------------------

def _ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b| in units in the last place of their (shared, positive) float dtype."""
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return (a.view(ints).long() - b.view(ints).long()).abs()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16],
                         ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("sym", [True, False], ids=["sym", "asym"])
@pytest.mark.parametrize("group_size", [32, 128, -1])
@pytest.mark.parametrize("bits", [4, 8])
def test_quantize_rule(bits, group_size, sym, dtype, xc_counts):
    E, n_out, n_in = 4, 64, 256
    gen = torch.Generator().manual_seed(7 * bits + group_size + 3 * sym)
    w = _random_weights(gen, E, n_out, n_in, dtype)
    args = _ct_args(bits, sym, group_size)
    scale, zp = _ct_qparams(w, args, group_size)
    q = ct_quantize(w, scale, zp, args, dtype=torch.int8).to(torch.int32)
    ours = quantize_int_groups(w.double(), bits, group_size, sym, "ct", dtype)
    cols = n_in if group_size == -1 else group_size

    scale_ulps = _ulp_distance(ours.scales.to(dtype), scale)
    same = scale_ulps == 0
    if dtype == torch.float64 or sym:
        # amax / ((qmax - qmin)/2) is one correctly rounded division in both
        assert same.all()
    else:
        # (max - min) / (qmax - qmin): they subtract in `dtype` (one rounding) before dividing;
        # we round the exact quotient once. Never more than 1 ulp apart.
        assert scale_ulps.max() <= 1
    # zero points, where the scales agree: ct rounds qmin - min/s computed in `dtype`
    zp_mismatch = torch.zeros_like(same)
    if not sym:
        zp_mismatch = same & (ours.zeros != zp.to(torch.int32))
        if zp_mismatch.any():
            lo = w.unflatten(-1, (-1, cols)).amin(-1).clamp(max=0)
            pre = (-(1 << (bits - 1)) - lo / scale).double()  # their value before rounding
            assert dtype != torch.float64
            assert ((pre - torch.floor(pre))[zp_mismatch] == 0.5).all()
            assert ((ours.zeros - zp.to(torch.int32)).abs()[zp_mismatch] == 1).all()
    params_agree = (same & ~zp_mismatch).repeat_interleave(cols, -1)

    diff = ours.codes != q
    if dtype == torch.float64:
        assert not diff.any()
    # where scale and zero agree, a code may differ only by 1 and only where their own
    # pre-rounding value x/s (+ zp), computed in `dtype`, is exactly a half-integer
    pre = w.unflatten(-1, (-1, cols)) / scale.unsqueeze(-1)
    if not sym:
        pre = pre + zp.to(dtype).unsqueeze(-1)
    pre = pre.flatten(-2).double()
    at_tie = (pre - torch.floor(pre)) == 0.5
    in_agreeing = diff & params_agree
    assert ((ours.codes - q).abs()[in_agreeing] == 1).all()
    assert not (in_agreeing & ~at_tie).any(), "code differences away from a rounding tie"
    xc_counts(groups=same.numel(), scale_1ulp=int((~same).sum()),
              zero_tie=int(zp_mismatch.sum()), codes=q.numel(),
              code_diff_at_tie=int(in_agreeing.sum()),
              code_diff_other_scale=int((diff & ~params_agree).sum()))


def test_all_zero_group():
    """Degenerate group (all zeros): compressed-tensors stores scale = eps of the dtype, we
    store 1 (reference/quantize.py); both dequantize to exact zeros."""
    w = torch.zeros(1, 4, 64)
    w[:, :, 32:] = torch.randn(1, 4, 32, generator=torch.Generator().manual_seed(0))
    for sym in (True, False):
        args = _ct_args(4, sym, 32)
        scale, zp = _ct_qparams(w, args, 32)
        ours = quantize_int_groups(w.double(), 4, 32, sym, "ct", torch.float32)
        assert (scale[..., 0] == torch.finfo(torch.float32).eps).all()
        assert (ours.scales[..., 0] == 1).all()
        assert torch.equal(ours.scales[..., 1].float(), scale[..., 1])
        q = ct_quantize(w, scale, zp, args, dtype=torch.int8)
        assert torch.equal(q[..., :32], torch.zeros_like(q[..., :32]))
        assert (dequantize_canonical(ours)[..., :32] == 0).all()
