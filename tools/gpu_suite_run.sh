#!/bin/bash
# Run a conformance suite on the GPU machine (no install there: a PYTHONPATH shim).
# usage: tools/gpu_suite_run.sh SUITE [extra moecert run args]
set -u
mkdir -p /tmp/shim/moecert
for d in reference kernels conformance reports; do ln -sfn "$PWD/$d" /tmp/shim/moecert/$d; done
export PYTHONPATH=/tmp/shim
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader
python -c "import torch, triton, pandas, pyarrow; print('torch', torch.__version__, 'triton', triton.__version__, 'pandas', pandas.__version__, 'pyarrow', pyarrow.__version__)"
python -c "import tqdm; print('tqdm', tqdm.__version__)" || echo "no tqdm"
suite=$1; shift
# the runner's default is one worker: a GPU run takes all (`-n auto`) unless the args say -n
workers=(-n auto); [[ " $* " == *" -n "* ]] && workers=()
start=$(date +%s)
python -m moecert.conformance.cli run --suite "$suite" --device cuda --results "${OUT:-/tmp}/results-$suite" "${workers[@]}" "$@" > "${OUT:-/tmp}/run-$suite.txt" 2> "${OUT:-/tmp}/run-$suite.err"
rc=$?
echo "suite $suite rc=$rc wall $(( $(date +%s) - start )) s"
tail -40 "${OUT:-/tmp}/run-$suite.txt"
tail -5 "${OUT:-/tmp}/run-$suite.err"
