"""Pieces several crosscheck modules share (not a test module): test data and the arithmetic
the reference is checked against, torch and moecert only, so that any module may import it
whatever library it compares with. A module imports it (and `_torchao`) by putting this
folder on sys.path, after its own pytest.importorskip.

* MX, shared by the torchao modules (MXFP8, MXFP4, MXFP6): byte views, random blocks of 32 in
  their own binades, probe values for an element's rounding, blocks whose amax sits at the
  scale rules' boundaries, and each scale rule's E8M0 exponent in exact arithmetic.
* NVFP4, shared by the torchao and compressed-tensors modules: the e2m1 / e4m3 grids, the
  layer's shapes, and the test that a one-step difference comes from a tie that only the other
  library's rounded intermediate crossed.
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch
from moecert.reference.elements import decode_e2m1, decode_e4m3
from moecert.reference.schemes.elements import get_element


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8)


def random_blocks(gen, shape, lo=-40, hi=40, dtype=torch.float64, block=32):
    """Random data with a different binade in [lo, hi) for every block of `block` along the
    last dim."""
    *lead, n = shape
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    octave = torch.randint(lo, hi, (*lead, n // block, 1), generator=gen).double()
    return (x.unflatten(-1, (-1, block)) * torch.exp2(octave)).flatten(-2).to(dtype)


def probe_values(values: torch.Tensor, tail: list[float], rand: torch.Tensor) -> torch.Tensor:
    """float32 inputs for an element's rounding: its non-negative `values` (sorted), every
    midpoint between neighbours (exact ties), `tail` (overflow range, Inf, tiny values), the
    float32 neighbours of all of these towards Inf and towards 0, and `rand`; then negated."""
    pos = values.float()
    mids = (pos[1:] + pos[:-1]) / 2
    base = torch.cat([pos, mids, torch.tensor(tail)])
    near = torch.cat([torch.nextafter(base, torch.full_like(base, math.inf)),
                      torch.nextafter(base, torch.zeros_like(base))])
    x = torch.cat([base, near, rand])
    return torch.cat([x, -x])


def boundary_blocks(exponents, mants, seed: int) -> torch.Tensor:
    """float32 blocks of 32, one per (binade k, mantissa m, sign): amax = m * 2^k (a rule's
    boundary when m is), with that sign at a random position, the other 31 elements uniform
    in (-amax, amax)."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for k in exponents:
        for m in mants:
            for sign in (1.0, -1.0):
                amax = m * 2.0**k
                blk = (torch.rand(32, generator=gen, dtype=torch.float64) * 2 - 1) * amax
                blk[int(torch.randint(0, 32, (1,), generator=gen))] = sign * amax
                rows.append(blk.to(torch.float32))
    return torch.stack(rows)


def exact_exponent(amax: float, rule: str, name: str) -> int:
    """The unbiased E8M0 exponent of each rule for element `name`, in exact rational
    arithmetic (no log2)."""
    el = get_element(name)
    a = Fraction(amax)
    m, e = math.frexp(amax)  # amax = m * 2^e, 0.5 <= m < 1
    floor_log2 = e - 1
    if rule == "floor":
        x = floor_log2 - el.emax
    elif rule == "ceil":
        x = floor_log2 - el.emax + (m != 0.5)
    elif rule == "even":  # amax rounded to the element's mantissa bits (ties even), then floor
        steps = a / Fraction(2) ** (floor_log2 - el.mantissa_bits)
        r = round(steps)  # Python's round on a Fraction is half-to-even
        x = floor_log2 - el.emax + (r == 2 ** (el.mantissa_bits + 1))
    else:  # rceil: smallest x with max * 2^x >= amax
        top = Fraction(el.max)
        x = floor_log2 - el.emax
        while top * Fraction(2) ** x < a:
            x += 1
        while top * Fraction(2) ** (x - 1) >= a:
            x -= 1
    return max(-127, min(127, x))


# --- NVFP4 ------------------------------------------------------------------------------------

E2M1_GRID = decode_e2m1(torch.arange(8))  # 0, 0.5, ..., 6
E4M3_GRID = decode_e4m3(torch.arange(127, dtype=torch.uint8))  # 0 .. 448
SHAPES = {"w13": (3, 128, 256, 2), "w2": (3, 256, 64, 1)}  # E, out, in, shards


def per_row(g: torch.Tensor, n_out: int) -> torch.Tensor:
    """[E] or [E, shards] -> [E, out, 1]"""
    g = g.view(g.shape[0], -1)
    return g.repeat_interleave(n_out // g.shape[1], dim=1).unsqueeze(-1)


def neighbours(a: torch.Tensor, b: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """a and b are adjacent values of the (non-negative, sorted) grid, with the same sign."""
    ia = torch.searchsorted(grid, a.abs().contiguous())
    ib = torch.searchsorted(grid, b.abs().contiguous())
    same_sign = (torch.signbit(a) == torch.signbit(b)) | (a == 0) | (b == 0)
    return ((ia - ib).abs() == 1) & same_sign


def tie_between(exact, their_pre, ours, theirs):
    """The tie between our value and theirs lies between the exact value and their rounded
    (float32 or bf16) intermediate, or on the latter: only their rounding moved it across."""
    mid = (ours + theirs) / 2
    return (exact - mid).abs() <= (exact - their_pre.double()).abs()
