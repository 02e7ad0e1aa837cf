#!/bin/bash
# Issue 44 in one GPU call (< 300 s), from the repository root, no install (a PYTHONPATH shim):
# the CUDA-only tests of the FP4 paths, the triton FP4 `ci` cases with each new path forced,
# then, the GPU to itself, base against candidates against the peers, graph replay:
#   decode (M 16, 64): plane scales as bytes (base) and as words (MOECERT_TRITON_FP4_SCALE_WORDS=1)
#   prefill (M 1024, 4096): the fused FP4 tile (base, MOECERT_TRITON_DEQUANT_ROWS=off), the
#     dispatch at its default threshold, and the grouped backend (dequantized once at load)
#   peers where carried: Marlin FP4 (.vllm/_moe_C_stable_libtorch.abi3.so, .vllm/marlin_anchor.py)
#   and triton_kernels' matmul_ogs (.vllm/tk): docs/speed.md, "`moecert bench`" and "Issue 44".
# Writes $OUT/i44-summary.md (and every step's log beside it). Exit 1 when a test or ci failed.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/i44}; mkdir -p "$OUT"
mkdir -p /tmp/shim/moecert
for d in reference kernels conformance reports; do ln -sfn "$PWD/$d" /tmp/shim/moecert/$d; done
export PYTHONPATH=/tmp/shim TRITON_CACHE_DIR=/tmp/i44-triton-cache
unset TRITON_INTERPRET MOECERT_TRITON_FP4_SCALE_WORDS MOECERT_TRITON_DEQUANT_ROWS
M="python -m moecert.conformance.cli"
S="$OUT/i44-summary.md"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$S"
MARLIN=()
[ -f .vllm/_moe_C_stable_libtorch.abi3.so ] && [ -f .vllm/marlin_anchor.py ] && \
    MARLIN=(--marlin-lib .vllm/_moe_C_stable_libtorch.abi3.so --marlin-anchor .vllm/marlin_anchor.py)
FP4=(--backend triton --scheme mxfp4 --scheme nvfp4)

# 1. correctness, side by side (80 s): the compiled tests, ci's FP4 cases per forced path
timeout 80 python -m pytest tests/kernels/test_fp4_prefill_cuda.py tests/kernels/test_fp4_planes.py \
    -k "prefill or words or ptx" -q -p no:cacheprovider -rfE > "$OUT/tests.txt" 2>&1 &
MOECERT_TRITON_FP4_SCALE_WORDS=1 timeout 80 $M run --suite ci --device cuda "${FP4[@]}" -n 6 \
    --results "$OUT/ci-words" > "$OUT/ci-words.txt" 2>&1 &
MOECERT_TRITON_DEQUANT_ROWS=0 timeout 80 $M run --suite ci --device cuda "${FP4[@]}" -n 6 \
    --results "$OUT/ci-dense" > "$OUT/ci-dense.txt" 2>&1 &
wait
failed=0
for f in tests ci-words ci-dense; do
    line=$(grep -E "passed|failed|^green|^not green" "$OUT/$f.txt" | tail -1)
    echo "- $f: ${line:-no verdict (cut at 80 s?)}" | tee -a "$S"
    echo "$line" | grep -qE "failed|not green|error" && failed=1; [ -z "$line" ] && failed=1
done

# 2. timing (the GPU to itself): decode bytes (with the peers) vs words, prefill base vs dispatch
B=(--device cuda --mode graph --max-seconds 0.5 --repeats 50)
timeout 55 $M bench "${B[@]}" "${FP4[@]}" --M 16,64 ${MARLIN[@]+"${MARLIN[@]}"} --results "$OUT/b-bytes" \
    --run-id bytes > "$OUT/b-bytes.txt" 2>&1
MOECERT_TRITON_FP4_SCALE_WORDS=1 timeout 45 $M bench "${B[@]}" "${FP4[@]}" --M 16,64 \
    --results "$OUT/b-words" --run-id words > "$OUT/b-words.txt" 2>&1
P=(--scheme mxfp4 --scheme nvfp4 --model mixtral-8x7b --M 1024,4096)
MOECERT_TRITON_DEQUANT_ROWS=off timeout 40 $M bench "${B[@]}" --backend triton --backend grouped \
    "${P[@]}" --results "$OUT/p-fused" --run-id fused > "$OUT/p-fused.txt" 2>&1
timeout 25 $M bench "${B[@]}" --backend triton "${P[@]}" --results "$OUT/p-dense" \
    --run-id dense > "$OUT/p-dense.txt" 2>&1
[ -d .vllm/tk ] && PYTHONPATH=.vllm/tk:$PYTHONPATH timeout 20 python tools/ogs_peer.py \
    --M 16,64 > "$OUT/ogs.txt" 2>&1
for f in b-bytes b-words p-fused p-dense ogs; do
    [ -f "$OUT/$f.txt" ] && { echo; echo "## $f"; echo '```'; grep -vE "^\s*$" "$OUT/$f.txt" | tail -40; echo '```'; } >> "$S"
done
$M report "$OUT/b-words" --baseline "$OUT/b-bytes" --md "$OUT/decode-words-vs-bytes.md" > /dev/null 2>&1
cat "$S"
exit $failed
