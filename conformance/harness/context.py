"""`CaseRun`: everything one case's checks share, made on first use and kept (the checkpoint,
the inputs, the reference output, the processed layer, the first output).

A step that raises keeps its exception: every check that needs that step reports the same
error instead of retrying it, so one broken backend call costs one set of rows, not a hang of
repeated failures.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import torch
from moecert.kernels import get_backend
from moecert.kernels.errors import BackendError, exception_text
from moecert.kernels.oracle import supports_reason
from moecert.kernels.platform import platform_of_device
from moecert.reference import moe, random_checkpoint
from moecert.reference.schemes import checkpoint_shape_issue

from . import checkpoint_cache
from .cases import Case
from .inputs import Inputs, case_inputs, input_regime
from .keepsakes import keepsake
from .metrics import error_metrics, error_profile
from .numerics import declared, effective, reading, reading_scheme
from .strides import restrided
from .tolerances import Tolerance, default_table, shape_class

# Above this many weights a layer's checkpoint is drawn directly in storage layout on the
# device (reference.random_checkpoint): quantizing float weights with the tools' rules runs on
# the CPU and takes seconds per expert at model sizes. On a GPU the limit is lower, so that
# the GPU suites spend their time on the GPU (synthesize dominated the ci suite's case time).
SYNTHESIZE_MAX_WEIGHTS_CPU = 1 << 24
SYNTHESIZE_MAX_WEIGHTS_ACCELERATOR = 1 << 20
# Seed offset of the second checkpoint the reload check loads into a processed layer.
RELOAD_SEED_OFFSET = 1000
# A problem's checkpoint is kept for the problem's other backends up to this many bytes (each
# backend gets its own copy, so a kept one costs twice its size); a larger one is drawn afresh
# per backend (the same bits: the draw is seeded), and its reference is computed from the first
# backend's draw before that backend sees it, then shared.
SHARE_MAX_BYTES = 1 << 28


class StepFailed(Exception):
    """A shared step failed earlier; carries its original exception."""


def _kept(fn):
    """Compute once; a raised exception is kept and re-raised (wrapped) on every later use."""
    @functools.wraps(fn)
    def wrapper(self):
        key = fn.__name__
        if key not in self._done:
            try:
                self._done[key] = (True, fn(self))
            except Exception as e:
                self._done[key] = (False, e)
        ok, value = self._done[key]
        if ok:
            return value
        raise StepFailed(f"{key} failed: {exception_text(value)}") from value
    return property(wrapper)


class SharedSteps:
    """What the cases of one problem on different backends share: the same checkpoint, its
    float64 reference and the exact tier's structure are the same for every backend, so they
    are made once. Holds one problem at a time (the runner sends a problem's cases to one
    worker one after another). A step that raises is not kept: each case raises it anew.

    Kept values are pristine: a backend gets copies (CaseRun.checkpoint), and a reference is
    computed before any backend sees the checkpoint, so a backend that writes into its
    checkpoint cannot change what the next backend is given or judged against."""

    def __init__(self):
        self._key: str | None = None
        self._steps: dict[str, object] = {}

    def get(self, key: str, step: str, make):
        if key != self._key:
            self._key, self._steps = key, {}
        if step not in self._steps:
            self._steps[step] = make()
        return self._steps[step]


def problem_key(case: Case, device: torch.device) -> str:
    """The case without its backend (and check depth), on `device`: the same for every backend."""
    return f"{device}|{replace(case, backend='', depth='full').to_json()}"


def fresh_copy(ckpt):
    """`ckpt` with every tensor cloned (a kept checkpoint handed to a backend)."""
    return replace(ckpt, tensors={n: t.clone() for n, t in ckpt.tensors.items()})


def checkpoint_bytes(ckpt) -> int:
    return sum(t.numel() * t.element_size() for t in ckpt.tensors.values())


class CaseRun:
    def __init__(self, case: Case, device: str = "cpu", table=None,
                 shared: SharedSteps | None = None):
        self.case = case
        self.problem = case.problem
        self.device = torch.device(device)
        self.backend = get_backend(case.backend)
        self.variant = case.variant
        self.table = table or default_table()
        self.shared = shared
        self.key = problem_key(case, self.device)
        self._done: dict[str, tuple[bool, object]] = {}
        # what the processed layer runs, in the backend's words (its optional describe);
        # "" until the layer exists, or for a backend without the hook
        self.backend_detail = ""
        # what the processed layer declares it computes (numerics.py), less what the
        # checkpoint's own reading says; {} until the layer exists or without the hook
        self.numerics: dict = {}

    # --- what the case is ---------------------------------------------------------------
    @functools.cached_property
    def claim(self) -> str | None:
        """None if the backend claims the case on this device, else its reason. A shape no
        checkpoint can hold is decided here, before the backend is asked."""
        issue = checkpoint_shape_issue(self.variant, self.problem)
        if issue:
            return f"no checkpoint of {self.variant.describe()} can hold this problem: {issue}"
        hook = getattr(self.backend, "supports_model_layer", None)
        if self.case.source is not None and hook is not None:
            # an engine reading the folder itself claims from the folder's own config
            try:
                return hook(self.case.source.folder, self.case.source.layer, self.variant,
                            self.problem)
            except BackendError as e:
                return str(e)
        return supports_reason(self.backend, self.variant, self.problem,
                               platform_of_device(self.device))

    @property
    def tolerance(self) -> Tolerance:
        """The entry of the reading judged: the checkpoint's scheme, or the declared one."""
        return self.tolerance_for(self.regime)

    def tolerance_for(self, regime: str) -> Tolerance:
        """The entry of the reading judged, for inputs drawn in `regime` (inputs.py)."""
        scheme, mode = reading_scheme(self.variant, self.numerics)
        return self.table.lookup(scheme, self.problem.dtype, self.case.backend,
                                 self.device.type, shape_class(self.problem),
                                 activation_mode=mode, regime=regime)

    @functools.cached_property
    def regime(self) -> str:
        """The regime of the case's own inputs (inputs.py): "calibrated", "given" or ""."""
        return input_regime(self.case)

    def loaded_layer(self):
        """The model layer this case's checkpoint was read from, once the read succeeded
        (None before, after a failed read, or for a synthesized case)."""
        if self.case.source is None or not self._done.get("checkpoint", (False,))[0]:
            return None
        from .model_layers import model_layer

        return model_layer(self.case.source.folder, self.case.source.layer)

    # --- shared steps -------------------------------------------------------------------
    def checkpoint_for(self, seed: int):
        """The case's checkpoint drawn from `seed`, laid out as the case hands it over; a copy
        of the problem's kept one where it is shared."""
        if self.shared is None:
            return self.laid_out_checkpoint(self._draw_checkpoint(seed))
        drawn = []

        def keep():
            drawn.append(self._draw_checkpoint(seed))
            return drawn[0] if checkpoint_bytes(drawn[0]) <= SHARE_MAX_BYTES else None
        kept = self.shared.get(self.key, f"checkpoint-{seed}", keep)
        if kept is not None:
            return self.laid_out_checkpoint(fresh_copy(kept))
        return self.laid_out_checkpoint(drawn[0] if drawn else self._draw_checkpoint(seed))

    def _kept_checkpoint(self):
        """The problem's pristine checkpoint (the case's seed), or None where it is not kept."""
        self.checkpoint  # noqa: B018 - makes the shared one, or raises as the case's would
        if self.shared is None:
            return None
        return self.shared.get(self.key, f"checkpoint-{self.case.seed}", lambda: None)

    def _draw_checkpoint(self, seed: int):
        if self.case.source is not None:
            return self._model_checkpoint(seed)
        P = self.problem
        weights = P.E * P.K * P.N * 3
        limit = (SYNTHESIZE_MAX_WEIGHTS_CPU if self.device.type == "cpu"
                 else SYNTHESIZE_MAX_WEIGHTS_ACCELERATOR)
        if weights > limit:
            ckpt = random_checkpoint(self.variant, P, seed=seed, device=self.device)
        else:
            seeded = replace(self.case, seed=seed)  # through the cache across runs
            ckpt = checkpoint_cache.synthesized(seeded, seeded.checkpoint).to(self.device)
        return ckpt

    def _model_checkpoint(self, seed: int):
        """A model layer's checkpoint as read (a copy: the loaded layer is kept for the
        process's other cases); for another seed (the reload check's second checkpoint) the
        same tensors with the experts rotated by one, so every per-expert value differs from
        the first load but the names, dtypes and shapes are the file's."""
        ckpt = self.case.checkpoint()
        if ckpt.variant != self.variant:
            raise ValueError(f"{self.case.source.label}: the layer reads as "
                             f"{ckpt.variant.describe()}, the case was made for "
                             f"{self.variant.describe()} (the folder changed since?)")
        E = ckpt.num_experts
        shift = 0 if seed == self.case.seed else 1
        tensors = {n: (t.roll(shift, dims=0) if shift and t.dim() and t.shape[0] == E
                       else t.clone()) for n, t in ckpt.tensors.items()}
        # the rotated copy is no longer the folder's: an engine must not be handed the folder
        return replace(ckpt, tensors=tensors, origin=None if shift else ckpt.origin
                       ).to(self.device)

    def laid_out_checkpoint(self, ckpt):
        """`ckpt` as the case hands it over: in a strided case every tensor restrided."""
        if not self.case.strided:
            return ckpt
        return replace(ckpt, tensors={n: restrided(t) for n, t in ckpt.tensors.items()})

    def laid_out_inputs(self, inputs: Inputs) -> Inputs:
        """`inputs` (on the case's device) as the case hands them over."""
        if not self.case.strided:
            return inputs
        return Inputs(*(None if t is None else restrided(t) for t in inputs.tensors()))

    @_kept
    def checkpoint(self):
        return self.checkpoint_for(self.case.seed)

    @_kept
    def inputs(self) -> Inputs:
        return self.laid_out_inputs(case_inputs(self.case).to(self.device))

    @_kept
    def reference(self) -> torch.Tensor:
        kept = self._kept_checkpoint()
        if kept is None and self.shared is None:
            return self.reference_for(self.checkpoint, self.inputs)
        if kept is None:  # made before the layer (`layer`): from the untouched draw
            return self.shared.get(self.key, "reference", lambda: self.reference_for(
                self.checkpoint, self.inputs))
        # from the pristine checkpoint, laid out as the case's (the backend may have
        # written into its own copy by now: that is no_mutation's to report)
        return self.shared.get(self.key, "reference", lambda: self.reference_for(
            self.laid_out_checkpoint(kept), self.inputs))

    def reference_of_draw(self, seed: int, ckpt) -> torch.Tensor:
        """The reference of the checkpoint drawn from `seed` on the case's inputs, from `ckpt`
        (this case's copy of that draw, before the backend sees it), made once per problem:
        every backend's draw from one seed is the same."""
        def make():
            return self.reference_for(ckpt, self.inputs)
        if self.shared is None:
            return make()
        return self.shared.get(self.key, f"reference-{seed}", make)

    def reference_for(self, ckpt, inputs: Inputs) -> torch.Tensor:
        x, w, ids, counts = inputs.tensors()
        return moe(ckpt, x, w, ids, self.problem, expert_num_tokens=counts)

    @_kept
    def expected(self) -> torch.Tensor:
        """The reference the output is judged against: the checkpoint's, or where the
        processed layer declares its numerics, that reading's of the untouched draw."""
        self.layer  # noqa: B018 - the declaration is the processed layer's
        if not self.numerics:
            return self.reference

        def make():
            return self.reference_for(self.declared_reading(self.case.seed), self.inputs)
        if self.shared is None:
            return make()
        return self.shared.get(self.key, f"expected|{sorted(self.numerics.items())}", make)

    def declared_reading(self, seed: int, ckpt=None):
        """The checkpoint drawn from `seed` (or `ckpt`) read as the layer declares: the
        problem's pristine draw where it is kept, else drawn again (the same bits)."""
        if ckpt is None:
            kept = self._kept_checkpoint() if seed == self.case.seed else None
            ckpt = self.laid_out_checkpoint(kept if kept is not None
                                            else self._draw_checkpoint(seed))
        return reading(ckpt, self.numerics)

    def new_layer(self, ckpt):
        layer = self.backend.create_layer(ckpt, self.problem)
        self.backend.process_weights_after_loading(layer)
        return layer

    @_kept
    def snapshot(self) -> dict[str, torch.Tensor]:
        """Copies (fingerprints, for model-size tensors) of every input and checkpoint
        tensor, taken before the backend sees them."""
        return {name: keepsake(t) for name, t in self.watched_tensors().items()}

    def watched_tensors(self) -> dict[str, torch.Tensor]:
        tensors = {f"checkpoint.{n}": t for n, t in self.checkpoint.tensors.items()}
        names = ("hidden_states", "topk_weights", "topk_ids", "expert_num_tokens")
        tensors.update({n: t for n, t in zip(names, self.inputs.tensors(), strict=True)
                        if t is not None})
        return tensors

    @_kept
    def layer(self):
        self.snapshot  # noqa: B018 - taken before the backend touches anything
        if self.shared is not None and self._kept_checkpoint() is None:
            self.reference  # noqa: B018 - shared with other backends: before this one writes
        if checkpoint_bytes(self.checkpoint) > SHARE_MAX_BYTES:
            release_cached(self.device)
        layer = self.new_layer(self.checkpoint)
        self.backend_detail = describe(self.backend, layer)
        self.numerics = effective(declared(self.backend, layer), self.variant)
        return layer

    def retire_layer(self) -> None:
        """Forget the kept layer: a check that changed its state (a second processing) hands
        it to no later check; the next `layer` is made and processed once, afresh. Without
        this an engine whose second processing repacks its weights failed every later check
        of the case (vLLM's Marlin on a GPU: "Hidden size mismatch" in token_order), a
        finding of the harness's order, not of the engine."""
        self._done.pop("layer", None)

    def apply(self, layer, inputs: Inputs | None = None) -> torch.Tensor:
        """One apply into an output buffer poisoned with NaN."""
        inputs = inputs or self.inputs
        out = torch.full_like(self.reference, torch.nan, dtype=self.problem.torch_dtype)
        args, opts = inputs.apply_args()
        self.backend.apply(layer, *args, out=out, **opts)
        return out  # the protocol writes into `out`: whatever it returns, `out` is judged

    @_kept
    def output(self) -> torch.Tensor:
        return self.apply(self.layer)

    def judge(self, actual: torch.Tensor, reference: torch.Tensor) -> dict:
        """All metrics of `actual`, and the tolerance entry's verdict on them."""
        tol = self.tolerance
        metrics = error_metrics(actual, reference, atol=tol.atol * output_scale(reference),
                                rtol=tol.rtol, **self._expert_ids())
        return {"metrics": metrics, "verdict": tol.judge(metrics)}

    def error_profile(self, actual: torch.Tensor, reference: torch.Tensor) -> dict:
        """Where the error sits: per expert, token and column (metrics.error_profile)."""
        return error_profile(actual, reference, **self._expert_ids())

    def _expert_ids(self) -> dict:
        ids = self.inputs.topk_ids
        if ids is None or self.problem.activation_format == "batched":
            return {}
        return {"expert_ids": ids}


def release_cached(device: torch.device) -> None:
    """Hand the caching allocator's free blocks back to the GPU before a large layer is
    built: what the draw, the snapshot's fingerprints and the float64 reference left cached
    (blocks of their chunk sizes, which the layer's tensors of gigabytes cannot reuse) would
    otherwise stay reserved beside it, in the case's peak and against the other workers."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


def describe(backend, layer) -> str:
    """The backend's optional `describe(layer)` (kernels/protocol.py), "" without it; a hook
    that raises says so in the text rather than failing the case's checks."""
    hook = getattr(backend, "describe", None)
    if hook is None:
        return ""
    try:
        return str(hook(layer))
    except Exception as e:
        return f"describe raised {type(e).__name__}: {e}"


def output_scale(reference: torch.Tensor) -> float:
    return float(reference.abs().max()) if reference.numel() else 0.0
