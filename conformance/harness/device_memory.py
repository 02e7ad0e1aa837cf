"""What a model-size case holds on its GPU at most: `case_device_need`, what the runner
budgets it at (schedule.device_need; a problem at its worst case's, schedule.problem_need) and
what the oversize guard refuses a case on (schedule.oversize). An upper bound of the caching
allocator's reserved peak, the `device_peak_bytes` of the case's checks (execute.py).

What a case holds (read from the code, the parts measured on the CPU with
tools/case_memory.py): it draws its checkpoint C and keeps it to its end (no_mutation compares
it after load, process and apply); where its backend claims it, it builds one processed layer
beside it (light checks: one layer per case; full depth adds the reload check's second
checkpoint and layers, FULL_DEPTH_EXTRA_LAYERS; the previous backend's case, layer and
checkpoint are freed and the cache emptied before the next: worker.release_device_memory).
The layer loads a copy of C, converts it to the common kernel format (kernels/convert.py)
and builds the backend's own operands. In bytes, W = E x K x N x 3 weights:

    declined on every CUDA platform:  C                                     + base
    claimed:                          2 C + conversion + backend operands  + base + temps

    C            the checkpoint's tensors as its format declares them (`checkpoint_bytes`)
    conversion   packed integer codes: unpacked codes beside the load (C at most); fp6:
                 codes widened to one e4m3 byte each (W: the model before this one counted
                 6 bits, one reason four grouped MXFP6 Qwen3-30B-A3B cases exceeded it)
    operands     grouped: its GEMM operand in 16 bits (2 W), or e4m3 with FP8 activations
                 (W); triton: 4-bit codes put into nibble planes, then tiles, two more copies
                 of w13's codes during processing; fp6 codes in six-bit planes beside w13's
                 widened bytes (3/4 of a byte per w13 element)
    base         the process (context, inputs, outputs, fixed-size chunks: fingerprints,
                 unpacking), the old model's 3.5 GiB
    temps        one expert's larger linear in float64 in the reference (the problem's first
                 claimed case computes it) or float32 in a backend, and what the measured
                 code's validation, fp6 widening and nibble planes held at once (below)

Measured against: certify on one H200 of a 2x host, 2026-11-30 15:21, tree 07d49e9: every
model-size case's peak (tests/conformance/harness/data/model_size_peaks.csv, the largest over
its checks and both M), each at or below this bound (tests/conformance/harness/
test_device_memory.py; the largest peak / bound 0.914, the grouped backend's MXFP6
DeepSeek-V3 cases, 48.6 of 53.2 GiB). The constants were fitted on the run before the chunked
code (two H200s, 2026-11-29, tree 665c1e5), whose peaks were higher:
EXPERT_TEMP_BYTES_PER_ELEMENT there (the residual of Mixtral-8x7B's triton cases,
whose float64 expert is the largest); it holds for the shapes measured, not proven for
others. That code validated e4m3 codes, block scales and 16-bit weights over a whole linear
at once, widened fp6 over 64M-element chunks and made triton's nibble planes of a whole
linear: commits 742023b, 356530c and 4055d80 chunk them, 1a7c06b the fingerprints, and
context.release_cached empties the allocator's cache before a large layer is built
(a6e0cb9). None is measured on a GPU yet: the measured code's terms stay until a run
measures the changed code (issue 43; tools/model_size_peaks.py makes the data file anew).

An external engine (`vllm`: vLLM's own MoE layer, kernels/vllm_backend.py) is budgeted by the
same parts less the conversion and our operands, plus its own term (`engine_term`):

    vllm:  2 C + processing + residue + base + temps

    C, the second   vLLM's create_weights allocates the layer's parameters in the file's
                    format (fp8.py Fp8MoEMethod, gptq_marlin.py, quark_moe.py, ...: codes,
                    scales and zero points as the file stores them) and its loaders copy C in
    processing      process_weights_after_loading makes the kernel's operands beside the
                    loaded ones before it drops them: Marlin's repack (marlin_moe_permute_
                    scales, gptq_marlin_moe_repack), DeepGEMM's UE8M0 requantization of block
                    fp8: one more C (per-tensor fp8 and Quark int8 requantize w13 one expert
                    at a time in place: fp8_utils.process_fp8_weight_tensor_strategy_moe)
    (no term for the harness's reading of what the processed layer declares,
    numerics.reading: it runs over expert chunks since c63bb18; before, it built float64
    copies of the whole layer)
    residue         what vLLM's processing does not explain, the largest residual of the
                    first run of every scheme after the fixes below (28 GiB). Before them
                    (52 GiB) it was mostly the worker's earlier layers: every MoERunner the
                    adapter made (each claim's probe, each case's layer) stayed registered in
                    vLLM's forward context for the worker's life (fused_moe/runner/
                    moe_runner.py register_layer_for_moe_forward_op); the adapter removes the
                    registration since 9ca0f4d

Measured against, 2x H200, vLLM 0.25.1 (tests/conformance/harness/data/vllm_model_size_peaks.csv,
column `run`): the ci suite's 61 model-size cases of run 20261130-060800-695d00 (tree 4de5dcb,
every scheme after both fixes, none out of memory, largest peak / budget 0.975: fp8-w8a16
DeepSeek-V3 63.1 GiB) and the fp8-w8a16 and w4a8-int8 cases of run 20261130-032637-9fc75c
(tree fa88056, the first after both fixes): fp8-w8a16 Qwen3-30B-A3B 56.4 -> 5.0 GiB,
Mixtral-8x7B out of memory at 100.8 -> 21.0, DeepSeek-V3 out of memory at 105.5 -> 63.0;
w4a8-int8 25.0 -> 1.9, 60.8 -> 6.9, out of memory at 52.4 -> 23.2 (every case now judged).
The run before both fixes (20261129-233037-c1bed1) is no longer in the data.
"""

from __future__ import annotations

import math

from moecert.kernels import get_backend
from moecert.kernels.platform import SIMULATED_PLATFORMS
from moecert.reference.schemes import ACT_NONE
from moecert.reference.schemes.tensors import declared_tensors, layer_sizes, tensor_shapes

from .cases import Case
from .memory import weights

CASE_BASE_BYTES = 3584 << 20  # the process's context, inputs, outputs (the old model's)
# One expert's larger linear in float64 in the reference (its chunk is at least one expert;
# the problem's first case computes it): the buffer, the codes, the scales spread over their
# blocks, the product, indices, at most 8 float64 values per element. The residual of the
# measured run it must cover, Mixtral-8x7B's triton cases (the first of their problems),
# came to 57.6 bytes per element above the base
EXPERT_TEMP_BYTES_PER_ELEMENT = 64
GROUPED_OPERAND_BYTES_PER_WEIGHT = 2  # its 16-bit GEMM operand
GROUPED_SCALED_OPERAND_BYTES_PER_WEIGHT = 1  # its padded e4m3 operand (FP8 activations)
# triton's 4-bit codes put into nibble planes, then tiles, beside the codes: two more copies
# of the larger linear's (w13's) codes, half a byte per element each
TRITON_FOUR_BIT_BYTES_PER_W13_ELEMENT = 1
# triton's fp6 codes in six-bit planes (issue 44, round fifteen) beside the widened e4m3 bytes
# of the linear they come from, w13 first: 3/4 of a byte per w13 element; made an expert at a
# time, so no whole-linear temporary (read from the code, not measured on a GPU yet)
TRITON_FP6_PLANE_BYTES_PER_W13_ELEMENT = 0.75
FULL_DEPTH_EXTRA_LAYERS = 4  # the reload check's layers and state clones beyond the case's
# What the old code's validation held at once per w13 element (the bools of the NaN code
# check of e4m3 weights; isfinite of 16-bit weights) and per coded block scale, and the fp6
# widening's temporaries: chunked since 742023b and 356530c, and 0 here since a GPU run
# measured the chunked code (2x H200, 2026-11-30 00:10, tree 1d30ecf, certify on 1 and 2 GPUs:
# every model-size peak within the budget without them; the 244 rows of data/
# model_size_peaks.csv). Kept as names so that the fit stays readable.
E4M3_CHECK_BYTES_PER_W13_ELEMENT = 0
SIXTEEN_BIT_CHECK_BYTES_PER_W13_ELEMENT = 0
FP6_WIDEN_TEMP_BYTES = 0
SCALE_CHECK_BYTES_PER_SCALE = 0
# triton's plane_nibbles over a whole linear: four times its codes at once, two beyond the
# copies above. Chunked since 4055d80, but in that call's 1-GPU run, at 0 here, Mixtral's
# triton NVFP4 case peaked above its budget (13.14 GiB against 12.85, 1.02x): it stays.
TRITON_PLANE_TEMP_BYTES_PER_W13_ELEMENT = 1

# --- an external engine's term (the module docstring): vLLM 0.25.1, read from its code and
# held to the measured run's peaks (tests/conformance/harness/data/vllm_model_size_peaks.csv)
ENGINE_BACKENDS = ("vllm",)
# process_weights_after_loading's operands beside the loaded parameters, in checkpoints
VLLM_PROCESSING_CHECKPOINTS = 1
# What a vLLM case held beyond its processing that vLLM's processing code does not explain:
# the largest residual above the rest of this bound in the first run of every scheme after the
# chunked reading and the layers' deregistration (2026-11-30, 61 cases on a 2x H200), 26.4 GiB
# (fp8-w8a16 DeepSeek-V3; next nvfp4 DeepSeek-V3 20.7, mxfp8 DeepSeek-V3 12.9, fp8-w8a16
# Mixtral-8x7B 6.6), rounded up. The run before the fixes needed 52 GiB (leaked layers).
VLLM_RESIDUE_BYTES = 28 << 30


def checkpoint_bytes(case: Case) -> int:
    """The bytes of the case's checkpoint as its format declares its tensors
    (schemes.tensors), at the widest dtype each may have: W4AFP8's int4 codes take a byte
    each, scales and zero points count too."""
    variant, P = case.variant, case.problem
    sizes = layer_sizes(P)
    total = 0
    for d in declared_tensors(variant).values():
        if not (d.required(variant.sym, variant.act_order, P.bias)
                or (d.written_when_sym and variant.sym)):
            continue
        shape = max(tensor_shapes(d, sizes, variant), key=math.prod)
        total += math.prod(shape) * max(t.itemsize for t in d.dtypes)
    return total


def declined_everywhere(case: Case) -> bool:
    """Whether the case's backend declines it on every CUDA platform (it then holds its
    checkpoint only: create_layer refuses before copying). Judged without a CUDA context
    (the parent schedules), so a platform-dependent claim counts as a claim."""
    try:
        backend = get_backend(case.backend)
        variant = case.variant
    except Exception:  # an unknown backend or scheme: its own rows say so; budget it fully
        return False
    cuda = [p for p in SIMULATED_PLATFORMS if p.kind == "cuda"]
    try:
        return all(backend.supports(variant, case.problem, p) is not None for p in cuda)
    except Exception:
        return False


def case_device_need(case: Case) -> int:
    """Bytes of GPU memory one model-size case holds at most (the module docstring)."""
    P = case.problem
    w = weights(case)
    variant = case.variant
    checkpoint = checkpoint_bytes(case)
    expert_linear = max(P.w13_rows * P.K, P.K * P.N)  # one expert's larger linear
    temps = (CASE_BASE_BYTES + EXPERT_TEMP_BYTES_PER_ELEMENT * expert_linear
             + _validation_temps(case, w))
    if case.backend in ENGINE_BACKENDS:  # vLLM's claim builds its layer: no declined shortcut
        return 2 * checkpoint + engine_term(case) + temps
    if declined_everywhere(case):  # refused before the layer's load: no reference either
        return checkpoint + CASE_BASE_BYTES
    conversion = 0
    if variant.packed:
        conversion = checkpoint
    elif variant.info.weight_element.units > 1:  # fp6: widened to e4m3 bytes
        conversion = w
    operands = 0
    if case.backend == "grouped":
        operands = w * (GROUPED_OPERAND_BYTES_PER_WEIGHT if variant.activation == ACT_NONE
                        else GROUPED_SCALED_OPERAND_BYTES_PER_WEIGHT)
    elif case.backend == "triton" and variant.info.weight_bits == 4:
        operands = (TRITON_FOUR_BIT_BYTES_PER_W13_ELEMENT + TRITON_PLANE_TEMP_BYTES_PER_W13_ELEMENT
                    ) * _w13_elements(P)
    elif case.backend == "triton" and variant.info.weight_element.units > 1:
        operands = int(TRITON_FP6_PLANE_BYTES_PER_W13_ELEMENT * _w13_elements(P))
    need = 2 * checkpoint + conversion + operands + temps
    if case.depth == "full":  # reload: the second checkpoint, and beside the case's layer a
        # reloaded one, a fresh one of the second checkpoint and a clone of each one's state
        # (checks/state.py); read from the code, never measured: certify's model-size cases
        # are light
        layer = (conversion or checkpoint) + operands
        need += checkpoint + FULL_DEPTH_EXTRA_LAYERS * layer
    return need


def engine_term(case: Case) -> int:
    """What an external engine's case holds beyond the harness's checkpoint, its layer's
    copy of it, the base and the reference's temporaries (the module docstring): vLLM's
    processing and the worker's earlier layers."""
    return VLLM_PROCESSING_CHECKPOINTS * checkpoint_bytes(case) + VLLM_RESIDUE_BYTES


def _validation_temps(case: Case, w: int) -> int:
    """What the measured code's validation and fp6 widening held at once (the module
    docstring: chunked since, kept until measured)."""
    P, info = case.problem, case.variant.info
    w13_elements = _w13_elements(P)
    if not info.quantized:
        return SIXTEEN_BIT_CHECK_BYTES_PER_W13_ELEMENT * w13_elements
    temps = 0
    if info.weight_element.nan_codes:
        temps += E4M3_CHECK_BYTES_PER_W13_ELEMENT * w13_elements
    if info.weight_element.units > 1:
        temps += FP6_WIDEN_TEMP_BYTES
    if info.scale_element is not None:  # block scales coded as elements, one per block
        temps += SCALE_CHECK_BYTES_PER_SCALE * w // case.variant.info.scale_block
    return temps


def _w13_elements(P) -> int:
    return P.E * P.w13_rows * P.K


__all__ = ["case_device_need", "checkpoint_bytes", "declined_everywhere", "engine_term"]
