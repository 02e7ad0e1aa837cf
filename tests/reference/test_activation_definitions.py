"""The activations between the two GEMMs, pinned to their published definitions.

Every number here is written from the source, never read from moecert's constants: the scheme
facts' SWIGLUOAI_ALPHA is read by the kernels too, so a wrong constant would make every
backend agree with a wrong reference and only a number written in a test can catch it.

- gpt-oss (OpenAI's gpt_oss/torch/model.py, `swiglu`): alpha = 1.702, limit = 7.0;
  x_glu = x[..., ::2], x_linear = x[..., 1::2] (gate and up interleaved by row);
  x_glu clamped above only (min=None, max=limit), x_linear to [-limit, limit];
  out = x_glu * sigmoid(alpha * x_glu) * (x_linear + 1).
- GELU (Hendrycks & Gimpel; torch.nn.GELU's default approximate="none"): x * Phi(x) with the
  exact normal CDF Phi(x) = (1 + erf(x / sqrt 2)) / 2, not the tanh approximation.
- SiLU-gated (Mixtral w1 = gate, w3 = up; Qwen gate_proj, up_proj): silu(gate) * up, the gate
  rows first in w13.
"""

from __future__ import annotations

import math

import pytest
import torch
from moecert.reference.activations import apply_activation, gelu

GPT_OSS_ALPHA = 1.702  # gpt_oss/torch/model.py: swiglu(x, alpha: float = 1.702, limit=7.0)
GPT_OSS_LIMIT = 7.0


def _sigmoid(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v))


def gpt_oss_swiglu(glu: float, linear: float) -> float:
    """One output of OpenAI's swiglu, written from its definition."""
    glu = min(glu, GPT_OSS_LIMIT)  # clamp(min=None, max=limit): no lower clamp
    linear = max(-GPT_OSS_LIMIT, min(linear, GPT_OSS_LIMIT))
    return glu * _sigmoid(GPT_OSS_ALPHA * glu) * (linear + 1)


# (gate, up) pairs: inside the limits, the gate above 7 (clamped), the gate below -7 (not
# clamped), the up projection past either limit
GPT_OSS_PAIRS = [(2.0, 0.5), (0.75, -1.25), (9.0, 1.0), (-9.0, 2.0), (-7.5, -3.0), (1.5, 9.0),
                 (1.5, -9.0)]


def test_swigluoai_is_gpt_oss_swiglu_on_interleaved_rows():
    # h = [g0, u0, g1, u1, ...]: gate j is row 2j, up j is row 2j + 1
    h = torch.tensor([[v for pair in GPT_OSS_PAIRS for v in pair]], dtype=torch.float64)
    got = apply_activation(h, "swigluoai")
    want = torch.tensor([[gpt_oss_swiglu(g, u) for g, u in GPT_OSS_PAIRS]], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-14, atol=0)


def test_swigluoai_split_takes_the_gate_half_first():
    gates, ups = zip(*GPT_OSS_PAIRS, strict=True)
    h = torch.tensor([[*gates, *ups]], dtype=torch.float64)
    got = apply_activation(h, "swigluoai-split")
    want = torch.tensor([[gpt_oss_swiglu(g, u) for g, u in GPT_OSS_PAIRS]], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-14, atol=0)


@pytest.mark.parametrize("alpha_that_is_not_gpt_oss", [1.0, 1.7])
def test_the_known_answers_tell_alpha_apart(alpha_that_is_not_gpt_oss):
    """The pairs above are sensitive to alpha: a reference computing with any other alpha
    misses the written answer by far more than the comparison's tolerance."""
    g, u = GPT_OSS_PAIRS[0]
    other = g * _sigmoid(alpha_that_is_not_gpt_oss * g) * (u + 1)
    assert abs(other - gpt_oss_swiglu(g, u)) > 1e-4


def test_the_gpt_oss_gate_has_no_lower_clamp():
    """gate -9: not clamped to -7; the output is -9 * sigmoid(1.702 * -9) * (up + 1)."""
    h = torch.tensor([[-9.0, 0.0]], dtype=torch.float64)
    want = -9.0 * _sigmoid(-9.0 * 1.702) * 1.0
    assert apply_activation(h, "swigluoai").item() == pytest.approx(want, rel=1e-14)
    clamped = -7.0 * _sigmoid(-7.0 * 1.702)
    assert abs(want - clamped) > 1e-6


# Phi(x), the standard normal CDF, from the tables (Abramowitz & Stegun 26.2), to 16 digits
NORMAL_CDF = {-2.0: 0.022750131948179207, -1.0: 0.15865525393145705, -0.5: 0.30853753872598688,
              0.5: 0.69146246127401312, 1.0: 0.84134474606854293, 2.0: 0.97724986805182079,
              3.0: 0.99865010196836990}


def test_gelu_is_the_exact_erf_gelu():
    xs = sorted(NORMAL_CDF)
    got = gelu(torch.tensor(xs, dtype=torch.float64))
    want = torch.tensor([x * NORMAL_CDF[x] for x in xs], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-14, atol=1e-16)
    # the tanh approximation misses these by up to 2e-4: far outside the tolerance
    tanh = [0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
            for x in xs]
    assert max(abs(t - w) for t, w in zip(tanh, want.tolist(), strict=True)) > 1e-4


@pytest.mark.parametrize("activation", ["silu", "gelu"])
def test_gated_activations_take_the_gate_rows_first(activation):
    """w13 = [gate rows; up rows] (Mixtral w1 then w3): act(h[:N]) * h[N:]."""
    gate, up = [1.0, -0.5], [3.0, 2.0]
    h = torch.tensor([[*gate, *up]], dtype=torch.float64)
    act = {"silu": lambda v: v * _sigmoid(v), "gelu": lambda v: v * NORMAL_CDF[v]}[activation]
    want = torch.tensor([[act(g) * u for g, u in zip(gate, up, strict=True)]],
                        dtype=torch.float64)
    torch.testing.assert_close(apply_activation(h, activation), want, rtol=1e-14, atol=0)
