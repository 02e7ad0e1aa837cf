#!/bin/bash
# Issue 41, third call of the thirteenth session (after the six carry parts): moecert's data
# through a plain vLLM MXFP4 layer (GPU 0) beside gpu_reduce.py mxfp4-rounded (GPU 1).
repo=$PWD; mkdir -p /tmp/shim/moecert; for d in reference kernels conformance reports; do ln -sfn "$repo/$d" /tmp/shim/moecert/$d; done
E=$(python3 tools/engine_carry.py env vllm)
(cd /tmp && CUDA_VISIBLE_DEVICES=0 PYTHONPATH=/tmp/shim:$E timeout 170 python3 $repo/tools/vllm_repro/mxfp4_rounded_moecert.py > $OUT/moecert-data.txt 2>&1) &
(cd /tmp && CUDA_VISIBLE_DEVICES=1 PYTHONPATH=$E timeout 100 python3 $repo/tools/vllm_repro/gpu_reduce.py mxfp4-rounded > $OUT/reduce.txt 2>&1) &
wait; grep -E "^  K=|^vLLM|Error" $OUT/moecert-data.txt $OUT/reduce.txt | grep -v "ERROR.*registry" | tail -30
