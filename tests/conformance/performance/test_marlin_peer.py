"""The Marlin peer's call of vLLM's `moe_wna16_marlin_gemm`, bound by the library's schema
(marlin_peer.marlin_arguments). The schema below is vLLM 0.25.1's, as its
`_moe_C_stable_libtorch.abi3.so` registers it (the string in the library, whitespace
joined); the library itself needs CUDA, so only the binding runs here."""

from __future__ import annotations

import pytest
import torch
from moecert.conformance.performance.marlin_peer import (
    MARLIN_FLAGS,
    LibraryOps,
    load_marlin,
    marlin_arguments,
)

VLLM_0_25_1 = (
    "_moe_C::moe_wna16_marlin_gemm(Tensor! a, Tensor? c_or_none, Tensor! b_q_weight, "
    "Tensor? b_bias_or_none, Tensor! b_scales, Tensor? a_scales, Tensor? global_scale, "
    "Tensor? b_zeros_or_none, Tensor? g_idx_or_none, Tensor? perm_or_none, Tensor! workspace, "
    "Tensor sorted_token_ids, Tensor! expert_ids, Tensor! num_tokens_past_padded, "
    "Tensor! topk_weights, int moe_block_size, int top_k, bool mul_topk_weights, "
    "int b_type_id, int size_m, int size_n, int size_k, bool is_full_k, bool use_atomic_add, "
    "bool use_fp32_reduce, bool is_zp_float, int thread_k, int thread_n, int blocks_per_sm) "
    "-> Tensor")
TENSORS = ("a", "c_or_none", "b_q_weight", "b_bias_or_none", "b_scales", "global_scale",
           "workspace", "sorted_token_ids", "expert_ids", "num_tokens_past_padded",
           "topk_weights")


def _values():
    values = {name: f"<{name}>" for name in TENSORS}  # each value says where it belongs
    values.update(moe_block_size=16, top_k=2, mul_topk_weights=False, b_type_id=7,
                  size_m=3, size_n=64, size_k=32, **MARLIN_FLAGS)
    return values


def test_every_value_lands_at_its_name_in_vllm_0_25_1s_order():
    schema = torch._C.parse_schema(VLLM_0_25_1)
    values = _values()
    args = marlin_arguments(schema, values)
    assert len(args) == len(schema.arguments) == 29
    bound = {a.name: v for a, v in zip(schema.arguments, args, strict=True)}
    for name, value in values.items():
        assert bound[name] == value, name
    # what a layer without act order, zero points or activation scales leaves out
    assert [n for n, v in bound.items() if v is None] == [
        "a_scales", "b_zeros_or_none", "g_idx_or_none", "perm_or_none"]
    # vLLM 0.25.1's fused_marlin_moe for such a layer: no atomics, fp32 reduce, full K
    assert (bound["is_full_k"], bound["use_atomic_add"], bound["use_fp32_reduce"],
            bound["is_zp_float"]) == (True, False, True, False)


def test_a_schema_that_asks_for_more_says_which_argument():
    schema = torch._C.parse_schema(VLLM_0_25_1.replace("int blocks_per_sm)",
                                                       "int blocks_per_sm, int stages)"))
    with pytest.raises(ValueError, match=r"asks for stages \(int\), which the peer does not"):
        marlin_arguments(schema, _values())


def test_a_value_the_schema_has_no_place_for_is_an_error_not_dropped():
    schema = torch._C.parse_schema(VLLM_0_25_1.replace("Tensor? global_scale, ", ""))
    with pytest.raises(ValueError, match="has no argument global_scale"):
        marlin_arguments(schema, _values())
    values = {**_values(), "global_scale": None}  # an absent optional: nothing lost
    assert len(marlin_arguments(schema, values)) == 28


def test_without_an_anchor_the_library_ops_load_it(tmp_path):
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"")
    peer, why = load_marlin(lib, tmp_path / "no-anchor.py", torch.device("cpu"))
    assert peer is None and why.startswith("Marlin runs on CUDA only")
    assert callable(LibraryOps.load) and callable(LibraryOps._align)
