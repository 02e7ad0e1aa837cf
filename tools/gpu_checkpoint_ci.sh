#!/bin/bash
# A `ci`-style run of real layers on the GPU machine: every committed producer fixture
# (tests/fixtures/checkpoints) and two Qwen3-30B-A3B-sized layers written here in
# llm-compressor's layouts (W4A16 pack-quantized and W4AFP8 int-quantized, random values,
# tools/make_model_folder.py), through `moecert run --suite ci --checkpoint DIR --layer all
# --device cuda` on triton, torch and grouped. Everything lands in $OUT.
#
# usage (repository root, on the GPU machine):  OUT=/some/dir tools/gpu_checkpoint_ci.sh [-n N]
#
# The GPU machine has no package registry: moecert's loader needs `safetensors`. If it is not
# importable there, bring its wheel in a folder git ignores and carry it, e.g. here:
#   pip download safetensors --no-deps --only-binary=:all: --python-version 3.12 -d .gpu-wheels
# (the GPU machine's python version); the script unpacks every .gpu-wheels/*.whl onto the path.
set -u
OUT=${OUT:-/tmp/gpu-checkpoint-ci}
WORKERS=${2:-4}
[ "${1:-}" = "-n" ] && WORKERS=$2
mkdir -p "$OUT" /tmp/shim/moecert
for d in reference kernels conformance reports; do ln -sfn "$PWD/$d" /tmp/shim/moecert/$d; done
for w in .gpu-wheels/*.whl; do [ -e "$w" ] && python -m zipfile -e "$w" /tmp/shim; done
export PYTHONPATH=/tmp/shim
{
  nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader
  python -c "import torch, triton, safetensors; print('torch', torch.__version__, 'triton', triton.__version__, 'safetensors', safetensors.__version__)"
} > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"
python -c "import safetensors" || { echo "no safetensors here: see this script's header"; exit 2; }

MODELS=/tmp/gpu-checkpoint-models
mkdir -p "$MODELS"
for producer in ct-w4a16 ct-w4afp8; do
  [ -d "$MODELS/qwen3-30b-a3b-$producer" ] || python tools/make_model_folder.py \
      "$MODELS/qwen3-30b-a3b-$producer" --producer "$producer" --shape 128,2048,768,8 \
      --shards 3 >> "$OUT/make_models.txt" 2>&1
done
cat "$OUT/make_models.txt"

status=0
for folder in tests/fixtures/checkpoints/*/ "$MODELS"/*/; do
  [ -f "$folder/config.json" ] || continue
  name=$(basename "$folder")
  # a fixture of a scheme moecert refuses (its manifest says which: ModelOpt INT4 AWQ) is
  # tested to be refused on the CPU, not run here
  held=$(python -c "import json, sys; from moecert.reference import SCHEMES; m = json.load(open('tests/fixtures/checkpoints/MANIFEST.json'))['fixtures']; print(m.get(sys.argv[1], {}).get('scheme', 'bf16') in SCHEMES)" "$name")
  if [ "$held" != True ]; then echo "$name: refused by moecert (scheme not held), not run" | tee -a "$OUT/summary.txt"; continue; fi
  start=$(date +%s)
  python -m moecert.conformance.cli run --suite ci --checkpoint "$folder" --layer all \
      --device cuda --backend triton --backend torch --backend grouped -n "$WORKERS" \
      --results "$OUT/results/$name" > "$OUT/run-$name.txt" 2> "$OUT/run-$name.err"
  rc=$?
  [ $rc -ne 0 ] && status=1
  echo "$name rc=$rc wall $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
  grep -E '^(backend|triton|torch|grouped) ' "$OUT/run-$name.txt" | tee -a "$OUT/summary.txt"
  grep -E '^not green' "$OUT/run-$name.txt" | tee -a "$OUT/summary.txt"
done
exit $status
