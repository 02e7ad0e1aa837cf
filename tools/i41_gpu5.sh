#!/bin/bash
# Issue 41, the fourteenth session's second call (after the six carry parts): one moecert MXFP4
# checkpoint and one input draw through the adapter and through gpu_reduce.py's plain path
# (tools/vllm_repro/mxfp4_adapter_vs_plain.py, two processes on GPU 0, run from /tmp: vLLM's
# model registry imports a top-level `kernels`), then compared: outputs, every processed tensor.
repo=$PWD; mkdir -p /tmp/shim/moecert "${OUT:=/tmp/out}"
for d in reference kernels conformance reports; do ln -sfn "$repo/$d" /tmp/shim/moecert/$d; done
E=$(python3 tools/engine_carry.py env vllm); S=$repo/tools/vllm_repro/mxfp4_adapter_vs_plain.py
cd /tmp || exit 1
export CUDA_VISIBLE_DEVICES=0 PYTHONPATH=/tmp/shim:$E
timeout 150 python3 "$S" adapter "$OUT/adapter.pt" > "$OUT/adapter.txt" 2>&1; echo "adapter exit $?"
timeout 150 python3 "$S" plain "$OUT/plain.pt" > "$OUT/plain.txt" 2>&1; echo "plain exit $?"
timeout 120 python3 "$S" compare "$OUT/adapter.pt" "$OUT/plain.pt" 2>&1 | tee "$OUT/compare.txt" | grep -v -i warn
grep -E "Error|error" "$OUT/adapter.txt" "$OUT/plain.txt" | grep -v registry | tail -5
