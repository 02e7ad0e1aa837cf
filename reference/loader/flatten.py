"""Each producer's quantization config flattened into the fields `producers.RULES` match:
"weights.<key>" and "input.<key>" for the weight and input specs (compressed-tensors' config
group, Quark's global spec), the top-level keys as written, and derived fields (`DERIVED`:
the activation mode, group size, packing version, ...) computed from them. Each raw field
keeps its key path in the file, for messages."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import CheckpointError
from ..schemes import (
    ACT_DYNAMIC_GROUP,
    ACT_DYNAMIC_TENSOR,
    ACT_DYNAMIC_TOKEN,
    ACT_STATIC_TENSOR,
    FP8_BLOCK,
    STRATEGY_BLOCK,
    STRATEGY_CHANNEL,
    STRATEGY_GROUP,
    STRATEGY_TENSOR,
)
from .config_keys import DERIVED

ABSENT = None  # a field missing (or null) in the config

# compressed-tensors (llm-compressor): config_groups.<g>.{weights, input_activations}, format.
# (input type, bits, strategy, dynamic, group size) -> activation mode
_CT_ACT = {
    ("int", 8, "token", True, None): ACT_DYNAMIC_TOKEN,
    ("int", 8, "tensor", False, None): ACT_STATIC_TENSOR,
    ("int", 8, "tensor", True, None): ACT_DYNAMIC_TENSOR,
    ("float", 8, "token", True, None): ACT_DYNAMIC_TOKEN,
    ("float", 8, "tensor", False, None): ACT_STATIC_TENSOR,
    ("float", 8, "group", True, FP8_BLOCK): ACT_DYNAMIC_GROUP,
}
_CT_STRATEGY = {"tensor": STRATEGY_TENSOR, "channel": STRATEGY_CHANNEL, "group": STRATEGY_GROUP,
                "tensor_group": STRATEGY_GROUP}


@dataclass
class Fields:
    """A flattened config: rule fields (raw and derived), and each raw field's path in the
    config as written (for messages) and value."""

    values: dict = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)  # raw field -> key path in the file
    raws: dict = field(default_factory=dict)  # raw field -> its value as written

    def raw(self, name: str, path: str, value) -> None:
        self.values[name] = self.raws[name] = value
        self.paths[name] = path

    def drop(self, name: str) -> None:
        for d in (self.values, self.paths, self.raws):
            d.pop(name, None)

    def path(self, name: str) -> str:
        """The key path in the file of a raw or derived field (derived: its first source
        present)."""
        if name in self.paths:
            return self.paths[name]
        for src in DERIVED.get(name, ()):
            if src in self.paths:
                return self.paths[src]
        return name


def flatten(qc: dict, source: str) -> Fields:
    method = qc.get("quant_method")
    f = Fields()
    for k, v in qc.items():
        f.raw(k, k, v)
    if method == "compressed-tensors":
        _flatten_ct(qc, source, f)
    elif method == "quark":
        _flatten_quark(qc, source, f)
    elif method in ("gptq", "awq"):
        _flatten_gptq(qc, source, f)
    elif method == "auto-round":
        _flatten_autoround(qc, source, f)
    return f


# AutoRound's default export (`quant_method: "auto-round"`): `packing_format` names the
# layout it packed the integer weights in -> the GPTQ checkpoint format it is (auto_gptq
# packing is GPTQ v1: zero - 1 stored, symmetric qzeros 0x77777777; no g_idx)
AUTOROUND_PACKING = {"auto_round:auto_gptq": "gptq"}


def _flatten_autoround(qc: dict, source: str, f: Fields) -> None:
    packing = qc.get("packing_format")
    if packing not in AUTOROUND_PACKING:
        raise CheckpointError(f"{source}.packing_format", " or ".join(
            map(repr, AUTOROUND_PACKING)) + " (the AutoRound packings moecert reads)",
            repr(packing))
    v = f.values
    v["gptq_format"] = AUTOROUND_PACKING[packing]
    v["act_order"] = False  # no g_idx: groups follow k // g
    v["sym"] = qc.get("sym", True)
    v["group_size"] = qc.get("group_size", -1)


def _flatten_gptq(qc: dict, source: str, f: Fields) -> None:
    method = qc["quant_method"]
    v = f.values
    if method == "gptq":
        formats = {k: qc[k] for k in ("checkpoint_format", "format") if qc.get(k) is not None}
        for k, fmt in formats.items():
            if fmt not in ("gptq", "gptq_v2"):
                raise CheckpointError(f"{source}.{k}", "gptq or gptq_v2 (moecert reads these "
                                      "two GPTQ layouts)", repr(fmt))
        if len(set(formats.values())) > 1:
            raise CheckpointError(f"{source}.format", f"the checkpoint_format "
                                  f"{formats['checkpoint_format']!r}", repr(formats["format"]))
        v["gptq_format"] = next(iter(formats.values()), "gptq")
        v["act_order"] = bool(qc.get("desc_act", False))  # else g_idx, if written, is k // g
    else:
        versions = {k: str(qc[k]).lower() for k in ("version", "format", "checkpoint_format")
                    if qc.get(k) is not None}
        v["awq_version"] = next(iter(versions.values()), "gemm")
        first = next(iter(versions), None)
        for k, ver in versions.items():
            if ver != v["awq_version"]:
                raise CheckpointError(f"{source}.{k}", f"{v['awq_version']!r} like "
                                      f"{source}.{first}", repr(qc[k]))
        v["awq_sym"] = not qc.get("zero_point", True)
        v["act_order"] = bool(qc.get("desc_act", False))
    v["sym"] = qc.get("sym", True)
    v["group_size"] = qc.get("group_size", -1)
    meta = qc.get("meta") or {}
    if not isinstance(meta, dict):
        raise CheckpointError(f"{source}.meta", "a JSON object", type(meta).__name__)
    f.drop("meta")
    for k, val in meta.items():
        f.raw(f"meta.{k}", f"meta.{k}", val)
    quantizer = " ".join(meta.get("quantizer") or [])
    # AutoRound's auto_gptq / auto_awq exports name it in `provider`
    v["tool"] = "auto-round" if qc.get("provider") == "auto-round" else \
        "gptqmodel" if "gptqmodel" in quantizer else \
        "autogptq" if method == "gptq" else "autoawq"


def _flatten_ct(qc: dict, source: str, f: Fields) -> None:
    """The one config group that targets the experts' Linear layers."""
    groups = qc.get("config_groups") or {}
    linear = [(n, g) for n, g in groups.items() if "Linear" in (g.get("targets") or [])] or \
        list(groups.items())
    if len(linear) != 1:
        raise CheckpointError(f"{source}.config_groups", "one config group targeting Linear",
                              f"{len(linear)} groups")
    name, g = linear[0]
    base = f"config_groups.{name}"
    w, a = g.get("weights") or {}, g.get("input_activations")
    for part, val in (("weights", w), ("input_activations", a)):
        if val is not None and not isinstance(val, dict):
            raise CheckpointError(f"{source}.{base}.{part}", "a JSON object (or null)",
                                  repr(val))
    for k, val in g.items():
        if k not in ("weights", "format"):
            f.raw(k, f"{base}.{k}", val)
    top = qc.get("format")
    fmt = g.get("format") or top
    if g.get("format") and top not in (None, g["format"], "mixed-precision"):
        raise CheckpointError(f"{source}.format", f"the format of {source}.{base}.format "
                              f"({g['format']!r}) or 'mixed-precision'", repr(top))
    f.raw("format", f"{base}.format" if g.get("format") else "format", fmt)
    for k, val in w.items():
        f.raw(f"weights.{k}", f"{base}.weights.{k}", val)
    v = f.values
    strategy = w.get("strategy")
    v["weights.strategy"] = _CT_STRATEGY.get(strategy, strategy)
    if strategy == "block":  # DeepSeek-style 128 x 128 weight blocks only
        if w.get("block_structure") != [FP8_BLOCK, FP8_BLOCK]:
            raise CheckpointError(f"{source}.{base}.weights.block_structure",
                                  f"[{FP8_BLOCK}, {FP8_BLOCK}] (the block shape moecert "
                                  "reads)", repr(w.get("block_structure")))
        v["weights.strategy"] = STRATEGY_BLOCK
    elif w.get("block_structure") is not None:
        raise CheckpointError(f"{source}.{base}.weights.block_structure", "null (blocks "
                              f"belong to the block strategy; {base}.weights.strategy is "
                              f"{strategy!r})", repr(w["block_structure"]))
    v["group_size"] = w.get("group_size") if strategy in ("group", "tensor_group") else -1
    version = str(qc.get("version") or "0.18")
    v["ct_version"] = "ct-0.17" if _version(version) < (0, 18) else "ct-0.18"
    # "group" (alias "dynamic") stores weight_g_idx; "weight" (alias "static") reorders the
    # columns at quantization time and stores none
    v["act_order"] = w.get("actorder") in ("group", "dynamic")
    if a:
        f.raw("input_activations", f"{base}.input_activations", a)
        for k, val in a.items():
            f.raw(f"input.{k}", f"{base}.input_activations.{k}", val)
        v["input"] = True
        v["activation"] = _CT_ACT.get((a.get("type"), a.get("num_bits"), a.get("strategy"),
                                       a.get("dynamic"), a.get("group_size")), ABSENT)


def _flatten_quark(qc: dict, source: str, f: Fields) -> None:
    g = qc.get("global_quant_config") or {}
    w, a = g.get("weight") or {}, g.get("input_tensors")
    if isinstance(w, list):
        w = w[0] if w else {}
    base = "global_quant_config"
    for part, val in (("weight", w), ("input_tensors", a)):
        if val is not None and not isinstance(val, dict):
            raise CheckpointError(f"{source}.{base}.{part}", "a JSON object (or null)",
                                  repr(val))
    for k, val in g.items():
        f.raw(k, f"{base}.{k}", val)
    for k, val in (qc.get("export") or {}).items():
        f.raw(f"export.{k}", f"export.{k}", val)
    f.drop("export")
    for k, val in w.items():
        f.raw(f"weights.{k}", f"{base}.weight.{k}", val)
    v = f.values
    # (qscheme, ch_axis) -> strategy; per_group stays raw (the MX rules match it)
    qscheme = {("per_tensor", None): STRATEGY_TENSOR, ("per_channel", 0): STRATEGY_CHANNEL,
               ("per_group", -1): "per_group", ("per_group", 1): "per_group"}
    v["weights.qscheme"] = qscheme.get((w.get("qscheme"), w.get("ch_axis")), ABSENT)
    if a:
        for k, val in a.items():
            f.raw(f"input.{k}", f"{base}.input_tensors.{k}", val)
        v["input"] = True
        mode = {("per_tensor", False, None): ACT_STATIC_TENSOR,
                ("per_tensor", True, None): ACT_DYNAMIC_TENSOR,
                ("per_token", True, 1): ACT_DYNAMIC_TOKEN, ("per_token", True, None):
                ACT_DYNAMIC_TOKEN, ("per_channel", True, 1): ACT_DYNAMIC_TOKEN}
        v["activation"] = mode.get((a.get("qscheme"), a.get("is_dynamic"), a.get("ch_axis")),
                                   ABSENT)


def _version(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits or 0))
    return tuple(out)
