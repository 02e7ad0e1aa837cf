#!/bin/bash
# certify (or another suite) with `-n auto` on several GPU selections of one host, one after
# another, each on a cold Triton cache and a cold checkpoint cache (issue 32's table):
#   tools/gpu_hosts.sh SUITE LIMIT_S SELECTION[:LIMIT_S]...
#   e.g. tools/gpu_hosts.sh certify 330 0,1,2,3:200 0
# A SELECTION is a CUDA_VISIBLE_DEVICES value; its own LIMIT_S overrides the first. Per selection: wall, the -n auto line, the
# verdict, and tools/run_breakdown.py's summary go to stdout and $OUT/hosts-<selection>.txt;
# at the end one row per selection of issue 43's table (host, GPUs, workers, wall, speed-up
# against this call's one-GPU selection) goes to stdout and $OUT/hosts-table.md, and the
# logs with every selection's results folder to $OUT/hosts.tgz.
# Issue 43 on one H200 in one call (under 9 minutes): tools/gpu_hosts.sh certify 400 0
# COSTS=RESULTS orders every run by those measured costs (--shard-costs: the longest problems
# first), e.g. in a later call on the same machine: COSTS=/tmp/results-0 tools/gpu_hosts.sh ...
# Certify as shards, one process per GPU, then one assemble: tools/gpu_shards.sh.
# A warm Triton cache beside the cold one (what a CI runner that persists its cache sees):
#   tools/gpu_hosts.sh certify 300 0:240; WARM_TRITON=1 tools/gpu_hosts.sh certify 300 0:240
# RUN_ARGS adds options to every run (e.g. RUN_ARGS=--mps: the workers share each GPU through
# MPS), WORKERS replaces -n auto (e.g. WORKERS=16).
# No install on the GPU machine: a PYTHONPATH shim to this checkout.
set -u
suite=${1:?usage: tools/gpu_hosts.sh SUITE LIMIT_S SELECTION...}; limit=$2; shift 2
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/shim/moecert
for d in reference kernels conformance reports; do ln -sfn "$PWD/$d" /tmp/shim/moecert/$d; done
export PYTHONPATH=/tmp/shim
nvidia-smi --query-gpu=index,name,memory.total,memory.free --format=csv,noheader
echo "cores $(nproc); git $(git rev-parse --short HEAD 2>/dev/null)"
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
host="$(nvidia-smi -L | wc -l)x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(nproc) cores"
rows=(); costs=()
if [[ -n ${COSTS:-} ]]; then  # copied: the runs below clear their own results folders
  rm -rf /tmp/costs-prev && cp -r "$COSTS" /tmp/costs-prev && costs=(--shard-costs /tmp/costs-prev)
fi
for arg in "$@"; do
  sel=${arg%%:*}; own=$limit; [[ $arg == *:* ]] && own=${arg##*:}
  tag=${sel//,/-}
  export TRITON_CACHE_DIR=/tmp/triton-$tag MOECERT_CACHE_DIR=/tmp/ckpt-$tag
  rm -rf "$MOECERT_CACHE_DIR" "/tmp/results-$tag"
  # WARM_TRITON=1 keeps the selection's Triton cache of an earlier run in this machine's /tmp
  # (a CI runner that persists TRITON_CACHE_DIR): its compiles are then loads
  [[ ${WARM_TRITON:-0} == 1 ]] || rm -rf "$TRITON_CACHE_DIR"
  start=$(date +%s)
  CUDA_VISIBLE_DEVICES=$sel timeout "$own" python -m moecert.conformance.cli run \
      --suite "$suite" --device cuda -n "${WORKERS:-auto}" --results "/tmp/results-$tag" "${costs[@]}" ${RUN_ARGS:-} \
      > "$OUT/run-$tag.txt" 2> "$OUT/run-$tag.err"
  rc=$?
  wall=$(( $(date +%s) - start ))
  workers=$(grep -m1 -o -- "-n auto: [0-9]*" "$OUT/run-$tag.err" | grep -o "[0-9]*$")
  workers=${workers:-${WORKERS:-}}
  gpus=$(tr ',' '\n' <<< "$sel" | wc -l)
  [[ $gpus == 1 && -z ${one:-} ]] && one=$wall
  rows+=("$gpus ${workers:-?} $wall $rc")
  {
    echo "== GPUs $sel: rc=$rc wall $(( $(date +%s) - start )) s"
    grep -m1 -- "-n auto" "$OUT/run-$tag.err"
    tail -4 "$OUT/run-$tag.txt"
    grep -c "out of memory" "$OUT/run-$tag.txt" | sed 's/^/lines saying out of memory: /'
    python tools/run_breakdown.py "/tmp/results-$tag" 2>&1 | head -30
    python - "/tmp/results-$tag" <<'PY'
import sys
from moecert.reports.store import load
rows = load(sys.argv[1])
retried = rows[rows["retried"].fillna("") != ""]
print("retried rows:", len(retried), "cases:", retried["case_id"].nunique())
for _, r in retried.drop_duplicates("case_id").head(5).iterrows():
    print("  ", r["case_id"], r["status"], r["retried"][:200])
PY
  } 2>&1 | tee "$OUT/hosts-$tag.txt"
done
{
  echo "| host | GPUs | workers | wall | speed-up | rc |"
  echo "|---|---|---|---|---|---|"
  for row in "${rows[@]}"; do
    read -r gpus workers wall rc <<< "$row"
    speed=$([[ -n ${one:-} ]] && python -c "print(f'{$one / $wall:.2f}x')" || echo "-")
    echo "| $host | $gpus | $workers | $wall s | $speed | $rc |"
  done
} | tee "$OUT/hosts-table.md"
# the results themselves travel back too (per-case peaks and durations for the memory model:
# schedule.device_need against `device_peak_bytes`): one tar with the logs, as the device
# tool returns at most eight files
tags=(); for arg in "$@"; do sel=${arg%%:*}; tags+=("results-${sel//,/-}"); done
tar -czf "$OUT/hosts.tgz" -C /tmp "${tags[@]}" -C "$OUT" $(cd "$OUT" && ls run-*.txt run-*.err hosts-*.txt) \
    && (cd "$OUT" && rm -f run-*.txt run-*.err hosts-[0-9]*.txt)
