#!/bin/bash
# The engines' GPU gate: vLLM's or transformers' own MoE layers on the GPU, through the same
# adapters as on the CPU (kernels/vllm_backend.py, kernels/transformers_engine/), on the
# engine versions tools/engine_carry.py brought there (docs/gpu-ci.md, "The engines on a GPU").
#
#   bash tools/gpu_engines.sh vllm|transformers [SUITE] [-- extra moecert run arguments]
#
# On the GPU machine, from the repository root, after `tools/engine_carry.py receive` of every
# part. Runs SUITE (default smoke) on the engine's backends on cuda, then every real producer
# folder under tests/fixtures/checkpoints through the engine (six at a time, one process
# each), with the engine's GPU list of expected failures where it exists
# (conformance/harness/xfail-<engine>-cuda.toml). Writes to $OUT: the record (device, versions,
# claimed counts per scheme and kernel, verdicts, wall time), the failing rows (CSV) and the
# results (one tar). GPU_ENGINES_S bounds each step's wall time (default 260 s); a step cut
# short is recorded as such, never as passed. Exit 1 when anything failed.
set -u
cd "$(dirname "$0")/.."
engine=${1:?usage: gpu_engines.sh vllm|transformers [SUITE]}
suite=${2:-smoke}
shift $(( $# >= 2 ? 2 : 1 )); [ "${1:-}" = "--" ] && shift
OUT=${OUT:-/tmp/gpu-engines}; mkdir -p "$OUT"
# per-step logs beside $OUT, tarred into it at the end: the device tool brings back at most
# eight files from $OUT (a run of 30 folders left its record behind on 2026-11-29)
logs=$(mktemp -d /tmp/gpu-engines-logs.XXXX)
# a shim of its own: its dist-info registers the engines' backends, which the other GPU
# scripts' /tmp/shim must not (on 2026-11-29 a certify run after this script on the same
# machine picked the transformers backends up from a shared shim, doubling its cases)
shim=/tmp/shim-engines
mkdir -p $shim/moecert
for d in reference kernels conformance reports; do ln -sfn "$PWD/$d" $shim/moecert/$d; done
# the engines' backends register through the package's entry points (pyproject.toml): the
# shim carries them in a dist-info of its own, as an install would
python3 -c '
import pathlib, tomllib
project = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]
info = pathlib.Path("/tmp/shim-engines/moecert-0.0.dist-info")
info.mkdir(exist_ok=True)
(info / "METADATA").write_text("Metadata-Version: 2.1\nName: moecert\nVersion: 0.0\n")
(info / "entry_points.txt").write_text("".join(
    f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n"
    for group, eps in project["entry-points"].items()))'
export PYTHONPATH=$shim:$(python3 tools/engine_carry.py env "$engine")
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_LOGGING_LEVEL=WARNING
unset TRITON_INTERPRET
case $engine in
    vllm) backends=(--backend vllm) ;;
    transformers) backends=(--backend transformers --backend transformers-grouped_mm
                            --backend transformers-batched_mm) ;;
    *) echo "gpu_engines.sh: engine must be vllm or transformers, got '$engine'" >&2; exit 2 ;;
esac
# the engine's GPU list where its GPU kernels fail otherwise than its CPU ones (vLLM: 0.25.1's
# CUDA build against the CPU gate's 0.32); else the engine's one list (transformers: every
# failing row of the H200 smoke run of 2026-11-29 14:16 is one xfail-transformers.toml expects)
xfail=()
list=conformance/harness/xfail-$engine-cuda.toml
[ -f "$list" ] || list=conformance/harness/xfail-$engine.toml
[ -f "$list" ] && xfail=(--xfail "$list")
limit=${GPU_ENGINES_S:-260}
device_kind=${GPU_ENGINES_DEVICE:-cuda}  # cpu: the same steps on a CPU (the script's own test)
results=$OUT/results-$engine
record=$OUT/gpu-engines-$engine.md
start=$(date +%s)

versions=$(python3 - "$engine" <<'EOF'
import sys, torch, triton
engine = sys.argv[1]
mod = __import__("vllm" if engine == "vllm" else "transformers")
extra = ""
if engine == "vllm":
    from vllm.platforms import current_platform
    extra = f", vLLM platform {type(current_platform).__name__}"
import compressed_tensors
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, triton {triton.__version__}, "
      f"{engine} {mod.__version__}, compressed-tensors {compressed_tensors.__version__}{extra}")
EOF
) || { echo "gpu_engines.sh: $engine does not import here (tools/engine_carry.py receive first)" >&2; exit 1; }
device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
{
    echo ""
    echo "### $(date -u +%Y-%m-%d\ %H:%M) UTC: $engine on $device_kind"
    echo ""
    echo "Device: $device; $versions. Command: \`bash tools/gpu_engines.sh $engine $suite\`"
    echo "(expected-failure list: ${xfail[*]:-none})."
    echo ""
    echo "| step | verdict | wall (s) |"
    echo "|---|---|---|"
} > "$record"

failed=0
step() {  # step NAME LOGFILE -- command...
    local name=$1 log=$2; shift 3
    local t0=$(date +%s)
    timeout "$limit" "$@" > "$log" 2>&1
    local rc=$?
    local verdict
    verdict=$(grep -E "^(green|not green|NOT)" "$log" | tail -1)
    [ $rc -eq 124 ] && verdict="cut short at ${limit} s (not a verdict)"
    [ $rc -ne 0 ] && failed=1
    echo "| $name | ${verdict:-exit $rc} | $(( $(date +%s) - t0 )) |" >> "$record"
    echo "$name: ${verdict:-exit $rc} ($(( $(date +%s) - t0 )) s)"
}

# GPU_ENGINES_PARTS: "suite", "folders", "triage" (after the summary, below) or suite and
# folders (default): one call of at most 600 s holds
# one of them on a machine whose /tmp already has the engine (the suite and 30 folders took
# longer than one call on 2026-11-29)
parts=${GPU_ENGINES_PARTS:-suite folders}
[[ " $parts " == *" suite "* ]] && \
step "$suite suite" "$OUT/$engine-$suite.log" -- python3 -m moecert.conformance.cli run \
    --suite "$suite" "${backends[@]}" --device "$device_kind" -n "${GPU_ENGINES_WORKERS:-8}" --results "$results" "${xfail[@]}" "$@"

# every real producer folder, six processes at a time
run_folder() {
    local f=$1 n
    n=$(basename "$f")
    timeout "$limit" python3 -m moecert.conformance.cli run --suite smoke --checkpoint "$f" \
        "${backends[@]}" --device "$device_kind" -n 1 --results "$results-folders/$n" \
        "${xfail[@]}" > "$logs/folder-$n.log" 2>&1
    echo "$n: exit $? $(grep -E '^(green|not green)' "$logs/folder-$n.log" | tail -1)" \
        >> "$OUT/folders-$engine.txt"
}
if [[ " $parts " == *" folders "* ]]; then
    t0=$(date +%s)
    : > "$OUT/folders-$engine.txt"
    # GPU_ENGINES_FOLDERS_S: no folder starts after this many seconds of the part (the call's
    # own limit would kill the script before its record and tar exist); the ones not started
    # are listed as such
    budget=${GPU_ENGINES_FOLDERS_S:-100000}
    # GPU_ENGINES_FOLDERS: the folder names to run (default every one)
    chosen=()
    for n in ${GPU_ENGINES_FOLDERS:-}; do chosen+=("tests/fixtures/checkpoints/$n/"); done
    [ ${#chosen[@]} -eq 0 ] && chosen=(tests/fixtures/checkpoints/*/)
    for f in "${chosen[@]}"; do
        while [ "$(jobs -rp | wc -l)" -ge "${GPU_ENGINES_FOLDER_JOBS:-6}" ]; do wait -n; done
        if [ $(( $(date +%s) - t0 )) -ge "$budget" ]; then
            echo "$(basename "$f"): not run (GPU_ENGINES_FOLDERS_S=$budget reached)" \
                >> "$OUT/folders-$engine.txt"
            continue
        fi
        run_folder "$f" &
    done
    wait
    sort -o "$OUT/folders-$engine.txt" "$OUT/folders-$engine.txt"
    bad=$(grep -vc ": exit 0 " "$OUT/folders-$engine.txt")
    [ "$bad" -ne 0 ] && failed=1
    echo "| $(wc -l < "$OUT/folders-$engine.txt") producer folders | $bad not green | $(( $(date +%s) - t0 )) |" >> "$record"
    cat "$OUT/folders-$engine.txt"
fi

{
    echo ""
    echo "Claimed cases per scheme and the kernel the engine ran (the results' backend_detail),"
    echo "by case status:"
    echo ""
    python3 tools/engine_gpu_summary.py $(ls -d "$results" "$results"-folders/* 2>/dev/null) \
        --failures "$OUT/failures-$engine.csv"
    echo ""
    echo "Total wall: $(( $(date +%s) - start )) s."
} >> "$record" 2>&1
# GPU_ENGINES_PARTS "triage": each failing accuracy row (one per variant and layer shape, at
# most GPU_ENGINES_TRIAGE_N) against every reading and planted bug the harness holds
# (tools/reading_sweep.py), then the engine's one-file reductions (tools/<engine>_repro/gpu_*.py,
# the engine and torch only), each under the step limit; into the tar
if [[ " $parts " == *" triage "* ]]; then
    t0=$(date +%s)
    if [ -s "$OUT/failures-$engine.csv" ]; then
        timeout "$limit" python3 tools/reading_sweep.py --failures "$OUT/failures-$engine.csv" \
            --one-per-layer --limit "${GPU_ENGINES_TRIAGE_N:-40}" --device "$device_kind" \
            --suite "$suite" --out "$logs/sweep-$engine.csv" > "$logs/sweep-$engine.txt" 2>&1
        echo "| reading sweep of the failures | exit $? | $(( $(date +%s) - t0 )) |" >> "$record"
    fi
    for script in tools/${engine}_repro/gpu_*.py; do
        [ -f "$script" ] || continue
        t1=$(date +%s)
        (cd "$(dirname "$script")" && timeout "$limit" python3 "$(basename "$script")") \
            > "$logs/$(basename "$script" .py).txt" 2>&1
        echo "| $(basename "$script") | exit $? | $(( $(date +%s) - t1 )) |" >> "$record"
    done
fi
cp "$OUT"/*.log "$logs"/ 2>/dev/null
tar -czf "$OUT/results-$engine.tgz" -C "$OUT" $(cd "$OUT" && ls -d "results-$engine" "results-$engine-folders" 2>/dev/null) \
    $(cd "$OUT" && ls folders-*.txt 2>/dev/null) -C "$logs" . 2>/dev/null
rm -rf "$results" "$results"-folders "$OUT"/*.log "$logs"
cat "$record"
exit $failed
