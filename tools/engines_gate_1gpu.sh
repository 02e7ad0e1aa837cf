#!/bin/bash
# The engines' GPU gate (tools/gpu_engines.sh) on a one-GPU machine in two device calls of at
# most 600 s each, after `tools/engine_carry.py receive` of every part (docs/gpu-ci.md):
#   bash tools/engines_gate_1gpu.sh vllm-ci   vLLM's whole `ci` suite (one call: it took
#                                             400-430 s of 12 workers on a shared host)
#   bash tools/engines_gate_1gpu.sh rest      transformers' `smoke` suite and every producer
#                                             folder through both engines, at once (on
#                                             2026-12-01 17 folders of 36 each fit the call)
#   bash tools/engines_gate_1gpu.sh folders   the folders GATE_FOLDERS names (default every
#                                             one) through both engines, at once
# Each part's records, failing rows and results come back in $OUT/i41.tgz, tarred by a
# watchdog at GATE_TAR_AT (560 s) if the call's own limit would come first.
set -u
cd "$(dirname "$0")/.."
part=${1:?usage: engines_gate_1gpu.sh vllm-ci|rest|folders}
. tools/gpu_batch.sh
batch_begin "gate-$part" "${GATE_TAR_AT:-560}"
limit=${GATE_STEP_S:-530}
jobs_=()
# folders ENGINE JOBS BUDGET_S [NAMES]: the producer folders through ENGINE in the background
# (NAMES empty: every one; none started after BUDGET_S), its pid added to jobs_
folders() {
  ( OUT=$work/${1/transformers/tf}-folders GPU_ENGINES_S=$limit GPU_ENGINES_PARTS=folders \
      GPU_ENGINES_FOLDER_JOBS=$2 GPU_ENGINES_FOLDERS_S=$3 GPU_ENGINES_FOLDERS="${4:-}" \
      bash tools/gpu_engines.sh "$1" smoke > "$work/${1/transformers/tf}-folders.txt" 2>&1
    stamp "$1 folders" $? ) &
  jobs_+=($!)
}
case $part in
  vllm-ci)
    OUT=$work/vllm-ci GPU_ENGINES_S=$limit GPU_ENGINES_WORKERS=${GATE_WORKERS:-13} \
        GPU_ENGINES_PARTS=suite bash tools/gpu_engines.sh vllm ci > "$work/vllm-ci.txt" 2>&1
    stamp "vllm ci" $? ;;
  rest)
    ( OUT=$work/tf-smoke GPU_ENGINES_S=$limit GPU_ENGINES_WORKERS=6 GPU_ENGINES_PARTS=suite \
        bash tools/gpu_engines.sh transformers smoke > "$work/tf-smoke.txt" 2>&1
      stamp "transformers smoke" $? ) &
    jobs_+=($!)
    folders transformers 3 400
    folders vllm 4 400 ;;
  folders)
    folders transformers 5 420 "${GATE_FOLDERS:-}"
    folders vllm 7 420 "${GATE_FOLDERS:-}" ;;
  *) echo "engines_gate_1gpu.sh: part must be vllm-ci, rest or folders, got '$part'" >&2; exit 2 ;;
esac
# these jobs only: a bare `wait` also waits for the watchdog (gpu_batch.sh), which cost two
# calls of 2026-12-01 their last 50 and 170 s
[ ${#jobs_[@]} -gt 0 ] && wait "${jobs_[@]}"
batch_end
for f in "$work"/*.txt; do
  [ "$(basename "$f")" = times.txt ] && continue
  echo "== $(basename "$f" .txt)"; grep -v '^|' "$f" | grep -E "case\(s\)|cut|green|wall|exit" | tail -n 12
done
for f in "$work"/*/failures-*.csv; do [ -f "$f" ] && { echo "== $f"; cut -d, -f2,4,5,6,8 "$f" | head -30; }; done
