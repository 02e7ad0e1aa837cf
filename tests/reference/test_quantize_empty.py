"""Activation quantization of an empty batch (M = 0) returns it unchanged instead of failing."""

import torch
from moecert.reference import MoEProblem, make_inputs, moe, synthesize
from moecert.reference.quantize import qdq_per_tensor


def test_dynamic_per_tensor_of_nothing_is_nothing():
    x = torch.zeros(0, 64, dtype=torch.float64)
    assert qdq_per_tensor(x).shape == (0, 64)


def test_layer_with_no_tokens_and_dynamic_tensor_activations():
    P = MoEProblem(M=0, K=64, N=32, E=4, topk=2)
    ckpt = synthesize("int8-w8a8", P, activation="dynamic-tensor")
    x, w, ids = make_inputs(P)
    assert moe(ckpt, x, w, ids, P).shape == (0, 64)
