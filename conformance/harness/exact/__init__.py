"""The exact tier: structured inputs on which every backend must match the reference bit for bit.

    s = structured_inputs(case)     # Structured(checkpoint, x, topk_weights, topk_ids,
                                    #            expert_num_tokens): CPU tensors
    backend output == moe(s.checkpoint, ...).to(dtype), every bit, whatever the accumulation
    order; NotExact("why") when the case's options make that impossible to construct.

Why the output is exact. Every value is a dyadic number with few significant bits, and every
step the kernels take is either exact in fp32 or a rounding of an exactly computed value (the
same rounding the reference applies to the same value):

  weights   one non-zero per weight row (a few where the rows cannot otherwise read every
            input column), each +-{1,3} * 2^q; scales are powers of two in the format's own
            storage (E8M0, fp16/bf16/fp32), zero points fill every other column of a group, so
            each GEMM output is one product (or a few on a common grid) plus a bias: exact in
            fp32 in any order, int32 dots times power-of-two scales included.
  q1, q2    int8 dynamic (per token, per tensor): every unit's amax is 127 * 2^p (an anchor
            column in x, an anchor intermediate per expert), so amax/127 = 2^p is exact in fp32
            and float64 alike and round(v / 2^p) is the same integer everywhere. int8 static:
            the input scales are powers of two. MXFP8: the E8M0 exponent and the E4M3 rounding
            of an identical input are deterministic bit operations, nothing to arrange.
  act       silu / gelu: gates are powers of two >= 32, where fp32 silu(g) = gelu(g) = g
            exactly, so act * up = g * up is a bf16/fp16 value and the reference's
            g * (1 - 1e-14) * up rounds to it. swigluoai: gates >= 7 (clamped to exactly 7),
            up values on a 0.5 grid so that 7 * (u + 1) has <= 8 significant bits and the
            sigmoid(11.9) factor (1 - 6.7e-6) rounds away. relu2: h^2 is exact in fp32.
  y         every expert output (GEMM2 + bias) is exact in the activation dtype, since a
            backend may store it there before the top-k sum (vLLM's fused MoE, the grouped
            backend). One column at weight +-2^q only shifts the bf16/fp16 intermediate's bits;
            w2's 3 * 2^q weights, its biases and a second column (N > K) are kept only where
            every output of the expert's actual inputs still fits (_fit_expert).
  router    weights 1, 1/2, 1/4 (also on the input: x * r is exact), so r * y and the top-k
            sum of the exact y are exact in fp32.

The relu2 int8-dynamic anchor uses h = 255 * 2^e: h^2 = 65025 * 2^2e rounds (bf16 and fp16) to
65024 * 2^2e = 127 * 2^(2e+9). `exactness_violations` re-derives every condition above from the
checkpoint's packed tensors (not from the design values) and `structured_inputs` refuses to
return a structure that fails it.

Observability: every x column and every intermediate column is read by some weight row, every
local expert receives tokens when M * topk allows it (routing "skewed" / "sparse" as the case
says), biases are non-zero where the options allow (never on an int8 anchor row), every scale
block draws its own power of two (w1 and w3 rows, groups, 128 x 128 and MX blocks alike).

    structured.py  `Structured` (a checkpoint and inputs), `NotExact`
    design.py      x's column roles and the float64 weight designs (one non-zero per row)
    encoding.py    the designs written in a scheme's format with power-of-two scales
    inputs.py      `structured_inputs`: routing, the designs, encoding, the audit
    audit.py       `exactness_violations`: every condition re-derived from the packed tensors
"""

from __future__ import annotations

from .audit import audit as audit
from .audit import exactness_violations as exactness_violations
from .encoding import encode_checkpoint as encode_checkpoint
from .encoding import lowbit as lowbit
from .inputs import structured_inputs as structured_inputs
from .inputs import why_not_exact as why_not_exact
from .structured import NotExact as NotExact
from .structured import Structured as Structured
