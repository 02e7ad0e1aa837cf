#!/bin/bash
# What CI's CPU machine never runs, on a GPU machine: every test file that holds CUDA-only tests
# (compiled Triton decodes, torch._scaled_grouped_mm's FP8 kernel, CUDA-graph capture, the
# reference on cuda), each file whole in a pytest process of its own (a file's tests may
# depend on its process's Triton state: tests/kernels/test_fp4_planes.py), then the `ci`
# suite on cuda. Appends a dated record (device, versions, per-file counts and wall time, the
# suite's verdict) to docs/gpu-ci.md and writes it to $OUT/gpu-ci-record.md.
#
# Run it once per change to kernels/ (README, "GPU CI"), on the GPU machine from the
# repository root: `bash tools/gpu_ci.sh` (no install there: a PYTHONPATH shim, as
# tools/gpu_suite_run.sh). GPU_CI_SUITE_S bounds the suite's wall time (default 1800 s);
# a suite cut short is recorded as such, never as passed. Exit 1 when anything failed.
# GPU_CI_PART=files runs the test files only, GPU_CI_PART=suites the `ci` suite and the real
# folders only (default: both): since test_zero_sums_cuda.py joined (2026-12-02) the whole
# script runs ~610 s on one H200, past a 600 s device call; two calls, each recorded, cover it.
# GPU_CI_SKIP="name.py ..." leaves those files out (recorded as left out, never as passed): a
# call that re-checks a kernel change may leave out a file the change cannot reach
# (test_mps_cuda.py, 181 s, the MPS daemon's run).
set -u
cd "$(dirname "$0")/.."
PART=${GPU_CI_PART:-all}
case "$PART" in all|files|suites) ;; *) echo "GPU_CI_PART=$PART: expected files, suites or unset (both)" >&2; exit 2 ;; esac
OUT=${OUT:-/tmp/gpu-ci}; mkdir -p "$OUT"
mkdir -p /tmp/shim/moecert
for d in reference kernels conformance reports; do ln -sfn "$PWD/$d" /tmp/shim/moecert/$d; done
export PYTHONPATH=/tmp/shim
unset TRITON_INTERPRET

# The files with CUDA-only tests (they skip, each by a reason naming the GPU, on a CPU).
FILES=(
    tests/kernels/test_int4_pairs.py        # PTX int4 pair decode, compiled Triton (sm80+)
    tests/kernels/test_fp4_planes.py        # PTX FP4 / AWQ zero-point decodes (sm80+)
    tests/kernels/test_fp4_prefill_cuda.py  # FP4 prefill decode + scale words, compiled (sm80+)
    tests/kernels/test_fp4_carry_cuda.py    # CARRY + LEAN (the default) bit for bit, compiled (sm89+)
    tests/kernels/test_fp4_scale_bf16_cuda.py  # SCALE_BF16 (bf16 scales at load) bit for bit (sm80+)
    tests/kernels/test_fused_activation_cuda.py  # the activation in GEMM1's epilogue bit for bit (sm80+)
    tests/kernels/test_e4m3_words_cuda.py   # MXFP8's 16-bit words against its fp8 bytes (sm89+)
    tests/kernels/test_zero_sums_cuda.py    # AWQ's zero points from the activation sums (sm80+)
    tests/kernels/test_fp6_planes_cuda.py   # MXFP6's six-bit planes against its e4m3 bytes (sm80+)
    tests/kernels/test_tail_tiles_cuda.py   # TAIL_M's smaller tiles against the whole tile (sm80+)
    tests/kernels/test_one_dot_cuda.py      # ONE_DOT's one dot against the four plane dots (sm80+)
    tests/kernels/test_int4_prefill_cuda.py # the int4 prefill dispatch's decode and layer (sm80+)
    tests/kernels/test_tma_b_cuda.py        # the weight tile by TMA against per-thread loads (sm90+)
    tests/kernels/test_grouped_fp8.py       # torch._scaled_grouped_mm FP8 row-wise (sm90)
    tests/kernels/test_grouped_capture.py   # CUDA-graph capture of the grouped backend
    tests/reference/test_devices.py         # the float64 reference on cuda
    tests/conformance/harness/test_mps_cuda.py  # --mps: the run's daemon, a real fault under it
)

record="$OUT/gpu-ci-record.md"
start=$(date +%s)
device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
versions=$(python -c "import sys, torch, triton; print(f'python {sys.version.split()[0]}, torch {torch.__version__}, triton {triton.__version__}, CUDA {torch.version.cuda}')")
commit=$(git rev-parse --short HEAD 2>/dev/null || echo "unknown")
{
    echo ""
    echo "## $(date -u +%Y-%m-%d\ %H:%M) UTC, commit $commit"
    echo ""
    echo "Device: $device ($(nvidia-smi -L | wc -l) GPU(s)); $versions."
    echo "Command: \`${GPU_CI_PART:+GPU_CI_PART=$GPU_CI_PART }${GPU_CI_SUITE_S:+GPU_CI_SUITE_S=$GPU_CI_SUITE_S }${GPU_CI_SKIP:+GPU_CI_SKIP=\"$GPU_CI_SKIP\" }bash tools/gpu_ci.sh\`."
    echo ""
    echo "| step | result | wall (s) |"
    echo "|---|---|---|"
} > "$record"

failed=0
[ "$PART" = suites ] && FILES=()
for f in "${FILES[@]}"; do
    if [[ " ${GPU_CI_SKIP:-} " == *" $(basename "$f") "* ]]; then
        echo "| $f | left out (GPU_CI_SKIP) | 0 |" >> "$record"
        echo "$f: left out (GPU_CI_SKIP)"
        continue
    fi
    t0=$(date +%s)
    python -m pytest "$f" -q -p no:cacheprovider -rfEs > "$OUT/$(basename "$f" .py).txt" 2>&1
    rc=$?
    line=$(grep -E "^(=+ )?[0-9]+ (passed|failed|skipped|error)|no tests ran" "$OUT/$(basename "$f" .py).txt" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')
    [ $rc -ne 0 ] && failed=1
    echo "| $f | ${line:-no summary (exit $rc)} | $(( $(date +%s) - t0 )) |" >> "$record"
    echo "$f: ${line:-exit $rc}"
done

if [ "$PART" != files ]; then
    t0=$(date +%s)
    timeout "${GPU_CI_SUITE_S:-1800}" python -m moecert.conformance.cli run --suite ci --device cuda \
        -n auto --results "$OUT/results-ci" > "$OUT/suite-ci.txt" 2> "$OUT/suite-ci.err"
    rc=$?
    if [ $rc -eq 124 ]; then
        verdict="cut short after ${GPU_CI_SUITE_S:-1800} s (not finished: no verdict)"; failed=1
    else
        verdict=$(grep -E "^(green|not green)" "$OUT/suite-ci.txt" | tail -1)
        [ $rc -ne 0 ] && failed=1
    fi
    echo "| \`moecert run --suite ci --device cuda -n auto\` | exit $rc: ${verdict:-see suite-ci.txt} | $(( $(date +%s) - t0 )) |" >> "$record"

    # The real FP8 static-tensor folders through the GPU's FP8 GEMMs (issue 40, item 8: the grouped
    # backend's reload on a real compressed-tensors FP8 folder), every check, saturation and
    # reload included, under the tolerance table's cuda entries.
    for folder in tests/fixtures/checkpoints/ct-fp8-static-qwen3moe tests/fixtures/checkpoints/modelopt-fp8-qwen3moe; do
        t0=$(date +%s)
        name=$(basename "$folder")
        python -m moecert.conformance.cli run --suite ci --checkpoint "$folder" --device cuda \
            --backend grouped --backend triton --backend torch -n 4 --results "$OUT/results-folders" \
            > "$OUT/folder-$name.txt" 2>&1
        rc=$?
        [ $rc -ne 0 ] && failed=1
        verdict=$(grep -E "^(green|not green)" "$OUT/folder-$name.txt" | tail -1)
        echo "| \`moecert run --suite ci --checkpoint $folder --device cuda\` (grouped, triton, torch) | exit $rc: ${verdict:-see folder-$name.txt} | $(( $(date +%s) - t0 )) |" >> "$record"
    done
fi
echo "" >> "$record"
echo "Total wall time $(( $(date +%s) - start )) s; $([ $failed -eq 0 ] && echo 'everything passed' || echo 'FAILURES: see the rows above')." >> "$record"
cat "$record" >> docs/gpu-ci.md
cat "$record"
exit $failed
