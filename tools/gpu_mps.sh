#!/bin/bash
# Issue 43: a run's workers sharing a GPU through CUDA MPS (the Multi-Process Service) rather
# than the driver's time slicing between their contexts. Measured first because certify's
# check time rose with the workers per GPU at the same cores (2x H200, 24 workers: 3306 s on
# one GPU, 1882 s on two; docs/speed.md), which is what time slicing does and MPS undoes.
#   tools/gpu_mps.sh COMMAND...   COMMAND under a private MPS control daemon (its pipe and
#   log folders under /tmp/mps, nothing of the card's settings touched: no compute mode), then
#   the daemon quit; prints how many clients its server took (server.log) so a run that never
#   reached MPS cannot pass for one that did.
# `moecert run --mps` does this itself since 1f07375 (conformance/harness/mps.py); this
# wrapper is what measured it first (tools/i43_mps_gpu.sh, 2026-12-01).
# Under MPS a fatal fault of one client is raised in every client of that GPU (NVIDIA's MPS
# documentation, "Error containment"): a measurement tool, not the runner's default.
set -u
command -v nvidia-cuda-mps-control > /dev/null || { echo "gpu_mps: no nvidia-cuda-mps-control on this machine"; exit 3; }
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps/log
rm -rf /tmp/mps; mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d || { echo "gpu_mps: the MPS control daemon did not start"; exit 3; }
"$@"; rc=$?
echo "gpu_mps: server list: $(echo get_server_list | nvidia-cuda-mps-control | tr '\n' ' ')"
echo quit | nvidia-cuda-mps-control
for _ in $(seq 20); do pgrep -f nvidia-cuda-mps > /dev/null || break; sleep 0.5; done
echo "gpu_mps: clients the server took: $(grep -c 'New client' "$CUDA_MPS_LOG_DIRECTORY/server.log" 2>/dev/null || echo 0)"
tail -n 3 "$CUDA_MPS_LOG_DIRECTORY/control.log" 2>/dev/null | sed 's/^/gpu_mps: control.log: /'
exit $rc
