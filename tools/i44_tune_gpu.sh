#!/bin/bash
# Issue 44, round six (docs/speed.md): the H200's own tuned entries for the decode layers that
# had none there (W4A8 int8, now in nibble planes; MXFP4 on Mixtral-8x7B and DeepSeek-V3;
# MXFP8, whose kernel MXFP6 runs too), timed against the tree before them. Two calls, from the
# repository root, no install (a PYTHONPATH shim):
#   tools/i44_tune_gpu.sh tune    the W4A8 planes' CUDA test (tests/kernels/test_int4_pairs.py),
#       then `moecert tune --M 16,64 --routings 3` per scheme into a copy of the package's
#       files (/tmp/i44-cand: the merge keeps every entry already there); the new h200.json
#       comes back in the tar. Each step has its own limit; the tuner writes after every layer
#       and M, so a step cut short keeps what it measured.
#   tools/i44_tune_gpu.sh bench   decode at M 16 / 64 with the Marlin FP4 peer, the files of
#       .bench/base-configs (the tree before, carried) against the tree's own, in one process
#       each; then the `ci` suite on cuda with the tree's files (verdicts; its wall on one GPU).
# The peer: .vllm/_moe_C_stable_libtorch.abi3.so (from vLLM 0.25.1's wheel, carried).
# Results: $OUT/i41.tgz (tools/gpu_batch.sh: the folder /tmp/i44t or /tmp/i44b, with a
# watchdog tar at 560 s).
set -u
cd "$(dirname "$0")/.."
SHIM=/tmp/shim; mkdir -p "$SHIM/moecert"
for d in reference kernels conformance reports; do ln -sfn "$PWD/$d" "$SHIM/moecert/$d"; done
export PYTHONPATH=$SHIM TRITON_CACHE_DIR=/tmp/i44-triton-cache
unset TRITON_INTERPRET MOECERT_TRITON_CONFIG_DIR MOECERT_TRITON_NIB_SPAN MOECERT_TRITON_SPLIT_K
M="python -m moecert.conformance.cli"
L3=(--model qwen3-30b-a3b --model mixtral-8x7b --model deepseek-v3)
. tools/gpu_batch.sh

tune() {
    batch_begin i44t 560
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$work/gpu.txt"
    python -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$work/gpu.txt"
    CAND=/tmp/i44-cand; rm -rf "$CAND"; mkdir -p "$CAND"
    cp kernels/triton_moe/configs/*.json "$CAND/"
    timeout 110 python -m pytest tests/kernels/test_int4_pairs.py -q -n 8 -p no:cacheprovider \
        -rfE > "$work/tests.txt" 2>&1
    stamp tests $?
    export MOECERT_TRITON_CONFIG_DIR=$CAND
    T=(--out "$CAND" --M 16,64 --routings 3)
    timeout 170 $M tune "${T[@]}" "${L3[@]}" --scheme w4a8-int8 > "$work/tune-w4a8.txt" 2>&1
    stamp tune-w4a8 $?
    timeout 120 $M tune "${T[@]}" --model mixtral-8x7b --model deepseek-v3 --scheme mxfp4 \
        > "$work/tune-mxfp4.txt" 2>&1
    stamp tune-mxfp4 $?
    timeout 140 $M tune "${T[@]}" "${L3[@]}" --scheme mxfp8 > "$work/tune-mxfp8.txt" 2>&1
    stamp tune-mxfp8 $?
    cp "$CAND/h200.json" "$work/h200.json"
    batch_end
}

bench() {
    batch_begin i44b 560
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$work/gpu.txt"
    B=(--device cuda --mode graph --max-seconds 0.5 --repeats 50 --M 16,64
       --marlin-lib .vllm/_moe_C_stable_libtorch.abi3.so --backend triton
       --scheme w4a8-int8 --scheme mxfp8 --scheme mxfp6-e2m3 --scheme mxfp4)
    MOECERT_TRITON_CONFIG_DIR=$PWD/.bench/base-configs timeout 110 $M bench "${B[@]}" \
        --results "$work/b-base" --run-id base > "$work/b-base.txt" 2>&1
    stamp bench-base $?
    timeout 110 $M bench "${B[@]}" --results "$work/b-cand" --run-id cand > "$work/b-cand.txt" 2>&1
    stamp bench-cand $?
    $M report "$work/b-cand" --baseline "$work/b-base" --md "$work/cand-vs-base.md" \
        > /dev/null 2>&1
    s=$(date +%s)
    timeout 250 $M run --suite ci --device cuda -n auto --results "$work/ci" > "$work/ci.txt" 2>&1
    stamp "ci ($(( $(date +%s) - s )) s)" $?
    batch_end
}

case "${1:-}" in
    tune) tune ;;
    bench) bench ;;
    *) echo "usage: tools/i44_tune_gpu.sh tune|bench" >&2; exit 2 ;;
esac
