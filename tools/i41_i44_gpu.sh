#!/bin/bash
# Issues 41 and 44 on a two-GPU machine in one call, after `tools/engine_carry.py receive` of
# every part (docs/gpu-ci.md, thirteenth session):
#   GPU 0: tools/vllm_repro/gpu_reduce.py mxfp4-rounded (vLLM's rounded-up Marlin MXFP4 path
#     without moecert), then vLLM 0.25.1's whole `ci` and `smoke` suites at once (their GPU
#     list; tools/gpu_engines.sh, suite part);
#   GPU 1: tools/gpu_ci.sh (issue 44: every CUDA-only test file and the `ci` suite on the tree,
#     MXFP4's bf16 scales the default), then the MXFP4 producer folders through vLLM
#     (I41_FOLDERS; every check, the exact tier included).
# Everything lands in one tar, $OUT/i41-i44.tgz, and a summary on stdout (the device tool
# brings back eight files). I41_SUITES_S (380): each vLLM suite's limit.
# History: 2026-11-30 15:00 and 15:10 (twelfth session: the MX schemes, six folders, the
# smoke suite cut at 330 s, the NVFP4 prefill diag): git log of this file. Its 18:07 run (this
# version) outran the call's 600 s and wrote no tar (gpu_ci.sh took 402 s beside the suites):
# tools/i41_gpu2.sh has the watchdog; run gpu_ci.sh in a call of its own.
set -u
cd "$(dirname "$0")/.."
final=${OUT:-/tmp/out}; mkdir -p "$final"
work=/tmp/i41-i44; rm -rf "$work"; mkdir -p "$work"
start=$(date +%s)
stamp() { echo "$1 exit $2 at $(( $(date +%s) - start )) s" >> "$work/times.txt"; }
folders=${I41_FOLDERS:-quark-mxfp4-w4a4-qwen3moe ct-mxfp4-qwen3moe ct-mxfp4-w4a4-qwen3moe}
limit=${I41_SUITES_S:-380}
(
  export CUDA_VISIBLE_DEVICES=0
  PYTHONPATH=$(python3 tools/engine_carry.py env vllm) timeout 150 \
      python3 tools/vllm_repro/gpu_reduce.py mxfp4-rounded > "$work/reduce-mxfp4.txt" 2>&1
  stamp "gpu_reduce.py mxfp4-rounded" $?
  ( OUT=$work/ci GPU_ENGINES_S=$limit GPU_ENGINES_WORKERS=9 GPU_ENGINES_PARTS=suite \
      bash tools/gpu_engines.sh vllm ci > "$work/ci.txt" 2>&1
    stamp "vllm ci" $? ) &
  ( OUT=$work/smoke GPU_ENGINES_S=$limit GPU_ENGINES_WORKERS=7 GPU_ENGINES_PARTS=suite \
      bash tools/gpu_engines.sh vllm smoke > "$work/smoke.txt" 2>&1
    stamp "vllm smoke" $? ) &
  wait
) &
(
  export CUDA_VISIBLE_DEVICES=1
  OUT=$work/gpu-ci GPU_CI_SUITE_S=200 bash tools/gpu_ci.sh > "$work/gpu-ci.txt" 2>&1
  stamp "gpu_ci.sh" $?
  OUT=$work/folders GPU_ENGINES_S=200 GPU_ENGINES_PARTS=folders GPU_ENGINES_FOLDER_JOBS=3 \
      GPU_ENGINES_FOLDERS="$folders" bash tools/gpu_engines.sh vllm smoke > "$work/folders.txt" 2>&1
  stamp "vllm folders" $?
) &
wait
tar -czf "$final/i41-i44.tgz" -C /tmp i41-i44
cat "$work/times.txt" "$work/reduce-mxfp4.txt" | grep -v Warning | tail -n 30
for f in gpu-ci ci smoke folders; do
  [ -f "$work/$f.txt" ] && { echo "== $f"; grep -v '^|' "$work/$f.txt" | tail -n 14; }
done
