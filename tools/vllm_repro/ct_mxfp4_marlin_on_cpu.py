"""vLLM 0.32 on the CPU platform: llm-compressor's MXFP4 (W4A16, `mxfp4-pack-quantized`) MoE
layer. vLLM's MXFP4 oracle picks a Marlin backend for it on the CPU (not vLLM's CPU MXFP4
kernel, which it picks for a gpt-oss `mxfp4` file), and process_weights_after_loading then
calls torch.ops._C.gptq_marlin_repack, which the CPU build does not have. vLLM, torch and the
file only (tests/fixtures/checkpoints/ct-mxfp4-qwen3moe, made by llm-compressor 0.14.0.1);
no AMX gate involved: `python ct_mxfp4_marlin_on_cpu.py [FOLDER]`."""
import json
import sys
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.distributed import init_distributed_environment, initialize_model_parallel
from vllm.model_executor.layers.fused_moe import FusedMoEFactory
from vllm.model_executor.layers.quantization import get_quantization_config

HERE = Path(__file__).resolve().parent
FIXTURE = "tests/fixtures/checkpoints/ct-mxfp4-qwen3moe"  # from here or from standalone/
FOLDER = Path(sys.argv[1]) if len(sys.argv) > 1 else next(
    (p / FIXTURE for p in HERE.parents if (p / FIXTURE).is_dir()), Path(FIXTURE))
LAYER = 1

config = json.loads((FOLDER / "config.json").read_text())
qcfg = config["quantization_config"]
E, K, N = config["num_local_experts"], config["hidden_size"], config["moe_intermediate_size"]
CONFIG = VllmConfig()
with set_current_vllm_config(CONFIG):
    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                 distributed_init_method=f"file://{tempfile.mktemp()}")
    initialize_model_parallel(1, 1)
    qc = get_quantization_config(qcfg["quant_method"]).from_config(qcfg)
    r = FusedMoEFactory(E, config["num_experts_per_tok"], K, N, params_dtype=torch.bfloat16,
                        quant_config=qc, prefix=f"model.layers.{LAYER}.mlp.experts")
    qm = r.routed_experts.quant_method
    print("oracle chose", [v for k, v in vars(qm).items() if k.endswith("_backend")],
          getattr(qm.experts_cls, "__name__", qm.experts_cls))
    prefix = f"model.layers.{LAYER}.mlp.experts."
    with safe_open(str(FOLDER / "model.safetensors"), framework="pt") as f:
        weights = [(n.removeprefix(prefix), f.get_tensor(n)) for n in f.keys()
                   if n.startswith(prefix)]
    print(f"{len(list(r.load_weights(weights)))} of {len(weights)} file tensors loaded")
    try:
        qm.process_weights_after_loading(r.routed_experts)
        print("process_weights_after_loading ran")
    except Exception as e:
        print(f"process_weights_after_loading raised {type(e).__name__}: {e}")
