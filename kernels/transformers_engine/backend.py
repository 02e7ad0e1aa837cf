"""Hugging Face transformers' own MoE layers as moecert backends (optional: needs an
importable `transformers`, 5.x).

    transformers             transformers' default experts implementation ("eager": the
                             model class's own per-expert loop)
    transformers-grouped_mm  `experts_implementation="grouped_mm"` (integrations/moe.py:
                             torch's grouped_mm, or transformers' fallback loop where torch
                             has no kernel for the weights' dtype or device)
    transformers-batched_mm  `experts_implementation="batched_mm"` (one bmm per token and
                             expert)

One backend per experts implementation (not a variant of one): each is a separate code path
of transformers' that a user picks by name, and the registry, the claims and the expected-
failure lists are per backend. The GPU-only implementations (deepgemm, sonicmoe) are not
registered: they need CUDA kernels from the Hub.

Nothing of transformers is re-implemented here. A synthesized case's checkpoint is written
as the model folder its producer writes (folder.py: the producer's quantization_config, the
per-expert tensors under the file's names) and read back by `AutoModelForCausalLM.
from_pretrained`, which resolves the quantizer from the config, converts the per-expert
tensors into transformers' fused expert tensors, and quantizes, dequantizes or keeps them as
that quantizer does on this machine. The case then calls the decoder layer's experts module
(`model.model.layers[L].mlp.experts`) with the case's hidden states, `top_k_index` and
`top_k_weights`. A model folder (`moecert run --checkpoint`) is read by its own model class,
decoder layer L alone (one_layer.py: a one-layer model of L's kind handed L's tensors only),
and the case runs that layer's experts.

Claims are transformers': the quantizer its `AutoHfQuantizer` resolves for the file's
quantization_config, and that quantizer's `validate_environment` on this machine (a missing
package, a device it needs); their exception is the reason. What fails after that (at load
or in the forward) is judged as the case's result, not refused.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import warnings
from pathlib import Path

import torch
from moecert.reference.schemes import ACT_NONE, FP8_BLOCK, STRATEGY_BLOCK

from ..engine_inputs import (
    check_engine_checkpoint,
    engine_output,
    folder_origin,
    not_this_machine,
    origin_text,
)
from ..errors import BackendError, UnsupportedError, check_layer
from ..platform import Platform
from ..quant_config import Variant
from ..vllm_checkpoint import quantization_config
from . import folder, one_layer

_lock = threading.RLock()
_claims: dict[tuple, str | None] = {}


@functools.cache
def _transformers():
    """transformers' modules, imported once; ImportError if it is not installed."""
    import transformers
    from transformers import CONFIG_MAPPING, AutoConfig, AutoModelForCausalLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING
    from transformers.quantizers.auto import AutoHfQuantizer

    transformers.logging.disable_progress_bar()
    major = int(transformers.__version__.split(".")[0])
    if major < 5:
        raise ImportError(f"transformers {transformers.__version__}: the adapter reads "
                          "transformers 5's fused experts (integrations/moe.py)")
    return {"version": transformers.__version__, "auto_config": AutoConfig,
            "model": AutoModelForCausalLM, "quantizer": AutoHfQuantizer,
            "configs": CONFIG_MAPPING, "causal_lm": MODEL_FOR_CAUSAL_LM_MAPPING}


@functools.cache
def _import_error() -> str | None:
    try:
        _transformers()
    except Exception as e:
        return f"transformers is not importable: {type(e).__name__}: {e}"
    return None


def _version() -> str:
    return _transformers()["version"]


class TransformersLayer(torch.nn.Module):
    """One decoder layer's experts module of a model transformers loaded (`experts`; the
    model itself is not kept: its other weights are transformers' random initialization,
    never run), and what the adapter knows of the load."""

    def __init__(self, backend: str, quant: Variant, problem):
        super().__init__()
        self.backend, self.quant, self.problem = backend, quant, problem
        self.experts: torch.nn.Module | None = None
        self.origin: tuple[str, int] | None = None
        self.quantizer: str | None = None  # transformers' HfQuantizer class that loaded it
        self.dequantize: bool | None = None  # the quantizer's config said dequantize
        self.unread: list[str] = []  # file tensors of the experts transformers left unread
        self.uninitialized: list[str] = []  # expert parameters the file did not fill
        self.loaded: str = ""  # what of a model folder from_pretrained was given


class TransformersBackend:
    """transformers' MoE experts, as transformers runs them on this machine."""

    name = "transformers"
    implementation = "eager"

    @property
    def version(self) -> str:
        info = "" if _import_error() else _version()
        return f"transformers {info or '-'} ({self.implementation} experts)"

    def available(self) -> str | None:
        return _import_error()

    # --- claims ----------------------------------------------------------------------------
    def supports(self, variant: Variant, problem, *, platform: Platform | None = None
                 ) -> str | None:
        why = not_this_machine("transformers", platform) or self.available()
        if why:
            return why
        quant = Variant.of(variant)
        why = _adapter_limit(quant, problem)
        if why:
            return why
        return self._claim(quant, problem, None)

    def supports_model_layer(self, folder_path: str, layer: int, variant: Variant, problem
                             ) -> str | None:
        """The claim for decoder layer `layer` of a model folder: transformers' quantizer for
        the folder's own config.json."""
        why = self.available()
        if why:
            return why
        why = _adapter_limit(Variant.of(variant), problem, table=False)
        if why:
            return why
        return self._claim(Variant.of(variant), problem, str(folder_path))

    def _claim(self, quant: Variant, problem, origin: str | None) -> str | None:
        key = (quant, problem.torch_dtype, problem.activation, origin)
        if key not in _claims:
            _claims[key] = _quantizer_verdict(quant, problem, origin)
        return _claims[key]

    # --- the layer -------------------------------------------------------------------------
    def create_layer(self, checkpoint, problem) -> TransformersLayer:
        quant = Variant.of(checkpoint)
        origin = folder_origin(checkpoint)
        why = self.supports(quant, problem) if origin is None else \
            self.supports_model_layer(*origin, quant, problem)
        if why:
            raise UnsupportedError(self.name, why)
        layer = TransformersLayer(self.name, quant, problem)
        layer.origin = origin
        self.load_weights(layer, checkpoint)
        return layer

    def load_weights(self, layer: TransformersLayer, checkpoint) -> None:
        """transformers' from_pretrained on the checkpoint's model folder (a new one written
        for a synthesized checkpoint; the folder itself for a model folder's layer): its
        loader, conversion mapping and quantizer make the experts, which replace the
        layer's. A reload is a new from_pretrained, as transformers reloads weights."""
        check_layer(layer, TransformersLayer, self.name)
        quant = Variant.of(checkpoint)
        if quant != layer.quant:
            raise BackendError("checkpoint", f"the layer's quantization {layer.quant}",
                               str(quant))
        origin = folder_origin(checkpoint)
        if origin != layer.origin:
            raise BackendError("checkpoint", f"tensors of the same kind as the layer was made "
                               f"from ({origin_text(layer.origin)})", origin_text(origin))
        device = _device_of(checkpoint)
        if origin is not None:
            self._load(layer, origin[0], origin[1], device, one=True)
            return
        check_engine_checkpoint(quant, checkpoint, layer.problem)
        tmp = Path(tempfile.mkdtemp(prefix="moecert-transformers-"))
        try:
            folder.write(tmp, quant, checkpoint.tensors, layer.problem)
            self._load(layer, str(tmp), 0, device)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def reload_declined(self, layer: TransformersLayer, checkpoint) -> str | None:
        """Why `checkpoint` cannot be loaded into `layer` (the reload check skips with it),
        else None: a layer read from a model folder is loaded by transformers' from_pretrained
        from that folder's own files, and any other tensors (the check's second checkpoint:
        the folder's tensors with the experts rotated) are not a folder transformers can read;
        the adapter writes folders for synthesized checkpoints only."""
        check_layer(layer, TransformersLayer, self.name)
        origin = folder_origin(checkpoint)
        if layer.origin is None or origin == layer.origin:
            return None
        return (f"the layer was read by transformers from {origin_text(layer.origin)}, and "
                "transformers reloads a folder's layer from that folder's files only; the "
                f"second checkpoint (the folder's tensors, experts rotated) is "
                f"{origin_text(origin)}, not that folder")

    def _load(self, layer: TransformersLayer, path: str, index: int, device,
              one: bool = False) -> None:
        """from_pretrained of the folder at `path`, or (`one`: a model folder's layer) of a
        model of decoder layer `index` alone (one_layer.py: that layer's tensors only, so a
        big folder is neither read nor built whole); the folder itself where that form is
        not known."""
        t = _transformers()
        kwargs = {"dtype": layer.problem.torch_dtype, "output_loading_info": True}
        if device.type != "cpu":
            kwargs["device_map"] = str(device)
        view = one_layer.select(path, index) if one else None
        if isinstance(view, str) or view is None:
            config = json.loads((Path(path) / "config.json").read_text())
            layer.loaded = "the whole folder" + (f" ({view})" if view else "")
        else:
            config = view.config
            layer.loaded = view.describe()
        with _lock, _quiet() as report:
            try:
                if isinstance(view, one_layer.OneLayer):
                    cfg = t["configs"][config["model_type"]].from_dict(config)
                    cfg._experts_implementation = self.implementation
                    model, info = t["causal_lm"][type(cfg)].from_pretrained(
                        None, config=cfg, state_dict=view.state_dict, **kwargs)
                else:
                    model, info = t["model"].from_pretrained(
                        path, experts_implementation=self.implementation, **kwargs)
            except Exception as e:
                # transformers logs what failed in its load report and raises a summary:
                # the report's error lines go with the exception
                detail = _report_errors(report)
                if detail:
                    raise type(e)(f"{e} [load report: {detail}]") from e
                raise
            finally:
                if isinstance(view, one_layer.OneLayer):
                    view.close()
        # the one-layer model holds the layer as its layer 0; its report is named back as
        # the folder names the tensors
        held = 0 if isinstance(view, one_layer.OneLayer) else index
        experts = model.model.layers[held].mlp.experts
        prefix = f"model.layers.{held}.mlp.experts."

        def named(keys):
            return sorted(f"model.layers.{index}.mlp.experts." + k[len(prefix):]
                          for k in keys if k.startswith(prefix))
        layer.unread = named(info.get("unexpected_keys", ()))
        layer.uninitialized = named(info.get("missing_keys", ()))
        # the quantizer the file's config resolves to; transformers drops it from a model it
        # dequantized at load (`hf_quantizer` None then)
        qc = config.get("quantization_config")
        layer.quantizer = type(t["quantizer"].from_config(qc, pre_quantized=True)).__name__ \
            if qc else None
        layer.dequantize = bool(qc) and getattr(model, "hf_quantizer", None) is None
        experts.requires_grad_(False)
        layer.experts = experts.eval()

    def process_weights_after_loading(self, layer: TransformersLayer) -> None:
        """Nothing: transformers converts, quantizes or dequantizes inside from_pretrained
        (its quantizer's _process_model_after_weight_loading has run)."""
        check_layer(layer, TransformersLayer, self.name)

    def describe(self, layer: TransformersLayer) -> str:
        """transformers' experts class and implementation, the quantizer that loaded the
        layer, the dtype its expert weights hold, and what the file held that the load left
        unread or what it left unfilled (transformers' own loading report)."""
        check_layer(layer, TransformersLayer, self.name)
        ex = layer.experts
        impl = getattr(getattr(ex, "config", None), "_experts_implementation", "?")
        text = f"{type(ex).__name__} ({impl})"
        if layer.quantizer:
            text += f"; {layer.quantizer}" + ("(dequantize)" if layer.dequantize else "")
        dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in ex.parameters()})
        text += f"; weights {','.join(dtypes)}"
        if layer.unread:
            text += f"; file tensors left unread: {_few(layer.unread)}"
        if layer.uninitialized:
            text += f"; parameters not in the file: {_few(layer.uninitialized)}"
        if layer.origin is not None:
            text += f"; loaded: {layer.loaded}"
        return text

    def numerics(self, layer: TransformersLayer) -> dict:
        """What transformers' loaded experts compute, read from the loaded module: where the
        expert weights are held as a 16-bit float dtype other than the checkpoint's (a
        quantizer dequantized them at load, e.g. FineGrainedFP8 on a machine without an fp8
        GPU or compressed-tensors' decompression; an fp16 checkpoint cast to a bf16 model),
        the experts run an unquantized layer on those weights: {"weights_dequantized":
        dtype}, and where the file's scheme quantizes activations (which the unquantized
        layer does not) {"activation": "none"} with it: the checks that test the scheme's own
        activation quantization (the exact tier's) then know it is not run. Quantized weights
        held as such declare nothing.

        Experts holding biases (gpt-oss's `GptOssExperts`) add each bias to the product
        already rounded to the model dtype, in every implementation (modeling_gpt_oss.py
        `current_state @ down_proj[e] + down_proj_bias[e]` in bf16; integrations/moe.py
        `_batched_linear` / `_grouped_linear` add it after the matmul): gpt-oss's own
        definition (OpenAI's gpt_oss/torch/model.py adds the bias after the tensor-parallel
        all-reduce of the bf16 product), declared as {"bias_after_rounding": True}.

        The eager experts (every model class's own per-expert loop) weight each expert's
        model-dtype output in float32, cast it back and `index_add_` it into a model-dtype
        buffer expert by expert: the routed sum accumulated in bf16, in increasing expert id,
        declared as {"sum_in_activation_dtype": True}. grouped_mm and batched_mm sum the
        top-k outputs in float32 (integrations/moe.py: "reshape+sum accumulates in fp32"),
        which the exact reading covers."""
        check_layer(layer, TransformersLayer, self.name)
        out = {}
        if self.implementation == "eager":
            out["sum_in_activation_dtype"] = True
        if any(name.endswith("_bias") for name, _ in layer.experts.named_parameters()):
            out["bias_after_rounding"] = True
        dtypes = {p.dtype for p in layer.experts.parameters()}
        if len(dtypes) != 1 or next(iter(dtypes)) not in folder.DTYPES:
            return out
        held = folder.DTYPES[next(iter(dtypes))]
        if layer.quant.scheme == {"bfloat16": "bf16", "float16": "fp16"}[held]:
            return out
        out["weights_dequantized"] = held
        if layer.quant.activation != ACT_NONE:
            out["activation"] = ACT_NONE
        return out

    def apply(self, layer: TransformersLayer, hidden_states, topk_weights, topk_ids, *,
              out=None, **opts) -> torch.Tensor:
        check_layer(layer, TransformersLayer, self.name)
        out = engine_output(layer.problem, hidden_states, opts, out)
        if hidden_states.shape[0] == 0:
            return out
        # the routing as transformers' router hands it to the experts: int64 expert ids; the
        # weights are the case's (float32), which every experts implementation takes
        with torch.inference_mode():
            y = layer.experts(hidden_states, topk_ids.to(torch.int64), topk_weights)
        out.copy_(y)
        return out


class TransformersGroupedMmBackend(TransformersBackend):
    name = "transformers-grouped_mm"
    implementation = "grouped_mm"


class TransformersBatchedMmBackend(TransformersBackend):
    name = "transformers-batched_mm"
    implementation = "batched_mm"


def _quantizer_verdict(quant: Variant, problem, origin: str | None) -> str | None:
    """transformers' answer for the file's quantization_config on this machine: None where
    the quantizer it resolves accepts the environment, else its refusal."""
    t = _transformers()
    try:
        if origin is None:
            qc = quantization_config(quant)
        else:
            qc = getattr(t["auto_config"].from_pretrained(origin), "quantization_config", None)
    except Exception as e:
        return f"transformers {_version()} refuses the config: {_refusal(e)}"
    if qc is None:
        return None
    try:
        with _quiet():
            quantizer = t["quantizer"].from_config(qc, pre_quantized=True)
            quantizer.validate_environment(dtype=problem.torch_dtype, device_map=None,
                                           weights_only=True)
    except Exception as e:
        return f"transformers {_version()} refuses it: {_refusal(e)}"
    kernel = _hub_kernel_missing(quantizer)
    if kernel:
        return (f"transformers {_version()} runs it with {kernel}, a kernel it fetches from "
                "the Hugging Face hub at first use (integrations/hub_kernels.py), which does "
                "not load here (no hub, or no `kernels` package)")
    return None


# Quantizers whose kept (not dequantized) path runs a kernel transformers loads from the hub
# (its name in transformers' hub kernel mapping). On a GPU FineGrainedFP8 keeps fp8 weights
# and needs `kernels-community/finegrained-fp8`; on a CPU it dequantizes and needs none.
HUB_KERNELS = {"FineGrainedFP8HfQuantizer": "finegrained-fp8"}


def _hub_kernel_missing(quantizer) -> str | None:
    """The hub kernel the quantizer's path needs and cannot load here, or None."""
    name = HUB_KERNELS.get(type(quantizer).__name__)
    if name is None or getattr(quantizer.quantization_config, "dequantize", False):
        return None
    from transformers.integrations.hub_kernels import lazy_load_kernel

    with _quiet():
        return None if lazy_load_kernel(name) is not None else name


class _Report(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record):
        with contextlib.suppress(Exception):
            self.lines.extend(record.getMessage().splitlines())


@contextlib.contextmanager
def _quiet():
    """transformers' load-time warnings and logs (missing weights of the model's other
    modules, which the adapter never runs) kept out of the run's output, and collected
    (the load report names a conversion's failure only there)."""
    report = _Report()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logger = logging.getLogger("transformers")
        level, handlers, propagate = logger.level, logger.handlers[:], logger.propagate
        logger.handlers[:] = [report]
        logger.propagate = False
        logger.setLevel(logging.WARNING)
        try:
            yield report
        finally:
            logger.handlers[:] = handlers
            logger.propagate = propagate
            logger.setLevel(level)


def _report_errors(report: _Report) -> str:
    """The exceptions in transformers' load report (a conversion op's "ValueError: ..."),
    then the report's "Error: <op> on tensors destined for <parameter>" lines."""
    lines = [line.strip() for line in report.lines]
    raised = [line for line in lines if re.match(r"^\w+(Error|Exception): ", line)
              and not line.startswith("Error:")]
    where = [line for line in lines if line.startswith("Error:")]
    return "; ".join(dict.fromkeys(raised + where))[:600]


def _adapter_limit(quant: Variant, problem, table: bool = True) -> str | None:
    """What the adapter cannot hand transformers (not a quantizer's refusal). A synthesized
    case (`table`) is written as a Qwen3-MoE folder, which has no expert biases, no other
    activation; a model folder runs its own model class, which computes what its config
    says (the reference reads the same config: gpt-oss's biases and swigluoai)."""
    if problem.activation_format != "standard":
        return ("batched activation format: transformers' experts take tokens with their "
                "top_k_index only")
    if problem.expert_map is not None:
        return ("expert_map: transformers maps experts only under its expert-parallel "
                "sharding (several ranks); the adapter runs one process")
    if problem.apply_router_weight_on_input:
        return ("router weight on input: transformers' experts weight each expert's output, "
                "never its input")
    if problem.torch_dtype not in folder.DTYPES:
        return f"dtype {problem.dtype}: a model folder here holds bf16 or fp16"
    if not table:
        return None
    gpt_oss = folder.is_gpt_oss(problem)
    if gpt_oss and not problem.bias:
        return ("swigluoai without expert biases: the model whose experts compute it "
                "(GptOssExperts) always adds gate_up_proj_bias / down_proj_bias")
    if not gpt_oss and problem.activation not in folder.HIDDEN_ACT:
        return (f"activation {problem.activation}: Qwen3MoeExperts gates act(gate) * up with "
                f"ACT2FN[hidden_act] ({', '.join(folder.HIDDEN_ACT)} here); gpt-oss's "
                f"experts compute {folder.GPT_OSS_ACTIVATION} (gate/up rows interleaved)")
    if not gpt_oss and problem.bias:
        return ("expert bias: Qwen3MoeExperts holds no gate_up_proj / down_proj bias (gpt-oss's "
                f"experts do, with {folder.GPT_OSS_ACTIVATION} only)")
    try:
        qc = quantization_config(quant)
    except ValueError as e:
        return str(e)
    if gpt_oss and not folder.gpt_oss_format(qc):
        return (f"{quant.describe()} with swigluoai: the adapter writes gpt-oss folders in the "
                f"formats of its release (quant_method {', '.join(folder.GPT_OSS_METHODS)}) "
                "and of transformers (unquantized) only")
    if quant.weight_strategy == STRATEGY_BLOCK and problem.N % FP8_BLOCK:
        return (f"block scales with N={problem.N} not a multiple of {FP8_BLOCK}: a scale "
                "block of the checkpoint's fused w13 spans gate and up rows, which per-expert "
                "gate_proj / up_proj files cannot hold")
    if not gpt_oss and qc is not None and folder.gpt_oss_format(qc):
        return (f"{qc['quant_method']}: its producer (the gpt-oss release) writes gpt-oss's "
                f"fused expert tensors, whose experts compute {folder.GPT_OSS_ACTIVATION} with "
                f"biases; a {problem.activation} case has no such file")
    return None



def _device_of(checkpoint) -> torch.device:
    t = next(iter(checkpoint.tensors.values()), None)
    return t.device if isinstance(t, torch.Tensor) else torch.device("cpu")


def _refusal(e: Exception) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}"


def _few(items: list, n: int = 3) -> str:
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")



os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

__all__ = ["TransformersBackend", "TransformersBatchedMmBackend",
           "TransformersGroupedMmBackend", "TransformersLayer"]
