"""Does vLLM 0.32's Mixtral loader take llm-compressor's Mixtral expert names? llm-compressor
writes `...block_sparse_moe.experts.<e>.gate_proj/up_proj/down_proj.*`; vLLM's MixtralMoE builds
its FusedMoE with checkpoint names w1/w2/w3. The names of the file, through what vLLM's
AutoWeightsLoader applies (MixtralModel.hf_to_vllm_mapper) and FusedMoE's expert mapping.
vLLM, safetensors and the file only: `python mixtral_ct_names.py [FOLDER]`."""
import json
import sys
from pathlib import Path

from safetensors import safe_open
from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts
from vllm.model_executor.models.mixtral import MixtralModel

HERE = Path(__file__).resolve().parent
FOLDER = Path(sys.argv[1]) if len(sys.argv) > 1 else \
    HERE.parents[1] / "tests/fixtures/checkpoints/ct-w4a16-sym-mixtral-sharded"
config = json.loads((FOLDER / "config.json").read_text())
files = json.loads((FOLDER / "model.safetensors.index.json").read_text())["weight_map"]
names = sorted(n for n in files if ".experts." in n)
for shard in sorted(set(files.values())):  # the names are the shards' own
    with safe_open(str(FOLDER / shard), framework="pt") as f:
        assert {n for n in f.keys() if ".experts." in n} <= set(names)
mapping = RoutedExperts.build_expert_params_mapping(
    "w1", "w2", "w3", num_experts=config["num_local_experts"])


def param(name):
    return next((name.replace(w, p) for p, w, _, _ in mapping if w in name), None)


print(f"{len(names)} expert tensors, e.g. {names[0]}")
print("mapped as written:", sum(param(n) is not None for n in names))
mapped = MixtralModel.hf_to_vllm_mapper.apply_list(names)
print("mapped after MixtralModel.hf_to_vllm_mapper:", sum(param(n) is not None for n in mapped),
      f"e.g. {names[0]} -> {param(mapped[0])}")
