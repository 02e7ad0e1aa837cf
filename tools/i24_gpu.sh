#!/bin/bash
# Issue 24's GPU steps in one command each (the device's lease is short): the shim, versions,
# then the step named by $1. usage: tools/i24_gpu.sh check|bench|new|ci|ogs|tune [args]
# The device gets the session's checkout (main): this branch travels as a copy in its ignored
# .bench/i24 (tools/i24_sync.sh), run from there; the checkout itself is the base.
set -u
BASE=$PWD
[ -d .bench/i24 ] && cd .bench/i24
mkdir -p /tmp/shim/moecert /tmp/shimbase/moecert
for d in reference kernels conformance reports; do
  ln -sfn "$PWD/$d" /tmp/shim/moecert/$d
  ln -sfn "$BASE/$d" /tmp/shimbase/moecert/$d
done
export PYTHONPATH=/tmp/shim
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
echo "here $PWD base $(cd $BASE && git log --oneline -1 | cut -c1-40) fp4planes=$(grep -c FP4_SPAN kernels/triton_moe/layout.py)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
MARLIN=(--marlin-lib .vllm/_moe_C_stable_libtorch.abi3.so --marlin-anchor .vllm/marlin_anchor.py)
step=$1; shift
case $step in
check)  # the GPU-only unit tests of the new decodes, then a quick bench of the new paths
  timeout 240 python -m pytest -p no:cacheprovider -q -x tests/kernels/test_fp4_planes.py \
      tests/kernels/test_int4_pairs.py 2>&1 | tail -8
  timeout 200 python -m moecert.conformance.cli bench --device cuda --backend triton \
      --results "$OUT/chk" --mode graph --M 16,64 "$@" 2>&1 | grep -v "^$" | tail -40 ;;
bench)  # $1: label; the base tree (.bench/base) then this tree, same machine, Marlin peer
  label=$1; shift
  for tree in new base; do
    [ $tree = base ] && export PYTHONPATH=/tmp/shimbase || export PYTHONPATH=/tmp/shim
    timeout 280 python -m moecert.conformance.cli bench --device cuda --backend triton \
        --results "$OUT/$label-$tree" --mode graph "${MARLIN[@]}" "$@" \
        > "$OUT/$label-$tree.txt" 2> "$OUT/$label-$tree.err"
    echo "== $tree rc=$?"; grep -v "^$" "$OUT/$label-$tree.txt" | cut -c1-110; tail -2 "$OUT/$label-$tree.err"
  done ;;
new)  # this tree only
  label=$1; shift
  timeout 560 python -m moecert.conformance.cli bench --device cuda --backend triton \
      --results "$OUT/$label" --mode graph "${MARLIN[@]}" "$@" > "$OUT/$label.txt" 2> "$OUT/$label.err"
  echo "rc=$?"; grep -v "^$" "$OUT/$label.txt" | cut -c1-110; tail -2 "$OUT/$label.err" ;;
ci)  # the GPU-only decode tests, then the ci suite on triton (args), int4 forced into planes
  timeout 240 python -m pytest -p no:cacheprovider -q tests/kernels/test_fp4_planes.py \
      tests/kernels/test_int4_pairs.py -k "ptx or packed or awq" 2>&1 | tail -4
  start=$(date +%s)
  MOECERT_TRITON_NIB_SPAN=128 timeout 400 python -m moecert.conformance.cli run --suite ci \
      --device cuda --backend triton --results "$OUT/ci" "$@" > "$OUT/ci.txt" 2> "$OUT/ci.err"
  echo "ci rc=$? wall $(( $(date +%s) - start )) s"; tail -6 "$OUT/ci.txt"; tail -3 "$OUT/ci.err" ;;
ogs)  # mxfp4 on gpt-oss-120b: this tree's triton and Marlin (bench), then triton_kernels'
  # matmul_ogs (tools/ogs_peer.py, UNTESTED until this runs), same machine
  timeout 200 python -m moecert.conformance.cli bench --device cuda --backend triton \
      --results "$OUT/ogs-bench" --mode graph "${MARLIN[@]}" --scheme mxfp4 \
      --model gpt-oss-120b --M 1,16,64 2>&1 | grep -v "^$" | tail -8
  PYTHONPATH=.vllm/tk:$PYTHONPATH timeout 200 python tools/ogs_peer.py --M 1,16,64 2>&1 \
      | tail -8 ;;
tune)
  timeout 560 python -m moecert.conformance.cli tune "$@" 2>&1 | tail -30
  cp kernels/triton_moe/configs/*.json "$OUT/" ;;
esac
