"""`checkpoint_shape_issue`: which shapes a checkpoint of a scheme can hold, and that the
answer is the reference's own (it writes and reads exactly those)."""

from __future__ import annotations

import re
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from moecert.reference import Checkpoint, MoEProblem, canonicalize, synthesize
from moecert.reference.errors import CheckpointError
from moecert.reference.layouts import read_linear, write_linear
from moecert.reference.schemes import SCHEMES, checkpoint_shape_issue
from moecert.reference.synthesize import quantize_weights, random_weights


def _attrs(scheme, **kw):
    return Checkpoint(scheme=scheme, tensors={}, **kw)


def _problem(K=256, N=128, **kw):
    return MoEProblem(M=1, K=K, N=N, E=1, topk=1, **kw)


@pytest.mark.parametrize(("scheme", "attrs", "problem", "issue"), [
    ("gptq-int4", {}, _problem(N=64),
     "group_size: expected a group size dividing w2's input dimension 64, found 128"),
    ("gptq-int4", {}, _problem(N=192),
     "group_size: expected a group size dividing w2's input dimension 192, found 128"),
    ("gptq-int4", {"group_size": 64}, _problem(K=160),
     "group_size: expected a group size dividing w13's input dimension 160, found 64"),
    ("gptq-int4", {"group_size": -1}, _problem(K=2044),
     "w13_qweight: expected an input dimension divisible by 8, found 2044"),
    ("gptq-int8", {"group_size": -1}, _problem(N=66),
     "w2_qweight: expected an input dimension divisible by 4, found 66"),
    ("awq-int4", {"group_size": -1}, _problem(K=2044),
     "w2_qzeros: expected an output dimension divisible by 8, found 2044"),
    ("w4a8-int8", {"group_size": -1, "checkpoint_format": "awq"}, _problem(K=2044),
     "w2_qzeros: expected an output dimension divisible by 8, found 2044"),
    ("w4a8-int8", {"group_size": -1, "checkpoint_format": "gptq"}, _problem(K=2044),
     "w13_qweight: expected an input dimension divisible by 8, found 2044"),
    ("mxfp8", {}, _problem(N=784), "w2_weight: expected an input dimension divisible by 32, "
     "found 784"),
    ("mxfp8", {}, _problem(K=48), "w13_weight: expected an input dimension divisible by 32, "
     "found 48"),
    # two e2m1 per byte: an odd input dimension fills no whole byte (named before the block)
    ("mxfp4", {}, _problem(K=33), "w13_weight: expected an input dimension divisible by 2 "
     "(2 e2m1 elements per byte), found 33"),
    ("mxfp4", {}, _problem(N=48), "w2_weight: expected an input dimension divisible by 32, "
     "found 48"),
    ("mxfp4", {}, _problem(K=2880, N=2880), None),  # gpt-oss-120b
    # compressed-tensors pads its words; fp8 blocks round up; 16-bit weights hold anything
    ("ct-int4", {"group_size": -1}, _problem(K=2044), None),
    ("fp8-w8a16", {"weight_strategy": "block"}, _problem(K=200, N=72), None),
    ("bf16", {}, _problem(K=7, N=3), None),
    ("gptq-int4", {}, _problem(N=256), None),
])
def test_shape_issues(scheme, attrs, problem, issue):
    found = checkpoint_shape_issue(_attrs(scheme, **attrs), problem)
    assert (None if found is None else str(found)) == issue


def test_a_nonpositive_group_size_is_an_issue_not_a_division_by_zero():
    # Variant and Checkpoint refuse a group size of 0 themselves, but the rule takes
    # any object with their attributes (a vendor's config): it must not divide by it
    attrs = SimpleNamespace(scheme="gptq-int4", group_size=0, checkpoint_format="gptq")
    assert str(checkpoint_shape_issue(attrs, _problem())) == (
        "group_size: expected -1 (one group) or a positive group size, found 0")


# Every scheme's variants at shapes around the group sizes, packing words and MX blocks.
_SHAPES = ((64, 64), (64, 48), (96, 32), (40, 64), (36, 64), (64, 36), (64, 66))


def _variants():
    for name, info in SCHEMES.items():
        formats = info.checkpoint_formats or (None,)
        groups = info.group_sizes if info.packed else (None,)
        for fmt in formats:
            for g in groups:
                kw = {"checkpoint_format": fmt} if fmt else {}
                if g is not None:
                    kw["group_size"] = g
                yield name, kw


def _about(error: Exception, issue) -> bool:
    """Whether `error` is about the dimension `issue` names: the dimension ("found D" or
    "input dimension D") appears in it, and for a group size the group too (the writer's
    unflatten into [-1, G] groups is where such a shape fails)."""
    text = str(error)
    group = re.search(r"dividing \S+ input dimension (\d+), found (\d+)", str(issue))
    if group:
        dim, size = group.groups()
        return f"({dim})" in text and f"{size}]" in text
    dim = re.search(r"found (\d+)$", str(issue)).group(1)
    return f"({dim})" in text or f" {dim}" in text


@pytest.mark.parametrize(("scheme", "attrs"), list(_variants()),
                         ids=lambda v: v if isinstance(v, str) else ",".join(map(str, v.values())))
def test_the_reference_writes_exactly_the_shapes_it_says_it_holds(scheme, attrs):
    """Where no issue is reported the reference synthesizes and reads a checkpoint; where one
    is, its writer cannot make that linear at that shape (it raises, or the tensors read back
    as another shape): the rule is the formats', not a guess. GPTQ / AWQ zero points are the
    exception: the reader takes a padded last word, but the tools floor out * b / 32 words,
    so no tool's file holds them (kernels/quant_config.py's spec follows the tools)."""
    for K, N in _SHAPES:
        problem = MoEProblem(M=1, K=K, N=N, E=1, topk=1)
        issue = checkpoint_shape_issue(_attrs(scheme, **attrs), problem)
        if issue is None:
            canonicalize(synthesize(scheme, problem, **attrs))
            continue
        if issue.tensor.endswith("_qzeros"):
            continue
        ckpt = _attrs(scheme, **attrs)
        prefix = issue.linear
        n_out, n_in = (problem.w13_rows, K) if prefix == "w13" else (K, N)
        gen = torch.Generator().manual_seed(0)
        w = random_weights(gen, 1, n_out, n_in, gated=prefix == "w13")
        try:
            tensors = write_linear(quantize_weights(ckpt, w, gen, prefix, torch.bfloat16),
                                   prefix, ckpt, torch.bfloat16)
            read = read_linear(replace(ckpt, tensors=tensors), prefix)
        except (CheckpointError, RuntimeError, ValueError) as e:
            # the error must be the one the issue predicts: the dimension it names does not
            # split into its groups / blocks (any other error is a bug, not the rule at work)
            assert _about(e, issue), (str(issue), K, N, f"{type(e).__name__}: {e}")
            continue
        assert tuple(read.codes.shape) != (1, n_out, n_in), (issue, K, N)
