#!/bin/bash
# Issue 43, eighteenth session: does MPS (tools/gpu_mps.sh) take the contention out of the
# check time? One GPU call, from the repository root, no install:
#   the `ci` suite cold without MPS, then cold under MPS (same machine, same tree);
#   issue 44's FP4 decode rows with the Marlin peer timed as a graph replay (a7dab23), no MPS;
#   certify cold under MPS in what is left of the call.
# Results: $OUT/i41.tgz (the folder /tmp/i43m; gpu_hosts.sh's logs and results under it).
set -u
cd "$(dirname "$0")/.."
. tools/gpu_batch.sh
use_checkout
batch_begin i43m 565
record_machine
OUT=$work/plain bash tools/gpu_hosts.sh ci 120 0 > "$work/ci-plain.txt" 2>&1
stamp ci-plain $?
OUT=$work/mps bash tools/gpu_mps.sh bash tools/gpu_hosts.sh ci 120 0 > "$work/ci-mps.txt" 2>&1
stamp ci-mps $?
TRITON_CACHE_DIR=/tmp/i43-bench-triton timeout 130 python -m moecert.conformance.cli bench \
    --device cuda --mode graph --max-seconds 0.5 --repeats 50 --M 16,64 --backend triton \
    --scheme mxfp4 --scheme nvfp4 --marlin-lib .vllm/_moe_C_stable_libtorch.abi3.so \
    --results "$work/fp4" --run-id fp4-graph-peer > "$work/fp4.txt" 2>&1
stamp fp4-bench $?
left=$(( 555 - ($(date +%s) - start) ))
OUT=$work/mps-cert bash tools/gpu_mps.sh bash tools/gpu_hosts.sh certify "$left" 0 \
    > "$work/cert-mps.txt" 2>&1
stamp "cert-mps (limit $left s)" $?
batch_end
