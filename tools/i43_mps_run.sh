#!/bin/bash
# Issue 43, eighteenth session, second call: `moecert run --mps` itself (the run's own MPS
# daemon, conformance/harness/mps.py), from the repository root, no install:
#   tests/conformance/harness/test_mps_cuda.py: a real device-side fault among correct cases
#   under --mps (the correct ones must pass, outside MPS where the fault reached them);
#   the `ci` suite cold with --mps at -n auto (12 on 16 cores) and at -n 16;
#   certify cold with --mps in what is left of the call.
# After each run: whether an MPS daemon is left (there must be none).
# Results: $OUT/i41.tgz (the folder /tmp/i43r).
set -u
cd "$(dirname "$0")/.."
. tools/gpu_batch.sh
use_checkout
batch_begin i43r 565
left_over() { echo "$1: MPS processes left: $(pgrep -fc nvidia-cuda-mps)" >> "$work/times.txt"; }
record_machine
timeout 240 python -m pytest tests/conformance/harness/test_mps_cuda.py -q -s -p no:cacheprovider \
    > "$work/test-mps-cuda.txt" 2>&1
stamp "test_mps_cuda ($(tail -n 1 "$work/test-mps-cuda.txt"))" $?
left_over test
RUN_ARGS=--mps OUT=$work/ci-mps bash tools/gpu_hosts.sh ci 120 0 > "$work/ci-mps.txt" 2>&1
stamp ci-mps $?
left_over ci-mps
RUN_ARGS=--mps WORKERS=16 OUT=$work/ci-mps16 bash tools/gpu_hosts.sh ci 120 0 > "$work/ci-mps16.txt" 2>&1
stamp ci-mps-16 $?
left_over ci-mps-16
left=$(( 555 - ($(date +%s) - start) ))
RUN_ARGS=--mps OUT=$work/cert-mps bash tools/gpu_hosts.sh certify "$left" 0 > "$work/cert-mps.txt" 2>&1
stamp "cert-mps (limit $left s)" $?
left_over cert-mps
batch_end
