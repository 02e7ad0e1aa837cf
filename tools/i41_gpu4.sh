#!/bin/bash
# The fourteenth session's batch (issues 41 and 44), on a two-GPU machine after
# `tools/engine_carry.py receive` of every part (docs/gpu-ci.md):
#   GPU 0: tools/vllm_repro/mxfp4_rounded_moecert.py (its second version: moecert's, randn and
#     spread randn weights, each on both input draws at M 1 / 17 / 33 / 64, run from /tmp: vLLM's
#     model registry imports a top-level `kernels`), then issue 44's table (`I44_TABLE=1
#     tools/i44_gpu.sh`: the gptq-int4 row against Marlin int4 with the peer's fix 0199af6);
#   GPU 1 at once: vLLM's whole `ci` suite (12 workers, I41_SUITES_S) beside the Quark W4A4 and
#     llm-compressor MXFP4 folders (every check, the exact tier included).
# A watchdog writes $OUT/i41.tgz at I41_TAR_AT (560 s) if the call's own limit would come first.
set -u
cd "$(dirname "$0")/.."
repo=$PWD
. tools/gpu_batch.sh
batch_begin i41d "${I41_TAR_AT:-560}"
folders=${I41_FOLDERS:-quark-mxfp4-w4a4-qwen3moe ct-mxfp4-qwen3moe}
limit=${I41_SUITES_S:-430}
mkdir -p /tmp/shim/moecert
for d in reference kernels conformance reports; do ln -sfn "$repo/$d" /tmp/shim/moecert/$d; done
E=$(python3 tools/engine_carry.py env vllm)
(
  export CUDA_VISIBLE_DEVICES=0
  (cd /tmp && PYTHONPATH=/tmp/shim:$E timeout 200 \
      python3 "$repo/tools/vllm_repro/mxfp4_rounded_moecert.py") > "$work/moecert-data.txt" 2>&1
  stamp "mxfp4_rounded_moecert.py" $?
  OUT=$work/i44 I44_TABLE=1 timeout 300 bash tools/i44_gpu.sh > "$work/i44.txt" 2>&1
  stamp "i44_gpu.sh I44_TABLE=1" $?
) &
gpu0=$!
(
  export CUDA_VISIBLE_DEVICES=1
  ( OUT=$work/ci GPU_ENGINES_S=$limit GPU_ENGINES_WORKERS=12 GPU_ENGINES_PARTS=suite \
      bash tools/gpu_engines.sh vllm ci > "$work/ci.txt" 2>&1
    stamp "vllm ci" $? ) &
  ( OUT=$work/folders GPU_ENGINES_S=300 GPU_ENGINES_PARTS=folders GPU_ENGINES_FOLDER_JOBS=2 \
      GPU_ENGINES_FOLDERS="$folders" bash tools/gpu_engines.sh vllm smoke > "$work/folders.txt" 2>&1
    stamp "vllm folders" $? ) &
  wait
) &
gpu1=$!
wait "$gpu0" "$gpu1"
batch_end
grep -E "^  K=|^vLLM|Error" "$work/moecert-data.txt" | grep -v "ERROR.*registry" | tail -n 60
for f in ci folders; do
  [ -f "$work/$f.txt" ] && { echo "== $f"; grep -v '^|' "$work/$f.txt" | grep -E "case\(s\)|cut|green|wall" | tail -n 4; }
done
grep -E "gptq-int4|Marlin" "$work/i44/i44-summary.md" 2>/dev/null | head -20
