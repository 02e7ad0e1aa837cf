#!/bin/bash
# Verdicts of one suite on the GPU for this tree and an earlier one, in one call, then their
# comparison (issue 25: a refactor must not change a verdict).
#   here:   git archive REV | tar -x -C .bench/before      (carry .bench/before to the device)
#   device: tools/gpu_before_after.sh SUITE [WORKERS] [TIMEOUT_S]
# Each tree runs through a PYTHONPATH shim (nothing is installed on the GPU machine); the
# verdict snapshots and the comparison land in $OUT (tools/behaviour_snapshot.py).
set -u
suite=${1:?usage: tools/gpu_before_after.sh SUITE [WORKERS] [TIMEOUT_S]}
workers=${2:-8}; limit=${3:-270}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# the earlier tree travels only when the call's carry names it (.bench/ is ignored): say so
# before any run (2026-11-29: without it the "after" run took its 123 s for nothing)
if [ ! -f .bench/before/tools/behaviour_snapshot.py ]; then
  echo "gpu_before_after.sh: .bench/before holds no tree here: name \".bench/before\" in the call's carry" >&2
  exit 2
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
run() {  # TREE LABEL
  rm -rf "/tmp/shim-$2" && mkdir -p "/tmp/shim-$2/moecert"
  for d in reference kernels conformance reports; do ln -sfn "$1/$d" "/tmp/shim-$2/moecert/$d"; done
  start=$(date +%s)
  (cd "$1" && PYTHONPATH="/tmp/shim-$2" timeout "$limit" python -m moecert.conformance.cli run \
      --suite "$suite" --device cuda --results "$OUT/results-$2" -n "$workers" \
      > "$OUT/run-$2.txt" 2> "$OUT/run-$2.err")
  echo "$2 rc=$? wall $(( $(date +%s) - start )) s"; tail -3 "$OUT/run-$2.txt"
  PYTHONPATH="/tmp/shim-$2" python "$1/tools/behaviour_snapshot.py" verdicts "$OUT/results-$2" \
      "$OUT/verdicts-$2.json"
}
run "$PWD" after
run "$PWD/.bench/before" before
python tools/behaviour_snapshot.py compare "$OUT/verdicts-before.json" "$OUT/verdicts-after.json" \
    > "$OUT/compare.txt"
echo "compare rc=$? ($(wc -l < "$OUT/compare.txt") lines in compare.txt)"
