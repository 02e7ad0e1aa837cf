#!/bin/bash
# Issue 44, round six (docs/speed.md): the H200's own tuned entries for the decode layers that
# had none there (W4A8 int8, now in nibble planes; MXFP4 on Mixtral-8x7B and DeepSeek-V3;
# MXFP8, whose kernel MXFP6 runs too), timed against the tree before them. From the repository
# root, no install (a PYTHONPATH shim), three calls:
#   tools/i44_tune_gpu.sh tune-w4a8   the W4A8 planes' CUDA test (tests/kernels/test_int4_pairs.py),
#       then `moecert tune --M 16,64 --routings 3` of W4A8 on the three layers (up to 520 s;
#       Mixtral-8x7B at M 64 outran 90 s alone)
#   tools/i44_tune_gpu.sh tune-fp     MXFP4 on Mixtral-8x7B and DeepSeek-V3, MXFP8 on the
#       three layers (~250 s)
#     Both write into the tree's own kernels/triton_moe/configs/ (the merge keeps every entry
#     already there) and return h200.json in the tar: copy it back into the checkout before the
#     next call (a machine idle for a minute is released with its /tmp: 2026-12-01, call 2).
#     Each step has its own limit; the tuner writes after every layer and M, so a step cut
#     short keeps what it measured.
#   tools/i44_tune_gpu.sh bench   decode at M 16 / 64 with the Marlin FP4 peer, the files of
#       .bench/base-configs (the tree before, carried) against the tree's own, in one process
#       each; then the `ci` suite on cuda with the tree's files (verdicts; its wall on one GPU).
#   tools/i44_tune_gpu.sh fold    the MXFP8 fold candidate (MOECERT_TRITON_MXFP8_FOLD=1): the
#       `ci` suite's MXFP8 and MXFP6 cases on triton with it, then decode with and without it
#       (~250 s; nothing carried).
# The peer: .vllm/_moe_C_stable_libtorch.abi3.so (from vLLM 0.25.1's wheel, carried).
# Results: $OUT/i41.tgz (tools/gpu_batch.sh: the folder /tmp/i44t or /tmp/i44b, with a
# watchdog tar at 560 s).
# (2026-12-01 ran an earlier form: one `tune` call whose W4A8 and MXFP4 steps were cut at
# 170 / 120 s, then those two steps again by hand; docs/gpu-ci.md, sixteenth session.)
set -u
cd "$(dirname "$0")/.."
SHIM=/tmp/shim; mkdir -p "$SHIM/moecert"
for d in reference kernels conformance reports; do ln -sfn "$PWD/$d" "$SHIM/moecert/$d"; done
export PYTHONPATH=$SHIM TRITON_CACHE_DIR=/tmp/i44-triton-cache
unset TRITON_INTERPRET MOECERT_TRITON_CONFIG_DIR MOECERT_TRITON_NIB_SPAN MOECERT_TRITON_SPLIT_K
M="python -m moecert.conformance.cli"
. tools/gpu_batch.sh

tune() {  # tune NAME STEP...: STEP is "LIMIT_S MOECERT_TUNE_ARGS..." (one string)
    batch_begin "i44t-$1" 560; shift
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$work/gpu.txt"
    python -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$work/gpu.txt"
    C=$PWD/kernels/triton_moe/configs
    export MOECERT_TRITON_CONFIG_DIR=$C
    local n=0 step
    for step in "$@"; do
        n=$((n + 1)); read -r -a args <<< "$step"
        timeout "${args[0]}" $M tune --out "$C" --M 16,64 --routings 3 "${args[@]:1}" \
            > "$work/tune-$n.txt" 2>&1
        stamp "tune-$n (${args[*]:1})" $?
        cp "$C/h200.json" "$work/h200.json"
    done
    batch_end
}

tune_w4a8() {
    timeout 110 python -m pytest tests/kernels/test_int4_pairs.py -q -n 8 -p no:cacheprovider \
        -rfE > /tmp/i44-tests.txt 2>&1
    echo "tests exit $?: $(tail -n 1 /tmp/i44-tests.txt)"
    tune w4a8 "100 --model qwen3-30b-a3b --scheme w4a8-int8" \
        "260 --model mixtral-8x7b --scheme w4a8-int8" "120 --model deepseek-v3 --scheme w4a8-int8"
}

tune_fp() {
    tune fp "200 --model mixtral-8x7b --model deepseek-v3 --scheme mxfp4" \
        "140 --model qwen3-30b-a3b --model mixtral-8x7b --model deepseek-v3 --scheme mxfp8"
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

fold() {  # the MXFP8 fold (MOECERT_TRITON_MXFP8_FOLD=1): its ci cases, then decode timed
    batch_begin i44f 560
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$work/gpu.txt"
    MX=(--backend triton --scheme mxfp8 --scheme mxfp6-e2m3 --scheme mxfp6-e3m2)
    MOECERT_TRITON_MXFP8_FOLD=1 timeout 150 $M run --suite ci --device cuda "${MX[@]}" -n 8 \
        --results "$work/ci-fold" > "$work/ci-fold.txt" 2>&1
    stamp ci-fold $?
    B=(--device cuda --mode graph --max-seconds 0.5 --repeats 50 --M 16,64 --backend triton
       --scheme mxfp8 --scheme mxfp6-e2m3 --model qwen3-30b-a3b --model mixtral-8x7b
       --model deepseek-v3)
    timeout 80 $M bench "${B[@]}" --results "$work/b-tiles" --run-id tiles > "$work/b-tiles.txt" 2>&1
    stamp bench-tiles $?
    MOECERT_TRITON_MXFP8_FOLD=1 timeout 80 $M bench "${B[@]}" --results "$work/b-fold" \
        --run-id fold > "$work/b-fold.txt" 2>&1
    stamp bench-fold $?
    batch_end
}

case "${1:-}" in
    tune-w4a8) tune_w4a8 ;;
    tune-fp) tune_fp ;;
    bench) bench ;;
    fold) fold ;;
    *) echo "usage: tools/i44_tune_gpu.sh tune-w4a8|tune-fp|bench|fold" >&2; exit 2 ;;
esac
