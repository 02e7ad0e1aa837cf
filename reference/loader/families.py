"""Model families: where a decoder layer's routed experts, router and other tensors are, and
how the config names the layer's sizes and routing. Declared once as data.

Tensor names follow one of two conventions, whatever the family:

    per-expert  <prefix>.layers.<L>.<block>.experts.<e>.<projection>.<suffix>
    fused       <prefix>.layers.<L>.<block>.experts.<projection>[_<suffix>]   (3-D, experts first)

with the projection names of `PROJECTIONS` (gate_proj/up_proj/down_proj, Mixtral's w1/w3/w2,
fused gate_up_proj/down_proj).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# projection name in the file -> (moecert linear, shard: 0 gate, 1 up, None whole linear)
PROJECTIONS: dict[str, tuple[str, int | None]] = {
    "gate_proj": ("w13", 0), "up_proj": ("w13", 1), "down_proj": ("w2", None),
    "w1": ("w13", 0), "w3": ("w13", 1), "w2": ("w2", None),
    "gate_up_proj": ("w13", None),  # fused: both shards in one tensor
}
PER_EXPERT = re.compile(r"^(?P<layer>(?:.*\.)?layers\.(?P<L>\d+))\.(?P<block>[^.]+)\.experts\."
                        r"(?P<e>\d+)\.(?P<proj>[^.]+)\.(?P<suffix>.+)$")
FUSED = re.compile(r"^(?P<layer>(?:.*\.)?layers\.(?P<L>\d+))\.(?P<block>[^.]+)\.experts\."
                   r"(?P<proj>gate_up_proj|down_proj)(?:_(?P<suffix>[a-z_0-9]+))?$")
LAYER = re.compile(r"^(?:.*\.)?layers\.(?P<L>\d+)\.")

# Tensors of a layer that are not its routed experts: (pattern on the name after
# "layers.<L>.", kind, why it is not in the Checkpoint). First match wins.
NOT_ROUTED: tuple[tuple[re.Pattern, str, str], ...] = tuple(
    (re.compile(p), kind, why) for p, kind, why in (
        (r"^[^.]+\.(gate|router)\.(weight|bias|e_score_correction_bias)$", "router",
         "read into ModelLayer.router, not part of the experts' Checkpoint"),
        (r"^[^.]+\.shared_experts?(_gate)?\.", "shared experts",
         "a dense MLP every token takes (Qwen2-MoE: times sigmoid(shared_expert_gate)), "
         "added to the routed sum outside the fused-MoE kernel moecert judges: vLLM's "
         "SharedFusedMoE runs it as its own module through the dense linear path beside "
         "the routed kernel, which no moecert backend implements (ROCm AITER's option to "
         "fuse it as extra experts is not modelled)"),
        (r"^(self_attn|attention|attn)\.", "attention", "not part of an MoE layer"),
        (r"(layernorm|_norm|\.norm)\.", "norms", "not part of an MoE layer"),
        (r"^mlp\.(gate_proj|up_proj|down_proj)\.", "dense MLP", "a dense layer: no experts"),
    ))
# Tensors outside the decoder layers
MODEL_WIDE: tuple[tuple[re.Pattern, str, str], ...] = tuple(
    (re.compile(p), kind, why) for p, kind, why in (
        (r"embed", "embeddings", "not part of an MoE layer"),
        (r"lm_head", "lm_head", "not part of an MoE layer"),
        (r"norm\.", "norms", "not part of an MoE layer"),
    ))
OTHER_LAYERS = ("other decoder layers", "only the requested layer is read")
OTHER = "other"


@dataclass(frozen=True)
class Family:
    """How one model_type's config names its MoE sizes and routing.

    routing: a function of `reference/routing.py` ("softmax_topk", "sigmoid_topk",
    "grouped_topk") or None (unknown: the caller draws routings); params: routing parameter ->
    config key (a constant when not a str) or a tuple of keys tried in order."""

    routing: str | None
    params: tuple[tuple[str, object], ...] = ()
    activation: str = "<hidden_act>"  # moecert activation, or the config key to read
    interleaved: bool = False  # gate/up rows interleaved (gpt-oss)
    # 16-bit fused expert weights stored inputs first, [E, in, out] (transformers' gpt-oss
    # layout, `is_transposed=True`): transposed whatever the sizes (a square one too)
    fused_inputs_first: bool = False


# config keys tried in order for each size
SIZE_KEYS = {
    "E": ("n_routed_experts", "num_local_experts", "num_experts"),
    "K": ("hidden_size",),
    "N": ("moe_intermediate_size", "intermediate_size"),
    "topk": ("num_experts_per_tok", "experts_per_token", "moe_topk"),
}
HIDDEN_ACT = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu",
              "relu2": "relu2"}

FAMILIES: dict[str, Family] = {
    "qwen3_moe": Family("softmax_topk", (("renormalize", "norm_topk_prob"),)),
    "qwen2_moe": Family("softmax_topk", (("renormalize", "norm_topk_prob"),)),
    "mixtral": Family("softmax_topk", (("renormalize", True),)),
    "deepseek_v3": Family("grouped_topk", (
        ("num_expert_group", "n_group"), ("topk_group", "topk_group"),
        ("scoring", "scoring_func"), ("renormalize", "norm_topk_prob"),
        ("routed_scaling_factor", "routed_scaling_factor"))),
    "deepseek_v2": Family("grouped_topk", (
        ("num_expert_group", "n_group"), ("topk_group", "topk_group"),
        ("scoring", "scoring_func"), ("renormalize", "norm_topk_prob"),
        ("routed_scaling_factor", "routed_scaling_factor"))),
    # gpt-oss: top-k of the logits, softmax over the chosen (= softmax_topk renormalized)
    "gpt_oss": Family("softmax_topk", (("renormalize", True),), activation="swigluoai",
                      interleaved=True, fused_inputs_first=True),
}
UNKNOWN_FAMILY = Family(None)


def family(config: dict) -> Family:
    return FAMILIES.get(config.get("model_type", ""), UNKNOWN_FAMILY)


def classify(name: str, layer: int | None) -> tuple[str, str]:
    """(kind, why) of a tensor that is not one of layer `layer`'s routed experts."""
    m = LAYER.match(name)
    if m is None:
        for pattern, kind, why in MODEL_WIDE:
            if pattern.search(name):
                return kind, why
        return OTHER, "not part of an MoE layer"
    if int(m["L"]) != layer:
        return OTHER_LAYERS
    rest = name[m.end():]
    for pattern, kind, why in NOT_ROUTED:
        if pattern.search(rest):
            return kind, why
    return OTHER, "not a routed expert's tensor"
