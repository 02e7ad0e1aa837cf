"""A conformance case and its stable, readable id.

A case is (backend, the variant: the scheme and its checkpoint options (`Variant`), problem
shape and options, routing, seed). Its id is built from those fields alone, in a fixed order,
so the same case has the same id in every run, on every host and in every shard:

    triton/gptq-int4[act_order,g64,gptq_v2,asym]/M33.K256.N128.E8.k2/bf16.silu.bias.ep-3f2a9c1d/s0

A strided case (every checkpoint tensor and input with the same values in non-contiguous
memory, conformance/harness/strides.py) ends its options with `strided`: .../bf16.silu.strided/s0.

A model-size case (the `ci` and `certify` suites' layers of reference/models.py at full
size) names its model after the scheme, so `-k deepseek` and `--model deepseek-v3` find it:

    triton/gptq-int4/deepseek-v3/M256.K7168.N2048.E256.k8/bf16.silu/s0

(before issue 33 these ids had no model part; no other case's id changed.)

A case on a layer of a model folder (`moecert run --checkpoint`,
conformance/harness/model_layers.py) names the model and the layer after the backend, and the
hidden states' file by digest when they come from one; routed by the layer's own router it says
`route-router`:

    triton/qwen3-moe-w4a16@L1/ct-int4[g32]/M17.K256.N128.E8.k2/bf16.silu.route-router/s0

The id's bracket and the JSON's `attrs` are the variant's `overrides()` (what differs from the
scheme's defaults), so a variant and the case's text say one thing.

`to_json` / `from_json` carry a case whole (the id names an expert map only by digest), so a
failing case can be rerun from the command line.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields

from moecert.reference import Checkpoint, MoEProblem, synthesize
from moecert.reference.schemes import Variant

from .model_layers import LayerSource, model_layer

# The variant's attributes, in id order, and how each reads in an id.
_ATTR_LABELS = {
    "checkpoint_format": lambda v: str(v),
    "group_size": lambda v: f"g{v}",
    "sym": lambda v: "sym" if v else "asym",
    "act_order": lambda v: "act_order" if v else "no_act_order",
    "weight_strategy": lambda v: str(v),
    "activation": lambda v: f"a-{v}",
    "mx_scale_rule": lambda v: f"mx-{v}",
}
_PROBLEM_DEFAULTS = {f.name: f.default for f in fields(MoEProblem)}

# How tokens are routed (conformance/harness/inputs.py): random distinct experts; "skewed": one
# expert takes every token; "sparse": half of the experts get no token; "router": a model layer's
# own router on the hidden states (cases with a `source` only).
DRAWN_ROUTINGS = ("random", "skewed", "sparse")  # any case's
ROUTINGS = (*DRAWN_ROUTINGS, "router")


@dataclass(frozen=True)
class Case:
    backend: str
    variant: Variant  # the scheme and its attributes; a scheme name is its defaults
    problem: MoEProblem
    seed: int = 0
    routing: str = "random"
    # Which checks run (conformance/harness/suites.py): not part of the case's identity.
    depth: str = field(default="full", compare=False)
    # Every tensor the backend receives in a non-contiguous layout (conformance/harness/strides.py).
    strided: bool = False
    # The model layer the checkpoint (and the router, and maybe the inputs) come from; None:
    # synthesized from the seed.
    source: LayerSource | None = None
    # The model of reference/models.py whose layer this synthesized case has (the suites'
    # model-size cases); None for every other case.
    model: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "variant", Variant.of(self.variant))
        if self.routing not in ROUTINGS:
            raise ValueError(f"unknown routing {self.routing!r}; known: {', '.join(ROUTINGS)}")
        if not isinstance(self.strided, bool):
            raise ValueError(f"strided: expected true or false, found {self.strided!r}")
        if self.routing == "router" and self.source is None:
            raise ValueError("routing 'router' needs a model layer (source)")

    def __hash__(self):
        return hash(self.case_id)

    @property
    def scheme(self) -> str:
        return self.variant.scheme

    @property
    def attrs(self) -> dict:
        """The variant's attributes beyond the scheme's defaults (the id's bracket, JSON)."""
        return self.variant.overrides()

    @property
    def scheme_label(self) -> str:
        """The scheme and its variant as ids read: `gptq-int4[act_order,g64]`."""
        given = self.attrs
        attrs = ",".join(_ATTR_LABELS[k](given[k]) for k in _ATTR_LABELS if k in given)
        return f"{self.scheme}[{attrs}]" if attrs else self.scheme

    @property
    def case_id(self) -> str:
        P = self.problem
        scheme = self.scheme_label
        shape = f"M{P.M}.K{P.K}.N{P.N}.E{P.E}.k{P.topk}"
        options = [P.dtype, P.activation]
        if P.bias:
            options.append("bias")
        if P.apply_router_weight_on_input:
            options.append("router_on_input")
        if P.expert_map is not None:
            options.append(f"ep-{expert_map_digest(P.expert_map)}")
        if P.activation_format != _PROBLEM_DEFAULTS["activation_format"]:
            options.append(P.activation_format)
        if self.routing != "random":
            options.append(f"route-{self.routing}")
        if self.strided:
            options.append("strided")
        source = "" if self.source is None else f"{self.source.label}/"
        model = "" if self.model is None else f"{self.model}/"
        return (f"{self.backend}/{source}{scheme}/{model}{shape}/{'.'.join(options)}"
                f"/s{self.seed}")

    def to_json(self) -> str:
        return json.dumps({"backend": self.backend, "scheme": self.scheme,
                           "problem": asdict(self.problem), "attrs": self.attrs,
                           "seed": self.seed, "routing": self.routing, "depth": self.depth,
                           "strided": self.strided,
                           **({} if self.source is None else {"source": self.source.to_dict()}),
                           **({} if self.model is None else {"model": self.model})},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Case:
        d = json.loads(text)
        attrs = d.get("attrs", {})
        unknown = set(attrs) - set(_ATTR_LABELS)
        if unknown:
            raise ValueError(f"unknown checkpoint attributes {sorted(unknown)}; known: "
                             f"{', '.join(_ATTR_LABELS)}")
        problem = dict(d["problem"])
        if problem.get("expert_map") is not None:
            problem["expert_map"] = tuple(problem["expert_map"])
        return cls(d["backend"], Variant(d["scheme"], **attrs), MoEProblem(**problem),
                   d.get("seed", 0), d.get("routing", "random"), d.get("depth", "full"),
                   d.get("strided", False), LayerSource.from_dict(d.get("source")),
                   d.get("model"))

    def checkpoint(self) -> Checkpoint:
        """The case's checkpoint: the model layer's as read, or synthesized fresh from its
        seed."""
        if self.source is not None:
            return model_layer(self.source.folder, self.source.layer).checkpoint
        return synthesize(self.variant, self.problem, seed=self.seed)


def expert_map_digest(expert_map: tuple[int, ...]) -> str:
    """8 hex digits naming an expert map (the full map is a column of the results)."""
    text = ",".join(map(str, expert_map)).encode()
    return hashlib.sha256(text).hexdigest()[:8]
