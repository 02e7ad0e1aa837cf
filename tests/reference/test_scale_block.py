"""Granularity, one rule (issue 45 item 6): `weight_scale_block` (reference/schemes/shapes.py)
says how many weights one scale covers, as torchao's `block_size` (rows, cols); the reference's
readers and writer and the kernels' conversion read it, none restates it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from moecert.kernels.convert import convert_to_kernel_format, export_canonical
from moecert.kernels.layer import MoELayer
from moecert.reference import MoEProblem, canonicalize, synthesize
from moecert.reference.schemes import SCHEMES, Variant, scheme_variants, weight_scale_block

ROOT = Path(__file__).resolve().parents[2]

# (scheme, attributes, linear, [out, in]) -> the block, written from each format's definition
KNOWN = [
    # DeepSeek-V3's quantization_config: weight_block_size [128, 128]
    ("fp8-w8a8", {"weight_strategy": "block"}, "w13", (512, 256), (128, 128)),
    # llm-compressor FP8 per tensor: one scale per w1 / w3 shard of the fused w13
    ("fp8-w8a16", {"weight_strategy": "tensor"}, "w13", (512, 256), (256, 256)),
    ("fp8-w8a16", {"weight_strategy": "tensor"}, "w2", (256, 256), (256, 256)),
    # int8 per tensor: one scale per linear (the shard rule is fp8 producers')
    ("int8-w8a16", {"weight_strategy": "tensor"}, "w13", (512, 256), (512, 256)),
    ("fp8-w8a16", {"weight_strategy": "channel"}, "w13", (512, 256), (1, 256)),
    # OCP MX v1.0: one E8M0 scale per 32 elements along in; NVFP4 one e4m3 scale per 16
    ("mxfp4", {}, "w2", (256, 128), (1, 32)),
    ("nvfp4", {}, "w2", (256, 128), (1, 16)),
    # GPTQ / AWQ group_size along in; -1: one group over all of in
    ("gptq-int4", {"group_size": 64}, "w13", (512, 256), (1, 64)),
    ("awq-int4", {"group_size": -1}, "w2", (256, 128), (1, 128)),
    ("bf16", {}, "w13", (512, 256), (512, 256)),
]


@pytest.mark.parametrize(("scheme", "attrs", "linear", "dims", "block"), KNOWN)
def test_the_rule_gives_each_formats_block(scheme, attrs, linear, dims, block):
    assert weight_scale_block(Variant(scheme, **attrs), linear, *dims) == block


def test_a_stored_shard_count_overrides_the_producers_default():
    fp8 = Variant("fp8-w8a16", weight_strategy="tensor")
    assert weight_scale_block(fp8, "w13", 512, 256, shards=1) == (512, 256)
    int8 = Variant("int8-w8a16", weight_strategy="tensor")
    assert weight_scale_block(int8, "w13", 512, 256, shards=2) == (256, 256)


EVERY_VARIANT = [pytest.param(v, id=v.describe().replace(" ", "-"))
                 for scheme in SCHEMES for v in scheme_variants(scheme)]


@pytest.mark.parametrize("variant", EVERY_VARIANT)
def test_the_reference_and_the_kernels_read_the_rule(variant):
    problem = MoEProblem(M=4, K=256, N=128, E=2, topk=2)
    ckpt = synthesize(variant.scheme, problem, seed=3, **variant.overrides())
    layer = MoELayer("x", Variant.of(ckpt), problem, "cpu")
    layer.load(ckpt)
    convert_to_kernel_format(layer)
    read, exported = canonicalize(ckpt), export_canonical(layer)
    for p, dims in (("w13", (problem.w13_rows, problem.K)), ("w2", (problem.K, problem.N))):
        want = weight_scale_block(variant, p, *dims)
        assert tuple(read[p].block) == want, f"reference {p}"
        assert tuple(exported[p].block) == want, f"kernels {p}"


def _restated_blocks(path: Path) -> list[str]:
    """Tuples in `path` that restate a scale block: (FP8_BLOCK, FP8_BLOCK) or (1, x.scale_block)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Tuple) and len(node.elts) == 2:
            text = ast.unparse(node)
            if text in ("(FP8_BLOCK, FP8_BLOCK)",) or (
                    text.startswith("(1, ") and text.endswith(".scale_block)")):
                out.append(f"{path.relative_to(ROOT)}:{node.lineno} {text}")
    return out


def test_no_module_outside_the_facts_restates_a_scale_block():
    files = [f for d in ("reference", "kernels", "conformance") for f in (ROOT / d).rglob("*.py")
             if "schemes" not in f.relative_to(ROOT).parts]
    assert len(files) > 50
    found = [hit for f in files for hit in _restated_blocks(f)]
    assert not found, "scale blocks stated outside weight_scale_block:\n" + "\n".join(found)
    planted = ROOT / "reference" / "schemes" / "shapes.py"
    assert _restated_blocks(planted), "the finder finds the rule's own tuple"
