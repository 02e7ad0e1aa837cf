#!/bin/bash
# Issue 41's second call of the thirteenth session, on a two-GPU machine after
# `tools/engine_carry.py receive` of every part (docs/gpu-ci.md):
#   GPU 0: tools/vllm_repro/gpu_reduce.py mxfp4-rounded (run from /tmp: vLLM's model registry
#     imports a top-level `kernels`, which from the repository root is moecert's folder), then
#     vLLM's whole `ci` suite (12 workers);
#   GPU 1 at once: vLLM's whole `smoke` suite (10 workers) and the MXFP4 producer folders
#     (I41_FOLDERS, every check, the exact tier included).
# Each step is bounded (I41_SUITES_S, 400 s) and the tar, $OUT/i41.tgz, is written even when
# the call's own limit comes first (a watchdog at I41_TAR_AT, 560 s): the first version of
# this batch (tools/i41_i44_gpu.sh, 18:07) outran 600 s and brought nothing back by itself.
set -u
cd "$(dirname "$0")/.."
repo=$PWD
. tools/gpu_batch.sh
batch_begin i41b "${I41_TAR_AT:-560}"
folders=${I41_FOLDERS:-quark-mxfp4-w4a4-qwen3moe ct-mxfp4-qwen3moe ct-mxfp4-w4a4-qwen3moe}
limit=${I41_SUITES_S:-400}
(
  export CUDA_VISIBLE_DEVICES=0
  (cd /tmp && PYTHONPATH=$(cd "$repo" && python3 tools/engine_carry.py env vllm) timeout 90 \
      python3 "$repo/tools/vllm_repro/gpu_reduce.py" mxfp4-rounded) > "$work/reduce-mxfp4.txt" 2>&1
  stamp "gpu_reduce.py mxfp4-rounded" $?
  OUT=$work/ci GPU_ENGINES_S=$limit GPU_ENGINES_WORKERS=12 GPU_ENGINES_PARTS=suite \
      bash tools/gpu_engines.sh vllm ci > "$work/ci.txt" 2>&1
  stamp "vllm ci" $?
) &
gpu0=$!
(
  export CUDA_VISIBLE_DEVICES=1
  ( OUT=$work/smoke GPU_ENGINES_S=$limit GPU_ENGINES_WORKERS=10 GPU_ENGINES_PARTS=suite \
      bash tools/gpu_engines.sh vllm smoke > "$work/smoke.txt" 2>&1
    stamp "vllm smoke" $? ) &
  ( OUT=$work/folders GPU_ENGINES_S=240 GPU_ENGINES_PARTS=folders GPU_ENGINES_FOLDER_JOBS=3 \
      GPU_ENGINES_FOLDERS="$folders" bash tools/gpu_engines.sh vllm smoke > "$work/folders.txt" 2>&1
    stamp "vllm folders" $? ) &
  wait
) &
gpu1=$!
wait "$gpu0" "$gpu1"
batch_end
grep -vi warn "$work/reduce-mxfp4.txt" | tail -n 16
for f in ci smoke folders; do
  [ -f "$work/$f.txt" ] && { echo "== $f"; grep -v '^|' "$work/$f.txt" | grep -E "case\(s\)|cut|green|wall" | tail -n 4; }
done
