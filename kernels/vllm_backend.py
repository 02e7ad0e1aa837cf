"""vLLM's own MoE layers as moecert backends (optional: needs an importable `vllm`).

    vllm             vLLM as it runs on this machine: its quant config, its oracle's choice of
                     experts kernel, its weight loaders, its process_weights_after_loading and
                     its kernel. Claims are vLLM's: what its oracle refuses, or its layer
                     raises at creation, is unsupported with vLLM's reason.
    vllm-cpu-forced  the same, with vLLM's one CPU capability gate (`torch.cpu.
                     _is_amx_tile_supported`, which every quantized CPU MoE kernel of vLLM 0.32
                     requires) answered True while vLLM runs, so that vLLM's quantized weight
                     processing and CPU kernels run on a CPU without AMX. There, kernels that
                     execute AMX instructions (vLLM's `isa = "amx"` experts) are refused: they
                     would die with SIGILL. On a CPU with AMX the gate already answers True:
                     this backend runs what `vllm` runs (and says so in its backend detail).

Which of the two sees the gate True depends on the host, so the expected-failure list names
vLLM's AMX-gated behaviour once, as the backend group `vllm-amx` (`amx_gate_backends`).

Nothing of vLLM is re-implemented here: the adapter turns a moecert checkpoint into what a
model file holds (kernels/vllm_checkpoint.py), hands it to vLLM's loaders, and calls vLLM.
A checkpoint read unchanged from a model folder (its `origin`, `moecert run --checkpoint`)
goes to vLLM as the folder itself: vLLM's config path on the folder's own config, the
file's tensors under the file's names through vLLM's own expert mapping
(kernels/vllm_folder.py); no moecert slicing.

Each vLLM runner registers itself in vLLM's forward context (its compilation config), which
vLLM never empties; the adapter takes it out when the harness lets go of the layer (a
finalizer on VllmLayer), and at once for a runner built only to answer a claim, so that a
worker process does not keep every layer's parameters it ever built (`_registration`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import tempfile
import threading
import types
import weakref

import torch
from moecert.reference.schemes import (
    ACT_DYNAMIC_GROUP,
    ACT_DYNAMIC_TENSOR,
    ACT_DYNAMIC_TOKEN,
    ACT_MXFP4,
    ACT_MXFP8,
    ACT_NONE,
    ACT_NVFP4,
    ACT_STATIC_TENSOR,
)

from . import vllm_folder
from .engine_inputs import (
    check_engine_checkpoint,
    engine_output,
    folder_origin,
    not_this_machine,
    origin_text,
)
from .errors import BackendError, UnsupportedError, check_layer, exception_text
from .platform import Platform
from .quant_config import Variant
from .vllm_checkpoint import ACTIVATIONS, expert_tensors, file_config, quantization_config

# The runner's prefix: a model's `layers.0.mlp.experts`; names passed to its load_weights are
# relative to it ("0.gate_proj.qweight"), as vLLM's AutoWeightsLoader passes them.
PREFIX = "model.layers.{}.mlp.experts"
AMX_ISA = "amx"
# torch's answer before any forced call replaces it: whether this CPU executes AMX tiles
NATIVE_AMX_GATE = torch.cpu._is_amx_tile_supported
NO_KERNEL = "NONE"  # the backend enum value vLLM's oracles use for "nothing runs here"
# vLLM's CPU experts call one compiled entry, `fused_experts_cpu(..., moe_comp_method, ...)`;
# the method vLLM passes names the computation (its `CPUQuantMethod`), in moecert's
# activation modes: what the kernel does to each GEMM's input
CPU_KERNEL_MODULE = "vllm.model_executor.layers.fused_moe.experts.cpu_moe"
CPU_KERNEL_ENTRY = "fused_experts_cpu"
CPU_METHOD_ARG = 6  # the position of moe_comp_method in fused_experts_cpu's arguments
CPU_METHOD_ACTIVATIONS = {"INT4_W4A8": "dynamic-token", "INT8_W8A8": "dynamic-token",
                          "FP8_W8A16": "none", "MXFP4": "none"}

_lock = threading.RLock()
_selections: dict[tuple, tuple[str | None, str]] = {}
_layer_ids = iter(range(1 << 62))


@functools.cache
def _vllm():
    """vLLM's modules, imported once; ImportError if vLLM is not installed."""
    import vllm
    from vllm.config import ModelConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.model_executor.layers.fused_moe import layer as fused_moe_layer
    from vllm.model_executor.layers.quantization import get_quantization_config
    from vllm.platforms import current_platform

    # the function that builds a MoE layer (router, experts, runner): `FusedMoEFactory` since
    # vLLM 0.27, `FusedMoE` in 0.25 (the GPU gate's version); same arguments
    factory = getattr(fused_moe_layer, "FusedMoEFactory", None) or fused_moe_layer.FusedMoE

    config = VllmConfig()
    with set_current_vllm_config(config):
        # one process, one rank: vLLM's parallel state exists before any layer is built
        init_distributed_environment(
            world_size=1, rank=0, local_rank=0, backend="gloo",
            distributed_init_method=f"file://{tempfile.mkdtemp(prefix='moecert-vllm-')}/init")
        initialize_model_parallel(1, 1)
        if current_platform.is_cuda_alike():
            # vLLM's GPU worker makes the workspace its kernels draw from before any layer
            # runs (v1/worker/gpu_worker.py); the CPU worker makes none
            from vllm.v1.worker.workspace import init_workspace_manager
            init_workspace_manager(torch.device("cuda"))
    return {"version": vllm.__version__, "config": config, "set_config": set_current_vllm_config,
            "factory": factory, "quant_config": get_quantization_config,
            "verify_quantization": ModelConfig._verify_quantization}


@functools.cache
def _import_error() -> str | None:
    try:
        _vllm()
    except Exception as e:  # ImportError, or a vLLM that fails to start here
        return f"vllm is not importable: {type(e).__name__}: {e}"
    return None


class VllmLayer(torch.nn.Module):
    """One vLLM MoE layer (its MoERunner as `runner`) and what the adapter knows of it; once
    it is garbage, its runner's registration leaves vLLM's forward context (create_layer)."""

    def __init__(self, backend: str, runner, quant: Variant, problem):
        super().__init__()
        self.runner = runner
        self.backend, self.quant, self.problem = backend, quant, problem
        self.processed = False  # a record for load_weights, not a guard on processing
        # what vLLM made of the layer, read from vLLM as it runs: the dtype its loader
        # allocated for the weight scales, and the method its CPU kernel was called with
        self.scale_dtype: torch.dtype | None = None
        self.shard_scales = False  # the checkpoint's w13 had one per-tensor scale per shard
        self.kernel_method: str | None = None
        self.origin: tuple[str, int] | None = None  # the model folder and layer vLLM read
        self.model_config = None  # vLLM's ModelConfig the layer was built under, if it asked

    @property
    def experts(self):
        return self.runner.routed_experts

    @property
    def quant_method(self):
        return self.experts.quant_method


class VllmBackend:
    """vLLM's MoE layer, as vLLM runs it on this machine."""

    name = "vllm"
    forced_amx = False

    @property
    def version(self) -> str:
        info = "" if _import_error() else _vllm()["version"]
        return f"vllm {info or '-'}" + (" (CPU AMX gate forced)" if self.forced_amx else "")

    def available(self) -> str | None:
        why = _import_error()
        if why:
            return why
        if self.forced_amx and Platform.current().kind != "cpu":
            return "the CPU capability override is for CPU runs only"
        return None

    # --- claims --------------------------------------------------------------------------
    def supports(self, variant: Variant, problem, *, platform: Platform | None = None
                 ) -> str | None:
        why = not_this_machine("vLLM", platform) or self.available()
        if why:
            return why
        return self._claim(Variant.of(variant), _shape_key(problem), problem)

    def chosen(self, variant: Variant, problem) -> str:
        """vLLM's oracle's choice for the case: "BACKEND (ExpertsClass)"."""
        return self._selection(Variant.of(variant), _shape_key(problem), problem)[1]

    def _claim(self, quant, key, problem) -> str | None:
        return self._selection(quant, key, problem)[0]

    def supports_model_layer(self, folder: str, layer: int, variant: Variant, problem
                             ) -> str | None:
        """The claim for decoder layer `layer` of the model folder `folder`: vLLM's oracle
        on the layer built from the folder's own config (vLLM's config path), not from the
        table's config for the variant."""
        why = self.available()
        if why:
            return why
        origin = (str(folder), int(layer))
        return self._selection(Variant.of(variant), _shape_key(problem), problem,
                               origin)[0]

    def _selection(self, quant: Variant, key: tuple, problem,
                   origin: tuple[str, int] | None = None) -> tuple[str | None, str]:
        """(why not, vLLM's choice), asked of vLLM once per (mode, variant or model layer,
        shape): the layer is built, which runs vLLM's oracle; M, the seed and routing do not
        matter."""
        memo = (self.forced_amx, quant, key, origin)
        if memo not in _selections:
            _selections[memo] = self._select(quant, problem, origin)
        return _selections[memo]

    def _select(self, quant: Variant, problem, origin=None) -> tuple[str | None, str]:
        why = _adapter_limit(quant, problem, table=origin is None)
        if why:
            return why, ""
        try:
            with self._running():
                runner = self._runner(quant, problem, origin)
        except UnsupportedError as e:
            return e.reason, ""
        except Exception as e:
            return f"vLLM {_vllm()['version']} refuses it: {exception_text(e)}", ""
        # built to ask vLLM's oracle only: out of vLLM's forward context once read (that
        # entry would hold its parameters, on the GPU, as long as the process)
        registration = _registration(runner)
        try:
            return self._selected(runner, problem)
        finally:
            if registration is not None:
                _forget(*registration)

    def _selected(self, runner, problem) -> tuple[str | None, str]:
        """(why not, vLLM's choice) read off the runner vLLM built for the claim."""
        if problem.bias and not hasattr(runner.routed_experts, "w13_bias"):
            # vLLM took has_bias but its quant method made no bias parameters: its loader
            # fails on the first expert bias ("no attribute 'w13_bias'", 0.25.1's quantized
            # methods on a GPU), so a biased layer of this scheme does not load in vLLM
            method = type(runner.routed_experts.quant_method).__name__
            return (f"vLLM {_vllm()['version']}'s {method} makes no expert bias parameters "
                    "(a biased layer does not load)"), ""
        choice, isa = _choice(runner.routed_experts.quant_method)
        if choice.startswith(NO_KERNEL):
            # vLLM's fp8 oracle answers NONE off CUDA/ROCm instead of raising; the layer is
            # built and only processing fails (a CUDA-only op): no claim
            return f"vLLM {_vllm()['version']}'s oracle chose no experts kernel ({choice})", choice
        if self.forced_amx and isa == AMX_ISA and not cpu_has_amx():
            return (f"vLLM chose {choice}, an AMX kernel: with the capability gate forced it "
                    "would execute AMX tile instructions this CPU lacks (SIGILL)"), choice
        return None, choice

    # --- the layer -----------------------------------------------------------------------
    def create_layer(self, checkpoint, problem) -> VllmLayer:
        quant = Variant.of(checkpoint)
        origin = folder_origin(checkpoint)
        why = self.supports(quant, problem) if origin is None else \
            self.supports_model_layer(*origin, quant, problem)
        if why:
            raise UnsupportedError(self.name, why)
        check_engine_checkpoint(quant, checkpoint, problem)
        with self._running(), _uninitialized_memory_filled():
            runner = self._runner(quant, problem, origin)
        layer = VllmLayer(self.name, runner, quant, problem)
        layer.model_config = getattr(runner, "moecert_model_config", None)
        registration = _registration(runner)
        if registration is not None:
            # vLLM's forward context holds the runner (and its parameters) until the adapter
            # takes it out: when the harness lets go of the layer (the case's end, a retired
            # layer), not at the process's end
            weakref.finalize(layer, _forget, *registration)
        layer.origin = origin
        layer.scale_dtype = _scale_param_dtype(layer, quant)
        scale = checkpoint.tensors.get("w13_weight_scale")
        layer.shard_scales = bool(scale is not None and scale.dim() == 2
                                  and not torch.equal(scale[:, 0], scale[:, 1]))
        self.load_weights(layer, checkpoint)
        return layer

    def load_weights(self, layer: VllmLayer, checkpoint) -> None:
        """Per-expert tensors through the runner's load_weights (each parameter's own
        weight_loader per expert and shard), as vLLM's model loader feeds a model file."""
        check_layer(layer, VllmLayer, self.name)
        quant = Variant.of(checkpoint)
        if quant != layer.quant:
            raise BackendError("checkpoint", f"the layer's quantization {layer.quant}",
                               str(quant))
        check_engine_checkpoint(quant, checkpoint, layer.problem)
        if layer.processed:
            # vLLM reloads a processed model through its layerwise reload
            # (model_executor/model_loader/reload), which needs a whole model and its
            # ModelConfig; its per-parameter loaders alone would write checkpoint bytes into
            # kernel-format tensors
            raise BackendError("layer", "an unprocessed vLLM layer (the adapter does not "
                               "drive vLLM's layerwise reload)", "a processed layer")
        origin = folder_origin(checkpoint)
        if origin != layer.origin:
            raise BackendError("checkpoint", f"tensors of the same kind as the layer was made "
                               f"from ({origin_text(layer.origin)})", origin_text(origin))
        with self._running(layer):
            if origin is not None:  # the folder's own files through vLLM's mapping
                try:
                    vllm_folder.load(layer.runner, *origin, layer.problem.E)
                except vllm_folder.FolderRefusal as e:
                    raise UnsupportedError(self.name, f"vLLM {_vllm()['version']}'s model "
                                           f"loader refuses the file: {e}") from None
                return
            weights = expert_tensors(quant, checkpoint.tensors, layer.problem.N,
                                     gated=layer.problem.gated,
                                     activation=layer.problem.activation)
            list(layer.runner.load_weights(weights))

    def process_weights_after_loading(self, layer: VllmLayer) -> None:
        """vLLM's quant method's process_weights_after_loading, called as vLLM's model
        loader calls it; no guard of the adapter's own (a second call is vLLM's business)."""
        check_layer(layer, VllmLayer, self.name)
        layer.processed = True
        with self._running(layer):
            layer.quant_method.process_weights_after_loading(layer.experts)

    def describe(self, layer: VllmLayer) -> str:
        """What vLLM runs for this processed layer: its oracle's backend and the experts
        class of the kernel its processing built, e.g. "CPU (CPUExpertsInt4)"; the forced
        mode says so ("; CPU AMX gate forced")."""
        check_layer(layer, VllmLayer, self.name)
        backend, _ = _choice(layer.quant_method)
        kernel = getattr(layer.quant_method, "moe_kernel", None)
        experts = getattr(getattr(kernel, "impl", None), "fused_experts", None)
        if experts is not None:  # the class that runs, where processing built the kernel
            backend = f"{backend.split(' (')[0]} ({type(experts).__name__})"
        elif backend == "? (?)":  # no oracle choice, no modular kernel: the method's own call
            backend = f"{type(layer.quant_method).__name__} (no modular kernel)"
        if self.forced_amx:
            backend += "; CPU AMX gate forced" + (" (this CPU has AMX)" if cpu_has_amx() else "")
        return backend

    def numerics(self, layer: VllmLayer) -> dict:
        """What vLLM's processed layer computes, read from vLLM: the dtype its loader keeps
        the weight scales in, the activation quantization of the kernel it calls (the
        method vLLM's CPU experts pass their compiled kernel; elsewhere the experts' quant
        config), and whether its processing requantized per-shard fp8 w13 weights to one
        scale per expert (the processed w13_weight_scale has one value per expert)."""
        check_layer(layer, VllmLayer, self.name)
        out = {}
        if layer.scale_dtype is not None:
            out["weight_scale_dtype"] = str(layer.scale_dtype).removeprefix("torch.")
        mode = self._kernel_activation(layer)
        if mode is not None:
            out["activation"] = mode
        if mode == ACT_DYNAMIC_GROUP and _deep_gemm_e8m0():
            out["activation_scale_pow2"] = True
        if layer.problem.apply_router_weight_on_input and self._runs_prepare_step(layer):
            # every vLLM prepare step scales the input by `topk_weights.to(a1.dtype)`
            out["router_weight_in_activation_dtype"] = True
        elif layer.problem.apply_router_weight_on_input:
            # a method that calls fused_experts itself (0.25.1's Quark int8): its Triton
            # kernel multiplies GEMM1's float32 output by the weight (MUL_ROUTED_WEIGHT); on
            # the H200, 1.5e-3 to 1.7e-3 from that reading, 1.6e-2 to 2.1e-2 from x * r
            # (tools/vllm_repro/gpu_reduce.py int8-router)
            out["router_weight_on_gemm1_output"] = True
        if layer.problem.activation in _ROUNDED_GATE_ACTIVATIONS \
                and _engine_device().type == "cuda":
            # the CUDA silu_and_mul / gelu_and_mul every GPU MoE kernel calls between its
            # GEMMs (csrc/activation_kernels.cu): the activation returns the element type,
            # then multiplies up; vLLM's CPU experts compute act * up in fp32
            out["gate_activation_in_activation_dtype"] = True
        if self._rounds_int8_tokens_half_away(layer, mode):
            out["activation_round_half_away"] = True
        if self._quantizes_fp8_in_float32(layer, mode):
            out["activation_fp8_float32"] = True
        scale = getattr(layer.experts, "w13_weight_scale", None)
        if layer.shard_scales and isinstance(scale, torch.Tensor) \
                and scale.numel() == layer.problem.E:
            out["w13_requantized"] = _requantized_via()
        return out

    def _kernel_activation(self, layer: VllmLayer) -> str | None:
        if layer.kernel_method is None and not self._one_token(layer):
            return None
        if layer.kernel_method is not None:
            return CPU_METHOD_ACTIVATIONS.get(layer.kernel_method)
        experts = self._experts_class(layer)
        if experts is None:
            # a method with no modular kernel calls fused_experts with its own quant config
            # (made by `_ensure_moe_quant_config_init`, which apply calls): 0.25.1's
            # MoeWNA16, where Marlin refuses a w4a8-int8 layer, passes int4_w4a16's (no
            # activation quantization). Read as int8 tokens, its rows were 1.5e-2 to 2.0e-2
            # from the reference and its norm ratio 0.990-1.005 on an H200 (repeat_rows.py)
            method = getattr(layer.experts, "quant_method", None)
            return _quant_config_activation(getattr(method, "moe_quant_config", None))
        return _quant_config_activation(getattr(experts, "quant_config", None))

    def _one_token(self, layer: VllmLayer) -> bool:
        """One token through the layer, to see the call it makes (the CPU experts' compiled
        method; a method's quant config): False when it fails (the case's own apply reports
        it)."""
        P = layer.problem
        g = torch.Generator().manual_seed(0)
        device = _engine_device()
        x = torch.randn(1, P.K, generator=g).to(device, P.torch_dtype)
        ids = torch.arange(P.topk, dtype=torch.int32, device=device)[None]
        w = torch.full((1, P.topk), 1.0 / P.topk, device=device)
        try:
            self.apply(layer, x, w, ids)
        except Exception:
            return False
        return True

    def _runs_prepare_step(self, layer: VllmLayer) -> bool:
        """Whether the layer runs through a modular kernel's prepare step (the CPU experts'
        compiled entry, or the experts class processing built), rather than a quant method
        calling fused_experts itself."""
        return layer.kernel_method is not None or self._experts_class(layer) is not None

    def _rounds_int8_tokens_half_away(self, layer: VllmLayer, mode: str | None) -> bool:
        """Whether the layer's dynamic per-token int8 activations go through vLLM's
        per_token_quant_int8 (quantization/utils/int8_utils.py: x * (127 / amax) in float32,
        libdevice round, half away from zero): fused_experts and the Triton experts quantize
        with it on CUDA (fused_moe/utils.py _int8_quantize); other kernels are not read."""
        if _engine_device().type != "cuda" or (mode or layer.quant.activation) \
                != ACT_DYNAMIC_TOKEN or layer.quant.info.activation_element != "int8":
            return False
        experts = self._experts_class(layer)
        if experts is None:
            method = getattr(layer.experts, "quant_method", None)
            return type(method).__name__ in _FUSED_EXPERTS_METHODS
        return any(c.__name__ == "TritonExperts" for c in type(experts).__mro__)

    def _quantizes_fp8_in_float32(self, layer: VllmLayer, mode: str | None) -> bool:
        """Whether the layer's per-tensor or per-token fp8 activations go through vLLM's CUDA
        scaled_fp8_quant (csrc/quantization/w8a8/fp8/common.cu: a dynamic scale
        fl(amax / 448); per tensor x * fl(1 / s), per token x / s, in float32): every
        modular kernel's prepare step quantizes non-block fp8 so (fused_moe/utils.py
        _fp8_quantize), the experts' quant config saying float8_e4m3fn."""
        if _engine_device().type != "cuda" or mode not in _FP8_FLOAT32_MODES:
            return False
        qc = getattr(self._experts_class(layer), "quant_config", None)
        return getattr(qc, "quant_dtype", None) == torch.float8_e4m3fn

    def _experts_class(self, layer: VllmLayer):
        kernel = getattr(getattr(layer.experts, "quant_method", None), "moe_kernel", None)
        return getattr(getattr(kernel, "impl", None), "fused_experts", None)

    def apply(self, layer: VllmLayer, hidden_states, topk_weights, topk_ids, *, out=None,
              **opts) -> torch.Tensor:
        check_layer(layer, VllmLayer, self.name)
        out = engine_output(layer.problem, hidden_states, opts, out)
        if hidden_states.shape[0] == 0:
            return out
        # In vLLM the routing tensors are its router's own outputs, which its prepare step
        # scales in place (router weight on input): hand it copies, as its router would.
        with self._running(layer), _recording(layer), torch.inference_mode():
            # vLLM's runner makes the quant method's kernel config before every forward
            # (runner/moe_runner.py: `routed_experts._ensure_moe_quant_config_init()`); the
            # adapter enters the experts below the runner, so it makes it as the runner does.
            # Without it a method that makes none in processing ran unquantized: MoeWNA16,
            # vLLM's fallback where Marlin refuses an int4 layer, fed packed int4 weights to
            # unquantized Triton ("Hidden size mismatch 128 != 64" on an H200).
            layer.experts._ensure_moe_quant_config_init()
            # The runner also pads the hidden states to the hidden size the quant method
            # rounded the layer up to (Marlin MXFP4 at hidden 128 or 160: "Hidden size
            # mismatch w1" on an H200 without it) and strips the padding from the output:
            # its own step, called as its forward calls it
            x, _, keep = layer.runner._maybe_pad_hidden_states(None, hidden_states.contiguous())
            y = layer.experts.forward_modular(
                x=x,
                topk_weights=topk_weights.to(torch.float32, copy=True).contiguous(),
                topk_ids=topk_ids.to(torch.int32, copy=True).contiguous())
        out.copy_(y if keep is None else y[..., :keep])
        return out

    # --- vLLM ----------------------------------------------------------------------------
    def _runner(self, quant: Variant, problem, origin: tuple[str, int] | None = None):
        """vLLM's MoE layer: its quant config from the table's file config, or (a model
        folder's layer) from the folder's own config through vLLM's config path, with the
        checkpoint projection names the folder's vLLM model class passes its FusedMoE."""
        v = _vllm()
        names = {}
        if origin is None:
            d = quantization_config(quant, problem.activation)
            qc = v["quant_config"](_quantization_method(d)).from_config(d) if d else None
        else:
            try:
                qc = vllm_folder.quant_config(origin[0], v["verify_quantization"])
                names = {"ckpt_names": vllm_folder.ckpt_names(origin[0])}
            except Exception as e:
                raise UnsupportedError(self.name, f"vLLM {v['version']} refuses the config "
                                       f"of {origin[0]}: {exception_text(e)}") from None
        act, act_kwargs = ACTIVATIONS[problem.activation]

        def build():
            prefix = PREFIX.format(next(_layer_ids))
            try:
                return v["factory"](
                    problem.E, problem.topk, problem.K, problem.N,
                    params_dtype=problem.torch_dtype, quant_config=qc, prefix=prefix,
                    activation=act, has_bias=bool(problem.bias),
                    apply_router_weight_on_input=bool(problem.apply_router_weight_on_input),
                    **names, **act_kwargs)
            except BaseException:
                # a layer vLLM refused after its runner registered: nothing else would
                # remove it
                _forget(getattr(v.get("config"), "compilation_config", None), prefix)
                raise

        try:
            return build()
        except AttributeError as e:
            if getattr(v["config"], "model_config", None) is not None \
                    or not _MODEL_CONFIG_ASKED.search(str(e)):
                raise
        # vLLM asked for the served model's config, which a lone layer has none of: build it
        # again under one (the folder's, else a default Qwen3-MoE), kept for its later calls
        model_config = _model_config(origin[0] if origin else None, problem.torch_dtype)
        with _model_config_set(model_config):
            runner = build()
        runner.moecert_model_config = model_config
        return runner

    @contextlib.contextmanager
    def _running(self, layer: VllmLayer | None = None):
        """vLLM's current config (with the model config `layer` was built under, if any),
        and (forced mode) the AMX gate answered True, for the duration of one call into
        vLLM."""
        v = _vllm()
        _request_amx_tiles()
        model_config = getattr(layer, "model_config", None)
        # vLLM's model loader builds and processes its layers under the platform's device
        with _lock, v["set_config"](v["config"]), torch.device(_engine_device()), \
                _model_config_set(model_config):
            if not self.forced_amx:
                yield
                return
            gate = torch.cpu._is_amx_tile_supported
            torch.cpu._is_amx_tile_supported = _amx_supported
            try:
                yield
            finally:
                torch.cpu._is_amx_tile_supported = gate


class VllmCpuForcedBackend(VllmBackend):
    """vLLM with its CPU AMX capability gate overridden (see the module docstring)."""

    name = "vllm-cpu-forced"
    forced_amx = True


def _registration(runner) -> tuple[object, str] | None:
    """(vLLM's compilation config, name) where `runner` registered itself for vLLM's MoE
    custom op, None where it did not (a stand-in, a vLLM that registers nothing).

    vLLM's MoERunner puts itself into `compilation_config.static_forward_context` under its
    layer name (the prefix the adapter gave it) and appends the name to
    `static_all_moe_layers` (fused_moe/runner/moe_runner.py,
    `register_layer_for_moe_forward_op`, in 0.25.1 and 0.32 alike); vLLM never removes it (a
    model's layers live as long as its worker). Each layer the adapter builds, and each built
    only to answer a claim, stayed there with its parameters: on an H200 (vLLM 0.25.1) a
    worker's model-size cases held the parameters of every layer before them."""
    name = getattr(runner, "layer_name", None)
    if not isinstance(name, str):
        return None
    try:
        config = _vllm().get("config")
    except Exception:  # no vLLM here: nothing of it registered anything
        return None
    compilation = getattr(config, "compilation_config", None)
    context = getattr(compilation, "static_forward_context", None)
    if not isinstance(context, dict) or context.get(name) is not runner:
        return None
    return compilation, name


def _forget(compilation, name: str) -> None:
    """Remove layer `name`'s registration from vLLM's compilation config (`_registration`);
    the names are the adapter's own (a counter), so no other layer's entry goes."""
    context = getattr(compilation, "static_forward_context", None)
    if isinstance(context, dict):
        context.pop(name, None)
    names = getattr(compilation, "static_all_moe_layers", None)
    if isinstance(names, list):
        while name in names:
            names.remove(name)


@contextlib.contextmanager
def _uninitialized_memory_filled():
    """torch's deterministic fill of new memory (NaN for floats, the largest value for
    integers) while vLLM makes the layer's parameters: a kernel that reads a row its loader
    never wrote gives the same wrong answer on every run, not whatever the allocator held.
    vLLM 0.25.1's Quark int8 method makes a relu2 layer's w13 with twice the rows it loads
    (`torch.empty`); its H200 rows read 1.0, 0.105 and 2.6e-3 on three runs before this.
    warn_only: an op without a deterministic kernel warns instead of raising."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = fill
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


@contextlib.contextmanager
def _recording(layer: VllmLayer):
    """vLLM's CPU kernel entry wrapped for the call: the method it is called with is kept
    on the layer (the numerics vLLM's chosen experts class runs)."""
    import sys

    module = sys.modules.get(CPU_KERNEL_MODULE)
    entry = getattr(module, CPU_KERNEL_ENTRY, None)
    if entry is None:
        yield
        return

    def recorded(*args, **kwargs):
        method = args[CPU_METHOD_ARG] if len(args) > CPU_METHOD_ARG else None
        layer.kernel_method = getattr(method, "name", None)
        return entry(*args, **kwargs)
    setattr(module, CPU_KERNEL_ENTRY, recorded)
    try:
        yield
    finally:
        setattr(module, CPU_KERNEL_ENTRY, entry)



# vLLM's FusedMoEQuantConfig.quant_dtype names its block-scaled activation formats by strings
# of its own (a torch dtype otherwise): the ones that are an activation mode here
VLLM_QUANT_DTYPE_MODES = {"mxfp8": ACT_MXFP8, "mxfp4": ACT_MXFP4, "nvfp4": ACT_NVFP4}


def _requantized_via() -> str | bool:
    """How vLLM requantizes per-tensor w1 / w3 to one scale (fp8_utils / Quark's int8
    method): each shard through per_tensor_dequantize, `codes.to(float16) * scale`, then
    quantized by the larger scale. On CUDA the binary op casts the 0-d float32 scale to the
    float16 common dtype first; that reading matched the processed codes of a Quark int8
    layer on the H200 exactly (tools/vllm_repro/gpu_reduce.py int8-layer: 1066 codes of 3
    shards one off the exact requantization, each reproduced). The dtype is vLLM's own
    answer; on a CPU (scale not cast) the exact reading, as the CPU gate measured."""
    if _engine_device().type != "cuda":
        return True
    from vllm.model_executor.layers.quantization.utils.w8a8_utils import per_tensor_dequantize

    held = per_tensor_dequantize(torch.ones(1, dtype=torch.int8), torch.tensor(1.0)).dtype
    return str(held).removeprefix("torch.") if held != torch.float32 else True


def _deep_gemm_e8m0() -> bool:
    """vLLM's own answer: whether its fp8 1 x 128 group quantizer (per_token_group_quant_fp8,
    every block-fp8 kernel's activation quantizer) rounds the scales up to powers of two
    (DeepGEMM's UE8M0; on where DeepGEMM loads, VLLM_USE_DEEP_GEMM_E8M0 on by default:
    vLLM 0.25.1 on an H200 with its bundled DeepGEMM)."""
    try:
        from vllm.utils.deep_gemm import is_deep_gemm_e8m0_used
    except ImportError:
        return False
    return bool(is_deep_gemm_e8m0_used())


def _quant_config_activation(qc) -> str | None:
    """The activation mode a vLLM FusedMoEQuantConfig states (None: it cannot be read)."""
    if qc is None:
        return None
    try:
        dtype = qc.quant_dtype
        if dtype is None:
            return ACT_NONE
        if isinstance(dtype, str) and dtype in VLLM_QUANT_DTYPE_MODES:
            return VLLM_QUANT_DTYPE_MODES[dtype]
        if qc.block_shape is not None:
            return ACT_DYNAMIC_GROUP
        if qc.a1_scale is not None:
            return ACT_STATIC_TENSOR
        return ACT_DYNAMIC_TOKEN if qc.per_act_token_quant else ACT_DYNAMIC_TENSOR
    except Exception:
        return None


# vLLM's methods that read the served model's config while a layer is built (0.25.1 on a GPU:
# the MXFP4 oracle reads model_config.quantization_config, oracle/mxfp4.py; Quark's OCP-MX
# method model_config.hf_config.model_type, quark_moe.py): what they raise without one
_MODEL_CONFIG_ASKED = re.compile(r"'NoneType' object has no attribute "
                                 r"'(hf_config|quantization_config)'")
# the model a table layer stands for, where vLLM asks (above): its gate and up are separate
# per-expert tensors, as the adapter loads them; not gpt-oss, whose fused gate_up changes how
# Quark's method lays out its w13 scales
DEFAULT_MODEL_TYPE = "qwen3_moe"


@functools.cache
def _default_model_folder() -> str:
    """A folder holding only transformers' default config of DEFAULT_MODEL_TYPE."""
    import transformers

    folder = tempfile.mkdtemp(prefix="moecert-vllm-model-")
    transformers.AutoConfig.for_model(DEFAULT_MODEL_TYPE).save_pretrained(folder)
    return folder


@functools.cache
def _model_config(folder: str | None, dtype: torch.dtype):
    """vLLM's own ModelConfig of the model folder (None: of the default model), no tokenizer:
    what a served model's layers find in the current config."""
    from vllm.config import ModelConfig

    folder = folder or _default_model_folder()
    return ModelConfig(model=folder, tokenizer=folder, skip_tokenizer_init=True, dtype=dtype)


@contextlib.contextmanager
def _model_config_set(model_config):
    """vLLM's current config with `model_config` (nothing changed for None)."""
    if model_config is None:
        yield
        return
    config = _vllm()["config"]
    before = config.model_config
    config.model_config = model_config
    try:
        yield
    finally:
        config.model_config = before


def _scale_param_dtype(layer: VllmLayer, quant: Variant) -> torch.dtype | None:
    """The dtype vLLM's loader allocated for the w13 weight scales (a file's scales are
    copied into it), for schemes whose scales are stored as floats."""
    if quant.info.scale_encoding != "float":
        return None
    names = dict(file_config(quant, layer.problem.activation).names)
    for suffix in ("scales", "weight_scale"):
        param = getattr(layer.experts, f"w13_{names.get(suffix, suffix)}", None)
        if isinstance(param, torch.Tensor):
            return param.dtype
    return None


def _quantization_method(d: dict) -> str:
    """The quantization method vLLM's ModelConfig resolves for a model file's
    quantization_config (its `_verify_quantization`: the overrides that map e.g. a ModelOpt
    NVFP4 file's "modelopt" to "modelopt_fp4", checked in vLLM's order, then the platform's
    verify_quantization), run on a stand-in holding only what that method reads."""
    stub = types.SimpleNamespace(
        quantization=None, allow_deprecated_quantization=False, hf_config=types.SimpleNamespace(
            quantization_config=d), model_arch_config=types.SimpleNamespace(
                quantization_config=d))
    _vllm()["verify_quantization"](stub)
    return stub.quantization


# the gated activations whose CUDA kernel rounds act(gate) before the product (swigluoai has
# a kernel of its own, relu2 no product)
_ROUNDED_GATE_ACTIVATIONS = ("silu", "gelu")
# the activation modes vLLM's scaled_fp8_quant computes (block scales go through
# per_token_group_quant_fp8 instead)
_FP8_FLOAT32_MODES = (ACT_DYNAMIC_TENSOR, ACT_STATIC_TENSOR, ACT_DYNAMIC_TOKEN)
# the quant methods without a modular kernel whose apply calls fused_experts, read from 0.25.1
_FUSED_EXPERTS_METHODS = ("QuarkW8A8Int8MoEMethod", "MoeWNA16Method",
                          "CompressedTensorsWNA16MoEMethod")


def _engine_device() -> torch.device:
    """The device vLLM runs its layers on here: the accelerator where there is one (vLLM
    has one platform per process), else the CPU."""
    kind = Platform.current().kind
    return torch.device("cuda" if kind in ("cuda", "rocm") else kind)


def _amx_supported() -> bool:
    return True


def cpu_has_amx() -> bool:
    """Whether vLLM's own CPU AMX gate answers True on this machine (a CPU platform whose CPU
    executes AMX tiles): there vLLM runs its AMX-gated experts without forcing."""
    return Platform.current().kind == "cpu" and bool(NATIVE_AMX_GATE())


@functools.cache
def _request_amx_tiles() -> bool:
    """On a CPU with AMX, ask Linux for this process's AMX tile state (torch's `_init_amx`:
    arch_prctl ARCH_REQ_XCOMP_PERM), once a process. In a served model the bf16 linear
    layers (oneDNN) ask before any MoE layer runs; a lone MoE layer is the process's first
    AMX user, and vLLM's AMX kernels (which do not ask) then die with SIGILL (seen 2026-11-30
    on an Intel Xeon: a bf16 case first in a fresh process)."""
    return cpu_has_amx() and bool(torch.cpu._init_amx())


def amx_gate_backends() -> tuple[str, ...]:
    """The backends that run vLLM with its CPU AMX gate answering True on this machine:
    vllm-cpu-forced everywhere, and vllm itself on a CPU with AMX, where forcing changes
    nothing. The expected-failure list names them as the group `vllm-amx`, so that one entry
    states one behaviour of vLLM's AMX-gated kernels on every host."""
    return (VllmCpuForcedBackend.name, *((VllmBackend.name,) if cpu_has_amx() else ()))



def _shape_key(problem) -> tuple:
    return (problem.K, problem.N, problem.E, problem.topk, problem.dtype, problem.activation,
            bool(problem.bias), bool(problem.apply_router_weight_on_input),
            problem.expert_map is None, problem.activation_format)


def _adapter_limit(quant: Variant, problem, table: bool = True) -> str | None:
    """What the single-process adapter cannot express to vLLM (not vLLM's refusal); `table`:
    the checkpoint goes to vLLM through the table's file config (not a model folder's)."""
    if problem.activation_format != "standard":
        return ("batched activation format: vLLM builds it only for an all2all expert-"
                "parallel deployment (several ranks); the adapter runs one rank")
    if problem.expert_map is not None:
        return ("expert_map: vLLM derives it from expert parallelism over several ranks; "
                "the adapter runs one rank")
    if problem.activation not in ACTIVATIONS:
        return (f"activation {problem.activation}: vLLM reads gpt-oss's interleaved gate/up "
                "only from a fused gate_up tensor, not through per-expert gate/up loaders")
    if not table:
        return None
    try:
        quantization_config(quant, problem.activation)
    except ValueError as e:
        return str(e)
    return None


def _choice(quant_method) -> tuple[str, str | None]:
    """The oracle's choice recorded on vLLM's quant method: "BACKEND (ExpertsClass)", isa."""
    backend = next((v for k, v in vars(quant_method).items()
                    if k.endswith("_backend") and hasattr(v, "name")), None)
    experts = getattr(quant_method, "experts_cls", None)
    name = getattr(backend, "name", "?")
    cls = getattr(experts, "__name__", "?")
    return f"{name} ({cls})", getattr(experts, "isa", None)


os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

__all__ = ["VllmBackend", "VllmCpuForcedBackend", "VllmLayer"]
