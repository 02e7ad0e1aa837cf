#!/bin/bash
# Issues 41 and 44 on a two-GPU machine in one call, after `tools/engine_carry.py receive` of
# every part (docs/gpu-ci.md, "What the next GPU calls run", twelfth session):
#   GPU 0, vLLM 0.25.1 (tools/gpu_engines.sh, its GPU list), at once: the `ci` suite's MXFP4
#     and MXFP6 schemes (the adapter's model config, 1c60765: never on a GPU), the three Quark
#     OCP-MX folders, and the whole smoke suite (results kept: the numerics column of
#     MoeWNA16's w4a8-int8 rows);
#   GPU 1: tools/i44_prefill_diag.py (which side of the failing NVFP4 prefill-decode test is
#     off), then tools/gpu_ci.sh (every CUDA-only test file whole, the `ci` suite on cuda).
# Everything lands in one tar, $OUT/i41-i44.tgz, and a summary on stdout (the device tool
# brings back eight files). I41_SMOKE_S (330): the smoke suite's limit.
set -u
cd "$(dirname "$0")/.."
final=${OUT:-/tmp/out}; mkdir -p "$final"
work=/tmp/i41-i44; rm -rf "$work"; mkdir -p "$work"
start=$(date +%s)
# the shim the diag imports moecert through (gpu_ci.sh makes the same one)
mkdir -p /tmp/shim/moecert
for d in reference kernels conformance reports; do ln -sfn "$PWD/$d" /tmp/shim/moecert/$d; done
stamp() { echo "$1 exit $2 at $(( $(date +%s) - start )) s" >> "$work/times.txt"; }
(
  export CUDA_VISIBLE_DEVICES=0
  ( OUT=$work/mx GPU_ENGINES_S=240 GPU_ENGINES_WORKERS=8 GPU_ENGINES_PARTS=suite \
      bash tools/gpu_engines.sh vllm ci -- --scheme mxfp4 --scheme mxfp6-e2m3 \
      --scheme mxfp6-e3m2 > "$work/mx.txt" 2>&1; stamp "vllm ci mxfp4/mxfp6" $? ) &
  ( OUT=$work/folders GPU_ENGINES_S=200 GPU_ENGINES_PARTS=folders GPU_ENGINES_FOLDER_JOBS=3 \
      GPU_ENGINES_FOLDERS="quark-mxfp4-w4a4-qwen3moe quark-mxfp6-e2m3-qwen3moe quark-mxfp6-e3m2-qwen3moe gptoss-mxfp4-release ct-mxfp4-qwen3moe ct-mxfp4-w4a4-qwen3moe" \
      bash tools/gpu_engines.sh vllm smoke > "$work/folders.txt" 2>&1; stamp "vllm folders" $? ) &
  ( OUT=$work/smoke GPU_ENGINES_S=${I41_SMOKE_S:-330} GPU_ENGINES_WORKERS=10 \
      GPU_ENGINES_PARTS=suite bash tools/gpu_engines.sh vllm smoke > "$work/smoke.txt" 2>&1
    stamp "vllm smoke" $? ) &
  wait
) &
(
  export CUDA_VISIBLE_DEVICES=1
  for scale in nvfp4 mxfp4-folded; do
    PYTHONPATH=/tmp/shim timeout 120 python3 tools/i44_prefill_diag.py --scale "$scale" \
        > "$work/diag-$scale.txt" 2>&1
    stamp "i44 diag $scale" $?
  done
  OUT=$work/gpu-ci GPU_CI_SUITE_S=300 bash tools/gpu_ci.sh > "$work/gpu-ci.txt" 2>&1
  stamp "gpu_ci.sh" $?
) &
wait
tar -czf "$final/i41-i44.tgz" -C /tmp i41-i44
cat "$work/times.txt"
cat "$work"/diag-*.txt
for f in mx folders smoke gpu-ci; do echo "== $f"; tail -n 30 "$work/$f.txt"; done
