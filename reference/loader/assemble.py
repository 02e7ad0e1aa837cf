"""One decoder layer's routed-expert tensors, as the file stores them, assembled into the
tensors of a moecert `Checkpoint` (SPEC section 2; `docs/checkpoints.md` has the deviations).

Where each piece goes is derived from the layout's declarations (`schemes/tensors.py`), not
from per-scheme code: a declared dimension that names `out` is the one gate and up pieces
are stacked along; a declaration of shape [E] or [E, 2] takes one scalar per linear (per
shard for w13); a declaration with neither (g_idx) is one value the two shards must share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..errors import CheckpointError
from ..packing import pack_int32, unpack_int32
from ..schemes.records import Rejected
from ..schemes.tensors import TensorDecl, dim_size, parse_dim
from .families import FUSED, PER_EXPERT, PROJECTIONS
from .files import ModelFolder

# file suffixes that are checked and dropped rather than kept: (suffix, the value they must
# hold, why). Quark writes input zero points for symmetric activations.
DROPPED_IF = {"input_zero_point": (0, "symmetric activations: every input zero point is 0")}


@dataclass
class ExpertNames:
    """The file tensors of one layer's routed experts."""

    layer: int
    prefix: str  # e.g. "model.layers.3.mlp.experts"
    per_expert: dict[tuple[str, str], dict[int, str]] = field(default_factory=dict)
    fused: dict[tuple[str, str | None], str] = field(default_factory=dict)

    @property
    def suffixes(self) -> set[str | None]:
        return {s for _, s in self.per_expert} | {s for _, s in self.fused}


def find_experts(names, layer: int | None = None) -> dict[int, ExpertNames]:
    """The routed-expert tensors of every layer (or of `layer`), by layer index."""
    out: dict[int, ExpertNames] = {}
    for name in names:
        m = PER_EXPERT.match(name) or FUSED.match(name)
        if m is None or m["proj"] not in PROJECTIONS:
            continue
        L = int(m["L"])
        if layer is not None and L != layer:
            continue
        ex = out.setdefault(L, ExpertNames(L, f"{m['layer']}.{m['block']}.experts"))
        if "e" in m.groupdict() and m.groupdict().get("e") is not None:
            ex.per_expert.setdefault((m["proj"], m["suffix"]), {})[int(m["e"])] = name
        else:
            ex.fused[(m["proj"], m["suffix"])] = name
    return out


def expert_count(folder: ModelFolder, ex: ExpertNames) -> int:
    if ex.per_expert:
        return 1 + max(e for ids in ex.per_expert.values() for e in ids)
    return folder.shape(next(iter(ex.fused.values())))[0]


@dataclass
class Plan:
    """What the assembly needs to know about the layer and the format."""

    folder: ModelFolder
    names: ExpertNames
    decls: dict[str, TensorDecl]
    sizes: dict[str, int]  # E, R, K, N
    group_size: int
    bits: int
    packing: str | None
    suffix_map: dict[str, str]
    config_note: str  # "config.json: ..." where the sizes and bits come from
    experts: range
    rejected: tuple[Rejected, ...] = ()  # the format record's rejected values, by role
    scheme: str = ""
    notes: list[str] = field(default_factory=list)
    consumed: set[str] = field(default_factory=set)
    fused_inputs_first: bool = False  # the family's 16-bit fused weights are [E, in, out]
    # moecert tensor -> the file tensors it is built from (the first expert's), for messages
    sources: dict[str, list[str]] = field(default_factory=dict)


def assemble(plan: Plan) -> dict[str, torch.Tensor]:
    """The Checkpoint tensors of the plan's layer."""
    groups: dict[str, list] = {}
    for (proj, suffix), ids in plan.names.per_expert.items():
        _group(plan, groups, proj, suffix, ids=ids)
    for (proj, suffix), name in plan.names.fused.items():
        _group(plan, groups, proj, suffix, fused=name)
    out = {}
    for target, pieces in groups.items():
        t = _build(plan, target, pieces)
        if t is not None:
            out[target] = t
    return out


def _group(plan: Plan, groups, proj, suffix, ids=None, fused=None) -> None:
    linear, shard = PROJECTIONS[proj]
    file_suffix = suffix or "weight"
    msuffix = plan.suffix_map.get(file_suffix, file_suffix)
    example = fused or next(iter(ids.values()))
    if msuffix in DROPPED_IF:
        _check_dropped(plan, msuffix, list(ids.values()) if ids else [fused])
        return
    target = f"{linear}_{msuffix}"
    if target not in plan.decls:
        raise CheckpointError(f"{plan.folder.file_of(example).name}: {example}",
                              f"a tensor of the format ({plan.config_note}): suffixes "
                              f"{', '.join(sorted(_file_suffixes(plan)))}",
                              f"suffix {file_suffix!r}")
    if ids is not None:
        missing = [e for e in plan.experts if e not in ids]
        if missing:
            want = example.replace(f".experts.{next(iter(ids))}.",
                                   f".experts.{missing[0]}.")
            raise CheckpointError(want, f"a tensor for expert {missing[0]} (the other experts "
                                  f"have {proj}.{file_suffix})",
                                  f"missing from {plan.folder.root} ({len(missing)} of "
                                  f"{len(plan.experts)} experts lack it)")
    groups.setdefault(target, []).append((shard, ids, fused))
    plan.sources.setdefault(target, []).append(
        fused or ids.get(plan.experts.start, example))


def _file_suffixes(plan: Plan) -> set[str]:
    back = {v: k for k, v in plan.suffix_map.items()}
    return {back.get(n.split("_", 1)[1], n.split("_", 1)[1]) for n in plan.decls}


def _check_dropped(plan: Plan, suffix: str, names: list[str]) -> None:
    value, why = DROPPED_IF[suffix]
    for name in names:
        t = plan.folder.read(name)
        if (t.to(torch.int64) != value).any():
            raise CheckpointError(f"{plan.folder.file_of(name).name}: {name}",
                                  f"{value} ({why}; moecert holds no other)", "another value")
    plan.consumed.update(names)
    plan.notes.append(f"{suffix}: checked to be {value} in every expert ({why}), not kept")


# --- building one Checkpoint tensor from its pieces ------------------------------------------

def _kind(decl: TensorDecl, bits: int) -> tuple[str, int | None, int]:
    """("out", axis after E, divisor) | ("scalar", None, 1) | ("shape", ..) | ("shared", ..)."""
    if decl.role == "shape":
        return "shape", None, 1
    shape = decl.shapes[0]
    if all(d in ("E", "2") for d in shape):
        return "scalar", None, 1
    for i, d in enumerate(shape[1:]):
        if d.replace("ceil(", "").startswith("out"):
            return "out", i, parse_dim(d, decl.linear, 1, bits)[1]
    return "shared", None, 1


def _piece_shape(plan: Plan, decl: TensorDecl, rows: int) -> list[int]:
    """A per-expert piece's shape with `rows` output rows (N for a w13 shard)."""
    sizes = {**plan.sizes, "R": rows}
    return [dim_size(d, decl.linear, sizes, plan.group_size, plan.bits) for d in decl.shapes[0][1:]]


def _build(plan: Plan, target: str, pieces) -> torch.Tensor | None:
    decl = plan.decls[target]
    kind, axis, div = _kind(decl, plan.bits)
    fused = [p for p in pieces if p[2] is not None]
    if fused:
        return _from_fused(plan, target, decl, fused)
    _check_same_dtype(plan, pieces)
    linear = decl.linear
    shards = sorted(pieces, key=lambda p: -1 if p[0] is None else p[0])
    if linear == "w13" and [s for s, _, _ in shards] != [0, 1]:
        have = ", ".join("whole" if s is None else ("gate", "up")[s] for s, _, _ in shards)
        raise CheckpointError(f"{plan.names.prefix}.<e>.*: {target}", "gate and up "
                              "projections", have)
    N = plan.sizes["N"]
    rows = N if linear == "w13" else plan.sizes["K"]
    return _stack(plan, target, decl, kind, axis, div, rows, shards)


def _check_same_dtype(plan: Plan, pieces) -> None:
    """Every expert's (and shard's) piece of one tensor has one dtype, read from the headers
    before any data: the message names the piece that differs from the most common dtype
    (not whichever was read first)."""
    dtypes: dict[str, list[tuple[int, str]]] = {}
    for _, ids, _ in pieces:
        for e in plan.experts:
            dtypes.setdefault(plan.folder.dtype(ids[e]), []).append((e, ids[e]))
    if len(dtypes) < 2:
        return
    usual = max(dtypes, key=lambda d: len(dtypes[d]))
    odd, (e, name) = next((d, v[0]) for d, v in dtypes.items() if d != usual)
    raise CheckpointError(f"{plan.folder.file_of(name).name}: {name}", f"dtype {usual} like "
                          f"the other {len(dtypes[usual])} pieces of layer {plan.names.layer}'s "
                          f"experts (expert {e}, layer {plan.names.layer})", odd)


def _check_values(plan: Plan, name: str, role: str, t: torch.Tensor, first_expert=None) -> None:
    """No value the format record rejects for `role` (NaN scales, E8M0 0xFF, fp8 NaN codes,
    non-positive scales): the message names the file, the tensor, the expert and the layer.
    `first_expert`: the expert of t's row 0 when t holds several (a fused tensor).

    The scans are numpy's (the arrays' own methods) on the storage bits: torch's uint8
    compare ran about 10x slower on the 2-core CPU (docs/checkpoints.md, "Errors"); the
    element is located only on a hit."""
    rules = [r for r in plan.rejected if r.role == role]
    if not rules:
        return
    finite = None
    for r in rules:
        if r.bits is not None:
            if t.element_size() != 1:
                continue
            codes = t.contiguous().view(torch.uint8).numpy()
            if not (codes == r.bits).any():  # ndarray ops: no numpy import here
                continue
            hit = torch.from_numpy(codes == r.bits)
        elif not t.is_floating_point():
            continue
        elif r.value != r.value or abs(r.value) == float("inf"):  # NaN, infinity
            finite = _all_finite(t) if finite is None else finite
            if finite:
                continue
            hit = torch.isnan(t) if r.value != r.value else torch.isinf(t)
        elif r.value == 0:
            hit = t == 0
        else:  # a negative number stands for every negative value
            hit = t < 0
        if not bool(hit.any()):
            continue
        at = [int(i) for i in hit.nonzero()[0]]
        m = PER_EXPERT.match(name)
        expert = f"expert {first_expert + at[0]}, " if first_expert is not None else \
            f"expert {m['e']}, " if m else ""
        what = r.what.removeprefix("a ").removeprefix("an ")
        raise CheckpointError(f"{plan.folder.file_of(name).name}: {name}", f"no {what} "
                              f"(the {plan.scheme} format rejects it)", f"{r.what} at "
                              f"{expert}layer {plan.names.layer}, element {at}")


# exponent field of the 16-bit floats: all ones is an infinity or a NaN
_EXPONENT_BITS = {torch.bfloat16: 0x7F80, torch.float16: 0x7C00}


def _all_finite(t: torch.Tensor) -> bool:
    exp = _EXPONENT_BITS.get(t.dtype)
    if exp is None:
        return bool(torch.isfinite(t).all())
    bits = t.contiguous().view(torch.int16).numpy()
    return not ((bits & exp) == exp).any()


def _read_piece(plan: Plan, name: str, decl: TensorDecl, want: list[int] | None, into=None):
    t = plan.folder.read(name, into=into)
    plan.consumed.add(name)
    where = f"{plan.folder.file_of(name).name}: {name}"
    if t.dtype not in decl.dtypes:
        raise CheckpointError(where, f"dtype {' or '.join(map(str, decl.dtypes))} "
                              f"({plan.config_note})", str(t.dtype))
    _check_values(plan, name, decl.role, t)
    if want is not None and list(t.shape) != want:
        if t.numel() != math.prod(want):
            raise CheckpointError(where, f"shape {want} ({plan.config_note})",
                                  str(list(t.shape)))
        # 0-d and [1] scalars, [out] channel scales -> [out, 1]. Never on a piece read into
        # its slot (`into`, already of shape `want`): reshape makes a second view of the
        # slot's memory whose size-1 dimension gets another stride, and copying one into the
        # other is what torch refuses as a partial overlap (issue 30, docs/checkpoints.md)
        t = t.reshape(want)
    return t


def _stack(plan, target, decl, kind, axis, div, rows, shards) -> torch.Tensor:
    E, experts = len(plan.experts), plan.experts
    if kind == "scalar":
        vals = [[_read_piece(plan, ids[e], decl, [1]) for e in experts] for _, ids, _ in shards]
        t = torch.stack([torch.cat(v) for v in vals], dim=1)  # [E, shards]
        if t.shape[1] == 2 and ("E", "2") not in decl.shapes:
            if not torch.equal(t[:, 0], t[:, 1]):
                plan.notes.append(f"{target}: gate and up hold different values; the larger "
                                  "of the two kept (one per expert, as engines load it)")
            return t.amax(dim=1)
        return t if t.shape[1] == 2 else t[:, 0]
    if kind == "shape":
        vals = [[_read_piece(plan, ids[e], decl, [2]) for e in experts] for _, ids, _ in shards]
        t = torch.stack([torch.stack(v) for v in vals])  # [shards, E, 2]
        return torch.stack([t[:, :, 0].sum(0), t[0, :, 1]], dim=1)
    if kind == "shared":
        want = _piece_shape(plan, decl, rows)
        vals = [torch.stack([_read_piece(plan, ids[e], decl, want) for e in experts])
                for _, ids, _ in shards]
        for v, (_s, ids, _) in zip(vals[1:], shards[1:], strict=True):
            if not torch.equal(v, vals[0]):
                e = int((v != vals[0]).flatten(1).any(1).nonzero()[0])
                name = ids[experts[e]]
                raise CheckpointError(f"{plan.folder.file_of(name).name}: {name}", f"the same "
                                      f"{decl.role} as the gate projection (vLLM keeps one per "
                                      f"expert; expert {experts[e]}, layer {plan.names.layer})",
                                      "another")
        return vals[0]
    # "out": gate rows then up rows along `axis`
    want = _piece_shape(plan, decl, rows)
    if len(shards) == 2 and div > 1 and rows % div:
        return _stack_packed_out(plan, target, decl, axis, rows, shards, want)
    full = list(want)
    full[axis] *= len(shards)
    out = None
    for i, e in enumerate(experts):
        for j, (_, ids, _) in enumerate(shards):
            slot = None if out is None else out[i].narrow(axis, j * want[axis], want[axis])
            t = _read_piece(plan, ids[e], decl, want, into=slot)
            if out is None:
                out = torch.empty([E, *full], dtype=t.dtype)
                slot = out[i].narrow(axis, j * want[axis], want[axis])
            elif t.dtype != out.dtype:
                raise CheckpointError(f"{plan.folder.file_of(ids[e]).name}: {ids[e]}",
                                      f"dtype {out.dtype} like the other experts' (expert {e}, "
                                      f"layer {plan.names.layer})", str(t.dtype))
            if t is not slot:  # read elsewhere (a strided slot, a reshaped piece): copy it in
                slot.copy_(t)
    return out


def _stack_packed_out(plan, target, decl, axis, rows, shards, want) -> torch.Tensor:
    """Gate and up pieces packed along out with a row count the word does not divide (a
    compressed-tensors zero point of N % 8 rows): unpack both, join the rows, repack."""
    if decl.dtypes != (torch.int32,) or plan.packing is None:
        raise CheckpointError(f"{plan.names.prefix}.<e>: {target}", f"an output size divisible "
                              f"by the blocks it is stored in ({plan.config_note})",
                              f"{rows} rows")
    out = []
    for e in plan.experts:
        codes = [unpack_int32(_read_piece(plan, ids[e], decl, want), plan.bits, rows, dim=axis,
                              packing=plan.packing) for _, ids, _ in shards]
        out.append(pack_int32(torch.cat(codes, dim=axis), plan.bits, dim=axis,
                              packing=plan.packing))
    return torch.stack(out)


def _from_fused(plan: Plan, target: str, decl: TensorDecl, pieces) -> torch.Tensor:
    """A fused 3-D (or gpt-oss 4-D) tensor, experts first: the slice of the chosen experts,
    reshaped to the declaration (gpt-oss blocks [E, out, in/32, 16] -> [E, out, in/2]);
    16-bit fused weights stored inputs first ([E, in, out], gpt-oss bf16) are transposed."""
    if len(pieces) != 1 or pieces[0][0] is not None:
        raise CheckpointError(f"{plan.names.prefix}: {target}", "one fused tensor", "several")
    name = pieces[0][2]
    rows = plan.sizes["R"] if decl.linear == "w13" else plan.sizes["K"]
    want = [len(plan.experts), *_piece_shape(plan, decl, rows)]
    first, stop = plan.experts.start, plan.experts.stop
    shape = plan.folder.shape(name)
    where = f"{plan.folder.file_of(name).name}: {name}"
    t = plan.folder.read(name, slice(first, stop))
    plan.consumed.add(name)
    if t.dtype not in decl.dtypes:
        raise CheckpointError(where, f"dtype {' or '.join(map(str, decl.dtypes))} "
                              f"({plan.config_note})", str(t.dtype))
    _check_values(plan, name, decl.role, t, first_expert=first)
    inputs_first = t.dim() == 3 == len(want) and list(t.shape) == [want[0], want[2], want[1]] \
        and decl.role in ("weight",) and t.is_floating_point()
    # a square weight ([E, K, K] down_proj where K == N) has both shapes: the family decides
    if inputs_first and plan.fused_inputs_first:
        return t.transpose(1, 2).contiguous()
    if list(t.shape) == want:
        return t
    if inputs_first:
        return t.transpose(1, 2).contiguous()
    if t.numel() == math.prod(want) and t.shape[:2] == tuple(want[:2]):
        return t.reshape(want)
    raise CheckpointError(where, f"shape {[shape[0], *want[1:]]} ({plan.config_note})",
                          str(list(shape)))

