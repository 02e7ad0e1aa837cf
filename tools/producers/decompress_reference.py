"""The producers' own dequantization of one MoE layer's experts, as a test expectation.

    python tools/producers/decompress_reference.py [--fixtures DIR] [--out DIR] [--only NAME ...]

Runs in the producers' environment (`tox -e producers-llmc`: compressed-tensors 0.19.0,
transformers 5.17) and writes, per fixture it has a decompressor for,
`tests/fixtures/expected_dequant/<fixture>.safetensors`: the float weights of some experts of
the fixture's first MoE layer, as the producer's (or the format's reference reader's) own code
returns them, in the dtype it returns. The project's CI cannot install these packages; these
files let its tests hold moecert's dequantization to the producer's, bit for bit.

Decompressors (the `decompressor` metadata field names the one used):
- compressed-tensors fixtures: compressed-tensors' own compressor for the file's format
  (`BaseCompressor.get_value_from_registry(format).decompress(state_dict, scheme)`), fed the
  module's tensors as stored; output dtype: what it returns (the scale dtype, bf16 here).
- gpt-oss MXFP4 release layout: transformers' `integrations.mxfp4.convert_moe_packed_tensors`
  (its reader of the release), output fp32 (asked for: exact for E2M1 x 2^k in range).
- DeepSeek-V3 FP8 release layout: transformers' `Fp8Dequantize._dequantize_one` (its reader
  of DeepSeek's checkpoints), output fp32.
- GPTQModel gptq / gptq_v2 fixtures (run in its environment, `tox -e producers-gptqmodel`):
  its torch kernel module's `dequantize_weight` after its loader's v1 -> v2 zero conversion;
  output fp16 (the scales' dtype).
- Quark int4 fixtures (`tox -e producers-quark`): Quark's own `Pack_4_bits.unpack` of the
  weight and zero points, then (q - z) * s.
- Quark OCP MX fixtures (run in its environment, `tox -e producers-quark`): Quark's own fp6
  (and fp4: the MXFP4 W4A4 fixture) unpacking `create_pack_method(None, dtype).unpack` and
  `dequantize_fp4_fp6_per_group` with
  2^(scale - 127), the two calls vLLM's `dequant_mxfp6` makes; output fp32 (exact: an fp6
  value times 2^k in range).
- ModelOpt, Quark int8, GPTQModel's AWQ: none used (ModelOpt and Quark's int8 path have no
  standalone CPU dequantization of an exported file; GPTQModel's AWQ module is not wired in).

Tensor names: `layers.<L>.experts.<e>.<proj>.weight` [out, in], with <proj> the file's own
projection names (gate_proj/up_proj/down_proj); for gpt-oss, gate_proj/up_proj/down_proj
taken from the fused, interleaved tensors (row 2j gate j, row 2j+1 up j). Metadata: fixture,
layer, experts, decompressor and package versions (JSON).

Experts kept: the first and the last if both fit in `BUDGET` bytes, else the last alone.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))

import torch
from fixture_io import FIXTURES, MANIFEST, update_manifest, versions
from safetensors import safe_open
from safetensors.torch import save_file

EXPECTED = FIXTURES.parent / "expected_dequant"
BUDGET = 200_000  # bytes of one expectation file, about (the set stays a few MB)
EXPERT_KEY = re.compile(r"^(?P<prefix>.*\.layers\.(?P<layer>\d+)\..*experts\.)(?P<e>\d+)\."
                        r"(?P<proj>\w+)\.(?P<local>\w+)$")


class Folder:
    """Lazy reader of a model folder's tensors (one file or shards with an index)."""

    def __init__(self, path: Path):
        index = path / "model.safetensors.index.json"
        if index.exists():
            weight_map = json.loads(index.read_text())["weight_map"]
        else:
            with safe_open(path / "model.safetensors", "pt") as f:
                weight_map = dict.fromkeys(f.keys(), "model.safetensors")
        self.path, self.weight_map = path, weight_map

    def get(self, name: str) -> torch.Tensor:
        with safe_open(self.path / self.weight_map[name], "pt") as f:
            return f.get_tensor(name)

    def local(self, prefix: str) -> dict[str, torch.Tensor]:
        """The tensors named `prefix<local>` (no further dots), by local name."""
        return {n[len(prefix):]: self.get(n) for n in self.weight_map
                if n.startswith(prefix) and "." not in n[len(prefix):]}


def _experts(folder: Folder, layer: int) -> tuple[str, list[int], list[str]]:
    """The layer's per-expert name prefix, expert indices and projection names."""
    prefix, experts, projs = None, set(), []
    for name in folder.weight_map:
        m = EXPERT_KEY.match(name)
        if m and int(m["layer"]) == layer:
            prefix = m["prefix"]
            experts.add(int(m["e"]))
            if m["proj"] not in projs:
                projs.append(m["proj"])
    return prefix, sorted(experts), sorted(projs)


def _keep(n_experts: int, bytes_per_expert: int) -> list[int]:
    last = n_experts - 1
    return [0, last] if 2 * bytes_per_expert <= BUDGET else [last]


def ct_decompress(folder: Folder, config: dict, layer: int) -> tuple[dict, list[int], str]:
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationScheme

    qc = config["quantization_config"]
    (group,) = qc["config_groups"].values()  # these fixtures have one group over Linear
    scheme = QuantizationScheme.model_validate(group)
    compressor = BaseCompressor.get_value_from_registry(group["format"])
    prefix, experts, projs = _experts(folder, layer)
    out = {}
    per_expert = 0
    for e in experts:
        for proj in projs:
            w = compressor.decompress(folder.local(f"{prefix}{e}.{proj}."), scheme)["weight"]
            out[(e, proj)] = w
            per_expert += w.numel() * w.element_size() if e == 0 else 0
    keep = _keep(len(experts), per_expert)
    tensors = {f"layers.{layer}.experts.{e}.{p}.weight": w.contiguous()
               for (e, p), w in out.items() if e in keep}
    return tensors, keep, f"compressed_tensors {compressor.__name__}.decompress ({group['format']})"


def gptoss_decompress(folder: Folder, config: dict, layer: int) -> tuple[dict, list[int], str]:
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    base = f"model.layers.{layer}.mlp.experts."
    # transformers returns the in-memory layout [E, in, out]
    gate_up = convert_moe_packed_tensors(folder.get(base + "gate_up_proj_blocks"),
                                         folder.get(base + "gate_up_proj_scales"),
                                         dtype=torch.float32)
    down = convert_moe_packed_tensors(folder.get(base + "down_proj_blocks"),
                                      folder.get(base + "down_proj_scales"), dtype=torch.float32)
    E = gate_up.shape[0]
    keep = _keep(E, (gate_up[0].numel() + down[0].numel()) * 4)
    tensors = {}
    for e in keep:
        tensors[f"layers.{layer}.experts.{e}.gate_proj.weight"] = gate_up[e, :, 0::2].T.contiguous()
        tensors[f"layers.{layer}.experts.{e}.up_proj.weight"] = gate_up[e, :, 1::2].T.contiguous()
        tensors[f"layers.{layer}.experts.{e}.down_proj.weight"] = down[e].T.contiguous()
    return tensors, keep, "transformers.integrations.mxfp4.convert_moe_packed_tensors"


def deepseek_decompress(folder: Folder, config: dict, layer: int) -> tuple[dict, list[int], str]:
    from transformers.integrations.finegrained_fp8 import Fp8Dequantize

    op = Fp8Dequantize.__new__(Fp8Dequantize)  # _dequantize_one uses no quantizer state
    prefix, experts, projs = _experts(folder, layer)
    per_expert = sum(folder.get(f"{prefix}0.{p}.weight").numel() * 4 for p in projs)
    keep = _keep(len(experts), per_expert)
    tensors = {}
    for e in keep:
        for p in projs:
            t = folder.local(f"{prefix}{e}.{p}.")
            w = op._dequantize_one(t["weight"], t["weight_scale_inv"], torch.float32)
            tensors[f"layers.{layer}.experts.{e}.{p}.weight"] = w.contiguous()
    return tensors, keep, "transformers.integrations.finegrained_fp8.Fp8Dequantize._dequantize_one"


def gptq_decompress(folder: Folder, config: dict, layer: int) -> tuple[dict, list[int], str]:
    """GPTQModel's own dequantization: its torch kernel module (`TorchLinear`) loaded
    with the stored tensors, a v1 file converted to v2 by its loader's converter, then its
    `dequantize_weight` ([in, out], transposed here to [out, in])."""
    from gptqmodel.nn_modules.qlinear.torch import TorchLinear
    from gptqmodel.utils.model import convert_gptq_v1_to_v2_format_module

    qc = config["quantization_config"]
    prefix, experts, projs = _experts(folder, layer)
    per_expert = 0
    for p in projs:
        k8, n = folder.get(f"{prefix}0.{p}.qweight").shape
        per_expert += k8 * 8 * n * 2
    keep = _keep(len(experts), per_expert)
    tensors = {}
    for e in keep:
        for p in projs:
            t = folder.local(f"{prefix}{e}.{p}.")
            k, n = t["qweight"].shape[0] * 32 // qc["bits"], t["qweight"].shape[1]
            m = TorchLinear(bits=qc["bits"], group_size=qc["group_size"], sym=qc["sym"],
                                 desc_act=qc["desc_act"], in_features=k, out_features=n)
            for name in ("qweight", "qzeros", "scales", "g_idx"):
                getattr(m, name).data = t[name].clone()
            if qc["checkpoint_format"] == "gptq":
                convert_gptq_v1_to_v2_format_module(m, bits=qc["bits"], pack_dtype=torch.int32)
            tensors[f"layers.{layer}.experts.{e}.{p}.weight"] = m.dequantize_weight().T.contiguous()
    return tensors, keep, ("gptqmodel TorchLinear.dequantize_weight (v1 zeros converted by "
                           "convert_gptq_v1_to_v2_format_module)")


def quark_mx_decompress(folder: Folder, config: dict, layer: int
                        ) -> tuple[dict, list[int], str]:
    """Quark's own OCP MX fp6 / fp4 dequantization of its exported weight bytes and E8M0
    scales."""
    from quark.torch.kernel.hw_emulation.hw_emulation_interface import (
        dequantize_fp4_fp6_per_group,
    )
    from quark.torch.utils.pack import create_pack_method

    weight = config["quantization_config"]["global_quant_config"]["weight"]
    dtype, group = weight["dtype"], weight["group_size"]
    unpack = create_pack_method(None, dtype=dtype).unpack
    prefix, experts, projs = _experts(folder, layer)
    per_byte = 2 if dtype == "fp4" else 4 / 3  # elements per stored byte (fp6: 4 in 3)
    per_expert = sum(int(folder.get(f"{prefix}0.{p}.weight").numel() * per_byte) * 4
                     for p in projs)
    keep = _keep(len(experts), per_expert)
    tensors = {}
    for e in keep:
        for p in projs:
            t = folder.local(f"{prefix}{e}.{p}.")
            scale = 2.0 ** (t["weight_scale"].to(torch.float32) - 127)
            w = dequantize_fp4_fp6_per_group(unpack(t["weight"], reorder=False), scale, axis=-1,
                                             group_size=group, quant_dtype=dtype)
            tensors[f"layers.{layer}.experts.{e}.{p}.weight"] = w.to(torch.float32).contiguous()
    return tensors, keep, (f"quark create_pack_method(None, {dtype!r}).unpack + "
                           "dequantize_fp4_fp6_per_group (vLLM dequant_mxfp6's calls)")


def quark_int4_decompress(folder: Folder, config: dict, layer: int
                          ) -> tuple[dict, list[int], str]:
    """Quark's own unpacking of its int4 per-group export (`Pack_4_bits.unpack`, reorder and
    transpose back to [out, in], sign extension), then (q - z) * s per group of `group_size`
    along in (exact in float32: 4-bit integers times bf16 scales)."""
    from quark.torch.utils.pack import create_pack_method

    group = config["quantization_config"]["global_quant_config"]["weight"]["group_size"]
    unpack = create_pack_method("per_group", dtype="int4").unpack
    prefix, experts, projs = _experts(folder, layer)
    keep = [experts[-1]]  # one expert in fp32 (about 100 KB): the fixtures' size budget
    tensors = {}
    for e in keep:
        for p in projs:
            t = folder.local(f"{prefix}{e}.{p}.")
            q = unpack(t["weight"], reorder=True).to(torch.float32)  # [out, in]
            z = unpack(t["weight_zero_point"], reorder=True).to(torch.float32)  # [out, G]
            s = t["weight_scale"].to(torch.float32).t()  # [G, out] -> [out, G]
            w = (q - z.repeat_interleave(group, dim=1)) * s.repeat_interleave(group, dim=1)
            tensors[f"layers.{layer}.experts.{e}.{p}.weight"] = w.contiguous()
    return tensors, keep, ("quark create_pack_method('per_group', 'int4').unpack(reorder=True) "
                           "of weight and weight_zero_point, then (q - z) * s")


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _quark_mx(config: dict) -> bool:
    weight = config["quantization_config"]["global_quant_config"]["weight"]
    return weight.get("scale_format") == "e8m0"


def decompressor(entry: dict, config: dict):
    """The decompression function for a manifest entry (and its folder's config.json), or
    None where none is used (or its package is not in this environment)."""
    if entry["producer"] == "llm-compressor" and _importable("compressed_tensors"):
        return ct_decompress
    if (entry["producer"] == "gptqmodel" and entry["scheme"] == "gptq-int4"
            and _importable("gptqmodel")):
        return gptq_decompress
    if entry["producer"] == "quark" and _quark_mx(config) and _importable("quark"):
        return quark_mx_decompress
    if entry["producer"] == "quark" and entry["scheme"] == "quark-int4" and _importable("quark"):
        return quark_int4_decompress
    if entry["producer"] == "moecert" and entry["family"] == "gpt_oss":
        return gptoss_decompress
    if entry["producer"] == "moecert" and entry["family"] == "deepseek_v3":
        return deepseek_decompress
    return None


def write_expected(name: str, entry: dict, fixtures: Path, out_dir: Path) -> Path | None:
    config = json.loads((fixtures / name / "config.json").read_text())
    fn = decompressor(entry, config)
    if fn is None:
        return None
    folder = Folder(fixtures / name)
    layer = entry["moe_layers"][0]
    tensors, keep, how = fn(folder, config, layer)
    meta = {"fixture": name, "layer": str(layer), "experts": json.dumps(keep),
            "decompressor": how,
            "versions": json.dumps(versions("gptqmodel", "amd-quark"))}
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.safetensors"
    save_file(dict(sorted(tensors.items())), path, metadata=meta)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", type=Path, default=FIXTURES, help="fixture root folder")
    ap.add_argument("--out", type=Path, default=None,
                    help="where expectations go (default: expected_dequant/ beside the fixtures)")
    ap.add_argument("--only", nargs="*", help="these fixtures only")
    args = ap.parse_args(argv)
    out_dir = args.out or args.fixtures.parent / "expected_dequant"
    manifest = json.loads((args.fixtures / MANIFEST).read_text())
    for name, entry in manifest["fixtures"].items():
        if args.only and name not in args.only:
            continue
        path = write_expected(name, entry, args.fixtures, out_dir)
        if path is not None:
            print(f"{name}: {path.name}, {path.stat().st_size} bytes", flush=True)
            entry["expected_dequant"] = f"{out_dir.name}/{path.name}"
            update_manifest(args.fixtures, name, entry)
        else:
            print(f"{name}: no producer decompression (in this environment)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
