"""What a check keeps of a tensor to tell later whether it changed: a copy, or for big tensors
a fingerprint of its bytes (no_mutation, process_twice, the exact tier's inputs)."""

from __future__ import annotations

import torch

# Tensors above this many bytes are remembered by fingerprint, not copied: a DeepSeek-V3
# bf16 checkpoint is 22 GB, and a copy of it beside the layer's own does not fit on one GPU.
COPY_MAX_BYTES = 1 << 28
# bytes hashed at once: five int64 temporaries of 8x that (measured on the CPU at 1 << 26,
# issue 43: no_mutation peaked 2 GiB above what the case held); the sums are exact integers,
# so the chunk size does not change a fingerprint
_FINGERPRINT_CHUNK = 1 << 23


def keepsake(t: torch.Tensor):
    """What `unchanged` compares against later: a copy, or a fingerprint for big tensors."""
    if t.numel() * t.element_size() <= COPY_MAX_BYTES:
        return t.detach().clone()
    return fingerprint(t)


def fingerprint(t: torch.Tensor) -> tuple:
    """Shape, dtype, and two position-weighted sums of the bytes: any single changed byte
    changes the first sum, and a swap of two bytes the second."""
    data = _bytes(t)
    # summed on the tensor's device and read once: reading each chunk's sums waited on the
    # GPU twice a chunk (at 8 MiB chunks, ~1400 waits for a DeepSeek-V3 fp8 checkpoint; the
    # H200 run of 2026-11-30 00:10 took twice as long in no_mutation as the one before the
    # chunk shrank, not measured apart). int64 holds the sums: 255 x 251 x 2^40 bytes < 2^63
    sums = torch.zeros(2, dtype=torch.int64, device=data.device)
    for start in range(0, data.numel(), _FINGERPRINT_CHUNK):
        b = data[start:start + _FINGERPRINT_CHUNK].to(torch.int64)
        w = torch.arange(start, start + b.numel(), device=b.device, dtype=torch.int64) % 251
        sums[0] += b.sum()
        sums[1] += (b * (w + 1)).sum()
    total, weighted = sums.tolist()
    return (tuple(t.shape), t.dtype, total, weighted)


def unchanged(kept, t: torch.Tensor | None) -> bool:
    if not isinstance(t, torch.Tensor):
        return False
    if isinstance(kept, tuple):
        return fingerprint(t) == kept
    return (kept.shape == t.shape and kept.dtype == t.dtype
            and torch.equal(_bytes(kept), _bytes(t)))


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """The values' bytes in logical order (NaN payloads compare too; strides do not)."""
    flat = t.detach().contiguous().view(-1)
    if flat.numel() and flat.stride(-1) != 1:  # one element counts as contiguous at any stride
        flat = flat.clone(memory_format=torch.contiguous_format)
    return flat.view(torch.uint8)
