#!/bin/bash
# Certify as N shards on N GPUs of one host, one process per GPU, all at once, then one
# assemble (issue 43 item 4, docs/ci-shards.md "Two shards as two processes on one host"):
#   tools/gpu_shards.sh LIMIT_S BACKEND [GPUS]       e.g. tools/gpu_shards.sh 150 torch 0,1
# Shard i of N runs on the i-th GPU of GPUS (default 0,1) as
#   CUDA_VISIBLE_DEVICES=<gpu> moecert certify --backend BACKEND --shard i/N --run-id R ...
# into its own folder, with its own cold Triton and checkpoint caches (as separate hosts
# would have); then every shard's results go into one folder and `moecert certify --assemble`
# makes the bundle. Printed (and in $OUT/shards.txt): each shard's wall, exit code and last
# lines, the whole wall (first start to the assembled bundle), the bundle's first line (the
# verdict), `moecert certify --verify`'s line and `moecert report`'s verdict of all shards' rows.
# The bundle and the logs go to $OUT/shards.tgz. Exit code: the assemble's (0 certified).
#
# Settings (environment): WORKERS per shard (default 3 per 4 cores, shared out over the
# shards: `-n auto` in each would count every core for itself); DEVICE (cuda; cpu for a check
# on a machine without GPUs, where GPUS only names the shards); SUITE (certify; another suite
# makes the bundle NOT CERTIFIED, for a quick check); IMPORT (a module each shard and the
# assemble import first, e.g. tests/conformance/helpers' small_certify_suite with that folder
# on PYTHONPATH); COSTS (an earlier run's results: --shard-costs, balancing the shards by
# measured cost, the same table for every shard); SHARDS_ROOT (the working folder, /tmp/shards).
# No install on the GPU machine: a PYTHONPATH shim to this checkout, as tools/gpu_hosts.sh.
set -u
limit=${1:?usage: tools/gpu_shards.sh LIMIT_S BACKEND [GPUS]}
backend=${2:?usage: tools/gpu_shards.sh LIMIT_S BACKEND [GPUS]}
IFS=, read -r -a gpus <<< "${3:-0,1}"
n=${#gpus[@]}
device=${DEVICE:-cuda}
workers=${WORKERS:-$(( $(nproc) * 3 / 4 / n > 0 ? $(nproc) * 3 / 4 / n : 1 ))}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/shards.txt") 2>&1
root=${SHARDS_ROOT:-/tmp/shards}; rm -rf "$root"; mkdir -p "$root"
shim=$root/shim/moecert; mkdir -p "$shim"
for d in reference kernels conformance reports; do ln -sfn "$PWD/$d" "$shim/$d"; done
export PYTHONPATH=$root/shim${PYTHONPATH:+:$PYTHONPATH}
run_id=shards-$(date +%Y%m%d-%H%M%S)
extra=(); [[ -n ${IMPORT:-} ]] && extra+=(--import "$IMPORT")
[[ ${SUITE:-certify} != certify ]] && extra+=(--suite "$SUITE")
if [[ -n ${COSTS:-} ]]; then  # copied: one table for every shard (their splits must agree)
  cp -r "$COSTS" "$root/costs" && extra+=(--shard-costs "$root/costs")
fi
echo "shards: $n on ${device} ${gpus[*]}, backend $backend, $workers workers each, run $run_id"
start=$(date +%s)
pids=()
for i in "${!gpus[@]}"; do
  (
    export TRITON_CACHE_DIR=$root/triton-$i MOECERT_CACHE_DIR=$root/ckpt-$i
    [[ $device == cuda* ]] && export CUDA_VISIBLE_DEVICES=${gpus[$i]}
    s=$(date +%s)
    timeout "$limit" python -m moecert.conformance.cli certify --backend "$backend" \
        --device "$device" -n "$workers" --out "$root/shard$i" --shard "$i/$n" \
        --run-id "$run_id" "${extra[@]}" > "$root/shard$i.txt" 2>&1
    echo "$? $(( $(date +%s) - s ))" > "$root/shard$i.rc"
  ) &
  pids+=($!)
done
wait "${pids[@]}"
mkdir -p "$root/bundle/results"
for i in "${!gpus[@]}"; do
  read -r rc wall < "$root/shard$i.rc"
  echo "== shard $i/$n on ${device} ${gpus[$i]}: rc=$rc wall $wall s"
  tail -3 "$root/shard$i.txt"
  cp "$root/shard$i/results/"* "$root/bundle/results/" 2>/dev/null
done
moecert() {  # with IMPORT imported first: --assemble and --verify take no --import
  python -c "
import importlib, sys
for m in filter(None, [sys.argv[1]]): importlib.import_module(m)
from moecert.conformance.cli.app import main
raise SystemExit(main(sys.argv[2:]))" "${IMPORT:-}" "$@"
}
moecert certify --assemble "$root/bundle" > "$root/assemble.txt" 2>&1
arc=$?
wall=$(( $(date +%s) - start ))
echo "== assembled: rc=$arc; wall $wall s for $n shards at once and the assemble"
tail -3 "$root/assemble.txt"
echo "bundle: $(head -1 "$root/bundle/CERTIFICATE.txt" 2>/dev/null || echo 'no CERTIFICATE.txt')"
moecert certify --verify "$root/bundle" 2>&1 | tail -1
moecert report "$root/bundle/results" 2>&1 | tail -1
tar -czf "$OUT/shards.tgz" -C "$root" bundle $(cd "$root" && ls shard*.txt assemble.txt)
exit $arc
