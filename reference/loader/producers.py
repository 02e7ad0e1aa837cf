"""Which producer wrote a model folder, and which moecert scheme and variant its experts are.

The facts are data: `PRODUCERS` (a producer's `quant_method` and how its config reads),
`RULES` (config fields -> scheme and checkpoint attributes, first match wins),
`config_keys.CONFIG_KEYS` (every key each producer writes: read, checked to hold the one
value moecert reads, or not read and why) and `FILE_SUFFIXES` (a producer's tensor suffix
-> the moecert suffix of SPEC section 2). `detect` only flattens a config into fields
(`flatten.py`), checks each key against `CONFIG_KEYS` and walks the rules. A config no rule
reads is refused naming the key that differs from the nearest rule; a file is never read as
another scheme.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import CheckpointError
from ..schemes import (
    ACT_DYNAMIC_GROUP,
    ACT_MXFP4,
    ACT_MXFP8,
    ACT_NONE,
    ACT_NVFP4,
    ACT_STATIC_TENSOR,
    FP8_BLOCK,
    MX_BLOCK,
    NVFP4_BLOCK,
    STRATEGY_BLOCK,
    STRATEGY_CHANNEL,
    STRATEGY_GROUP,
    STRATEGY_TENSOR,
)
from .config_keys import CONFIG_KEYS, DERIVED, STRUCTURE, UNUSED, Key, key_of
from .flatten import Fields, flatten

ANY = object()  # a rule field that matches any value, present or not
PRESENT = object()  # a rule field that must be present (and not null)
ABSENT = None  # a rule field that must be missing (or null) in the config (flatten's too)


@dataclass(frozen=True)
class OneOf:
    """A rule field that matches any of `values` (ABSENT among them: may be missing)."""

    values: tuple

    def __repr__(self) -> str:
        return " or ".join(map(repr, self.values))


@dataclass(frozen=True)
class Rule:
    """Config fields (flattened, see `flatten.py`) -> a scheme and checkpoint attributes.

    `attrs` values (and `producer`) that are a field name in angle brackets
    ("<weights.group_size>") are read from the config; `unsupported` names a scheme moecert
    recognises but cannot hold yet, and `key` the field whose value makes it so."""

    producer: str
    match: tuple[tuple[str, object], ...]
    scheme: str
    attrs: tuple[tuple[str, object], ...] = ()
    unsupported: str = ""
    key: str = ""

    @property
    def method(self) -> str:
        return dict(self.match)["quant_method"]

    def reads(self) -> set[str]:
        """The fields this rule reads: those it matches and those its attributes come from."""
        refs = {v[1:-1] for _, v in self.attrs if isinstance(v, str) and v.startswith("<")}
        if self.producer.startswith("<"):
            refs.add(self.producer[1:-1])
        return {k for k, _ in self.match} | refs


def _r(producer, scheme, match, attrs=None, unsupported="", key=""):
    return Rule(producer, tuple(match.items()), scheme, tuple((attrs or {}).items()),
                unsupported, key)


# act order (g_idx) is read for the pack-quantized integer formats only
_CT = {"quant_method": "compressed-tensors", "act_order": False}
_W4A16 = {"quant_method": "compressed-tensors", "format": "pack-quantized",
          "weights.type": "int", "weights.strategy": OneOf((STRATEGY_GROUP, STRATEGY_CHANNEL)),
          "input": ABSENT}
_INT = {**_CT, "format": "int-quantized", "weights.type": "int", "weights.num_bits": 8,
        "weights.group_size": ABSENT}
_FLOAT = {**_CT, "format": "float-quantized", "weights.type": "float", "weights.num_bits": 8,
          "weights.group_size": ABSENT}
# the weights of compressed-tensors' float-block presets: symmetric float groups of `block`
_CT_FP_BLOCKS = {"weights.type": "float", "weights.strategy": STRATEGY_GROUP,
                 "weights.symmetric": True}
_CT_NVFP4 = {**_CT, "format": "nvfp4-pack-quantized", **_CT_FP_BLOCKS, "weights.num_bits": 4,
             "weights.group_size": NVFP4_BLOCK}
_CT_MXFP4 = {**_CT, "format": "mxfp4-pack-quantized", **_CT_FP_BLOCKS, "weights.num_bits": 4,
             "weights.group_size": MX_BLOCK}
_CT_MXFP8 = {**_CT, "format": "mxfp8-quantized", **_CT_FP_BLOCKS, "weights.num_bits": 8,
             "weights.group_size": MX_BLOCK}
# activations: NVFP4 (static global scale, e4m3 block scales per 16), MXFP8 (E8M0 per 32)
_CT_IN_NVFP4 = {"input.type": "float", "input.num_bits": 4, "input.strategy": "tensor_group",
                "input.group_size": NVFP4_BLOCK, "input.dynamic": "local"}
_CT_IN_MX = {"input.type": "float", "input.strategy": "group", "input.group_size": MX_BLOCK,
             "input.dynamic": True}

# Quark's OCP MX weight spec (its OCP_MXSpec defaults): per_group 32 along in, E8M0 scales
_STATIC_WEIGHTS = OneOf((False, ABSENT))
_QUARK = {"quant_method": "quark", "weights.group_size": ABSENT, "weights.scale_format": ABSENT,
          "weights.is_dynamic": _STATIC_WEIGHTS, "input.group_size": ABSENT,
          "input.scale_format": ABSENT}
_QUARK_MX = {"quant_method": "quark", "weights.qscheme": "per_group",
             "weights.group_size": MX_BLOCK, "weights.scale_format": "e8m0",
             "weights.is_dynamic": _STATIC_WEIGHTS}

# Quark's OCP MX input spec, dynamic (the engine quantizes each call: no input scales stored)
_QUARK_IN_MX = {"input.qscheme": "per_group", "input.ch_axis": OneOf((-1, 1)),
                "input.group_size": MX_BLOCK, "input.scale_format": "e8m0",
                "input.is_dynamic": True}

RULES: tuple[Rule, ...] = (
    _r("llm-compressor", "ct-int4", {**_W4A16, "weights.num_bits": 4},
       {"group_size": "<group_size>", "sym": "<weights.symmetric>",
        "checkpoint_format": "<ct_version>", "act_order": "<act_order>"}),
    _r("llm-compressor", "ct-int8", {**_W4A16, "weights.num_bits": 8},
       {"group_size": "<group_size>", "sym": "<weights.symmetric>",
        "checkpoint_format": "<ct_version>", "act_order": "<act_order>"}),
    # W4AFP8: int4 codes unpacked in int8 (int-quantized), symmetric, fp8 per-token inputs;
    # groups along K or one group (channel), as for W4A16 (issue 30 item 1)
    _r("llm-compressor", "w4a8-fp8", {**_CT, "format": "int-quantized", "weights.type": "int",
                                      "weights.num_bits": 4, "weights.symmetric": True,
                                      "weights.strategy": OneOf((STRATEGY_GROUP,
                                                                 STRATEGY_CHANNEL)),
                                      "input.type": "float"},
       {"group_size": "<group_size>", "activation": "<activation>"}),
    _r("llm-compressor", "int8-w8a8", {**_INT, "weights.symmetric": True, "input.type": "int"},
       {"weight_strategy": "<weights.strategy>", "activation": "<activation>"}),
    _r("llm-compressor", "int8-w8a16", {**_INT, "weights.symmetric": True, "input": ABSENT},
       {"weight_strategy": "<weights.strategy>"}),
    _r("llm-compressor", "fp8-w8a8", {**_FLOAT, "weights.symmetric": True,
                                      "input.type": "float"},
       {"weight_strategy": "<weights.strategy>", "activation": "<activation>"}),
    _r("llm-compressor", "fp8-w8a16", {**_FLOAT, "weights.symmetric": True, "input": ABSENT},
       {"weight_strategy": "<weights.strategy>"}),
    _r("llm-compressor", "nvfp4", {**_CT_NVFP4, "input": ABSENT},
       {"checkpoint_format": "ct", "activation": ACT_NONE}),
    _r("llm-compressor", "nvfp4", {**_CT_NVFP4, **_CT_IN_NVFP4},
       {"checkpoint_format": "ct", "activation": ACT_NVFP4}),
    _r("llm-compressor", "mxfp4", {**_CT_MXFP4, "input": ABSENT}, {"activation": ACT_NONE}),
    _r("llm-compressor", "mxfp4", {**_CT_MXFP4, **_CT_IN_MX, "input.num_bits": 8},
       {"activation": ACT_MXFP8}),
    # llm-compressor's MXFP4 preset (compressed-tensors 0.19 `MXFP4`) is W4A4: MXFP4
    # activations, E8M0 per 32, dynamic (the engine quantizes them; the rule is the variant's
    # mx_scale_rule, OCP's floor, docs/checkpoints.md)
    _r("llm-compressor", "mxfp4", {**_CT_MXFP4, **_CT_IN_MX, "input.num_bits": 4},
       {"activation": ACT_MXFP4}),
    _r("llm-compressor", "mxfp8", {**_CT_MXFP8, "input": ABSENT}, {"activation": ACT_NONE}),
    _r("llm-compressor", "mxfp8", {**_CT_MXFP8, **_CT_IN_MX, "input.num_bits": 8},
       {"activation": ACT_MXFP8}),
    # GPTQModel / AutoGPTQ: bits, group_size, desc_act, sym, checkpoint_format
    _r("<tool>", "gptq-int4", {"quant_method": "gptq", "bits": 4},
       {"group_size": "<group_size>", "sym": "<sym>", "checkpoint_format": "<gptq_format>",
        "act_order": "<act_order>"}),
    _r("<tool>", "gptq-int8", {"quant_method": "gptq", "bits": 8},
       {"group_size": "<group_size>", "sym": "<sym>", "checkpoint_format": "<gptq_format>",
        "act_order": "<act_order>"}),
    # AutoRound's default export: GPTQ-style packing (`packing_format`), no g_idx; signed
    # scales, which the GPTQ format records allow (`scale_sign`)
    *(_r("auto-round", f"gptq-int{b}", {"quant_method": "auto-round", "bits": b},
         {"group_size": "<group_size>", "sym": "<sym>", "checkpoint_format": "<gptq_format>",
          "act_order": "<act_order>"}) for b in (4, 8)),
    # AutoAWQ / GPTQModel's awq: GEMM layout only, no act order
    _r("<tool>", "awq-int4", {"quant_method": "awq", "bits": 4, "awq_version": "gemm",
                              "act_order": False},
       {"group_size": "<group_size>", "sym": "<awq_sym>", "checkpoint_format": "awq"}),
    # NVIDIA ModelOpt: quant_algo in hf_quant_config.json (or config.json)
    _r("modelopt", "fp8-w8a8", {"quant_method": "modelopt", "quant_algo": "FP8",
                                "group_size": ABSENT},
       {"weight_strategy": STRATEGY_TENSOR, "activation": ACT_STATIC_TENSOR}),
    _r("modelopt", "nvfp4", {"quant_method": "modelopt", "quant_algo": "NVFP4",
                             "group_size": OneOf((NVFP4_BLOCK, ABSENT))},
       {"checkpoint_format": "modelopt", "activation": ACT_NVFP4}),
    _r("modelopt", "mxfp8", {"quant_method": "modelopt", "quant_algo": "MXFP8",
                             "group_size": OneOf((MX_BLOCK, ABSENT))},
       {"activation": ACT_MXFP8}),
    # ModelOpt INT4 AWQ (W4A16_AWQ): int4 weights, two signed nibbles a byte along out, fp32
    # group scales, and the AWQ pre_quant_scale per input channel the layer multiplies its
    # input by (the layout's tensors; the reference and the backends apply it)
    _r("modelopt", "modelopt-int4-awq", {"quant_method": "modelopt", "quant_algo": "W4A16_AWQ",
                                         "group_size": PRESENT},
       {"group_size": "<group_size>", "sym": True, "activation": ACT_NONE}),
    # W4A8_AWQ quantizes x * pre_quant_scale to fp8 on top (a static per-tensor input scale):
    # not held yet, and ModelOpt 0.47's export of it fails here (docs/checkpoints.md)
    _r("modelopt", "modelopt-int4-awq", {"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"},
       unsupported="ModelOpt INT4 AWQ with fp8 activations (W4A8_AWQ: x * pre_quant_scale "
                   "quantized to e4m3 with a static input scale); moecert holds its 16-bit "
                   "activation form (W4A16_AWQ) only", key="quant_algo"),
    # AMD Quark: global_quant_config.{weight, input_tensors}
    _r("quark", "int8-w8a8", {**_QUARK, "weights.dtype": "int8", "input.dtype": "int8"},
       {"weight_strategy": "<weights.qscheme>", "activation": "<activation>"}),
    _r("quark", "int8-w8a16", {**_QUARK, "weights.dtype": "int8", "input": ABSENT},
       {"weight_strategy": "<weights.qscheme>"}),
    _r("quark", "fp8-w8a8", {**_QUARK, "weights.dtype": "fp8_e4m3",
                             "input.dtype": "fp8_e4m3"},
       {"weight_strategy": "<weights.qscheme>", "activation": "<activation>"}),
    # Quark OCP MX fp6 (OCP_MXFP6E2M3Spec / OCP_MXFP6E3M2Spec): blocks of 32 along in, E8M0
    # scales; weight-only holds; vLLM's W6A6 (fp6 inputs of the same spec) does not yet
    *(_r("quark", f"mxfp6-{el}", {**_QUARK_MX, "weights.dtype": f"fp6_{el}", "input": ABSENT},
         {"activation": ACT_NONE}) for el in ("e2m3", "e3m2")),
    *(_r("quark", f"mxfp6-{el}", {**_QUARK_MX, "weights.dtype": f"fp6_{el}", "input": PRESENT},
         unsupported="MXFP6 weights with quantized activations (vLLM's W6A6: MXFP6 "
                     "activations of the same element)", key="input")
      for el in ("e2m3", "e3m2")),
    # Quark OCP MXFP4 W4A4 (OCP_MXFP4Spec on weights and inputs, what AMD's MI355 MoE
    # releases ship): fp4 weights per 32 along in with E8M0 scales, inputs the same spec,
    # dynamic, their MX scale rule the input spec's scale_calculation_mode ("even" as Quark
    # writes it; vLLM's OCP MX emulation quantizes with Quark's qdq_mxfp4, "even" too)
    _r("quark", "mxfp4", {**_QUARK_MX, "weights.dtype": "fp4", **_QUARK_IN_MX,
                          "input.dtype": "fp4"},
       {"activation": ACT_MXFP4, "mx_scale_rule": "<input.scale_calculation_mode>"}),
    # Quark int4 per group (int4_wo_32 / _64 / _128): signed int4, symmetric, no inputs
    _r("quark", "quark-int4", {"quant_method": "quark", "weights.dtype": "int4",
                               "weights.qscheme": "per_group", "weights.scale_format": ABSENT,
                               "weights.is_dynamic": _STATIC_WEIGHTS, "input": ABSENT},
       {"group_size": "<weights.group_size>", "sym": True}),
    # gpt-oss release: MXFP4 experts, 16-bit activations
    _r("gpt-oss", "mxfp4", {"quant_method": "mxfp4"}, {"activation": ACT_NONE}),
    # DeepSeek-V3 / Qwen3 FP8 releases: 128x128 blocks, dynamic 1x128 activation groups
    _r("fp8-release", "fp8-w8a8", {"quant_method": "fp8",
                                   "weight_block_size": [FP8_BLOCK, FP8_BLOCK],
                                   "activation_scheme": "dynamic"},
       {"weight_strategy": STRATEGY_BLOCK, "activation": ACT_DYNAMIC_GROUP}),
)

# Producer -> the quant_method values it writes.
PRODUCERS: dict[str, tuple[str, ...]] = {
    "llm-compressor": ("compressed-tensors",), "gptqmodel": ("gptq", "awq"),
    "auto-round": ("auto-round", "gptq", "awq"),
    "autogptq": ("gptq",), "autoawq": ("awq",), "modelopt": ("modelopt",), "quark": ("quark",),
    "gpt-oss": ("mxfp4",), "fp8-release": ("fp8",), "unquantized": (),
}
# (producer, scheme or None for all its schemes) -> {suffix in its files: moecert suffix} where
# the two differ; every other suffix keeps its name (vLLM's loader keeps the file's suffix too).
# A fused tensor without a suffix (gate_up_proj) is suffix "weight".
FILE_SUFFIXES: dict[tuple[str, str | None], dict[str, str]] = {
    ("gpt-oss", None): {"blocks": "weight", "scales": "weight_scale"},
    ("fp8-release", None): {"weight_scale_inv": "weight_scale"},
    ("llm-compressor", "mxfp4"): {"weight_packed": "weight"},
}
# what `detect` reads besides the weights (for `not_read` and for people)
QUANT_CONFIG_FILES = ("config.json", "hf_quant_config.json", "quantize_config.json")


def known() -> str:
    """The producers and schemes this reader knows, for error messages."""
    schemes = sorted({r.scheme for r in RULES if not r.unsupported} | {"bf16", "fp16"})
    methods = sorted({m for ms in PRODUCERS.values() for m in ms})
    return (f"quant_method one of {', '.join(methods)} (or none: 16-bit); schemes "
            f"{', '.join(schemes)}")


@dataclass
class Detected:
    """The scheme and checkpoint attributes of a folder's experts, and who wrote them.
    `not_read`: each config key written but not read ("<file>: <key path>" -> why)."""

    producer: str
    scheme: str
    attrs: dict = field(default_factory=dict)
    config_file: str = "config.json"
    config: dict = field(default_factory=dict)  # the quantization config as read
    not_read: dict[str, str] = field(default_factory=dict)
    rule: Rule | None = None

    @property
    def suffixes(self) -> dict[str, str]:
        return {**FILE_SUFFIXES.get((self.producer, None), {}),
                **FILE_SUFFIXES.get((self.producer, self.scheme), {})}


def detect(config: dict, hf_quant: dict | None, quantize_config: dict | None,
           weight_dtype: str, config_file: str = "config.json") -> Detected:
    """The producer, scheme and attributes from `config.json`'s `quantization_config`,
    ModelOpt's `hf_quant_config.json` or GPTQ's `quantize_config.json`; 16-bit when none
    (the scheme then follows the stored weight dtype `weight_dtype`, "bf16" or "fp16")."""
    qc, source = config.get("quantization_config"), f"{config_file}: quantization_config"
    if qc is None and hf_quant is not None:
        qc, source = {"quant_method": "modelopt", **hf_quant.get("quantization", {})}, \
            "hf_quant_config.json: quantization"
    elif isinstance(qc, dict) and qc.get("quant_method") == "modelopt" and hf_quant:
        qc = _with_hf_quant(qc, hf_quant, source)
    if qc is None and quantize_config is not None:
        qc, source = quantize_config, "quantize_config.json"
    if qc is None:
        if weight_dtype not in ("bf16", "fp16"):
            raise CheckpointError(f"{config_file}: quantization_config", "a quantization config "
                                  f"for experts stored as {weight_dtype} ({known()})", "none")
        return Detected("unquantized", weight_dtype, {}, config_file, {})
    if not isinstance(qc, dict):
        raise CheckpointError(source, "a JSON object", type(qc).__name__)
    f = flatten(qc, source)
    method = f.values.get("quant_method")
    keys = CONFIG_KEYS.get(method, {})
    for name, path in f.paths.items():  # the values moecert reads only one way
        key = key_of(keys, name)
        if key is not None and key.allowed is not None and not _one_of(f.raws[name],
                                                                         key.allowed):
            raise CheckpointError(f"{source}.{path}", f"{' or '.join(map(repr, key.allowed))} "
                                  f"({key.why})", repr(f.raws[name]))
    for rule in RULES:
        if all(_matches(f.values.get(k, ABSENT), v) for k, v in rule.match):
            if rule.unsupported:
                raise CheckpointError(f"{source}.{f.path(rule.key)}", "a scheme moecert holds; "
                                      f"this is {rule.unsupported}, scheme {rule.scheme} not "
                                      f"supported yet ({known()})", f"scheme {rule.scheme}")
            attrs = {k: _value(v, f, source) for k, v in rule.attrs}
            return Detected(_value(rule.producer, f, source), rule.scheme, attrs,
                            source.split(":")[0], qc, _not_read(f, rule, keys, source), rule)
    _refuse(f, source, method)


def _with_hf_quant(qc: dict, hf_quant: dict, source: str) -> dict:
    """ModelOpt's config.json restates `quant_algo` and leaves out what its
    hf_quant_config.json says besides (the INT4 AWQ group size, `has_zero_point`,
    `pre_quant_scale`): those keys are read from there; a key both files hold must agree."""
    extra = hf_quant.get("quantization", {})
    for k, v in extra.items():
        if k in qc and qc[k] != v:
            raise CheckpointError(f"{source}.{k}", f"{v!r} (as hf_quant_config.json: "
                                  f"quantization.{k} says)", repr(qc[k]))
    return {**{k: v for k, v in extra.items() if k in _HF_QUANT_ONLY}, **qc}


# the keys of hf_quant_config.json's `quantization` that config.json does not restate and
# a rule reads (the INT4 AWQ export's); the others (exclude_modules, kv_cache_quant_algo)
# have their config.json counterparts
_HF_QUANT_ONLY = ("group_size", "has_zero_point", "pre_quant_scale")


def _one_of(value, allowed) -> bool:
    # True == 1 in Python: a bool and an int are different values in a config
    return any(type(value) is type(a) and value == a for a in allowed)


def _refuse(f: Fields, source: str, method) -> None:
    """No rule reads the config: name the field the nearest rule of the producer wants
    otherwise (or the quant_method, for an unknown producer)."""
    rules = [r for r in RULES if r.method == method and not r.unsupported]
    if not rules:
        what = ", ".join(f"{k}={v!r}" for k, v in sorted(f.values.items())
                         if k in ("quant_method", "format", "bits", "quant_algo")
                         and not isinstance(v, dict))
        raise CheckpointError(f"{source}.quant_method", known(), what or "no quant_method")

    def misses(r: Rule) -> list[tuple[str, object]]:
        return [(k, v) for k, v in r.match if not _matches(f.values.get(k, ABSENT), v)]

    # fewest fields differ; on a tie, a rule of the config's own format or algorithm, and
    # one that names a key over one that wants the whole input section gone
    nearest = min(rules, key=lambda r: (len(misses(r)), any(
        k in ("format", "quant_algo", "bits") for k, _ in misses(r)),
        any(k == "input" for k, _ in misses(r))))
    k = misses(nearest)[0][0]
    # what the rules as near as the nearest want of k, those that k fails only: a rule the
    # found value satisfies would make the message contradict itself ("expected None / 32,
    # found 32", issue 42)
    wanted = " / ".join(dict.fromkeys(
        repr(dict(r.match)[k]) for r in rules if len(misses(r)) == len(misses(nearest))
        and k in dict(misses(r))))
    raise CheckpointError(f"{source}.{_field_path(f, k)}", f"{wanted} (the nearest {method} "
                          f"scheme moecert reads is {nearest.scheme}; {known()})",
                          _found(f, k))


def _field_path(f: Fields, k: str) -> str:
    if k == "activation" or (k not in f.paths and k.startswith("input")):
        return f.path("input")
    return f.path(k)


def _found(f: Fields, k: str) -> str:
    if k in DERIVED:  # every source as written
        return ", ".join(f"{f.paths[s]}={f.raws[s]!r}" for s in DERIVED[k] if s in f.paths) \
            or "missing"
    return repr(f.values.get(k, ABSENT)) if k in f.values else "missing"


def _not_read(f: Fields, rule: Rule, keys: dict[str, Key], source: str) -> dict[str, str]:
    """Each config key written but not read by `rule`, and why (docs/checkpoints.md)."""
    reads = set(STRUCTURE)
    for name in rule.reads():
        reads.add(name)
        reads.update(DERIVED.get(name, ()))
        if name.startswith("input."):  # a rule that reads an input key reads the section
            reads.update(DERIVED["input"])
    out = {}
    for name, path in f.paths.items():
        key = key_of(keys, name)
        if key is None:
            out[f"{source}.{path}"] = "a key this reader does not know: not read"
        elif not key.read:
            out[f"{source}.{path}"] = key.why
        elif key.allowed is None and name not in reads and (f.raws[name] is not None
                                                             or key.only_for):
            # a key a rule should read but does not is a gap of the rules (a test holds
            # that none is left); one read for some schemes only says so, null or not (a
            # value there would not change this scheme's reading either)
            out[f"{source}.{path}"] = (f"{key.why}: read for {', '.join(key.only_for)} only"
                                       if key.only_for else f"{UNUSED}: {rule.scheme}")
    return out


def _matches(found, want) -> bool:
    if want is ANY:
        return True
    if isinstance(want, OneOf):
        return any(_matches(found, w) for w in want.values)
    if want is PRESENT:
        return found is not ABSENT
    return _one_of(found, (want,))


def _value(v, f: Fields, source: str):
    if not (isinstance(v, str) and v.startswith("<")):
        return v
    key = v[1:-1]
    if f.values.get(key, ABSENT) is ABSENT:
        if key == "activation":
            raise CheckpointError(f"{source}.{_field_path(f, key)}", "an activation "
                                  "quantization moecert reads (dynamic per-token, static or "
                                  "dynamic per-tensor, dynamic 1x128 fp8 groups)",
                                  _found(f, key))
        raise CheckpointError(f"{source}.{f.path(key)}", "a value moecert reads",
                              _found(f, key) if key in f.values else "missing")
    return f.values[key]

