#!/bin/bash
# Issue 41, the fourteenth session's third call, on a two-GPU machine after
# `tools/engine_carry.py receive` of every part: the MXFP4 file choice by activation
# (kernels/vllm_checkpoint.py: the gpt-oss release's file for gpt-oss's activation only, other
# layers as llm-compressor's MXFP4A16) judged on the H200.
#   GPU 0: gpu_reduce.py mxfp4-spread (each output also against the reading clamped at 7),
#     then vLLM's `ci` suite, MXFP4 only;
#   GPU 1 at once: vLLM's `smoke` suite, MXFP4 only, beside the four MXFP4 folders.
# A watchdog writes $OUT/i41.tgz at I41_TAR_AT (540 s) if the call's own limit would come first.
set -u
cd "$(dirname "$0")/.."
repo=$PWD
. tools/gpu_batch.sh
batch_begin i41f "${I41_TAR_AT:-540}"
folders=${I41_FOLDERS:-ct-mxfp4-qwen3moe ct-mxfp4-w4a4-qwen3moe quark-mxfp4-w4a4-qwen3moe gptoss-mxfp4-release}
limit=${I41_SUITES_S:-300}
E=$(python3 tools/engine_carry.py env vllm)
(
  export CUDA_VISIBLE_DEVICES=0
  (cd /tmp && PYTHONPATH=$E timeout 120 python3 "$repo/tools/vllm_repro/gpu_reduce.py" mxfp4-spread) \
      > "$work/spread.txt" 2>&1
  stamp "gpu_reduce.py mxfp4-spread" $?
  OUT=$work/ci GPU_ENGINES_S=$limit GPU_ENGINES_WORKERS=12 GPU_ENGINES_PARTS=suite \
      bash tools/gpu_engines.sh vllm ci -- --scheme mxfp4 > "$work/ci.txt" 2>&1
  stamp "vllm ci mxfp4" $?
) &
gpu0=$!
(
  export CUDA_VISIBLE_DEVICES=1
  ( OUT=$work/smoke GPU_ENGINES_S=$limit GPU_ENGINES_WORKERS=10 GPU_ENGINES_PARTS=suite \
      bash tools/gpu_engines.sh vllm smoke -- --scheme mxfp4 > "$work/smoke.txt" 2>&1
    stamp "vllm smoke mxfp4" $? ) &
  ( OUT=$work/folders GPU_ENGINES_S=300 GPU_ENGINES_PARTS=folders GPU_ENGINES_FOLDER_JOBS=4 \
      GPU_ENGINES_FOLDERS="$folders" bash tools/gpu_engines.sh vllm smoke > "$work/folders.txt" 2>&1
    stamp "vllm folders" $? ) &
  wait
) &
gpu1=$!
wait "$gpu0" "$gpu1"
batch_end
grep -E "^  moe_backend|^gpt-oss" "$work/spread.txt" | tail -n 12
for f in ci smoke folders; do
  [ -f "$work/$f.txt" ] && { echo "== $f"; grep -v '^|' "$work/$f.txt" | grep -E "case\(s\)|cut|green|wall" | tail -n 6; }
done
for f in ci smoke folders; do [ -f "$work/$f/failures-vllm.csv" ] && cut -d, -f2,4,5,6,8 "$work/$f/failures-vllm.csv" | head -20; done
