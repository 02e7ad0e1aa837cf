"""What the torchao crosscheck modules share (not a test module): torchao's MX scale modes by
our rule names, and the to_mx round trip on random layers through a reference checkpoint.

Imports torchao: a module imports this only after its pytest.importorskip("torchao"), so
without torchao it still skips cleanly.
"""

from __future__ import annotations

import torch
from _common import as_bytes, random_blocks
from moecert.reference.checkpoint import Checkpoint
from moecert.reference.dequantize import dequantize
from torchao.prototype.mx_formats.config import ScaleCalculationMode
from torchao.prototype.mx_formats.mx_tensor import to_dtype, to_mx

MODES = {"floor": ScaleCalculationMode.FLOOR, "even": ScaleCalculationMode.EVEN,
         "ceil": ScaleCalculationMode.CEIL, "rceil": ScaleCalculationMode.RCEIL}


def to_mx_round_trip(seed, rule, dtype, elem_dtype, scheme, quantize, stored, xc_counts):
    """to_mx(elem_dtype) with `rule` on a random w13 and w2 (3 experts, N = 64, K = 256, every
    block of 32 in its own binade) in `dtype`, against `quantize(w)` (ours, on float64): scale
    bytes bit-exact; `stored(data, ours)` asserts their elements are ours and returns what the
    checkpoint stores as `{p}_weight`. Their tensors through our `scheme` checkpoint reader
    equal their dequantization (to_dtype)."""
    gen = torch.Generator().manual_seed(seed)
    E, N, K = 3, 64, 256
    w13 = random_blocks(gen, (E, 2 * N, K)).to(dtype)
    w2 = random_blocks(gen, (E, K, N)).to(dtype)
    tensors, fp = {}, {}
    for p, w in (("w13", w13), ("w2", w2)):
        scale, data = to_mx(w.contiguous(), elem_dtype, 32, MODES[rule])
        ours = quantize(w.double())
        assert torch.equal(as_bytes(scale), (torch.log2(ours.scales) + 127).to(torch.uint8))
        tensors[f"{p}_weight"] = stored(data, ours)
        tensors[f"{p}_weight_scale"] = as_bytes(scale)
        fp[p] = to_dtype(data, scale, elem_dtype, 32, torch.float32)
    # their tensors through our checkpoint reader, against their dequantization
    w = dequantize(Checkpoint(scheme=scheme, tensors=tensors))
    for p in ("w13", "w2"):
        assert torch.equal(w[p], fp[p].double())
    xc_counts(blocks=(w13.numel() + w2.numel()) // 32, mismatches=0)
