"""NVFP4 (reference/layouts/dense.py, quantize.py): known answers derived by hand from the
format definitions, both checkpoint conventions (ModelOpt multiplies by weight_scale_2,
compressed-tensors divides by weight_global_scale), and malformed files rejected by name."""

from __future__ import annotations

import pytest
import torch
from moecert.reference import (
    Checkpoint,
    CheckpointError,
    MoEProblem,
    dequantize,
    make_inputs,
    moe,
    synthesize,
)
from moecert.reference.quantize import qdq_nvfp4, quantize_nvfp4

P = MoEProblem(M=3, K=16, N=16, E=1, topk=1)  # w13 32 x 16 (w1 rows 0..15, w3 16..31)


def _tensors(fmt: str, w13_global: tuple[float, float], w2_global: float) -> dict:
    weight = "weight" if fmt == "modelopt" else "weight_packed"
    glob = "weight_scale_2" if fmt == "modelopt" else "weight_global_scale"
    e4m3 = torch.float8_e4m3fn
    return {
        # byte 0x21: element 2j = code 1 (0.5) in the low nibble, 2j + 1 = code 2 (1.0)
        f"w13_{weight}": torch.full((1, 32, 8), 0x21, dtype=torch.uint8),
        "w13_weight_scale": torch.full((1, 32, 1), 2.0).to(e4m3),
        f"w13_{glob}": torch.tensor([w13_global], dtype=torch.float32),
        # byte 0xA7: low nibble 7 (6.0), high nibble 0xA (sign, code 2: -1.0)
        f"w2_{weight}": torch.full((1, 16, 8), 0xA7, dtype=torch.uint8),
        "w2_weight_scale": torch.full((1, 16, 1), 0.5).to(e4m3),
        f"w2_{glob}": torch.tensor([w2_global], dtype=torch.float32),
    }


@pytest.mark.parametrize("fmt,w13_global,w2_global", [
    ("modelopt", (0.25, 0.5), 2.0),
    ("ct", (4.0, 2.0), 0.5),  # the reciprocals of the ModelOpt values
])
def test_known_answer_per_shard_global_scales(fmt, w13_global, w2_global):
    w = dequantize(Checkpoint("nvfp4", _tensors(fmt, w13_global, w2_global),
                              checkpoint_format=fmt), P)
    # w1: [0.5, 1.0] * block scale 2 * 0.25; w3: the same * 0.5 (its own global scale)
    assert w["w13"][0, :16].unique().tolist() == [0.25, 0.5]
    assert w["w13"][0, :16, :2].tolist() == [[0.25, 0.5]] * 16
    assert w["w13"][0, 16:, :2].tolist() == [[0.5, 1.0]] * 16
    # w2: [6, -1] * 0.5 * 2
    assert w["w2"][0, :, :2].tolist() == [[6.0, -1.0]] * 16


def test_quantize_block_at_amax_6s():
    # a shard whose amax A sits in block 0: global G = A / (448 * 6), the block's scale
    # A / (6 G) = 448, codes w / (448 G) = 6 w / A; block 1 (amax A / 2) gets 224
    A = 3.0
    row = torch.zeros(32, dtype=torch.float64)
    row[:4] = torch.tensor([A, -A / 2, A / 4, A / 12])
    row[16:18] = torch.tensor([A / 2, -A / 8])
    w = row.expand(1, 2, 32).clone()
    for convention in ("multiply", "divide"):
        c = quantize_nvfp4(w, 1, convention)
        assert c.codes[0, 0, :4].tolist() == [6.0, -3.0, 1.5, 0.5]
        assert c.codes[0, 0, 16:18].tolist() == [6.0, -1.5]
        assert c.scales[0, 0].tolist() == [448.0, 224.0]
        g = torch.tensor(A / 2688, dtype=torch.float32).double()
        expected = g if convention == "multiply" else 1 / torch.tensor(2688 / A,
                                                                       dtype=torch.float32).double()
        assert torch.equal(c.global_scale, expected.expand(1, 2))


def test_quantize_shards_keep_their_own_global_scale():
    w = torch.ones(1, 4, 16, dtype=torch.float64)
    w[:, 2:] *= 1.5  # the w3 half
    c = quantize_nvfp4(w, 2, "multiply")
    g = c.global_scale[0]
    assert g[0] == g[1] and g[2] == g[3] and g[2] / g[0] == pytest.approx(1.5, rel=1e-6)


def test_activation_qdq_known_answers():
    # g = 1: block scale e4m3(amax / 6). [3, 1, -0.75]: scale 0.5, codes 6, 2, -1.5: exact.
    x = torch.zeros(2, 16, dtype=torch.float64)
    x[0, :3] = torch.tensor([3.0, 1.0, -0.75])
    # [7, 1.25]: 7/6 rounds to e4m3 1.125; 7/1.125 saturates to 6 (6.75), 1.25/1.125 = 1.11
    # rounds to e2m1 1 (1.125)
    x[1, :2] = torch.tensor([7.0, 1.25])
    q = qdq_nvfp4(x, 1.0)
    assert q[0, :3].tolist() == [3.0, 1.0, -0.75]
    assert q[1, :2].tolist() == [6.75, 1.125]
    # global scale 4: block scale e4m3(7/6 * 4 = 4.67) = 4.5, step 4.5 / 4 = 1.125: the same
    assert qdq_nvfp4(x, 4.0)[1, :2].tolist() == [6.75, 1.125]


def test_conventions_agree_end_to_end():
    # the same weights and calibration stored both ways: the reciprocal is read as one
    Q = MoEProblem(M=5, K=32, N=32, E=2, topk=2)
    x, w, ids = make_inputs(Q, seed=1)[:3]
    outs = [moe(synthesize("nvfp4", Q, seed=4, checkpoint_format=f, activation="nvfp4"),
                x, w, ids, Q) for f in ("modelopt", "ct")]
    assert torch.allclose(outs[0], outs[1], rtol=1e-5, atol=1e-6)
    assert outs[0].abs().max() > 0


def test_w4a4_input_scales_collapse_to_the_max():
    Q = MoEProblem(M=5, K=32, N=32, E=2, topk=2)
    ckpt = synthesize("nvfp4", Q, seed=4, activation="nvfp4")
    x, w, ids = make_inputs(Q, seed=1)[:3]
    s = ckpt.tensors["w13_input_scale"]
    assert s.shape == (2, 2) and len(s.unique()) == 4  # per expert and shard, all different
    same_max = dict(ckpt.tensors, w13_input_scale=torch.full_like(s, float(s.max())))
    other = Checkpoint("nvfp4", same_max, activation="nvfp4")
    assert torch.equal(moe(ckpt, x, w, ids, Q), moe(other, x, w, ids, Q))


@pytest.mark.parametrize("name,value,expected", [
    ("w13_weight_scale", float("nan"), "finite e4m3 block scales > 0"),
    ("w13_weight_scale", 0.0, "finite e4m3 block scales > 0"),
    ("w2_weight_scale", -1.0, "finite e4m3 block scales > 0"),
    ("w13_weight_scale_2", 0.0, "finite scales > 0"),
    ("w2_weight_scale_2", float("inf"), "finite scales > 0"),
])
def test_bad_scales_named(name, value, expected):
    t = _tensors("modelopt", (0.25, 0.5), 2.0)
    t[name] = t[name].clone()
    t[name].view(-1)[0] = value
    with pytest.raises(CheckpointError, match=f"^{name}: expected {expected}"):
        dequantize(Checkpoint("nvfp4", t), P)


@pytest.mark.parametrize("K,divisor", [(15, 2), (24, 16)])  # odd: no whole byte of e2m1
def test_k_off_the_block_refused(K, divisor):
    with pytest.raises(CheckpointError, match="^w13_weight: expected an input dimension "
                       f"divisible by {divisor}"):
        synthesize("nvfp4", MoEProblem(M=2, K=K, N=16, E=1, topk=1))


def test_wrong_dtypes_named():
    t = _tensors("ct", (4.0, 2.0), 0.5)
    t["w13_weight_scale"] = t["w13_weight_scale"].to(torch.float32)
    with pytest.raises(CheckpointError, match="^w13_weight_scale: expected dtype"):
        dequantize(Checkpoint("nvfp4", t, checkpoint_format="ct"), P)
    t = _tensors("ct", (4.0, 2.0), 0.5)
    t["w2_weight_global_scale"] = t["w2_weight_global_scale"].to(torch.bfloat16)
    with pytest.raises(CheckpointError, match="^w2_weight_global_scale: expected dtype"):
        dequantize(Checkpoint("nvfp4", t, checkpoint_format="ct"), P)
