"""fp8-w8a8: e4m3 weights (per tensor with w1/w3 shards, per channel, 128x128 blocks) and e4m3
activations (static per tensor, dynamic per token, dynamic 1x128 groups along K).

The known answers are derived by hand from the E4M3 definition: in [16, 32) the spacing is 2,
so 17 and 19 are ties (to 16 and 20: mantissas 000 and 010 are even); in [256, 448] it is 32;
448 = 1.75 * 2^8 is the largest value, beyond which a quotient saturates. A dynamic scale is
amax / 448, so a unit whose amax is 448 * 2^k has the exact scale 2^k.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch
from moecert.reference import CheckpointError, MoEProblem, dequantize, make_inputs, moe, synthesize
from moecert.reference.quantize import qdq_per_group, qdq_per_tensor, qdq_per_token
from moecert.reference.schemes import ACT_GROUP, get_scheme
from moecert.reference.schemes.tensors import declared_tensors


def _row(K: int, entries: dict[int, float], fill: float = 0.0) -> torch.Tensor:
    x = torch.full((K,), fill, dtype=torch.float64)
    for k, v in entries.items():
        x[k] = v
    return x


# --- the activation quantizers, by hand ---------------------------------------------------------

def test_group_known_answer_scales_per_128_columns_along_k():
    # row 0: group 0 has amax 448 * 2^-3 (scale 2^-3), group 1 amax 448 * 2^2 (scale 4);
    # 17 * 2^-3 and 19 * 4 are ties of the e4m3 grid of their group and round to even
    g0 = _row(128, {0: 448 / 8, 1: 17 / 8, 2: 19 / 8, 3: -3 / 8, 4: 300 / 8})
    g1 = _row(128, {0: -448 * 4, 5: 19 * 4, 6: 5 * 4, 7: 260 * 4})
    x = torch.stack([torch.cat([g0, g1]), torch.cat([g1, g0])])
    y = qdq_per_group(x, "e4m3")
    want0 = _row(128, {0: 448 / 8, 1: 16 / 8, 2: 20 / 8, 3: -3 / 8, 4: 288 / 8})
    want1 = _row(128, {0: -448 * 4, 5: 20 * 4, 6: 5 * 4, 7: 256 * 4})
    assert torch.equal(y[0], torch.cat([want0, want1]))
    assert torch.equal(y[1], torch.cat([want1, want0]))  # rows are their own units (not M)


def test_group_partial_last_group_is_its_own_unit():
    # K = 160: the second group holds columns 128..159 and its own amax 448 * 2^-1
    x = torch.cat([_row(128, {0: 448.0, 1: 19.0}), _row(32, {0: 224.0, 31: 8.5})]).unsqueeze(0)
    y = qdq_per_group(x, "e4m3")
    # group 1's scale is 1/2: 8.5 / (1/2) = 17, a tie, to 16
    want = torch.cat([_row(128, {0: 448.0, 1: 20.0}), _row(32, {0: 224.0, 31: 8.0})])
    assert torch.equal(y[0], want)
    assert ACT_GROUP == 128


def test_group_int8_uses_127():
    x = _row(128, {0: 127 * 2.0, 1: 3.5 * 2}).unsqueeze(0)  # code 3.5 -> 4 (half to even)
    assert torch.equal(qdq_per_group(x, "int8")[0], _row(128, {0: 254.0, 1: 8.0}))


def test_token_known_answer():
    x = torch.stack([_row(8, {0: 448 * 2.0, 1: 17 * 2.0, 2: 33 * 2.0}),
                     _row(8, {0: -448 / 4, 3: 19 / 4, 4: 1 / 1024})])
    y = qdq_per_token(x, "e4m3")
    # row 0 scale 2: 17 -> 16, 33 -> 32 (spacing 4 in [32, 64): 33 is below the tie 34)
    assert torch.equal(y[0], _row(8, {0: 896.0, 1: 32.0, 2: 64.0}))
    # row 1 scale 1/4: 19 -> 20; (1/1024) / (1/4) = 2^-8: subnormal grid 2^-9, kept
    assert torch.equal(y[1], _row(8, {0: -112.0, 3: 5.0, 4: 1 / 1024}))


def test_static_known_answer_saturates():
    x = _row(4, {0: 8.5, 1: 300.0, 2: -1000.0, 3: 0.0}).unsqueeze(0)
    y = qdq_per_tensor(x, 0.5, "e4m3")
    # 17 -> 16; 600 and -2000 saturate at +-448 (no NaN, no infinity)
    assert torch.equal(y[0], _row(4, {0: 8.0, 1: 224.0, 2: -224.0}))


def test_zero_unit_stays_zero():
    x = torch.zeros(2, 256, dtype=torch.float64)
    x[0, 200] = 448.0  # the first group of both rows and the second of row 1 are all zero
    for f in (lambda t: qdq_per_group(t, "e4m3"), lambda t: qdq_per_token(t, "e4m3")):
        y = f(x)
        assert torch.isfinite(y).all() and torch.equal(y, x)


# --- the scheme end to end ----------------------------------------------------------------------

P = MoEProblem(M=9, K=256, N=160, E=4, topk=2, bias=True)
MODES = ("dynamic-group", "dynamic-token", "static-tensor")


def test_record():
    s = get_scheme("fp8-w8a8")
    assert (s.element, s.activation_element) == ("e4m3", "e4m3")
    assert s.defaults()["weight_strategy"] == "block"  # DeepSeek: blocks with 1x128 groups
    assert s.defaults()["activation"] == "dynamic-group"
    assert s.formats[0].record == get_scheme("fp8-w8a16").formats[0].record  # same storage


@pytest.mark.parametrize("mode", MODES)
def test_e4m3_activations_change_the_result(mode):
    # q1/q2 must run with e4m3: the W8A8 result differs from the same weights as W8A16 by
    # about e4m3's relative step (unit roundoff 2^-4), far more than an int8 step would
    ckpt = synthesize("fp8-w8a8", P, seed=3, activation=mode)
    a16 = replace(ckpt, scheme="fp8-w8a16", activation="none",
                  tensors={n: t for n, t in ckpt.tensors.items() if "input_scale" not in n})
    x, w, ids = make_inputs(P, seed=4)
    y8, y16 = moe(ckpt, x, w, ids, P), moe(a16, x, w, ids, P)
    rel = ((y8 - y16).norm() / y16.norm()).item()
    assert 5e-3 < rel < 0.1


def test_group_differs_from_token():
    a = synthesize("fp8-w8a8", P, seed=5, activation="dynamic-group")
    x, w, ids = make_inputs(P, seed=6)
    x[:, :128] *= 16  # the first group of every row dominates its amax: groups matter
    ya = moe(a, x, w, ids, P)
    yt = moe(replace(a, activation="dynamic-token"), x, w, ids, P)
    assert not torch.equal(ya, yt)


@pytest.mark.parametrize("strategy", ["tensor", "channel", "block"])
def test_weights_and_input_scales_are_declared(strategy):
    ckpt = synthesize("fp8-w8a8", P, seed=1, weight_strategy=strategy,
                      activation="static-tensor")
    assert set(ckpt.tensors) == set(declared_tensors(ckpt))
    assert ckpt.tensors["w13_weight"].dtype == torch.float8_e4m3fn
    if strategy == "tensor":  # llm-compressor writes one scale per w1 / w3 shard
        assert ckpt.tensors["w13_weight_scale"].shape == (P.E, 2)
    s = ckpt.tensors["w13_input_scale"]
    assert s.shape == (P.E,) and s.dtype == torch.float32
    # calibrated as amax / 448 of unit normal inputs (amax about 3 over 64 x 256 samples)
    assert 3 / 448 < float(s.min()) and float(s.max()) < 6 / 448


def test_static_scale_is_the_max_over_experts():
    ckpt = synthesize("fp8-w8a8", P, seed=8, weight_strategy="tensor",
                      activation="static-tensor")
    x, w, ids = make_inputs(P, seed=9)
    y = moe(ckpt, x, w, ids, P)
    for name in ("w13_input_scale", "w2_input_scale"):
        s = ckpt.tensors[name]
        top = int(s.argmax())
        low = s.clone()
        low[(top + 1) % P.E] = s.max() / 4  # another expert's scale: no effect
        assert torch.equal(moe(replace(ckpt, tensors={**ckpt.tensors, name: low}),
                               x, w, ids, P), y)
        high = s.clone()
        high[top] = s.max() * 1.5  # the max itself: every expert's scale changes
        assert not torch.equal(moe(replace(ckpt, tensors={**ckpt.tensors, name: high}),
                                   x, w, ids, P), y)


# --- malformed inputs ---------------------------------------------------------------------------

def _static():
    return synthesize("fp8-w8a8", MoEProblem(M=1, K=128, N=128, E=2, topk=1), seed=2,
                      weight_strategy="channel", activation="static-tensor")


@pytest.mark.parametrize("name", ["w13_input_scale", "w2_input_scale"])
@pytest.mark.parametrize("value", [float("nan"), 0.0, -0.01, float("inf")])
def test_bad_input_scale_values_are_named(name, value):
    ckpt = _static()
    t = ckpt.tensors[name].clone()
    t[1] = value
    bad = replace(ckpt, tensors={**ckpt.tensors, name: t})
    with pytest.raises(CheckpointError, match="^" + re.escape(name) + ": expected finite "
                       "scales > 0"):
        dequantize(bad)


@pytest.mark.parametrize("name", ["w13_input_scale", "w2_input_scale"])
def test_bad_input_scale_shape_and_absence_are_named(name):
    ckpt = _static()
    P1 = MoEProblem(M=1, K=128, N=128, E=2, topk=1)
    wrong = replace(ckpt, tensors={**ckpt.tensors, name: torch.ones(2, 2)})
    with pytest.raises(CheckpointError, match="^" + re.escape(name) + ":.*shape"):
        dequantize(wrong, P1)
    gone = replace(ckpt, tensors={n: t for n, t in ckpt.tensors.items() if n != name})
    with pytest.raises(CheckpointError, match="^" + re.escape(name) + ":"):
        dequantize(gone, P1)


def test_a_true_tie_of_the_ratio_goes_to_even():
    # amax = 61/64 (not 448 * 2^k): x = 3/8 amax is x * 448 / amax = 168, the e4m3 tie
    # between 160 and 176; RNE takes 160. x / fl(amax / 448) lands on either side of 168.
    amax, x = 61 / 64, 3 / 8 * 61 / 64
    row = _row(128, {0: amax, 1: x, 2: -x}).unsqueeze(0)
    for y in (qdq_per_group(row, "e4m3"), qdq_per_token(row, "e4m3")):
        assert y[0, 1].item() == pytest.approx(160 * amax / 448, rel=1e-15)
        assert y[0, 2].item() == pytest.approx(-160 * amax / 448, rel=1e-15)
