"""Reading a quantized MoE model folder as its producer wrote it.

    from moecert.reference import load_checkpoint, ModelLayer, CheckpointError

    load_checkpoint(path)            -> [LayerSummary]: every MoE layer (no tensor data read)
    load_checkpoint(path, layer=L)   -> ModelLayer: layer L's routed experts as a Checkpoint
                                        (SPEC section 2 layout), its router, sizes and provenance

`path` is an HF-format folder (config.json, model.safetensors or the shards named by
model.safetensors.index.json) or an HF cache repo folder (its snapshot is used). Only the
requested layer's tensors are read, lazily (`safetensors.safe_open`). What is read, how names
map and where real files depart from SPEC section 2: docs/checkpoints.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..checkpoint import Checkpoint, checked_variant
from ..errors import CheckpointError
from ..layouts.check import check_tensors
from ..problem import MoEProblem
from ..routing import grouped_topk, sigmoid_topk, softmax_topk
from ..schemes import GATED_ACTIVATIONS, Variant
from ..schemes.tensors import declared_tensors
from .assemble import Plan, assemble, expert_count, find_experts
from .families import HIDDEN_ACT, SIZE_KEYS, classify, family
from .files import ModelFolder
from .producers import detect

ROUTING_FUNCTIONS = {"softmax_topk": softmax_topk, "sigmoid_topk": sigmoid_topk,
                     "grouped_topk": grouped_topk}
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "bf16": "bf16", "fp16": "fp16"}
_STORED = {torch.bfloat16: "bf16", torch.float16: "fp16"}


@dataclass(frozen=True)
class LayerSummary:
    """One MoE layer of a model folder, as `load_checkpoint(path)` lists it (from the configs
    and the tensor names alone: no tensor data is read)."""

    layer: int
    variant: Variant  # the scheme and attributes read from the config (act_order: g_idx)
    producer: str
    E: int
    K: int
    N: int
    topk: int
    activation: str
    dtype: str
    bias: bool
    not_read: dict = field(default_factory=dict)  # as ModelLayer.not_read
    stated: tuple[str, ...] = ()  # the variant's attributes the config states (inspect)

    def problem(self, M: int, **overrides) -> MoEProblem:
        fields = dict(M=M, K=self.K, N=self.N, E=self.E, topk=self.topk, dtype=self.dtype,
                      activation=self.activation, bias=self.bias)
        return MoEProblem(**{**fields, **overrides})

    @property
    def scheme(self) -> str:
        return self.variant.scheme


@dataclass
class Router:
    """The layer's router: logits = x @ weight.T (+ bias); `function` is a routing function of
    `reference/routing.py` (None: unknown, draw routings instead) called with `params`."""

    weight: torch.Tensor | None
    bias: torch.Tensor | None = None  # added to the logits (gpt-oss)
    correction_bias: torch.Tensor | None = None  # DeepSeek-V3 e_score_correction_bias
    function: str | None = None
    params: dict = field(default_factory=dict)

    def select(self, x: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(topk_weights float64 [M, topk], topk_ids int64 [M, topk]) for hidden states x."""
        if self.function is None or self.weight is None:
            raise CheckpointError("router.function", "a routing function moecert knows",
                                  "none for this model family")
        logits = x.to(torch.float64) @ self.weight.to(torch.float64).T
        if self.bias is not None:
            logits = logits + self.bias.to(torch.float64)
        params = dict(self.params)
        if self.correction_bias is not None:
            params["correction_bias"] = self.correction_bias
        return ROUTING_FUNCTIONS[self.function](logits, topk, **params)


@dataclass(frozen=True)
class Source:
    """Where a ModelLayer came from: enough to say which model was certified."""

    folder: str
    layer: int
    producer: str
    files: tuple[str, ...]
    sha256: str  # over the names, dtypes, shapes and bytes of every tensor read
    config_file: str


@dataclass
class ModelLayer:
    """One decoder layer's routed experts read from a model folder."""

    checkpoint: Checkpoint
    E: int
    K: int
    N: int
    topk: int
    activation: str
    dtype: str  # the model's activation dtype ("bf16" / "fp16")
    router: Router
    source: Source
    not_read: dict[str, str]
    notes: list[str] = field(default_factory=list)  # deviations the loader applied

    @property
    def bias(self) -> bool:
        return "w13_bias" in self.checkpoint.tensors

    @property
    def scheme(self) -> str:
        return self.checkpoint.scheme

    def problem(self, M: int, **overrides) -> MoEProblem:
        """The MoEProblem of M tokens through this layer (`overrides`: any MoEProblem field)."""
        fields = dict(M=M, K=self.K, N=self.N, E=self.E, topk=self.topk, dtype=self.dtype,
                      activation=self.activation, bias=self.bias)
        fields.update(overrides)
        return MoEProblem(**fields)


def load_checkpoint(path, layer: int | None = None, experts: range | None = None,
                    validate: bool = False):
    """Without `layer`: the MoE layers of the folder at `path` ([LayerSummary]). With it: that
    decoder layer's routed experts (`ModelLayer`; `experts` reads a range of them only).

    Without `layer`, only the configs and the tensor headers are read: the config is checked
    against the tensor names (expert counts). `validate=True` also reads every MoE layer, one
    at a time, with every check a layer's load makes: dtypes and shapes against the config,
    every value the format record rejects (NaN or non-positive scales, E8M0 0xFF, fp8 NaN
    codes). Every problem with the folder is one CheckpointError naming the file and the
    tensor (the producer's own name, its expert and layer) or config key at fault."""
    folder = ModelFolder(path)
    try:
        if layer is None:
            summaries = _summaries(folder)
            for s in summaries if validate else ():
                _load_layer(folder, s.layer, None)
                folder.read_log.clear()  # one layer's tensors at a time
            return summaries
        return _load_layer(folder, layer, experts)
    finally:
        folder.close()


# --- internals -----------------------------------------------------------------------------

def _config_value(folder: ModelFolder, keys) -> tuple[str, object]:
    cfg = _text_config(folder.config)
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return k, cfg[k]
    raise CheckpointError(f"{folder.root / 'config.json'}: {keys[0]}", f"one of "
                          f"{', '.join(keys)}", "missing")


def _text_config(config: dict) -> dict:
    """The language model's config (multimodal configs nest it under text_config)."""
    return {**config, **(config.get("text_config") or {})}


def _sizes(folder: ModelFolder) -> dict[str, int]:
    return {s: int(_config_value(folder, keys)[1]) for s, keys in SIZE_KEYS.items()}


def _stored_dtype(folder: ModelFolder, names) -> str:
    for ex in names.values():
        first = next(iter(ex.fused.values()), None) or next(iter(
            next(iter(ex.per_expert.values())).values()))
        t = folder.read(first, slice(0, 1)) if ex.fused else folder.read(first)
        folder.read_log.clear()
        return _STORED.get(t.dtype, str(t.dtype).removeprefix("torch."))
    return "bf16"


def _detect(folder: ModelFolder, names):
    stored = "bf16"
    if "quantization_config" not in folder.config and folder.hf_quant is None \
            and folder.quantize_config is None:
        stored = _stored_dtype(folder, names)
    return detect(folder.config, folder.hf_quant, folder.quantize_config, stored,
                  str(folder.root / "config.json"))


def _variant(det, ex) -> dict:
    """The Checkpoint attributes: the config's (act_order from the config, as engines read
    it: a g_idx written without act order must be the trivial k // g map)."""
    return dict(det.attrs)


def _checked(det, attrs: dict) -> Variant:
    """The variant the config states; one it cannot be is named by the config file."""
    try:
        return checked_variant(det.scheme, **attrs)
    except CheckpointError as e:
        raise CheckpointError(f"{det.config_file}: quantization_config ({e.tensor})",
                              e.expected, e.found) from None


def _summaries(folder: ModelFolder) -> list[LayerSummary]:
    layers = find_experts(folder.names())
    if not layers:
        raise CheckpointError(str(folder.root), "MoE layers (tensors named "
                              "...layers.<L>.<block>.experts.<e>.<projection>.<suffix>, or "
                              "fused ...experts.gate_up_proj)", "no routed experts")
    det = _detect(folder, layers)
    sizes = _sizes(folder)
    activation, dtype = _activation(folder), _dtype(folder)
    out = []
    for L, ex in sorted(layers.items()):
        names = {n for ids in ex.per_expert.values() for n in ids.values()} | \
            set(ex.fused.values())
        E = _check_expert_count(folder, ex, L, sizes)
        attrs = _variant(det, ex)
        out.append(LayerSummary(L, _checked(det, attrs), det.producer,
                                E, sizes["K"], sizes["N"], sizes["topk"],
                                activation, dtype, "bias" in ex.suffixes,
                                {**det.not_read, **_not_read(folder, names, L)},
                                tuple(attrs)))
    return out


def _check_expert_count(folder: ModelFolder, ex, L: int, sizes: dict[str, int]) -> int:
    """The layer's expert count from its tensor names, which must be the config's."""
    E = expert_count(folder, ex)
    if E != sizes["E"]:
        key = _config_value(folder, SIZE_KEYS["E"])[0]
        raise CheckpointError(f"{folder.root / 'config.json'}: {key}",
                              f"the {E} experts layer {L} holds", str(sizes["E"]))
    return E


def _dtype(folder: ModelFolder) -> str:
    cfg = _text_config(folder.config)
    return _DTYPES.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"), "bf16")


def _activation(folder: ModelFolder) -> str:
    fam = family(folder.config)
    if not fam.activation.startswith("<"):
        return fam.activation
    key, act = _config_value(folder, ("hidden_act", "activation_function"))
    if act not in HIDDEN_ACT:
        raise CheckpointError(f"{folder.root / 'config.json'}: {key}",
                              f"one of {', '.join(HIDDEN_ACT)}", repr(act))
    return HIDDEN_ACT[act]


def _load_layer(folder: ModelFolder, L: int, experts: range | None) -> ModelLayer:
    all_layers = find_experts(folder.names())
    if L not in all_layers:
        moe = sorted(all_layers)
        raise CheckpointError(f"{folder.root}: layer {L}", "a decoder layer with routed "
                              f"experts (MoE layers: {_ranges(moe) or 'none'})",
                              "no routed experts" if _has_layer(folder, L) else "no such layer")
    ex = all_layers[L]
    det = _detect(folder, {L: ex})
    sizes = _sizes(folder)
    activation = _activation(folder)
    E = _check_expert_count(folder, ex, L, sizes)
    experts = range(E) if experts is None else experts
    if experts.step != 1 or not 0 <= experts.start < experts.stop <= E:
        raise CheckpointError("experts", f"a contiguous range within 0..{E - 1}", str(experts))
    attrs = _variant(det, ex)
    shell = _checked(det, attrs)
    gated = activation in GATED_ACTIVATIONS
    R = 2 * sizes["N"] if gated else sizes["N"]
    sizes = {"E": len(experts), "R": R, "K": sizes["K"], "N": sizes["N"], "topk": sizes["topk"]}
    config_note = (f"{det.scheme} {_describe(attrs)} from {det.config_file}; hidden_size "
                   f"{sizes['K']}, intermediate size {sizes['N']} from config.json")
    plan = Plan(folder, ex, declared_tensors(shell), sizes, shell.group_size,
                shell.info.weight_bits, shell.record.packing, det.suffixes, config_note,
                experts, shell.record.rejected, det.scheme,
                fused_inputs_first=family(folder.config).fused_inputs_first)
    tensors = assemble(plan)
    whole = experts == range(E)
    ckpt = Checkpoint(det.scheme, tensors, first_expert=experts.start,
                      origin=(str(folder.root), L) if whole else None, **attrs)
    dtype = _dtype(folder)
    problem = MoEProblem(M=1, K=sizes["K"], N=sizes["N"], E=len(experts),
                         topk=min(sizes["topk"], len(experts)), dtype=dtype,
                         activation=activation, bias="w13_bias" in tensors)
    try:
        check_tensors(ckpt, problem)
    except CheckpointError as e:  # named as the file names it, moecert's name after
        raise CheckpointError(f"{folder.root}: layer {L}: {_file_names(plan, e.tensor)}",
                              f"{e.expected} ({config_note})", e.found) from None
    router = _router(folder, ex, L)
    router.pop("names")  # read into .router; listed in not_read: not part of the Checkpoint
    not_read = {**det.not_read, **_not_read(folder, plan.consumed, L)}
    return ModelLayer(
        checkpoint=ckpt, E=len(experts), K=sizes["K"], N=sizes["N"], topk=sizes["topk"],
        activation=activation, dtype=dtype, router=Router(**router),
        source=Source(str(folder.root), L, det.producer, tuple(folder.files_read()),
                      folder.sha256(), det.config_file),
        not_read=not_read, notes=plan.notes)


def _file_names(plan: Plan, tensor: str) -> str:
    """The file tensors (first expert's) moecert's `tensor` ("w13_weight_scale: dim 1") was
    built from, with the file, and moecert's name after them."""
    name = tensor.split(":")[0].split(" ")[0]
    files = plan.sources.get(name)
    if not files:
        return tensor
    where = ", ".join(f"{plan.folder.file_of(n).name}: {n}" for n in files)
    return f"{where} (moecert {tensor})"


def _describe(attrs: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in attrs.items())


def _has_layer(folder: ModelFolder, L: int) -> bool:
    return any(f"layers.{L}." in n for n in folder.names())


def _ranges(ids: list[int]) -> str:
    out, start = [], None
    for i, v in enumerate(ids):
        if start is None:
            start = v
        if i + 1 == len(ids) or ids[i + 1] != v + 1:
            out.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return ", ".join(out)


def _router(folder: ModelFolder, ex, L: int) -> dict:
    block = ex.prefix.removesuffix(".experts")
    found = {}
    for part in ("gate", "router"):
        for what in ("weight", "bias", "e_score_correction_bias"):
            name = f"{block}.{part}.{what}"
            if name in folder.weight_map:
                found[what] = (name, folder.read(name))
    weight = found.get("weight", (None, None))[1]
    fam = family(folder.config)
    function, params = fam.routing, {}
    cfg = _text_config(folder.config)
    for param, key in fam.params:
        if not isinstance(key, str):
            params[param] = key
        elif key in cfg and cfg[key] is not None:
            params[param] = cfg[key]
    if weight is None or not weight.is_floating_point():
        function = None  # no float router weight to route with
    return {"weight": weight, "bias": found.get("bias", (None, None))[1],
            "correction_bias": found.get("e_score_correction_bias", (None, None))[1],
            "function": function, "params": params,
            "names": [n for n, _ in found.values()]}


def _not_read(folder: ModelFolder, consumed: set[str], L: int) -> dict[str, str]:
    counts: dict[str, list] = {}
    for name in folder.names():
        if name in consumed:
            continue
        kind, why = classify(name, L)
        counts.setdefault(kind, [why, 0])[1] += 1
    return {kind: f"{why} ({n} tensor{'s' * (n != 1)})" for kind, (why, n) in counts.items()}


__all__ = ["LayerSummary", "ModelLayer", "Router", "Source", "load_checkpoint"]
