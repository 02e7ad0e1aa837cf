"""Which producer wrote a model folder, and which moecert scheme and variant its experts are.

The facts are data: `PRODUCERS` (a producer's `quant_method` and how its config reads),
`RULES` (config fields -> scheme and checkpoint attributes, first match wins) and
`FILE_SUFFIXES` (a producer's tensor suffix -> the moecert suffix of SPEC section 2).
`detect` only flattens a config into fields and walks the rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import CheckpointError
from ..schemes import (
    ACT_DYNAMIC_GROUP,
    ACT_DYNAMIC_TENSOR,
    ACT_DYNAMIC_TOKEN,
    ACT_MXFP8,
    ACT_NONE,
    ACT_NVFP4,
    ACT_STATIC_TENSOR,
    STRATEGY_BLOCK,
    STRATEGY_CHANNEL,
    STRATEGY_GROUP,
    STRATEGY_TENSOR,
)

ANY = object()  # a rule field that matches any value, present or not
ABSENT = None  # a rule field that must be missing (or null) in the config


@dataclass(frozen=True)
class Rule:
    """Config fields (flattened, see `flatten_*`) -> a scheme and checkpoint attributes.

    `attrs` values (and `producer`) that are a field name in angle brackets
    ("<weights.group_size>") are read from the config; `unsupported` names a scheme moecert
    recognises but cannot hold yet."""

    producer: str
    match: tuple[tuple[str, object], ...]
    scheme: str
    attrs: tuple[tuple[str, object], ...] = ()
    unsupported: str = ""


def _r(producer, scheme, match, attrs=None, unsupported=""):
    return Rule(producer, tuple(match.items()), scheme, tuple((attrs or {}).items()),
                unsupported)


# compressed-tensors (llm-compressor): config_groups.<g>.{weights, input_activations}, format
_CT_ACT = {  # (input type, strategy, dynamic) -> activation mode
    ("int", "token", True): ACT_DYNAMIC_TOKEN, ("int", "tensor", False): ACT_STATIC_TENSOR,
    ("int", "tensor", True): ACT_DYNAMIC_TENSOR, ("float", "token", True): ACT_DYNAMIC_TOKEN,
    ("float", "tensor", False): ACT_STATIC_TENSOR, ("float", "group", True): ACT_DYNAMIC_GROUP,
}
_CT_STRATEGY = {"tensor": STRATEGY_TENSOR, "channel": STRATEGY_CHANNEL, "group": STRATEGY_GROUP,
                "block": STRATEGY_BLOCK, "tensor_group": STRATEGY_GROUP}
_W4A16 = {"format": "pack-quantized", "weights.type": "int", "input": ABSENT}
_INT = {"format": "int-quantized", "weights.type": "int", "weights.num_bits": 8}
_FLOAT = {"format": "float-quantized", "weights.type": "float", "weights.num_bits": 8}

# Quark's OCP MX weight spec (its OCP_MXSpec defaults): per_group 32 along in, E8M0 scales
_QUARK_MX = {"quant_method": "quark", "weights.qscheme": "per_group", "weights.group_size": 32,
             "weights.scale_format": "e8m0"}

RULES: tuple[Rule, ...] = (
    _r("llm-compressor", "ct-int4", {**_W4A16, "weights.num_bits": 4},
       {"group_size": "<group_size>", "sym": "<weights.symmetric>",
        "checkpoint_format": "<ct_version>", "act_order": "<act_order>"}),
    _r("llm-compressor", "ct-int8", {**_W4A16, "weights.num_bits": 8},
       {"group_size": "<group_size>", "sym": "<weights.symmetric>",
        "checkpoint_format": "<ct_version>", "act_order": "<act_order>"}),
    # W4AFP8: int4 codes unpacked in int8 (int-quantized), symmetric, fp8 per-token inputs
    _r("llm-compressor", "w4a8-fp8", {"format": "int-quantized", "weights.type": "int",
                                      "weights.num_bits": 4, "weights.symmetric": True,
                                      "input.type": "float"},
       {"group_size": "<group_size>", "activation": "<activation>"}),
    _r("llm-compressor", "w4afp8", {"format": ANY, "weights.type": "int", "weights.num_bits": 4,
                                    "input.type": "float"},
       unsupported="int4 weights with fp8 activations (W4AFP8) other than symmetric "
                   "int-quantized"),
    _r("llm-compressor", "int8-w8a8", {**_INT, "input.type": "int"},
       {"weight_strategy": "<weights.strategy>", "activation": "<activation>"}),
    _r("llm-compressor", "int8-w8a16", {**_INT, "input": ABSENT},
       {"weight_strategy": "<weights.strategy>"}),
    _r("llm-compressor", "fp8-w8a8", {**_FLOAT, "input.type": "float"},
       {"weight_strategy": "<weights.strategy>", "activation": "<activation>"}),
    _r("llm-compressor", "fp8-w8a16", {**_FLOAT, "input": ABSENT},
       {"weight_strategy": "<weights.strategy>"}),
    _r("llm-compressor", "nvfp4", {"format": "nvfp4-pack-quantized", "input": ABSENT},
       {"checkpoint_format": "ct", "activation": ACT_NONE}),
    _r("llm-compressor", "nvfp4", {"format": "nvfp4-pack-quantized"},
       {"checkpoint_format": "ct", "activation": ACT_NVFP4}),
    _r("llm-compressor", "mxfp4", {"format": "mxfp4-pack-quantized", "input": ABSENT},
       {"activation": ACT_NONE}),
    _r("llm-compressor", "mxfp4", {"format": "mxfp4-pack-quantized"}, {"activation": ACT_MXFP8}),
    _r("llm-compressor", "mxfp8", {"format": "mxfp8-quantized", "input": ABSENT},
       {"activation": ACT_NONE}),
    _r("llm-compressor", "mxfp8", {"format": "mxfp8-quantized"}, {"activation": ACT_MXFP8}),
    # GPTQModel / AutoGPTQ: bits, group_size, desc_act, sym, checkpoint_format
    _r("<tool>", "gptq-int4", {"quant_method": "gptq", "bits": 4},
       {"group_size": "<group_size>", "sym": "<sym>", "checkpoint_format": "<gptq_format>",
        "act_order": "<act_order>"}),
    _r("<tool>", "gptq-int8", {"quant_method": "gptq", "bits": 8},
       {"group_size": "<group_size>", "sym": "<sym>", "checkpoint_format": "<gptq_format>",
        "act_order": "<act_order>"}),
    # AutoAWQ / GPTQModel's awq: GEMM layout only
    _r("<tool>", "awq-int4", {"quant_method": "awq", "bits": 4, "awq_version": "gemm"},
       {"group_size": "<group_size>", "sym": "<awq_sym>", "checkpoint_format": "awq"}),
    # NVIDIA ModelOpt: quant_algo in hf_quant_config.json (or config.json)
    _r("modelopt", "fp8-w8a8", {"quant_method": "modelopt", "quant_algo": "FP8"},
       {"weight_strategy": STRATEGY_TENSOR, "activation": ACT_STATIC_TENSOR}),
    _r("modelopt", "nvfp4", {"quant_method": "modelopt", "quant_algo": "NVFP4"},
       {"checkpoint_format": "modelopt", "activation": ACT_NVFP4}),
    _r("modelopt", "mxfp8", {"quant_method": "modelopt", "quant_algo": "MXFP8"},
       {"activation": ACT_MXFP8}),
    # AMD Quark: global_quant_config.{weight, input_tensors}
    _r("quark", "int8-w8a8", {"quant_method": "quark", "weights.dtype": "int8",
                              "input.dtype": "int8"},
       {"weight_strategy": "<weights.qscheme>", "activation": "<activation>"}),
    _r("quark", "int8-w8a16", {"quant_method": "quark", "weights.dtype": "int8",
                               "input": ABSENT},
       {"weight_strategy": "<weights.qscheme>"}),
    _r("quark", "fp8-w8a8", {"quant_method": "quark", "weights.dtype": "fp8_e4m3",
                             "input.dtype": "fp8_e4m3"},
       {"weight_strategy": "<weights.qscheme>", "activation": "<activation>"}),
    # Quark OCP MX fp6 (OCP_MXFP6E2M3Spec / OCP_MXFP6E3M2Spec): blocks of 32 along in, E8M0
    # scales; weight-only holds; vLLM's W6A6 (fp6 inputs of the same spec) does not yet
    *(_r("quark", f"mxfp6-{el}", {**_QUARK_MX, "weights.dtype": f"fp6_{el}", "input": ABSENT},
         {"activation": ACT_NONE}) for el in ("e2m3", "e3m2")),
    *(_r("quark", f"mxfp6-{el}", {**_QUARK_MX, "weights.dtype": f"fp6_{el}", "input": True},
         unsupported="MXFP6 weights with quantized activations (vLLM's W6A6: MXFP6 "
                     "activations of the same element)") for el in ("e2m3", "e3m2")),
    # gpt-oss release: MXFP4 experts, 16-bit activations
    _r("gpt-oss", "mxfp4", {"quant_method": "mxfp4"}, {"activation": ACT_NONE}),
    # DeepSeek-V3 / Qwen3 FP8 releases: 128x128 blocks, dynamic 1x128 activation groups
    _r("fp8-release", "fp8-w8a8", {"quant_method": "fp8", "weight_block_size": [128, 128],
                           "activation_scheme": "dynamic"},
       {"weight_strategy": STRATEGY_BLOCK, "activation": ACT_DYNAMIC_GROUP}),
)

# Producer -> the quant_method values it writes.
PRODUCERS: dict[str, tuple[str, ...]] = {
    "llm-compressor": ("compressed-tensors",), "gptqmodel": ("gptq", "awq"),
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
    """The scheme and checkpoint attributes of a folder's experts, and who wrote them."""

    producer: str
    scheme: str
    attrs: dict = field(default_factory=dict)
    config_file: str = "config.json"
    config: dict = field(default_factory=dict)  # the quantization config as read

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
    if qc is None and quantize_config is not None:
        qc, source = quantize_config, "quantize_config.json"
    if qc is None:
        if weight_dtype not in ("bf16", "fp16"):
            raise CheckpointError(f"{config_file}: quantization_config", "a quantization config "
                                  f"for experts stored as {weight_dtype} ({known()})", "none")
        return Detected("unquantized", weight_dtype, {}, config_file, {})
    if not isinstance(qc, dict):
        raise CheckpointError(source, "a JSON object", type(qc).__name__)
    fields = _flatten(qc, source)
    for rule in RULES:
        if all(_matches(fields.get(k, ABSENT), v) for k, v in rule.match):
            if rule.unsupported:
                raise CheckpointError(source, f"a scheme moecert holds; this is {rule.unsupported}"
                                      f", scheme {rule.scheme} not supported yet ({known()})",
                                      f"scheme {rule.scheme}")
            attrs = {k: _value(v, fields, source) for k, v in rule.attrs}
            return Detected(_value(rule.producer, fields, source), rule.scheme, attrs,
                            source.split(":")[0], qc)
    method = fields.get("quant_method")
    what = ", ".join(f"{k}={v!r}" for k, v in sorted(fields.items())
                     if k in ("quant_method", "format", "bits", "quant_algo", "weights.num_bits",
                              "weights.type", "weights.dtype", "input.type", "awq_version"))
    if any(method in ms for ms in PRODUCERS.values()):  # a known producer, an unknown scheme
        key = f"{source}.config_groups" if method == "compressed-tensors" else source
        raise CheckpointError(key, f"a {method} scheme moecert knows ({known()})", what)
    raise CheckpointError(f"{source}.quant_method", known(), what or "no quant_method")


def _matches(found, want) -> bool:
    return want is ANY or found == want


def _value(v, fields: dict, source: str):
    if not (isinstance(v, str) and v.startswith("<")):
        return v
    key = v[1:-1]
    if fields.get(key, ABSENT) is ABSENT:
        raise CheckpointError(f"{source}.{key}", "a value", "missing")
    return fields[key]


# --- flattening each producer's config into rule fields ---------------------------------------

def _flatten(qc: dict, source: str) -> dict:
    method = qc.get("quant_method")
    flat = {k: v for k, v in qc.items() if not isinstance(v, dict)}
    if method == "compressed-tensors":
        flat.update(_flatten_ct(qc, source))
    elif method == "quark":
        flat.update(_flatten_quark(qc, source))
    elif method in ("gptq", "awq"):
        fmt = qc.get("checkpoint_format") or qc.get("format") or "gptq"
        flat["gptq_format"] = "gptq_v2" if fmt == "gptq_v2" else "gptq"
        flat["awq_version"] = str(qc.get("version") or qc.get("format") or "gemm").lower()
        flat["awq_sym"] = not qc.get("zero_point", True)
        flat["sym"] = qc.get("sym", True)
        flat["act_order"] = bool(qc.get("desc_act", False))  # else g_idx, if written, is k // g
        flat["group_size"] = qc.get("group_size", -1)
        quantizer = " ".join((qc.get("meta") or {}).get("quantizer") or [])
        flat["tool"] = "gptqmodel" if "gptqmodel" in quantizer else \
            "autogptq" if method == "gptq" else "autoawq"
    return flat


def _flatten_ct(qc: dict, source: str) -> dict:
    """The one config group that targets the experts' Linear layers."""
    groups = qc.get("config_groups") or {}
    linear = [g for g in groups.values() if "Linear" in (g.get("targets") or [])] or \
        list(groups.values())
    if len(linear) != 1:
        raise CheckpointError(f"{source}.config_groups", "one config group targeting Linear",
                              f"{len(linear)} groups")
    g = linear[0]
    w, a = g.get("weights") or {}, g.get("input_activations")
    flat = {"format": g.get("format") or qc.get("format")}
    flat.update({f"weights.{k}": v for k, v in w.items() if not isinstance(v, dict)})
    strategy = w.get("strategy")
    flat["weights.strategy"] = _CT_STRATEGY.get(strategy, strategy)
    flat["group_size"] = w.get("group_size") if strategy in ("group", "tensor_group") else -1
    version = str(qc.get("version") or "0.18")
    flat["ct_version"] = "ct-0.17" if _version(version) < (0, 18) else "ct-0.18"
    # "group" (alias "dynamic") stores weight_g_idx; "weight" (alias "static") reorders the
    # columns at quantization time and stores none
    flat["act_order"] = w.get("actorder") in ("group", "dynamic")
    if a:
        flat.update({f"input.{k}": v for k, v in a.items() if not isinstance(v, dict)})
        flat["input"] = True
        flat["activation"] = _CT_ACT.get((a.get("type"), a.get("strategy"),
                                          bool(a.get("dynamic"))), ABSENT)
    return flat


def _flatten_quark(qc: dict, source: str) -> dict:
    g = qc.get("global_quant_config") or {}
    w, a = g.get("weight") or {}, g.get("input_tensors")
    if isinstance(w, list):
        w = w[0] if w else {}
    flat = {f"weights.{k}": v for k, v in w.items() if not isinstance(v, dict)}
    flat["weights.qscheme"] = {"per_tensor": STRATEGY_TENSOR, "per_channel": STRATEGY_CHANNEL
                               }.get(w.get("qscheme"), w.get("qscheme"))
    if a:
        flat.update({f"input.{k}": v for k, v in a.items() if not isinstance(v, dict)})
        flat["input"] = True
        mode = {("per_tensor", False): ACT_STATIC_TENSOR, ("per_tensor", True): ACT_DYNAMIC_TENSOR,
                ("per_token", True): ACT_DYNAMIC_TOKEN, ("per_channel", True): ACT_DYNAMIC_TOKEN}
        flat["activation"] = mode.get((a.get("qscheme"), bool(a.get("is_dynamic"))), ABSENT)
    return flat


def _version(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits or 0))
    return tuple(out)
