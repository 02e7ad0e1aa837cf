#!/bin/bash
# Issues 41 and 44 on a two-GPU machine in one call, after `tools/engine_carry.py receive` of
# every part (docs/gpu-ci.md, twelfth session):
#   GPU 0, vLLM 0.25.1 (tools/gpu_engines.sh, its GPU list), at once: the `ci` suite's MXFP4
#     and MXFP6 schemes, then the triage of their failing rows (tools/reading_sweep.py), and
#     the Quark OCP-MX folders (I41_FOLDERS);
#   GPU 1: tools/i44_prefill_diag.py and tests/kernels/test_fp4_scale_bf16_cuda.py (issue
#     44's NVFP4 prefill decode), then vLLM's whole smoke suite (results kept).
# I41_GPU_CI=1 runs tools/gpu_ci.sh on GPU 1 instead of the smoke suite.
# Everything lands in one tar, $OUT/i41-i44.tgz, and a summary on stdout (the device tool
# brings back eight files). I41_SMOKE_S (330): the smoke suite's limit.
# 2026-11-30 15:00 (first version: the smoke suite, the MX schemes and six folders at once on
# GPU 0, gpu_ci.sh on GPU 1): 473 s, the smoke suite cut at 330 s.
set -u
cd "$(dirname "$0")/.."
final=${OUT:-/tmp/out}; mkdir -p "$final"
work=/tmp/i41-i44; rm -rf "$work"; mkdir -p "$work"
start=$(date +%s)
# the shim the diag and the tests import moecert through (gpu_ci.sh makes the same one)
mkdir -p /tmp/shim/moecert
for d in reference kernels conformance reports; do ln -sfn "$PWD/$d" /tmp/shim/moecert/$d; done
stamp() { echo "$1 exit $2 at $(( $(date +%s) - start )) s" >> "$work/times.txt"; }
folders=${I41_FOLDERS:-quark-mxfp4-w4a4-qwen3moe quark-mxfp6-e2m3-qwen3moe quark-mxfp6-e3m2-qwen3moe}
(
  export CUDA_VISIBLE_DEVICES=0
  ( OUT=$work/mx GPU_ENGINES_S=240 GPU_ENGINES_WORKERS=10 GPU_ENGINES_PARTS="suite triage" \
      GPU_ENGINES_TRIAGE_N=12 bash tools/gpu_engines.sh vllm ci -- --scheme mxfp4 \
      --scheme mxfp6-e2m3 --scheme mxfp6-e3m2 > "$work/mx.txt" 2>&1
    stamp "vllm ci mxfp4/mxfp6 + triage" $? ) &
  ( OUT=$work/folders GPU_ENGINES_S=240 GPU_ENGINES_PARTS=folders GPU_ENGINES_FOLDER_JOBS=3 \
      GPU_ENGINES_FOLDERS="$folders" bash tools/gpu_engines.sh vllm smoke > "$work/folders.txt" 2>&1
    stamp "vllm folders" $? ) &
  wait
) &
(
  export CUDA_VISIBLE_DEVICES=1
  PYTHONPATH=/tmp/shim timeout 60 python3 tools/i44_prefill_diag.py --scale nvfp4 \
      > "$work/diag-nvfp4.txt" 2>&1
  stamp "i44 diag nvfp4" $?
  PYTHONPATH=/tmp/shim timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE \
      tests/kernels/test_fp4_scale_bf16_cuda.py > "$work/scale-bf16-cuda.txt" 2>&1
  stamp "test_fp4_scale_bf16_cuda.py" $?
  if [ "${I41_GPU_CI:-0}" = 1 ]; then
    OUT=$work/gpu-ci GPU_CI_SUITE_S=300 bash tools/gpu_ci.sh > "$work/gpu-ci.txt" 2>&1
    stamp "gpu_ci.sh" $?
  else
    OUT=$work/smoke GPU_ENGINES_S=${I41_SMOKE_S:-330} GPU_ENGINES_WORKERS=12 \
        GPU_ENGINES_PARTS=suite bash tools/gpu_engines.sh vllm smoke > "$work/smoke.txt" 2>&1
    stamp "vllm smoke" $?
  fi
) &
wait
tar -czf "$final/i41-i44.tgz" -C /tmp i41-i44
cat "$work/times.txt" "$work"/diag-*.txt
tail -n 3 "$work/scale-bf16-cuda.txt"
for f in mx folders smoke gpu-ci; do
  [ -f "$work/$f.txt" ] && { echo "== $f"; grep -v '^|' "$work/$f.txt" | tail -n 12; }
done
