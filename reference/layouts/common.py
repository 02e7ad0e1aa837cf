"""Checks and small conversions shared by the layout readers and writers."""

from __future__ import annotations

import torch

from ..checkpoint import Checkpoint
from ..errors import CheckpointError
from ..schemes.records import FormatRecord
from ..schemes.tensors import role_names

_TORCH_SCALE_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def linear_format(ckpt: Checkpoint, p: str) -> tuple[FormatRecord, int, dict[str, str]]:
    """What a reader or writer of linear `p` reads off the records: the format record, the
    weight bits, and the tensor names by role (`schemes.tensors.role_names`)."""
    return ckpt.record, ckpt.info.weight_bits, role_names(ckpt, p)


def num_groups(ckpt: Checkpoint, name: str, n_in: int) -> int:
    """Groups along an input dimension of length n_in; the group size must divide it."""
    g = ckpt.group_size
    if g == -1:
        return 1
    if g <= 0 or n_in % g:
        raise CheckpointError(name, f"group size {g} dividing the input dimension",
                              f"input dimension {n_in}")
    return n_in // g


def scales_float64(ckpt: Checkpoint, name: str) -> torch.Tensor:
    """float64 copy of a scale tensor, which must be finite and non-zero, and > 0 unless
    the format record's `scale_sign` is "any"."""
    s = ckpt.tensor(name).to(torch.float64)
    signed = ckpt.record.scale_sign == "any"
    bad = ~torch.isfinite(s) | ((s == 0) if signed else (s <= 0))
    if bad.any():
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise CheckpointError(name, "finite non-zero scales" if signed else
                              "finite scales > 0", f"{s[idx].item()} at index "
                              f"{_layer_index(ckpt, idx)} ({int(bad.sum())} bad)")
    return s


def _layer_index(ckpt: Checkpoint, idx) -> list[int]:
    """A position in a (sliced) checkpoint's tensor as a position in the whole layer's."""
    idx = [int(i) for i in idx]
    return [idx[0] + ckpt.first_expert, *idx[1:]] if idx else idx


def check_finite(name: str, t: torch.Tensor) -> None:
    if t.is_floating_point() and not torch.isfinite(t).all():
        raise CheckpointError(name, "finite values", f"{int((~torch.isfinite(t)).sum())} "
                              "non-finite entries")


def check_range(ckpt: Checkpoint, name: str, t: torch.Tensor, lo: int, hi: int,
                what: str) -> None:
    """`t` (read from tensor `name`, experts first) within [lo, hi]."""
    if t.numel() and (t.min() < lo or t.max() > hi):
        bad = ((t < lo) | (t > hi)).nonzero()[0]
        raise CheckpointError(name, f"{what} in [{lo}, {hi}]",
                              f"{t[tuple(bad)].item()} at index {_layer_index(ckpt, bad)}")


def check_symmetric_zeros(name: str, signed: torch.Tensor, code_offset: int) -> None:
    """A symmetric (sym=True) file may still carry zero points; they must all be the symmetric
    zero (signed 0, stored 2^(b-1)), or the checkpoint's attributes and tensors disagree."""
    if signed.numel() and signed.any():
        raise CheckpointError(name, f"the symmetric zero {code_offset} in every field (sym=True)",
                              f"stored zeros in [{int(signed.min()) + code_offset}, "
                              f"{int(signed.max()) + code_offset}]")


def read_g_idx(ckpt: Checkpoint, name: str, n_in: int, groups: int) -> torch.Tensor | None:
    """g_idx [E, in] when the checkpoint has act order; None when groups follow k // g.

    A g_idx present without act order must be the trivial k // g map: anything else means
    the checkpoint's attributes and tensors disagree.
    """
    if name not in ckpt.tensors:
        if ckpt.act_order:
            ckpt.tensor(name)  # raises: missing
        return None
    E = ckpt.num_experts
    g_idx = ckpt.expect(name, (torch.int32, torch.int64), (E, n_in))
    check_range(ckpt, name, g_idx, 0, groups - 1, "group indices")
    if not ckpt.act_order:
        trivial = torch.arange(n_in, device=g_idx.device) // (n_in // groups)
        if not torch.equal(g_idx.to(torch.int64), trivial.expand(E, -1)):
            raise CheckpointError(name, "k // group_size (act_order is False)",
                                  "a permuted group map; set act_order=True")
        return None
    return g_idx.to(torch.int64)


def scale_dtype(record_dtype: str, model_dtype: torch.dtype) -> torch.dtype:
    return model_dtype if record_dtype == "model" else _TORCH_SCALE_DTYPES[record_dtype]
