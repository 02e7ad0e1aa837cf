#!/bin/bash
# Issue 41 on a two-GPU machine in one call, after `tools/engine_carry.py receive` of every
# part: GPU 0 runs vLLM's smoke suite (tools/gpu_engines.sh, the GPU list); GPU 1 runs the
# one-file reductions of the rows the last smoke run left open (tools/vllm_repro/gpu_reduce.py
# int8 router fp8-tensor nvfp4), then the producer folders that have not run through vLLM on
# cuda. Everything lands in one tar in $OUT (the device tool brings back eight files).
#   I41_SUITE_S (330): the suite's limit; I41_FOLDERS_S (200): no folder starts after this.
set -u
cd "$(dirname "$0")/.."
final=${OUT:-/tmp/out}; mkdir -p "$final"
work=/tmp/i41; rm -rf "$work"; mkdir -p "$work"
# the nine folders that finished on 2026-11-29 14:29 (docs/gpu-ci.md) are left out
done_before="ct-fp8-block-qwen3moe deepseekv3-fp8-release ct-fp8-channel-qwen3moe
ct-w8a8-int8-qwen3moe modelopt-fp8-qwen3moe ct-nvfp4-qwen3moe modelopt-nvfp4-qwen3moe
modelopt-nvfp4-mixtral modelopt-nvfp4-qwen3moe-e16"
folders=$(ls tests/fixtures/checkpoints | grep -v MANIFEST | grep -vxF -f <(tr ' ' '\n' <<< "$done_before"))
start=$(date +%s)
( CUDA_VISIBLE_DEVICES=0 OUT=$work/suite GPU_ENGINES_S=${I41_SUITE_S:-330} GPU_ENGINES_WORKERS=16 \
    GPU_ENGINES_PARTS=suite bash tools/gpu_engines.sh vllm smoke > "$work/suite.txt" 2>&1
  echo "suite exit $? at $(( $(date +%s) - start )) s" >> "$work/times.txt" ) &
( export CUDA_VISIBLE_DEVICES=1
  (cd tools/vllm_repro && PYTHONPATH=$(python3 ../engine_carry.py env vllm) timeout 200 \
      python3 gpu_reduce.py int8 router fp8-tensor nvfp4 > "$work/reduce.txt" 2>&1)
  echo "reduce exit $? at $(( $(date +%s) - start )) s" >> "$work/times.txt"
  OUT=$work/folders GPU_ENGINES_S=160 GPU_ENGINES_PARTS=folders GPU_ENGINES_FOLDER_JOBS=8 \
      GPU_ENGINES_FOLDERS_S=${I41_FOLDERS_S:-200} GPU_ENGINES_FOLDERS="$folders" \
      bash tools/gpu_engines.sh vllm smoke > "$work/folders.txt" 2>&1
  echo "folders exit $? at $(( $(date +%s) - start )) s" >> "$work/times.txt" ) &
wait
tar -czf "$final/i41.tgz" -C /tmp i41
cat "$work/times.txt" "$work/reduce.txt"
tail -5 "$work/suite.txt" "$work/folders.txt"
