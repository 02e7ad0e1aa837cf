"""Checkpoint layouts read into float64 weights (reference/layouts/, dequantize.py).

Every checkpoint here is built by hand: codes, zeros and scales are chosen in the test, packed
with the test's own word builder (`pack_words`, a per-slot loop rather than the reference's
reshape) and the expected weights come from the format's formula written out below, so the
reader is never checked against itself.
"""

from __future__ import annotations

import pytest
import torch
from moecert.reference.canonical import dequantize_canonical
from moecert.reference.checkpoint import Checkpoint
from moecert.reference.dequantize import canonicalize, dequantize
from moecert.reference.problem import MoEProblem
from moecert.reference.synthesize import synthesize

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # slot i of each 8 holds column 8c + AWQ_ORDER[i]


# --- helpers --------------------------------------------------------------------------------

@pytest.fixture
def gen():
    return torch.Generator().manual_seed(1234)


def as_int32(word: int) -> int:
    return word - (1 << 32) if word >= 1 << 31 else word


def pack_words(u: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """Unsigned b-bit fields (b in 4, 8) into int32 words along `dim`, field j at bits j*b."""
    per = 32 // bits
    x = u.movedim(dim, -1).to(torch.int64)
    assert x.shape[-1] % per == 0 and x.min() >= 0 and x.max() < 1 << bits
    words = torch.zeros(*x.shape[:-1], x.shape[-1] // per, dtype=torch.int64)
    for j in range(per):
        words |= x[..., j::per] << (j * bits)
    words = torch.where(words >= 1 << 31, words - (1 << 32), words)
    return words.to(torch.int32).movedim(-1, dim)


def awq_slots(cols: torch.Tensor, dim: int) -> torch.Tensor:
    """AutoAWQ storage order along `dim`: slot i of each 8 takes column 8c + AWQ_ORDER[i]."""
    x = cols.movedim(dim, -1)
    x = x.reshape(*x.shape[:-1], -1, 8)[..., AWQ_ORDER].reshape(cols.movedim(dim, -1).shape)
    return x.movedim(-1, dim)


def expected_weights(q, s, cols, z=None, g_idx=None) -> torch.Tensor:
    """W[e, o, k] = (q[e, o, k] - z[e, o, gi]) * s[e, o, gi], gi = g_idx[e, k] or k // cols."""
    E, n_out, n_in = q.shape
    gi = (torch.arange(n_in) // cols).expand(E, n_in) if g_idx is None else g_idx.long()
    idx = gi.unsqueeze(1).expand(E, n_out, n_in)
    w = q.double()
    if z is not None:
        w = w - torch.gather(z.double(), 2, idx)
    return w * torch.gather(s.double(), 2, idx)


def rand_codes(gen, E, n_out, n_in, bits):
    half = 1 << (bits - 1)
    return torch.randint(-half, half, (E, n_out, n_in), generator=gen)


def rand_scales(gen, E, n_out, groups):
    """Positive scales k * 2^-6, k in 1..63: exact in fp16 and bf16."""
    return torch.randint(1, 64, (E, n_out, groups), generator=gen).double() / 64


def linears(gen, E, K, N, bits, groups_of):
    """Signed codes, signed zeros and scales for w13 [E, 2N, K] and w2 [E, K, N]."""
    half = 1 << (bits - 1)
    out = {}
    for p, (n_out, n_in) in {"w13": (2 * N, K), "w2": (K, N)}.items():
        G = groups_of(n_in)
        out[p] = dict(q=rand_codes(gen, E, n_out, n_in, bits),
                      z=torch.randint(-half, half, (E, n_out, G), generator=gen),
                      s=rand_scales(gen, E, n_out, G))
    return out


def gptq_tensors(p, q, s, z, bits, fmt, g_idx=None):
    """GPTQ: qweight [E, in/per, out] along in; scales [E, G, out]; qzeros [E, G, out/per]."""
    half = 1 << (bits - 1)
    unsigned_zero = (z if z is not None else torch.zeros_like(s, dtype=torch.int64)) + half
    stored = unsigned_zero - 1 if fmt == "gptq" else unsigned_zero  # v1 stores z - 1
    t = {f"{p}_qweight": pack_words((q + half).transpose(1, 2), bits, dim=1),
         f"{p}_scales": s.transpose(1, 2).to(torch.float16),
         f"{p}_qzeros": pack_words(stored.transpose(1, 2), bits, dim=2)}
    if g_idx is not None:
        t[f"{p}_g_idx"] = g_idx.to(torch.int32)
    return t


def awq_tensors(p, q, s, z):
    """AWQ: qweight [E, in, out/8] and qzeros [E, G, out/8] along out in AWQ order."""
    t = {f"{p}_qweight": pack_words(awq_slots((q + 8).transpose(1, 2), 2), 4, dim=2),
         f"{p}_scales": s.transpose(1, 2).to(torch.float16)}
    if z is not None:
        t[f"{p}_qzeros"] = pack_words(awq_slots((z + 8).transpose(1, 2), 2), 4, dim=2)
    return t


def ct_tensors(p, q, s, z, bits, g_idx=None, scale_dtype=torch.bfloat16):
    """compressed-tensors: weight_packed [E, out, in/per]; weight_scale [E, out, G];
    weight_zero_point [E, out/per, G], signed zeros + 2^(b-1) packed along out (dim 1)."""
    half = 1 << (bits - 1)
    t = {f"{p}_weight_packed": pack_words(q + half, bits, dim=2),
         f"{p}_weight_scale": s.to(scale_dtype)}
    if z is not None:
        t[f"{p}_weight_zero_point"] = pack_words(z + half, bits, dim=1)
    if g_idx is not None:
        t[f"{p}_weight_g_idx"] = g_idx.to(torch.int32)
    return t


def assert_weights(ckpt, expected):
    w = dequantize(ckpt)
    for p in ("w13", "w2"):
        assert w[p].dtype == torch.float64
        assert torch.equal(w[p], expected[p]), p


# --- GPTQ -----------------------------------------------------------------------------------

def test_gptq_known_word():
    # One qweight word 0xe8a522c8 holds u = 8,12,2,2,5,10,8,14 for inputs k = 0..7 of output
    # column 0: codes u - 8 = 0,4,-6,-6,-3,2,0,6; scale 0.5, symmetric.
    E, K, N = 1, 8, 8
    q = {"w13": torch.zeros(E, 2 * N, K, dtype=torch.int64),
         "w2": torch.zeros(E, K, N, dtype=torch.int64)}
    tensors = {}
    for p in q:
        s = torch.full((E, q[p].shape[1], 1), 0.5, dtype=torch.float64)
        tensors.update(gptq_tensors(p, q[p], s, None, 4, "gptq_v2"))
    tensors["w13_qweight"][0, 0, 0] = as_int32(0xE8A522C8)
    w = dequantize(Checkpoint("gptq-int4", tensors, group_size=-1, sym=True,
                              checkpoint_format="gptq_v2"))
    assert w["w13"][0, 0].tolist() == [0.0, 2.0, -3.0, -3.0, -1.5, 1.0, 0.0, 3.0]
    assert not w["w13"][0, 1:].any()


def test_gptq_sym_zero_words_v1_and_v2(gen):
    # Symmetric int4 files still carry qzeros: v1 stores z - 1 = 7 in every nibble
    # (0x77777777), v2 stores z = 8 (0x88888888). Both mean W = (u - 8) * s.
    E, K, N = 2, 16, 8
    lin = linears(gen, E, K, N, 4, lambda n_in: 1)
    expected = {p: expected_weights(d["q"], d["s"], cols=d["q"].shape[2])
                for p, d in lin.items()}
    results = []
    for fmt, word in (("gptq", 0x77777777), ("gptq_v2", 0x88888888)):
        tensors = {}
        for p, d in lin.items():
            t = gptq_tensors(p, d["q"], d["s"], None, 4, fmt)
            assert torch.equal(t[f"{p}_qzeros"], torch.full_like(t[f"{p}_qzeros"],
                                                                 as_int32(word)))
            tensors.update(t)
        ckpt = Checkpoint("gptq-int4", tensors, group_size=-1, sym=True, checkpoint_format=fmt)
        assert_weights(ckpt, expected)
        results.append(dequantize(ckpt))
        # and a symmetric file without qzeros reads the same
        no_zeros = {n: t for n, t in tensors.items() if not n.endswith("qzeros")}
        assert_weights(Checkpoint("gptq-int4", no_zeros, group_size=-1, sym=True,
                                  checkpoint_format=fmt), expected)
    assert torch.equal(results[0]["w13"], results[1]["w13"])


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group_size", [-1, 32])
def test_gptq_asym_v1_stores_zero_minus_one(gen, bits, group_size):
    # v1 (AutoGPTQ) stores z - 1, v2 stores z; the same true zeros give the same weights.
    # True unsigned zeros 1..2^b-1 (v1 cannot store a true zero of 0).
    E, K, N = 2, 64, 32
    cols = lambda n_in: n_in if group_size == -1 else group_size  # noqa: E731
    lin = linears(gen, E, K, N, bits, lambda n_in: n_in // cols(n_in))
    half = 1 << (bits - 1)
    for d in lin.values():
        d["z"] = d["z"].clamp(min=1 - half)
    lin["w13"]["z"][0, 0, 0] = half - 1  # stored v1 field 2^b - 2, the largest legal
    lin["w13"]["z"][0, 1, 0] = 1 - half  # true unsigned zero 1: stored v1 field 0
    expected = {p: expected_weights(d["q"], d["s"], cols(d["q"].shape[2]), z=d["z"])
                for p, d in lin.items()}
    for fmt in ("gptq", "gptq_v2"):
        tensors = {}
        for p, d in lin.items():
            tensors.update(gptq_tensors(p, d["q"], d["s"], d["z"], bits, fmt))
        assert_weights(Checkpoint(f"gptq-int{bits}", tensors, group_size=group_size, sym=False,
                                  checkpoint_format=fmt), expected)


def test_gptq_int8_sym_zero_bytes(gen):
    # int8: u - 128; symmetric v1 zero bytes 0x7f (z - 1 = 127), v2 0x80.
    E, K, N = 1, 16, 8
    lin = linears(gen, E, K, N, 8, lambda n_in: 1)
    expected = {p: expected_weights(d["q"], d["s"], cols=d["q"].shape[2])
                for p, d in lin.items()}
    for fmt, word in (("gptq", 0x7F7F7F7F), ("gptq_v2", 0x80808080)):
        tensors = {}
        for p, d in lin.items():
            tensors.update(gptq_tensors(p, d["q"], d["s"], None, 8, fmt))
            tensors[f"{p}_qzeros"] = torch.full_like(tensors[f"{p}_qzeros"], as_int32(word))
        assert_weights(Checkpoint("gptq-int8", tensors, group_size=-1, sym=True,
                                  checkpoint_format=fmt), expected)
    # int8 codes span -128..127: the extremes survive the trip
    assert lin["w13"]["q"].min() >= -128 and lin["w13"]["q"].max() <= 127


# --- act order (g_idx) ------------------------------------------------------------------------

def _act_order_g_idx(E, n_in, groups):
    """Non-monotonic: column k belongs to group (5k + 3) mod G, each group of equal size."""
    return ((torch.arange(n_in) * 5 + 3) % groups).expand(E, n_in).clone()


@pytest.mark.parametrize("layout", ["gptq", "gptq_v2", "ct-0.17", "ct-0.18"])
def test_act_order_g_idx_picks_the_scale(gen, layout):
    E, K, N, g = 2, 64, 32, 32
    lin = linears(gen, E, K, N, 4, lambda n_in: n_in // g)
    gidx = {"w13": _act_order_g_idx(E, K, K // g), "w2": _act_order_g_idx(E, N, N // g)}
    # group 0 scale 1, group 1 scale 2 in w13: column 0 -> group 1 (5*0+3 mod 2), column 1 ->
    # group 0, so the map is not k // 32
    lin["w13"]["s"][:, :, 0], lin["w13"]["s"][:, :, 1] = 1.0, 2.0
    assert gidx["w13"][0, :3].tolist() == [1, 0, 1]
    tensors = {}
    for p, d in lin.items():
        if layout.startswith("gptq"):
            d["z"] = d["z"].clamp(min=-7)  # true unsigned zero >= 1: storable in v1
            tensors.update(gptq_tensors(p, d["q"], d["s"], d["z"], 4, layout, g_idx=gidx[p]))
        else:
            tensors.update(ct_tensors(p, d["q"], d["s"], d["z"], 4, g_idx=gidx[p]))
    expected = {p: expected_weights(d["q"], d["s"], g, z=d["z"], g_idx=gidx[p])
                for p, d in lin.items()}
    q, z = lin["w13"]["q"], lin["w13"]["z"]
    assert torch.equal(expected["w13"][:, :, 0], (q[:, :, 0] - z[:, :, 1]).double() * 2.0)
    assert torch.equal(expected["w13"][:, :, 1], (q[:, :, 1] - z[:, :, 0]).double() * 1.0)
    scheme = "gptq-int4" if layout.startswith("gptq") else "ct-int4"
    ckpt = Checkpoint(scheme, tensors, group_size=g, sym=False, checkpoint_format=layout,
                      act_order=True)
    assert_weights(ckpt, expected)
    canon = canonicalize(ckpt)
    assert torch.equal(canon["w13"].g_idx, gidx["w13"])


def test_trivial_g_idx_without_act_order_is_accepted(gen):
    # some files carry g_idx = k // g even without desc_act; that is the plain grouping
    E, K, N, g = 1, 64, 32, 32
    lin = linears(gen, E, K, N, 4, lambda n_in: n_in // g)
    tensors, expected = {}, {}
    for p, d in lin.items():
        n_in = d["q"].shape[2]
        trivial = (torch.arange(n_in) // g).expand(E, n_in)
        tensors.update(gptq_tensors(p, d["q"], d["s"], None, 4, "gptq", g_idx=trivial))
        expected[p] = expected_weights(d["q"], d["s"], g)
    assert_weights(Checkpoint("gptq-int4", tensors, group_size=g, sym=True,
                              checkpoint_format="gptq"), expected)


# --- AWQ ------------------------------------------------------------------------------------

def test_awq_known_word():
    # Every qweight word 0x75316420: slots hold 0,2,4,6,1,3,5,7, i.e. column j of each 8 holds
    # u = j; qzeros 0x88888888 (z = 8 everywhere). W[o, k] = (o % 8 - 8) * s[o].
    E, K, N = 1, 16, 8
    tensors, expected = {}, {}
    for p, (n_out, n_in) in {"w13": (2 * N, K), "w2": (K, N)}.items():
        s = (torch.arange(n_out, dtype=torch.float64) + 1) / 4
        tensors[f"{p}_qweight"] = torch.full((E, n_in, n_out // 8), as_int32(0x75316420),
                                             dtype=torch.int32)
        tensors[f"{p}_qzeros"] = torch.full((E, 1, n_out // 8), as_int32(0x88888888),
                                            dtype=torch.int32)
        tensors[f"{p}_scales"] = s.view(1, 1, n_out).to(torch.float16)
        col = (torch.arange(n_out) % 8 - 8).double() * s
        expected[p] = col.view(1, n_out, 1).expand(E, n_out, n_in)
    assert_weights(Checkpoint("awq-int4", tensors, group_size=-1), expected)


@pytest.mark.parametrize("group_size", [-1, 32])
def test_awq_order_with_zeros(gen, group_size):
    E, K, N = 2, 64, 32
    cols = lambda n_in: n_in if group_size == -1 else group_size  # noqa: E731
    lin = linears(gen, E, K, N, 4, lambda n_in: n_in // cols(n_in))
    tensors, expected = {}, {}
    for p, d in lin.items():
        tensors.update(awq_tensors(p, d["q"], d["s"], d["z"]))
        expected[p] = expected_weights(d["q"], d["s"], cols(d["q"].shape[2]), z=d["z"])
    ckpt = Checkpoint("awq-int4", tensors, group_size=group_size)
    assert ckpt.sym is False  # AWQ defaults to zero points
    assert_weights(ckpt, expected)


# --- compressed-tensors -----------------------------------------------------------------------

@pytest.mark.parametrize("version", ["ct-0.17", "ct-0.18"])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("sym", [True, False])
def test_ct_pack_quantized(gen, version, bits, sym):
    E, K, N, g = 2, 64, 32, 32
    lin = linears(gen, E, K, N, bits, lambda n_in: n_in // g)
    tensors, expected = {}, {}
    for p, d in lin.items():
        z = None if sym else d["z"]
        tensors.update(ct_tensors(p, d["q"], d["s"], z, bits))
        expected[p] = expected_weights(d["q"], d["s"], g, z=z)
    assert_weights(Checkpoint(f"ct-int{bits}", tensors, group_size=g, sym=sym,
                              checkpoint_format=version), expected)


def test_ct_zero_point_packed_along_out():
    # int4 zero points -8..7 for output rows 0..15 of one group: u = z + 8 = 0..15 packed
    # along out gives words 0x76543210, 0xfedcba98 in dim 1. Codes all 0: W[o, k] = -z[o] * s.
    E, K, N = 1, 8, 8
    z = torch.arange(-8, 8).view(1, 16, 1)
    tensors = ct_tensors("w13", torch.zeros(E, 2 * N, K, dtype=torch.int64),
                         torch.ones(E, 2 * N, 1, dtype=torch.float64) / 2, z, 4)
    assert tensors["w13_weight_zero_point"].view(-1).tolist() == [
        as_int32(0x76543210), as_int32(0xFEDCBA98)]
    tensors.update(ct_tensors("w2", torch.zeros(E, K, N, dtype=torch.int64),
                              torch.ones(E, K, 1, dtype=torch.float64),
                              torch.zeros(E, K, 1, dtype=torch.int64), 4))
    w = dequantize(Checkpoint("ct-int4", tensors, group_size=-1, sym=False))
    assert w["w13"][0, :, 0].tolist() == [-x / 2 for x in range(-8, 8)]


def test_ct_weight_shape_is_honoured(gen):
    E, K, N = 1, 16, 8
    lin = linears(gen, E, K, N, 4, lambda n_in: 1)
    tensors, expected = {}, {}
    for p, d in lin.items():
        tensors.update(ct_tensors(p, d["q"], d["s"], None, 4))
        tensors[f"{p}_weight_shape"] = torch.tensor([list(d["q"].shape[1:])] * E)
        expected[p] = expected_weights(d["q"], d["s"], d["q"].shape[2])
    assert_weights(Checkpoint("ct-int4", tensors, group_size=-1, sym=True,
                              checkpoint_format="ct-0.18"), expected)


# --- INT8 / FP8 / MXFP8 / 16-bit -------------------------------------------------------------

def _int8_weights(gen, E, K, N):
    return {"w13": torch.randint(-128, 128, (E, 2 * N, K), generator=gen, dtype=torch.int8),
            "w2": torch.randint(-128, 128, (E, K, N), generator=gen, dtype=torch.int8)}


def test_int8_per_channel(gen):
    E, K, N = 2, 16, 8
    w = _int8_weights(gen, E, K, N)
    tensors, expected = {}, {}
    for p, t in w.items():
        s = torch.rand(E, t.shape[1], 1, generator=gen) + 0.1
        tensors[f"{p}_weight"], tensors[f"{p}_weight_scale"] = t, s
        expected[p] = t.double() * s.double()  # row o scaled by s[e, o]
    assert_weights(Checkpoint("int8-w8a16", tensors, weight_strategy="channel"), expected)


def test_int8_per_tensor_and_shard_scales(gen):
    # Per-tensor: w2 scale [E]; w13 shard scales [E, 2]: rows 0..N-1 (w1, gate) use column 0,
    # rows N..2N-1 (w3, up) use column 1.
    E, K, N = 2, 16, 8
    w = _int8_weights(gen, E, K, N)
    s13 = torch.tensor([[0.5, 0.25], [2.0, 0.125]])
    s2 = torch.tensor([0.75, 3.0])
    tensors = {"w13_weight": w["w13"], "w13_weight_scale": s13,
               "w2_weight": w["w2"], "w2_weight_scale": s2}
    ckpt = Checkpoint("int8-w8a16", tensors, weight_strategy="tensor")
    expected13 = w["w13"].double().clone()
    for e in range(E):
        expected13[e, :N] *= s13[e, 0].item()
        expected13[e, N:] *= s13[e, 1].item()
    expected2 = w["w2"].double() * s2.double().view(E, 1, 1)
    assert_weights(ckpt, {"w13": expected13, "w2": expected2})
    # one [E] scale for w13 as well
    tensors["w13_weight_scale"] = s2
    assert_weights(Checkpoint("int8-w8a16", tensors, weight_strategy="tensor"),
                   {"w13": w["w13"].double() * s2.double().view(E, 1, 1), "w2": expected2})


def _fp8_weights(gen, shape):
    """Random E4M3FN tensors without the NaN codes 0x7f / 0xff."""
    b = torch.randint(0, 256, shape, generator=gen, dtype=torch.int64)
    b = torch.where((b & 0x7F) == 0x7F, b - 1, b)
    return b.to(torch.uint8).view(torch.float8_e4m3fn)


def test_fp8_block_with_partial_edge_blocks(gen):
    # 2N = 200 rows, K = 130: scales [E, ceil(200/128) = 2, ceil(130/128) = 2]; the last
    # row block holds 72 rows, the last column block 2 columns. w2 [E, 130, 100]: [E, 2, 1].
    E, K, N = 2, 130, 100
    tensors, expected = {}, {}
    for p, (n_out, n_in) in {"w13": (2 * N, K), "w2": (K, N)}.items():
        wt = _fp8_weights(gen, (E, n_out, n_in))
        R, C = -(-n_out // 128), -(-n_in // 128)
        s = torch.rand(E, R, C, generator=gen) + 0.5
        tensors[f"{p}_weight"], tensors[f"{p}_weight_scale"] = wt, s
        rows, cols = torch.arange(n_out) // 128, torch.arange(n_in) // 128
        expected[p] = wt.to(torch.float64) * s.double()[:, rows][:, :, cols]
    assert tensors["w13_weight_scale"].shape == (E, 2, 2)
    assert tensors["w2_weight_scale"].shape == (E, 2, 1)
    ckpt = Checkpoint("fp8-w8a16", tensors, weight_strategy="block")
    assert_weights(ckpt, expected)
    w = dequantize(ckpt)
    # the corner element of the partial block uses the scale of block (1, 1)
    s = tensors["w13_weight_scale"][1, 1, 1].double()
    assert w["w13"][1, 199, 129] == tensors["w13_weight"][1, 199, 129].double() * s


@pytest.mark.parametrize("strategy", ["tensor", "channel"])
def test_fp8_tensor_and_channel(gen, strategy):
    E, K, N = 2, 16, 8
    tensors, expected = {}, {}
    for p, (n_out, n_in) in {"w13": (2 * N, K), "w2": (K, N)}.items():
        wt = _fp8_weights(gen, (E, n_out, n_in))
        shape = (E,) if strategy == "tensor" else (E, n_out, 1)
        s = torch.rand(shape, generator=gen) + 0.5
        tensors[f"{p}_weight"], tensors[f"{p}_weight_scale"] = wt, s
        expected[p] = wt.double() * s.double().view(E, -1, 1)
    assert_weights(Checkpoint("fp8-w8a16", tensors, weight_strategy=strategy), expected)


def test_mxfp8_e8m0_scales(gen):
    # scale byte b means 2^(b - 127), one per 32 inputs of a row
    E, K, N = 2, 64, 32
    tensors, expected = {}, {}
    for p, (n_out, n_in) in {"w13": (2 * N, K), "w2": (K, N)}.items():
        wt = _fp8_weights(gen, (E, n_out, n_in))
        sb = torch.randint(100, 150, (E, n_out, n_in // 32), generator=gen).to(torch.uint8)
        sb[0, 0, 0], sb[-1, -1, -1] = 0, 254  # 2^-127 and 2^127
        tensors[f"{p}_weight"], tensors[f"{p}_weight_scale"] = wt, sb
        scale = torch.tensor([2.0**(b - 127) for b in range(256)], dtype=torch.float64)[
            sb.long()]
        expected[p] = wt.double() * scale.repeat_interleave(32, dim=2)
    assert_weights(Checkpoint("mxfp8", tensors), expected)


@pytest.mark.parametrize("scheme,dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_dense_16bit(gen, scheme, dtype):
    E, K, N = 2, 16, 8
    tensors = {"w13_weight": torch.randn(E, 2 * N, K, generator=gen).to(dtype),
               "w2_weight": torch.randn(E, K, N, generator=gen).to(dtype),
               "w13_bias": torch.randn(E, 2 * N, generator=gen).to(dtype),
               "w2_bias": torch.randn(E, K, generator=gen).to(dtype)}
    w = dequantize(Checkpoint(scheme, tensors))
    for name, t in tensors.items():
        key = name.removesuffix("_weight")
        assert w[key].dtype == torch.float64
        assert torch.equal(w[key], t.double()), name


def test_bias_read_for_quantized_schemes():
    P = MoEProblem(M=1, K=64, N=32, E=2, topk=1, bias=True)
    ckpt = synthesize("gptq-int4", P, seed=5, group_size=32)
    w = dequantize(ckpt)
    assert torch.equal(w["w13_bias"], ckpt.tensors["w13_bias"].double())
    assert torch.equal(w["w2_bias"], ckpt.tensors["w2_bias"].double())


# --- canonical form of synthesized checkpoints ------------------------------------------------

INT_CASES = [
    ("gptq-int4", dict(group_size=32, sym=True), 4),
    ("gptq-int4", dict(group_size=64, sym=False, checkpoint_format="gptq_v2"), 4),
    ("gptq-int4", dict(group_size=32, sym=False, checkpoint_format="gptq", act_order=True), 4),
    ("gptq-int8", dict(group_size=-1, sym=True), 8),
    ("gptq-int8", dict(group_size=32, sym=False), 8),
    ("awq-int4", dict(group_size=32), 4),
    ("awq-int4", dict(group_size=64, sym=True), 4),
    ("ct-int4", dict(group_size=32, sym=True, checkpoint_format="ct-0.18"), 4),
    ("ct-int4", dict(group_size=64, sym=False, act_order=True), 4),
    ("ct-int8", dict(group_size=-1, sym=False, checkpoint_format="ct-0.18"), 8),
    ("w4a8-int8", dict(group_size=32, checkpoint_format="awq", sym=False), 4),
    ("int8-w8a16", dict(weight_strategy="channel"), 8),
    ("int8-w8a8", dict(weight_strategy="tensor", activation="dynamic-token"), 8),
]


@pytest.mark.parametrize("scheme,attrs,bits", INT_CASES,
                         ids=[f"{s}-{i}" for i, (s, _, _) in enumerate(INT_CASES)])
def test_canonical_codes_of_synthesized_int_checkpoints(scheme, attrs, bits):
    P = MoEProblem(M=1, K=128, N=64, E=2, topk=1)
    ckpt = synthesize(scheme, P, seed=11, **attrs)
    canon = canonicalize(ckpt)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    for p, c in canon.items():
        assert c.codes.dtype == torch.int32, p
        assert c.codes.min() >= lo and c.codes.max() <= hi, p
        assert c.scales.dtype == torch.float64
        assert (c.scales > 0).all()
        if ckpt.sym:
            assert c.zeros is None, p
        else:
            assert c.zeros.dtype == torch.int32
            assert c.zeros.min() >= lo and c.zeros.max() <= hi, p
    assert canon["w13"].shape == (2, 2 * 64, 128)
    assert canon["w2"].shape == (2, 128, 64)


@pytest.mark.parametrize("scheme,attrs", [("fp8-w8a16", dict(weight_strategy="block")),
                                          ("mxfp8", {})])
def test_canonical_codes_of_synthesized_fp8_checkpoints(scheme, attrs):
    P = MoEProblem(M=1, K=128, N=64, E=2, topk=1)
    canon = canonicalize(synthesize(scheme, P, seed=11, **attrs))
    for c in canon.values():
        assert c.codes.dtype == torch.float64
        assert c.codes.abs().max() <= 448
        assert c.zeros is None
        # decoded E4M3 values: an fp8 round trip leaves them unchanged
        assert torch.equal(c.codes.float().to(torch.float8_e4m3fn).double(), c.codes)


def test_dequantize_leaves_the_canonical_form_untouched():
    # float formats keep float64 codes: dequantizing must not scale them in place
    from moecert.reference import MoEProblem, canonicalize, synthesize

    P = MoEProblem(M=1, K=64, N=32, E=2, topk=1)
    for scheme in ("fp8-w8a16", "mxfp8", "bf16", "gptq-int4"):
        lin = canonicalize(synthesize(scheme, P, seed=0, **({"group_size": 32}
                                                            if scheme == "gptq-int4" else {})))
        before = lin["w13"].codes.clone()
        first = dequantize_canonical(lin["w13"])
        assert torch.equal(lin["w13"].codes, before)
        assert torch.equal(dequantize_canonical(lin["w13"]), first)


def test_mxfp4_synthesized_with_the_producing_tools_rule(gen):
    """gpt-oss-style MXFP4 files come from triton_kernels' downcast_to_mxfp: scales by rceil
    (never saturating), elements rounded half away from zero; the format record says so and
    synthesize follows it whatever the checkpoint's (activation) mx_scale_rule."""
    from moecert.reference.quantize import quantize_mx
    from moecert.reference.schemes.records import get_record
    from moecert.reference.synthesize import quantize_weights, random_weights

    rec = get_record("mxfp4-e2m1", "ocp-mx-1.0")
    assert (rec.mx_rule, rec.element_rounding) == ("rceil", "rna")
    w = random_weights(gen, 2, 64, 96, gated=False)
    got = quantize_weights(Checkpoint("mxfp4", {}, mx_scale_rule="floor"), w, gen, "w2",
                           torch.bfloat16)
    want = quantize_mx(w, "rceil", "e2m1", "rna")
    assert torch.equal(got.codes, want.codes) and torch.equal(got.scales, want.scales)
    assert (got.codes.abs().unflatten(-1, (-1, 32)).amax(-1) >= 3).all()  # no block below
    floor = quantize_mx(w, "floor", "e2m1", "rna")
    assert not torch.equal(floor.scales, want.scales)
