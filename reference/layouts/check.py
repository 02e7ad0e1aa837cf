"""`check_tensors`: a checkpoint holds exactly its format's tensors (`schemes/tensors.py`), each a
torch.Tensor on the checkpoint's device with a declared dtype and shape.

It runs before any reader, so an error names the tensor at fault, not the one a reader happened
to compare it with. Shapes are checked against the problem's sizes when there is a problem;
without one, against the sizes most tensors agree on (a size no two tensors can settle, as in a
16-bit checkpoint whose two weights disagree on K, names every tensor involved).
"""

from __future__ import annotations

from collections import Counter

import torch

from ..errors import CheckpointError
from ..schemes.tensors import (
    ALWAYS,
    IF_ACT_ORDER,
    IF_ASYM,
    IF_BIAS,
    LINEAR_SIZES,
    TensorDecl,
    declared_tensors,
    dim_size,
    layer_sizes,
    parse_dim,
)

_SIZE_NAMES = {"E": "expert count", "R": "w13 row count", "K": "hidden size K",
               "N": "intermediate size N"}
_WHY_REQUIRED = {ALWAYS: "every checkpoint of this format holds it",
                 IF_ASYM: "zero points of an asymmetric (sym=False) checkpoint",
                 IF_ACT_ORDER: "the group index of an act_order checkpoint",
                 IF_BIAS: "the problem has bias"}


def check_tensors(ckpt, problem=None) -> None:
    """CheckpointError naming the first tensor that is not what `ckpt`'s format declares."""
    decls = declared_tensors(ckpt)
    tensors = ckpt.tensors
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise CheckpointError(name, "a torch.Tensor", type(t).__module__.split(".")[0]
                                  + "." + type(t).__name__)
    _check_names(ckpt, decls, bool(problem is not None and problem.bias))
    _check_device(tensors)
    shapes = {name: _declared_shape(decls[name], t) for name, t in tensors.items()}
    sizes = (layer_sizes(problem) if problem is not None
             else _agreed_sizes(ckpt, decls, shapes))
    _check_group_size(ckpt, decls, sizes)
    for name, t in tensors.items():
        want = [_dim_size(ckpt, decls[name].linear, d, sizes) for d in shapes[name]]
        if list(t.shape) != want:
            source = "the problem's" if problem is not None else "the sizes the tensors agree on"
            raise CheckpointError(name, f"shape {want} = [{', '.join(shapes[name])}] for "
                                  f"{_describe_sizes(decls[name].linear, sizes)} ({source})",
                                  str(list(t.shape)))


def _check_names(ckpt, decls: dict[str, TensorDecl], bias: bool) -> None:
    unknown = sorted(set(ckpt.tensors) - set(decls))
    if unknown:
        raise CheckpointError(", ".join(unknown), f"only the tensors of {ckpt.variant.describe()}: "
                              f"{', '.join(decls)}", "a tensor of another name")
    for name, d in decls.items():
        if name not in ckpt.tensors and d.required(ckpt.sym, ckpt.act_order, bias):
            raise CheckpointError(name, f"a tensor ({_WHY_REQUIRED[d.presence]}; "
                                  f"{ckpt.variant.describe()})", "missing; present: "
                                  f"{', '.join(sorted(ckpt.tensors)) or 'none'}")


def _check_device(tensors: dict[str, torch.Tensor]) -> None:
    by_device = Counter(t.device for t in tensors.values())
    if len(by_device) < 2:
        return
    (common, n), (_, m) = by_device.most_common(2)
    if n == m:  # no majority: name them all
        raise CheckpointError(", ".join(tensors), "every tensor on one device",
                              ", ".join(f"{k} on {t.device}" for k, t in tensors.items()))
    for name, t in tensors.items():
        if t.device != common:
            raise CheckpointError(name, f"device {common} (the other tensors')", str(t.device))


def _declared_shape(d: TensorDecl, t: torch.Tensor) -> tuple[str, ...]:
    """The declared shape of `t`'s rank, after checking its dtype."""
    if t.dtype not in d.dtypes:
        raise CheckpointError(d.name, f"dtype {' or '.join(map(str, d.dtypes))}", str(t.dtype))
    for shape in d.shapes:
        if len(shape) == t.dim():
            return shape
    raise CheckpointError(d.name, " or ".join(f"a {len(s)}-D tensor [{', '.join(s)}]"
                                              for s in d.shapes), f"shape {list(t.shape)}")


# --- sizes ------------------------------------------------------------------------------------

def _parse(ckpt, linear: str | None, dim: str) -> tuple[str | None, int, bool]:
    return parse_dim(dim, linear, ckpt.group_size, ckpt.info.weight_bits)


def _dim_size(ckpt, linear, dim: str, sizes: dict[str, int]) -> int:
    return dim_size(dim, linear, sizes, ckpt.group_size, ckpt.info.weight_bits)


def _agreed_sizes(ckpt, decls: dict[str, TensorDecl], shapes: dict[str, tuple[str, ...]]
                  ) -> dict[str, int]:
    """The layer's sizes that most tensors give exactly (see `_pick` for ties). Group counts
    do not vote (the group size may be what is wrong); packed words (ceil) vote only for a
    size no tensor gives exactly, and otherwise break ties."""
    votes = {(s, exact): {} for s in _SIZE_NAMES for exact in (True, False)}
    packed = {s: [] for s in _SIZE_NAMES}  # (words, codes per word) along each size
    for name, shape in shapes.items():
        for dim, size in zip(shape, ckpt.tensors[name].shape, strict=True):
            symbol, div, exact = _parse(ckpt, decls[name].linear, dim)
            if symbol and dim != "groups":
                votes[(symbol, exact)].setdefault(size * div, []).append((name, div == 1))
                if not exact:
                    packed[symbol].append((size, div))
    n_only_packed = not votes[("N", True)]
    votes = {s: votes[(s, True)] or votes[(s, False)] for s in _SIZE_NAMES}

    def pick(symbol, fits=None):
        def held(v):  # packed dimensions that hold a size v exactly
            return sum(-(-v // div) == size for size, div in packed[symbol])
        return _pick(symbol, votes[symbol], fits, held)

    sizes = {s: pick(s) for s in ("E", "K")}
    r_top = _leaders(votes["R"], len)
    # N held only by padded words (compressed-tensors pads N = 36 to 5 words of 8): the
    # rows (R = 2N or N) give N exactly where the words agree
    held_n = [n for r in r_top for n in (r // 2, r) if n_only_packed and n > 0 and all(
        -(-n // div) == size for size, div in packed["N"])]
    sizes["N"] = held_n[0] if held_n else pick("N", lambda n: any(r in (n, 2 * n) for r in r_top))
    sizes["R"] = pick("R", lambda r: r in (sizes["N"], 2 * sizes["N"]))
    if sizes["R"] in (sizes["N"], 2 * sizes["N"]):
        return sizes
    n_side = [n for n, _ in votes["N"][sizes["N"]]]
    r_side = [n for n, _ in votes["R"][sizes["R"]]]
    blamed = (n_side if len(n_side) < len(r_side) else r_side if len(r_side) < len(n_side)
              else sorted(set(n_side + r_side)))
    raise CheckpointError(", ".join(blamed), f"w13 rows R = N or 2N (N = {sizes['N']}, w2's "
                          "input size)", f"R = {sizes['R']}")


def _leaders(votes: dict[int, list], score, among=None) -> list[int]:
    values = list(votes) if among is None else among
    if not values:
        return []
    best = max(score(votes[v]) for v in values)
    return sorted(v for v in values if score(votes[v]) == best)


def _pick(symbol: str, votes: dict[int, list], fits=None, packed=None) -> int:
    """The size most tensors give; among ties, the one that fits the other sizes, then the one
    the packed dimensions hold, then the one more undivided dimensions give."""
    best = _leaders(votes, len)
    if len(best) > 1 and fits is not None:
        best = [v for v in best if fits(v)] or best
    if len(best) > 1 and packed is not None:
        most = max(packed(v) for v in best)
        best = [v for v in best if packed(v) == most]
    if len(best) > 1:
        best = _leaders(votes, lambda vs: sum(direct for _, direct in vs), best)
    if len(best) == 1:
        return best[0]
    names = sorted({n for v in best for n, _ in votes[v]})
    raise CheckpointError(", ".join(names), f"one {_SIZE_NAMES[symbol]} in every tensor",
                          "; ".join(f"{v} in {', '.join(n for n, _ in votes[v])}"
                                    for v in best))


def _check_group_size(ckpt, decls: dict[str, TensorDecl], sizes: dict[str, int]) -> None:
    g = ckpt.group_size
    if _has_groups(decls) and g != -1 and (sizes["K"] % g or sizes["N"] % g):
        raise CheckpointError("checkpoint.group_size", f"a group size dividing both input "
                              f"sizes (K = {sizes['K']}, N = {sizes['N']})", str(g))


def _has_groups(decls: dict[str, TensorDecl]) -> bool:
    return any("groups" in shape for d in decls.values() for shape in d.shapes)


def _describe_sizes(linear: str | None, sizes: dict[str, int]) -> str:
    parts = [f"E = {sizes['E']}"]
    if linear:
        parts += [f"{side} = {sym} = {sizes[sym]}" for side, sym in LINEAR_SIZES[linear].items()]
    return ", ".join(parts)


__all__ = ["check_tensors"]
