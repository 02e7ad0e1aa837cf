#!/bin/bash
# Issue 41 on a two-GPU machine in one call, after `tools/engine_carry.py receive` of every
# part: GPU 0 runs vLLM's smoke suite (tools/gpu_engines.sh, the GPU list); GPU 1 runs the
# one-file reductions (tools/vllm_repro/gpu_reduce.py), then producer folders through vLLM.
# Everything lands in one tar in $OUT (the device tool brings back eight files).
#   I41_REDUCE   the reduction steps (default: int8-layer int8-router fp8-tensor, the
#                readings of 2026-11-29 21:40 that have not run on a GPU)
#   I41_FOLDERS  the folders (default: the two real Quark int8 folders: the tensor one's
#                rows wait for the int8 requantization reading's first GPU run)
#   I41_SUITE_S (330): the suite's limit; I41_FOLDERS_S (200): no folder starts after this.
#   I41_SUITE_ARGS: more `moecert run` arguments for the suite (e.g. "--scheme int8-w8a8")
#   I41_INSIDE   after the suite, tools/vllm_repro/inside_outside.py on GPU 0 with vLLM's own
#                oracle ("default") and with FP8 Marlin forced ("marlin"); "" skips it
# 2026-11-29 17:34 (every folder but the nine of 14:29): suite 215 s, reductions 153 s,
# folders 490 s into the call.
set -u
cd "$(dirname "$0")/.."
final=${OUT:-/tmp/out}; mkdir -p "$final"
work=/tmp/i41; rm -rf "$work"; mkdir -p "$work"
folders=${I41_FOLDERS:-quark-int8-channel-qwen3moe quark-int8-tensor-qwen3moe}
start=$(date +%s)
( CUDA_VISIBLE_DEVICES=0 OUT=$work/suite GPU_ENGINES_S=${I41_SUITE_S:-330} GPU_ENGINES_WORKERS=16 \
    GPU_ENGINES_PARTS=suite bash tools/gpu_engines.sh vllm smoke ${I41_SUITE_ARGS:-} \
    > "$work/suite.txt" 2>&1
  echo "suite exit $? at $(( $(date +%s) - start )) s" >> "$work/times.txt"
  # item 6: the harness's flow against a plain create / process / apply, same inputs
  for mode in ${I41_INSIDE-default marlin}; do
    flag=(); [ "$mode" = marlin ] && flag=(--force-marlin)
    CUDA_VISIBLE_DEVICES=0 PYTHONPATH=/tmp/shim-engines:$(python3 tools/engine_carry.py env vllm) \
        VLLM_LOGGING_LEVEL=WARNING timeout 120 python3 tools/vllm_repro/inside_outside.py \
        "${flag[@]}" > "$work/inside-$mode.txt" 2>&1
    echo "inside-outside $mode exit $? at $(( $(date +%s) - start )) s" >> "$work/times.txt"
  done ) &
( export CUDA_VISIBLE_DEVICES=1
  # shellcheck disable=SC2086
  (cd tools/vllm_repro && PYTHONPATH=$(python3 ../engine_carry.py env vllm) timeout 200 \
      python3 gpu_reduce.py ${I41_REDUCE:-int8-layer int8-router fp8-tensor} > "$work/reduce.txt" 2>&1)
  echo "reduce exit $? at $(( $(date +%s) - start )) s" >> "$work/times.txt"
  OUT=$work/folders GPU_ENGINES_S=160 GPU_ENGINES_PARTS=folders GPU_ENGINES_FOLDER_JOBS=8 \
      GPU_ENGINES_FOLDERS_S=${I41_FOLDERS_S:-200} GPU_ENGINES_FOLDERS="$folders" \
      bash tools/gpu_engines.sh vllm smoke > "$work/folders.txt" 2>&1
  echo "folders exit $? at $(( $(date +%s) - start )) s" >> "$work/times.txt" ) &
wait
tar -czf "$final/i41.tgz" -C /tmp i41
cat "$work/times.txt"
grep -v -E "^(INFO|WARNING)" "$work/reduce.txt"
tail -n 5 "$work/suite.txt" "$work/folders.txt"
for f in "$work"/inside-*.txt; do [ -e "$f" ] && grep -v -E "^(INFO|WARNING)" "$f" | tail -n 20; done
