#!/bin/bash
# Issue 34's GPU steps, one device call each (the lease is short). The device gets the session's
# checkout (main); this branch travels as `git archive` copies in the ignored .bench/i34 and
# the base (main) in .bench/base, each run through its own PYTHONPATH shim.
# usage: tools/i34_gpu.sh sweep|bench|ci [args]   (run from the checkout's root)
set -u
ROOT=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for tree in i34 base; do
  mkdir -p /tmp/shim-$tree/moecert
  for d in reference kernels conformance reports; do
    ln -sfn "$ROOT/.bench/$tree/$d" /tmp/shim-$tree/moecert/$d
  done
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
step=$1; shift
case $step in
sweep)  # candidate prefill tiles, the new tree's kernel (tools/prefill_sweep.py)
  cd .bench/i34
  PYTHONPATH=/tmp/shim-i34 timeout "${SWEEP_S:-240}" python tools/prefill_sweep.py "$@" \
      > "$OUT/sweep.txt" 2> "$OUT/sweep.err"
  echo "sweep rc=$?"; grep -E "BEST|base|s$" "$OUT/sweep.txt"; tail -3 "$OUT/sweep.err" ;;
bench)  # $1: label; new then base, same machine, graph replay
  label=$1; shift
  for tree in i34 base; do
    cd "$ROOT/.bench/$tree"
    PYTHONPATH=/tmp/shim-$tree timeout "${BENCH_S:-200}" python -m moecert.conformance.cli \
        bench --device cuda --results "$OUT/$label-$tree" --mode graph "$@" \
        > "$OUT/$label-$tree.txt" 2> "$OUT/$label-$tree.err"
    echo "== $tree rc=$?"; grep -v "^$" "$OUT/$label-$tree.txt" | cut -c1-120
    tail -2 "$OUT/$label-$tree.err"
  done ;;
ci)  # tools/gpu_ci.sh on the new tree
  cd .bench/i34
  OUT=$OUT/gpu-ci bash tools/gpu_ci.sh 2>&1 | tail -12 ;;
esac
