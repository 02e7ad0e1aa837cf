"""The NVFP4 reference against compressed-tensors' nvfp4-pack-quantized (pinned 0.20.0).

compressed-tensors keeps one global scale per Linear: w1 (gate_proj) and w3 (up_proj) are
separate modules, so a w13 holds two, `w13_weight_global_scale` [E, 2]. The stored global scale
is the reciprocal, 448 * 6 / amax: w = e2m1 * block scale / global.

* e2m1: unpack_fp4_from_uint8 on all 256 bytes vs decode_e2m1(unpack_nibbles) (element 2j in the
  low nibble); pack_fp4_to_uint8 vs pack_nibbles(encode_e2m1); FP4_E2M1_DATA.cast_to_fp4 vs
  round_to_e2m1 on every value, every tie, their float32 neighbours and random values.
* Reader: random MoE weights quantized with compressed-tensors' own qparams (generate_gparam,
  calculate_qparams with the NVFP4A16 preset) and NVFP4PackedCompressor.compress, one module
  per expert and shard, read with Checkpoint("nvfp4", format "ct"): our codes, block scales
  and global multipliers (1 / stored) are theirs, and our dequantization is their
  NVFP4PackedCompressor.decompress up to its own float32 / bf16 rounding (modelled exactly).
* Writer: synthesize("nvfp4", checkpoint_format="ct") tensors through their decompress give
  our values, so the reciprocal is stored the way compressed-tensors reads it; the same
  tensors with the multiplier stored instead are caught.
* Weight rule: their global scale, block-scale bytes and codes vs quantize_nvfp4("divide").

Where compressed-tensors 0.20.0 computes differently, the test asserts its rule and counts:
* Its arithmetic is float32 (and bf16 for bf16 weights): block scale
  e4m3(fl32(global * fl_w(block_amax / 6))), codes e2m1(fl32(x / fl32(bs / global))), where
  fl_w rounds to the weight's dtype. Fed those intermediates, round_to_e4m3 / round_to_e2m1
  give its bytes exactly; it differs from the exact rule we follow only where the rounded
  value lands on or crosses a tie: one e4m3 or e2m1 step.
* generate_gparam's 448 * 6 / amax is torch's scalar / tensor: fl(2688 * fl(1 / amax)) in the
  amax's dtype (bf16 for a bf16 weight), stored as float32; we round 2688 / amax once to
  float32. Equal for a power-of-two amax, which the weight-rule test pins so that both sides
  quantize against the same global scale.
* A block scale that rounds to 0 becomes 0.125 (its e4m3 "eps"), 1 in ours (ModelOpt writes 1
  for an all-zero block); the block's codes are 0 either way.
* cast_to_fp4 gives +0 for an input of -0.0 (sign from torch.sign); round_to_e2m1 keeps -0
  (code 0x8). Both are zero.
* decompress returns bf16: bf16(fl32(e2m1 * fl32(bs / global))); ours is exact in float64.

Activations (the NVFP4 preset's input_activations: dynamic local block scales against the
static input_global_scale): compute_dynamic_scales_and_zp + fake_quantize vs qdq_nvfp4 with
g = input_global_scale, with the same float32 differences.
"""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("compressed_tensors")

from _common import E2M1_GRID, E4M3_GRID, SHAPES, neighbours, per_row, random_blocks, tie_between
from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
from compressed_tensors.compressors.nvfp4.helpers import (
    pack_fp4_to_uint8,
    unpack_fp4_from_uint8,
)
from compressed_tensors.quantization import QuantizationScheme
from compressed_tensors.quantization.lifecycle.forward import fake_quantize
from compressed_tensors.quantization.quant_args import FP4_E2M1_DATA
from compressed_tensors.quantization.quant_scheme import NVFP4, NVFP4A16
from compressed_tensors.quantization.utils import (
    calculate_qparams,
    compute_dynamic_scales_and_zp,
    generate_gparam,
)
from moecert.reference.checkpoint import Checkpoint
from moecert.reference.dequantize import canonicalize, dequantize
from moecert.reference.elements import (
    decode_e2m1,
    decode_e4m3,
    encode_e2m1,
    round_to_e2m1,
    round_to_e4m3,
)
from moecert.reference.packing import pack_nibbles, unpack_nibbles
from moecert.reference.problem import MoEProblem
from moecert.reference.quantize import nvfp4_global_scale, qdq_nvfp4, quantize_nvfp4
from moecert.reference.synthesize import synthesize

pytestmark = pytest.mark.crosscheck

F32, BF16 = torch.float32, torch.bfloat16
SCHEME = QuantizationScheme(targets=["Linear"], **NVFP4A16)
CT_ZERO_SCALE = 0.125  # compressed-tensors' replacement for a block scale of 0 (e4m3 "eps")


# --- e2m1 codec -------------------------------------------------------------------------------

def test_unpack_all_bytes():
    b = torch.arange(256, dtype=torch.uint8).view(16, 16)
    theirs = unpack_fp4_from_uint8(b, 16, 32, dtype=F32).double()
    ours = decode_e2m1(unpack_nibbles(b))
    assert torch.equal(theirs, ours)
    assert torch.equal(torch.signbit(theirs), torch.signbit(ours))


def test_pack_all_codes():
    codes = torch.cartesian_prod(torch.arange(16), torch.arange(16)).view(16, 32)
    values = decode_e2m1(codes).float()  # -0.0 included (code 8)
    assert torch.equal(pack_fp4_to_uint8(values), pack_nibbles(encode_e2m1(values)))


def test_cast_to_fp4():
    mids = (E2M1_GRID[1:] + E2M1_GRID[:-1]) / 2
    base = torch.cat([E2M1_GRID, mids, torch.tensor([7.0, 1e4, math.inf, 2.0**-149])]).float()
    near = torch.cat([torch.nextafter(base, torch.full_like(base, math.inf)),
                      torch.nextafter(base, torch.zeros_like(base))])
    rand = torch.rand(20000, generator=torch.Generator().manual_seed(0)) * 7
    x = torch.cat([base, near, rand])
    x = torch.cat([x, -x])
    theirs = FP4_E2M1_DATA.cast_to_fp4(x.clone()).double()
    ours = round_to_e2m1(x.double())
    assert torch.equal(theirs, ours)
    # the sign of zero: theirs takes it from torch.sign (+0 for -0.0 in), ours keeps it
    neg = torch.signbit(x)
    keep = ~((x == 0) & neg)
    assert torch.equal(torch.signbit(theirs)[keep], torch.signbit(ours)[keep])
    assert not torch.signbit(theirs)[~keep].any() and torch.signbit(ours)[~keep].all()


# --- compressing with compressed-tensors ----------------------------------------------------

def _ct_compress(w: torch.Tensor):
    """One Linear weight [out, in] through compressed-tensors: global scale and block scales
    from its qparams functions (what llm-compressor's min-max observers call), then the
    nvfp4-pack-quantized compressor. Returns its compressed state dict and float32 scales."""
    gs = generate_gparam(w.amin(), w.amax())
    g = w.unflatten(-1, (-1, 16))
    scale, zp = calculate_qparams(g.amin(-1), g.amax(-1), SCHEME.weights, global_scale=gs)
    state = {"weight": w, "weight_scale": scale, "weight_global_scale": gs,
             "weight_zero_point": zp}
    return NVFP4PackedCompressor.compress(state, SCHEME), scale


def _ct_decompress(packed, scale, gs) -> torch.Tensor:
    state = {"weight_packed": packed, "weight_scale": scale, "weight_global_scale": gs}
    return NVFP4PackedCompressor.decompress(state, SCHEME)["weight"]


def _ct_checkpoint(gen, dtype, lo=-8, pin_amax=False):
    """A layer compressed module by module (each expert's w1, w3 and w2), stacked as vLLM's
    MoE layer holds it. Returns the tensors, the float weights and their decompressions.
    `pin_amax`: each module's amax a power of two, so that their global scale 2688 / amax
    is exact, ours (test_global_scale_rule)."""
    tensors, floats, theirs = {}, {}, {}
    for p, (E, n_out, n_in, shards) in SHAPES.items():
        w = random_blocks(gen, (E, n_out, n_in), lo, 0, dtype, block=16)
        w[:, n_out // shards:] *= 1.5  # w3 differs from w1 in magnitude
        if pin_amax:
            for s in w.view(E * shards, -1):
                s[0] = 2.0 ** math.ceil(math.log2(s.abs().max().item()))
        parts = {"weight_packed": [], "weight_scale": [], "weight_global_scale": []}
        deq = []
        for e in range(E):
            for s in w[e].chunk(shards, dim=0):
                c, _ = _ct_compress(s.contiguous())
                for name in parts:
                    parts[name].append(c[name])
                deq.append(_ct_decompress(c["weight_packed"], c["weight_scale"],
                                          c["weight_global_scale"]))
        tensors[f"{p}_weight_packed"] = torch.stack(parts["weight_packed"]).view(E, n_out, -1)
        tensors[f"{p}_weight_scale"] = torch.stack(parts["weight_scale"]).view(E, n_out, -1)
        gs = torch.cat(parts["weight_global_scale"]).view(E, shards)
        tensors[f"{p}_weight_global_scale"] = gs if shards == 2 else gs.view(E)
        floats[p] = w
        theirs[p] = torch.stack(deq).view(E, n_out, n_in)
    return tensors, floats, theirs


def _decompress_model(codes, bs, stored_global) -> torch.Tensor:
    """compressed-tensors' decompress arithmetic: bf16(fl32(e2m1 * fl32(bs / global)))."""
    step = bs.float() / per_row(stored_global.float(), codes.shape[1])
    return (codes.float() * step.repeat_interleave(16, -1)).to(BF16)


def _check_against_decompress(canon, ours, tensors, theirs, xc_counts):
    rounded = 0
    for p, c in canon.items():
        E, n_out, n_in = c.codes.shape
        stored = tensors[f"{p}_weight_global_scale"]
        their_codes = unpack_fp4_from_uint8(tensors[f"{p}_weight_packed"].view(-1, n_in // 2),
                                            E * n_out, n_in, dtype=F32)
        assert torch.equal(c.codes, their_codes.view(E, n_out, n_in).double())
        assert torch.equal(c.scales, tensors[f"{p}_weight_scale"].double())
        assert torch.equal(c.global_scale.unsqueeze(-1), 1 / per_row(stored.double(), n_out))
        assert theirs[p].dtype == BF16
        assert torch.equal(theirs[p], _decompress_model(c.codes, c.scales, stored))
        # ours is exact; theirs is float32 arithmetic then a bf16 rounding
        bound = (2.0**-8 + 2.0**-20) * ours[p].abs()  # half a bf16 ulp, float32 steps
        assert ((ours[p] - theirs[p].double()).abs() <= bound).all()
        rounded += int((ours[p].to(BF16) != theirs[p]).sum())
    xc_counts(elements=sum(t.numel() for t in theirs.values()), double_rounding=rounded)


@pytest.mark.parametrize("dtype", [F32, BF16], ids=["float32", "bfloat16"])
def test_read_compressed_tensors_checkpoint(dtype, xc_counts):
    tensors, _, theirs = _ct_checkpoint(torch.Generator().manual_seed(1), dtype, lo=-20)
    ckpt = Checkpoint(scheme="nvfp4", tensors=tensors, checkpoint_format="ct")
    _check_against_decompress(canonicalize(ckpt), dequantize(ckpt), tensors, theirs, xc_counts)


def test_synthesized_checkpoint_through_decompress(xc_counts):
    P = MoEProblem(M=1, K=256, N=64, E=3, topk=1)
    ckpt = synthesize("nvfp4", P, seed=2, checkpoint_format="ct")
    canon, ours = canonicalize(ckpt), dequantize(ckpt)
    theirs, wrong = {}, {}
    for p, (E, n_out, n_in, shards) in SHAPES.items():
        t = {n.removeprefix(f"{p}_"): v for n, v in ckpt.tensors.items() if n.startswith(p)}
        gs = t["weight_global_scale"].view(E, shards)
        assert (gs > 1).all()  # 2688 / amax; the multiplier amax / 2688 would be < 1 here
        deq, deq_wrong = [], []
        for e in range(E):
            for s in range(shards):
                rows = slice(s * n_out // shards, (s + 1) * n_out // shards)
                args = (t["weight_packed"][e, rows], t["weight_scale"][e, rows])
                deq.append(_ct_decompress(*args, gs[e, s].view(1)))
                # a writer that stored the multiplier 1 / global instead
                deq_wrong.append(_ct_decompress(*args, (1 / gs[e, s].double()).float().view(1)))
        theirs[p] = torch.stack(deq).view(E, n_out, n_in)
        wrong[p] = torch.stack(deq_wrong).view(E, n_out, n_in)
        nonzero = canon[p].codes != 0
        assert not torch.isclose(wrong[p].double(), ours[p], rtol=0.5)[nonzero].any()
    _check_against_decompress(canon, ours, ckpt.tensors, theirs, xc_counts)


# --- the weight rule ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, BF16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("lo", [-8, -20], ids=["normal", "tiny-blocks"])
def test_quantize_rule(dtype, lo, xc_counts):
    gen = torch.Generator().manual_seed(3 + lo)
    tensors, floats, _ = _ct_checkpoint(gen, dtype, lo, pin_amax=True)
    counts = dict(blocks=0, bs_tie_step=0, zero_scale=0, codes=0, code_tie_step=0)
    for p, (E, n_out, _, shards) in SHAPES.items():
        w = floats[p]
        ours = quantize_nvfp4(w.double(), shards, "divide")
        gs = tensors[f"{p}_weight_global_scale"].view(E, shards)
        amax = w.abs().reshape(E, shards, -1).amax(-1)
        assert torch.equal(gs, nvfp4_global_scale(amax.double(), "divide"))
        g = 1 / per_row(gs.double(), n_out)  # our multiplier for their global scale
        # their bytes from their rounded intermediates (float32; bf16 for block_amax / 6)
        their_bs = decode_e4m3(tensors[f"{p}_weight_scale"])
        block_amax = w.abs().unflatten(-1, (-1, 16)).amax(-1)
        bs_pre = per_row(gs, n_out) * (block_amax / 6.0)
        rounded = round_to_e4m3(bs_pre.double())
        zero = rounded == 0
        assert torch.equal(their_bs, torch.where(zero, CT_ZERO_SCALE, rounded))
        step32 = their_bs.float() / per_row(gs, n_out)
        elem_pre = (w.unflatten(-1, (-1, 16)) / step32.unsqueeze(-1)).flatten(-2).float()
        their_codes = decode_e2m1(unpack_nibbles(tensors[f"{p}_weight_packed"]))
        assert torch.equal(their_codes, round_to_e2m1(elem_pre.double()))

        # against ours: a block scale that rounds to 0 is 1 in ours, 0.125 in theirs
        assert torch.equal(ours.global_scale.unsqueeze(-1), g)
        assert (ours.scales[zero] == 1).all()
        exact_bs = block_amax.double() / (6 * g)
        bs_diff = (their_bs != ours.scales) & ~zero
        assert neighbours(their_bs[bs_diff], ours.scales[bs_diff], E4M3_GRID).all()
        assert tie_between(exact_bs, bs_pre, ours.scales, their_bs)[bs_diff].all()
        same = (their_bs == ours.scales).repeat_interleave(16, -1)
        exact = w.double() / (ours.scales.repeat_interleave(16, -1) * g)
        code_diff = (their_codes != ours.codes) & same
        assert neighbours(their_codes[code_diff], ours.codes[code_diff], E2M1_GRID).all()
        assert tie_between(exact, elem_pre, ours.codes, their_codes)[code_diff].all()
        assert (their_codes[zero.repeat_interleave(16, -1)] == 0).all()
        counts["blocks"] += their_bs.numel()
        counts["bs_tie_step"] += int(bs_diff.sum())
        counts["zero_scale"] += int(zero.sum())
        counts["codes"] += their_codes.numel()
        counts["code_tie_step"] += int(code_diff.sum())
    if dtype == F32:
        # float32 weights: bit-exact for these seeds (a float32 intermediate meets a tie the
        # exact value misses with probability about 2^-20 per value)
        assert counts["bs_tie_step"] == counts["code_tie_step"] == 0
    if lo == -20:
        assert counts["zero_scale"] > 0
    xc_counts(**counts)



@pytest.mark.parametrize("dtype", [F32, BF16], ids=["float32", "bfloat16"])
def test_global_scale_rule(dtype, xc_counts):
    """generate_gparam computes 448 * 6 / amax as torch's scalar / tensor does: the reciprocal
    of amax in amax's dtype, times 2688 (two roundings; bf16 ones for a bf16 weight), then
    stored as float32. Ours rounds 2688 / amax once to float32. They agree where 1 / amax is
    exact (amax a power of two); otherwise theirs is within two roundings of the quotient."""
    gen = torch.Generator().manual_seed(4)
    amax = (torch.rand(4096, generator=gen, dtype=torch.float64) * 100 + 1e-3).to(dtype)
    theirs = torch.cat([generate_gparam(-a.view(1), a.view(1)) for a in amax])
    ours = nvfp4_global_scale(amax.double(), "divide")
    assert torch.equal(theirs, (torch.reciprocal(amax) * 2688.0).float())
    differ = theirs != ours
    # two roundings of the dtype (unit roundoff u) from the exact quotient
    u = {F32: 2.0**-24, BF16: 2.0**-8}[dtype]
    exact = 2688.0 / amax.double()
    assert ((theirs.double() - exact).abs() <= (2 * u + u * u) * exact).all()
    powers = torch.exp2(torch.arange(-10, 10, dtype=torch.float64)).to(dtype)
    assert torch.equal(torch.cat([generate_gparam(-a.view(1), a.view(1)) for a in powers]),
                       nvfp4_global_scale(powers.double(), "divide"))
    xc_counts(amaxes=amax.numel(), global_differs=int(differ.sum()))


# --- activations: qdq_nvfp4 ------------------------------------------------------------------

@pytest.mark.parametrize("calibration", [1.25, 0.8], ids=["headroom", "saturating"])
def test_qdq_nvfp4_activations(calibration, xc_counts):
    """input_global_scale from a calibration amax (1.25x or 0.8x this batch's: the latter
    saturates block scales at 448 and elements at 6). Ours equals their fake-quantized values
    to float32 rounding, except in blocks whose float32 block scale rounds to another e4m3
    value (a tie) and at elements whose float32 value crosses an e2m1 tie (one step)."""
    args = QuantizationScheme(targets=["Linear"], **NVFP4).input_activations
    gen = torch.Generator().manual_seed(8)
    x = random_blocks(gen, (64, 512), -12, 0, F32, block=16)
    x[0, :16] = 0  # an all-zero block: scale 0.125 in theirs, values 0 in both
    a = x.abs().amax() * calibration
    g = generate_gparam(-a.view(1), a.view(1))
    scale, zp = compute_dynamic_scales_and_zp(value=x, args=args, module=None, global_scale=g)
    theirs = fake_quantize(x, scale, zp, args, global_scale=g).double()
    ours = qdq_nvfp4(x.double(), g.double())
    their_bs = scale.double()
    block_amax = x.abs().unflatten(-1, (-1, 16)).amax(-1)
    bs_pre = g * (block_amax / 6.0)  # their float32 block scale before the e4m3 cast
    rounded = round_to_e4m3(bs_pre.double())
    assert torch.equal(their_bs, torch.where(rounded == 0, CT_ZERO_SCALE, rounded))
    exact_bs = block_amax.double() / 6 * g.double()
    same_bs = round_to_e4m3(exact_bs) == their_bs
    bs_tie = tie_between(exact_bs, bs_pre, round_to_e4m3(exact_bs), their_bs)
    assert (bs_tie | (rounded == 0))[~same_bs].all()
    same = same_bs.repeat_interleave(16, -1)
    step32 = (scale / g).double().repeat_interleave(16, -1)
    elem_pre = (x / (scale / g).repeat_interleave(16, -1)).double()
    close = (ours - theirs).abs() <= 2.0**-23 * ours.abs()
    tie = neighbours(ours / step32, theirs / step32, E2M1_GRID) & tie_between(
        x.double() / step32, elem_pre, ours / step32, theirs / step32)
    assert (close | tie)[same].all()
    assert (theirs[0, :16] == 0).all() and (ours[0, :16] == 0).all()
    if calibration < 1:  # both saturate: block scale 448, element 6
        assert (their_bs == 448).any()
        assert (ours.abs() == 6 * 448 / g.double()).any()
    xc_counts(blocks=same_bs.numel(), zero_scale=int((rounded == 0).sum()),
              bs_tie_step=int((~same_bs & (rounded != 0)).sum()),
              elements=ours.numel(), element_tie_step=int((~close & same).sum()))
