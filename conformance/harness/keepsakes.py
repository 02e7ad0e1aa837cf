"""What a check keeps of a tensor to tell later whether it changed: a copy, or for big tensors
a fingerprint of its bytes (no_mutation, process_twice, the exact tier's inputs)."""

from __future__ import annotations

import torch

# Tensors above this many bytes are remembered by fingerprint, not copied: a DeepSeek-V3
# bf16 checkpoint is 22 GB, and a copy of it beside the layer's own does not fit on one GPU.
COPY_MAX_BYTES = 1 << 28
# A fingerprint sums the bytes as 16-bit words, laid out in rows of _ROW_WORDS: a word's weight
# is its column + 1, so the weighted sum is the column sums times 1..251, with no position
# tensor. Rows are summed _CHUNK_ROWS at a time, one int64 temporary of 4x the chunk's bytes
# (2^16 rows: 31 MiB of the tensor, 126 MiB of temporary); the sums are exact integers, so the
# chunk size does not change a fingerprint.
_ROW_WORDS = 251
_CHUNK_ROWS = 1 << 16


def keepsake(t: torch.Tensor):
    """What `unchanged` compares against later: a copy, or a fingerprint for big tensors."""
    if t.numel() * t.element_size() <= COPY_MAX_BYTES:
        return t.detach().clone()
    return fingerprint(t)


def fingerprint(t: torch.Tensor) -> tuple:
    """Shape, dtype, and two position-weighted sums of the bytes read as 16-bit words (a byte
    at an odd start or end on its own): any single changed byte changes its word and so the
    first sum, and a swap of two bytes changes the first sum unless both sit at the same
    place in their words, then the second unless the words are a multiple of 251 apart.

    Why words, column sums and no position tensor: the byte-wise version of this (every byte
    widened to int64, a position tensor, its remainder and product) moved about 90 bytes of
    memory per byte fingerprinted, ~1 TB for a DeepSeek-V3 fp8 checkpoint, twice per case
    (the snapshot and no_mutation) on a GPU that 24 workers share; this moves about 9, in 3
    kernel launches per 31 MiB instead of 9 per 8 MiB. int64 holds the sums exactly:
    |word| <= 2^15, weight <= 251, 2^39 words: < 2^63."""
    data = _bytes(t)
    lead = data.storage_offset() % 2  # a 16-bit view starts at an even byte
    body = data[lead:]
    even = body.numel() - body.numel() % 2
    words = (body[:even].view(torch.int16) if even  # an empty slice may sit at an odd byte
             else torch.empty(0, dtype=torch.int16, device=data.device))
    loose = torch.cat([data[:lead], body[even:]]).tolist()  # at most two bytes
    columns = torch.zeros(_ROW_WORDS, dtype=torch.int64, device=data.device)
    full = words.numel() - words.numel() % _ROW_WORDS
    rows = words[:full].view(-1, _ROW_WORDS)
    for start in range(0, rows.shape[0], _CHUNK_ROWS):
        columns += rows[start:start + _CHUNK_ROWS].sum(0, dtype=torch.int64)
    tail = words[full:]
    columns[:tail.numel()] += tail.to(torch.int64)
    weights = torch.arange(1, _ROW_WORDS + 1, dtype=torch.int64, device=data.device)
    sums = torch.stack([columns.sum(), (columns * weights).sum()])
    total, weighted = sums.tolist()  # the one wait on the device
    return (tuple(t.shape), t.dtype, total, weighted, tuple(loose))


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
