"""Properties of quantize -> write -> read -> dequantize across every layout.

1. Quantization error: a synthesized checkpoint dequantizes to within half a step of the float
   weights it came from, except where the tool's rule clips; where it clips, and by how much,
   is bounded per rule (derivation next to `clip_slack`).
2. write -> read is the identity on the canonical form, bit for bit, for every layout.
3. One set of true int4 weights written as GPTQ v1, GPTQ v2, AWQ and compressed-tensors 0.17 /
   0.18 dequantizes to the same float64 tensors (and to the formula computed here).
"""

from __future__ import annotations

from dataclasses import replace

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from moecert.reference.canonical import CanonicalLinear, dequantize_canonical
from moecert.reference.checkpoint import Checkpoint
from moecert.reference.dequantize import dequantize
from moecert.reference.layouts import read_linear, write_linear
from moecert.reference.synthesize import quantize_weights, random_weights

MODEL_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
UNIT_ROUNDOFF = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8, torch.float32: 2.0**-24}
EPS = 1e-9  # float64 noise in w / s, in steps

# (scheme, attrs) of the integer group layouts; group_size and act_order are drawn separately
INT_LAYOUTS = [
    ("gptq-int4", dict(checkpoint_format="gptq", sym=True)),
    ("gptq-int4", dict(checkpoint_format="gptq", sym=False)),
    ("gptq-int4", dict(checkpoint_format="gptq_v2", sym=False)),
    ("gptq-int8", dict(checkpoint_format="gptq", sym=False)),
    ("gptq-int8", dict(checkpoint_format="gptq_v2", sym=True)),
    ("awq-int4", dict(sym=False)),
    ("awq-int4", dict(sym=True)),
    ("ct-int4", dict(checkpoint_format="ct-0.17", sym=True)),
    ("ct-int4", dict(checkpoint_format="ct-0.18", sym=False)),
    ("ct-int8", dict(checkpoint_format="ct-0.17", sym=False)),
    ("ct-int8", dict(checkpoint_format="ct-0.18", sym=True)),
    ("w4a8-int8", dict(checkpoint_format="gptq_v2", sym=False)),
    ("w4a8-int8", dict(checkpoint_format="awq", sym=False)),
]
OTHER_LAYOUTS = [
    ("bf16", {}), ("fp16", {}),
    ("int8-w8a16", dict(weight_strategy="channel")),
    ("int8-w8a16", dict(weight_strategy="tensor")),
    ("int8-w8a8", dict(weight_strategy="tensor", activation="static-tensor")),
    ("fp8-w8a16", dict(weight_strategy="tensor")),
    ("fp8-w8a16", dict(weight_strategy="channel")),
    ("fp8-w8a16", dict(weight_strategy="block")),
    ("mxfp8", dict(mx_scale_rule="floor")),
    ("mxfp8", dict(mx_scale_rule="rceil")),
]


@st.composite
def layout_cases(draw, layouts):
    """(Checkpoint attributes, prefix, E, n_out, n_in, seed, model dtype) for one linear."""
    scheme, attrs = draw(st.sampled_from(layouts))
    attrs = dict(attrs)
    info = Checkpoint(scheme, {}, **attrs).info
    if info.group_sizes and info.family != "mxfp8":
        attrs["group_size"] = draw(st.sampled_from(info.group_sizes))
        if info.act_order:
            attrs["act_order"] = draw(st.booleans())
    ckpt = Checkpoint(scheme, {}, **attrs)
    g = ckpt.group_size
    if info.family == "mxfp8":
        n_in = 32 * draw(st.integers(1, 8))
    elif info.family in ("gptq", "awq", "ct", "w4a8"):  # packed along in for GPTQ/CT: 8 | in
        unit = 8 if g == -1 else g
        n_in = unit * draw(st.integers(1, max(1, 384 // unit)))
    else:  # one element per storage unit: any size, partial 128x128 blocks included
        n_in = draw(st.integers(1, 300))
    if ckpt.record.name.startswith("awq"):  # AWQ packs along out
        n_out = 8 * draw(st.integers(1, 24))
    else:
        n_out = draw(st.integers(1, 300))
    prefix = draw(st.sampled_from(("w13", "w2")))
    if prefix == "w13" and n_out % 2:
        n_out += 1  # w13 holds gate and up halves
    return (ckpt, prefix, draw(st.integers(1, 2)), n_out, n_in, draw(st.integers(0, 2**31 - 1)),
            draw(st.sampled_from(tuple(MODEL_DTYPES.values()))))


def quantize_case(ckpt, prefix, E, n_out, n_in, seed, model_dtype):
    """Float weights, their canonical quantization, and the canonical form read back from
    the tensors written for it."""
    gen = torch.Generator().manual_seed(seed)
    w = random_weights(gen, E, n_out, n_in, gated=prefix == "w13")
    canon = quantize_weights(ckpt, w, gen, prefix, model_dtype)
    tensors = write_linear(canon, prefix, ckpt, model_dtype)
    return w, canon, read_linear(replace(ckpt, tensors=tensors), prefix)


def per_element(t: torch.Tensor, cols: int, g_idx: torch.Tensor | None, n_in: int):
    """[E, out, G] -> [E, out, in]: column k takes group g_idx[e, k], or k // cols."""
    E, n_out, _ = t.shape
    gi = (torch.arange(n_in) // cols).expand(E, n_in) if g_idx is None else g_idx.long()
    return torch.gather(t, 2, gi.unsqueeze(1).expand(E, n_out, n_in))


def clip_slack(ckpt: Checkpoint, scale_dtype: torch.dtype) -> float:
    """How far (in steps) past the code range the tool's rule can leave an element.

    The rules pick s so the group's range fills the codes exactly, in exact arithmetic; then s
    is rounded to its storage dtype, s' = s (1 + d), |d| <= u, so x / s' can overshoot the
    range edge by maxq * u / (1 - u) steps (maxq = 2^b - 1; the sym rules overshoot at most
    half that). Rounding the zero point z = round(-min / s') never clips the low end. GPTQ v1
    cannot store a true zero of 0 and raises it to 1, which moves the range down by up to
    half a step more. AWQ's symmetric rule divides by 2^(b-1) - 1 and never clips at all.
    """
    u = UNIT_ROUNDOFF[scale_dtype]
    maxq = (1 << ckpt.info.weight_bits) - 1
    slack = maxq * u / (1 - u)
    if ckpt.record.zero_domain == "unsigned-minus-one" and not ckpt.sym:
        slack += 0.5
    return slack


@settings(max_examples=80, deadline=None)
@given(layout_cases(INT_LAYOUTS))
def test_int_dequantize_within_half_step(case):
    ckpt, prefix, E, n_out, n_in, seed, model_dtype = case
    w, _, back = quantize_case(ckpt, prefix, E, n_out, n_in, seed, model_dtype)
    cols = back.block[1]
    s = per_element(back.scales, cols, back.g_idx, n_in)
    z = 0.0 if back.zeros is None else per_element(back.zeros.double(), cols, back.g_idx, n_in)
    err = (dequantize_canonical(back) - w).abs() / s
    r = w / s + z  # the code before rounding and clamping, in the signed domain
    half = 1 << (ckpt.info.weight_bits - 1)
    lo, hi = -half, half - 1
    high, low = r > hi + 0.5, r < lo - 0.5
    inside = ~(high | low)
    # rounding alone: half a step
    assert (err[inside] <= 0.5 + EPS).all(), float(err[inside].max())
    # clipping moves codes to the range edge, nowhere else
    assert (back.codes[high] == hi).all() and (back.codes[low] == lo).all()
    excess = torch.maximum(r - (hi + 0.5), (lo - 0.5) - r).clamp(min=0)
    if ckpt.record.name.startswith("awq") and not ckpt.sym:
        # AutoAWQ does not widen [min, max] to include 0: a group of one sign loses its end
        # near 0 by design (z = clamp(-round(min / s), 0, 15)). Only groups that straddle 0
        # are covered by the rounding bound.
        groups = w.unflatten(-1, (-1, cols))
        straddles = (groups.amin(-1) <= 0) & (groups.amax(-1) >= 0)
        excess = excess * per_element(straddles.double(), cols, None, n_in)
    if ckpt.record.name.startswith("awq") and ckpt.sym:
        assert not (high | low).any()
    scale_dtype = model_dtype if ckpt.record.scale_dtype == "model" else torch.float16
    assert (excess <= clip_slack(ckpt, scale_dtype) + EPS).all(), float(excess.max())


def e4m3_half_ulp(t: torch.Tensor) -> torch.Tensor:
    """Half the spacing of E4M3 values at |t| (2^(max(floor(log2|t|), -6) - 3) / 2)."""
    exp = torch.floor(torch.log2(t.abs().clamp(min=2.0**-30))).clamp(min=-6)
    return torch.exp2(exp - 3) / 2


@settings(max_examples=50, deadline=None)
@given(case=layout_cases([c for c in OTHER_LAYOUTS if c[0] not in ("bf16", "fp16")]),
       mx_rule=st.sampled_from(("ceil", "rceil")))
def test_scaled_dequantize_within_half_step(case, mx_rule):
    # INT8 (s = amax/127 in fp32) never clips; FP8 (s = amax/448) and MXFP8 with the ceil and
    # rceil rules keep |w / s| <= 448, so the error is half an E4M3 spacing. (MXFP8's OCP
    # floor rule lets the block max reach 2^9 > 448 and saturate, by design.)
    ckpt, prefix, E, n_out, n_in, seed, model_dtype = case
    if ckpt.info.family == "mxfp8":
        ckpt = replace(ckpt, mx_scale_rule=mx_rule)
    w, _, back = quantize_case(ckpt, prefix, E, n_out, n_in, seed, model_dtype)
    rows, cols = back.block
    s = back.scales.repeat_interleave(rows, 1)[:, :n_out].repeat_interleave(cols, 2)[..., :n_in]
    t = w / s
    err = (dequantize_canonical(back) - w).abs() / s
    if ckpt.info.family == "int8":
        assert (t.abs() <= 127.5).all()
        assert (err <= 0.5 + EPS).all(), float(err.max())
    else:
        assert (t.abs() <= 448 * (1 + 2.0**-23)).all()
        assert (err <= e4m3_half_ulp(t) * (1 + EPS)).all(), float((err / e4m3_half_ulp(t)).max())


def assert_same_canonical(a: CanonicalLinear, b: CanonicalLinear):
    assert a.block == b.block
    assert a.codes.dtype == b.codes.dtype and torch.equal(a.codes, b.codes)
    assert a.scales.dtype == b.scales.dtype == torch.float64
    assert torch.equal(a.scales, b.scales)
    for name in ("zeros", "g_idx", "global_scale"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert torch.equal(x.long() if name == "g_idx" else x,
                               y.long() if name == "g_idx" else y), name


@settings(max_examples=100, deadline=None)
@given(layout_cases(INT_LAYOUTS + OTHER_LAYOUTS))
def test_write_then_read_is_identity(case):
    ckpt, prefix, E, n_out, n_in, seed, model_dtype = case
    _, canon, back = quantize_case(ckpt, prefix, E, n_out, n_in, seed, model_dtype)
    assert back.shape == (E, n_out, n_in)
    assert_same_canonical(canon, back)
    # and the written tensors read back again write the same tensors
    again = write_linear(back, prefix, ckpt, model_dtype)
    first = write_linear(canon, prefix, ckpt, model_dtype)
    assert again.keys() == first.keys()
    for name in first:
        assert again[name].dtype == first[name].dtype, name
        assert torch.equal(_bits(again[name]), _bits(first[name])), name


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


# --- one set of true int4 weights, every int4 format -----------------------------------------

INT4_FORMATS = [("gptq-int4", "gptq"), ("gptq-int4", "gptq_v2"), ("awq-int4", "awq"),
                ("ct-int4", "ct-0.17"), ("ct-int4", "ct-0.18")]


def true_int4_linear(gen, E, n_out, n_in, g, sym, g_idx=None) -> CanonicalLinear:
    """Codes -8..7; zeros with unsigned value 1..15 (storable by GPTQ v1: z - 1 >= 0); scales
    k * 2^j, k in 1..255 and j in -10..0, exact in fp16 and in bf16."""
    cols = n_in if g == -1 else g
    G = n_in // cols
    codes = torch.randint(-8, 8, (E, n_out, n_in), generator=gen, dtype=torch.int32)
    zeros = None if sym else torch.randint(-7, 8, (E, n_out, G), generator=gen,
                                           dtype=torch.int32)
    k = torch.randint(1, 256, (E, n_out, G), generator=gen).double()
    j = torch.randint(-10, 1, (E, n_out, G), generator=gen).double()
    return CanonicalLinear(codes=codes, scales=k * torch.exp2(j), block=(1, cols), zeros=zeros,
                           g_idx=g_idx)


def formula(c: CanonicalLinear) -> torch.Tensor:
    """(q - z[e, o, gi]) * s[e, o, gi] with gi = g_idx[e, k] or k // cols, gathered per element."""
    E, n_out, n_in = c.codes.shape
    gi = c.g_idx if c.g_idx is not None else (torch.arange(n_in) // c.block[1]).expand(E, n_in)
    idx = gi.long().unsqueeze(1).expand(E, n_out, n_in)
    w = c.codes.double()
    if c.zeros is not None:
        w = w - torch.gather(c.zeros.double(), 2, idx)
    return w * torch.gather(c.scales, 2, idx)


@settings(max_examples=50, deadline=None)
@given(g=st.sampled_from((32, 64, 128, -1)), sym=st.booleans(), E=st.integers(1, 2),
       k_mult=st.integers(1, 2), n_mult=st.integers(1, 2), seed=st.integers(0, 2**31 - 1),
       model_dtype=st.sampled_from(tuple(MODEL_DTYPES.values())), act_order=st.booleans())
def test_same_true_weights_in_every_int4_format(g, sym, E, k_mult, n_mult, seed, model_dtype,
                                                act_order):
    unit = 8 if g == -1 else g
    K, N = unit * k_mult * (2 if g == -1 else 1), unit * n_mult
    gen = torch.Generator().manual_seed(seed)
    lin = {}
    for p, (n_out, n_in) in {"w13": (2 * N, K), "w2": (K, N)}.items():
        g_idx = None
        if act_order:  # groups formed in a random column order
            cols = n_in if g == -1 else g
            g_idx = torch.stack([(torch.randperm(n_in, generator=gen) // cols)
                                 for _ in range(E)])
        lin[p] = true_int4_linear(gen, E, n_out, n_in, g, sym, g_idx)
    expected = {p: formula(c) for p, c in lin.items()}
    formats = [(s, f) for s, f in INT4_FORMATS if not (act_order and s == "awq-int4")]
    for scheme, fmt in formats:
        attrs = Checkpoint(scheme, {}, group_size=g, sym=sym, checkpoint_format=fmt,
                           act_order=act_order)
        tensors = {}
        for p, c in lin.items():
            tensors.update(write_linear(c, p, attrs, model_dtype))
        w = dequantize(replace(attrs, tensors=tensors))
        for p in lin:
            assert torch.equal(w[p], expected[p]), f"{scheme} {fmt} {p}"
