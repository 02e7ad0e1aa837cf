#!/bin/bash
# `moecert bench` on the GPU machine (no install there: a PYTHONPATH shim), then its report.
# usage: tools/gpu_bench.sh [moecert bench options]   (docs/speed.md has the full run)
set -u
mkdir -p /tmp/shim/moecert
for d in reference kernels conformance reports; do ln -sfn "$PWD/$d" /tmp/shim/moecert/$d; done
export PYTHONPATH=/tmp/shim
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader
results="${OUT:-/tmp}/bench"
python -m moecert.conformance.cli bench --device cuda --results "$results" "$@" \
    > "${OUT:-/tmp}/bench.txt" 2> "${OUT:-/tmp}/bench.err"
rc=$?
echo "bench rc=$rc"
tail -3 "${OUT:-/tmp}/bench.err"
python -m moecert.conformance.cli report "$results" --md "${OUT:-/tmp}/bench.md" \
    > "${OUT:-/tmp}/bench-report.txt"
cat "${OUT:-/tmp}/bench.txt"
exit $rc
