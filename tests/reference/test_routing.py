"""Routing helpers: the tie rule, renormalization, correction bias and group selection."""

from __future__ import annotations

import math

import torch
from moecert.reference import grouped_topk, sigmoid_topk, softmax_topk


def test_ties_go_to_the_lower_expert_index():
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.5, 3.0]])
    _, ids = softmax_topk(logits, 2)
    assert ids.tolist() == [[1, 2]]
    _, ids = sigmoid_topk(logits, 3)
    assert ids.tolist() == [[1, 2, 4]]


def test_softmax_topk_renormalizes_or_not():
    logits = torch.randn(7, 8, generator=torch.Generator().manual_seed(0))
    w, ids = softmax_topk(logits, 2, renormalize=True)
    torch.testing.assert_close(w.sum(-1), torch.ones(7, dtype=torch.float64))
    raw, ids2 = softmax_topk(logits, 2, renormalize=False)
    assert torch.equal(ids, ids2)
    torch.testing.assert_close(raw, torch.gather(torch.softmax(logits.double(), -1), 1, ids))
    assert (raw.sum(-1) < 1).all()


def test_sigmoid_correction_bias_selects_but_does_not_weight():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    bias = torch.tensor([0.0, 0.0, 0.0, 5.0])
    w, ids = sigmoid_topk(logits, 2, correction_bias=bias, renormalize=False)
    assert ids.tolist() == [[3, 0]]
    torch.testing.assert_close(w, torch.sigmoid(torch.tensor([[-1.0, 2.0]], dtype=torch.float64)))


def test_grouped_topk_keeps_only_the_best_groups():
    # 8 experts in 4 groups of 2; group 3 holds the single best expert but group 1 has the
    # best pair, so with topk_group=1 and a correction bias (sum of top-2) group 1 wins.
    logits = torch.tensor([[0.0, 0.0, 2.0, 2.0, 0.0, 0.0, 3.0, -5.0]])
    zero_bias = torch.zeros(8)
    _, ids = grouped_topk(logits, 2, num_expert_group=4, topk_group=1, scoring="sigmoid",
                          correction_bias=zero_bias)
    assert sorted(ids.tolist()[0]) == [2, 3]
    _, ids = grouped_topk(logits, 2, num_expert_group=4, topk_group=1, scoring="sigmoid")
    assert sorted(ids.tolist()[0]) == [6, 7]  # without bias a group scores by its max
    w, _ = grouped_topk(logits, 2, num_expert_group=4, topk_group=2, routed_scaling_factor=2.5)
    torch.testing.assert_close(w.sum(-1), torch.tensor([2.5], dtype=torch.float64))


def test_deepseek_v3_grouped_topk_with_a_correction_bias():
    """DeepSeek-V3's MoEGate (modeling_deepseek.py, noaux_tc): scores = sigmoid(logits);
    the choice is scores + e_score_correction_bias (a group scores by the sum of its two best
    choices, topk_group groups stay, top-k among them); the weights are the chosen experts'
    scores WITHOUT the bias, normalized to sum 1 (norm_topk_prob), times routed_scaling_factor.
    Here the bias changes both the experts chosen and, were it added, their weights."""
    logits = torch.tensor([[2.0, 0.0, 1.0, 0.5]])
    bias = torch.tensor([0.0, 0.1, 0.5, 0.3])
    # scores 0.881, 0.5, 0.731, 0.622; choices 0.881, 0.6, 1.231, 0.922; groups {0, 1} sum
    # 1.481, {2, 3} sum 2.154: the second group, experts 2 and 3 (without the bias the first
    # group, by its best expert 0.881, and experts 0 and 1)
    w, ids = grouped_topk(logits, 2, num_expert_group=2, topk_group=1, scoring="sigmoid",
                          correction_bias=bias, routed_scaling_factor=2.5)
    assert ids.tolist() == [[2, 3]]
    s2, s3 = 1 / (1 + math.exp(-1.0)), 1 / (1 + math.exp(-0.5))
    want = torch.tensor([[2.5 * s2 / (s2 + s3), 2.5 * s3 / (s2 + s3)]], dtype=torch.float64)
    torch.testing.assert_close(w, want, rtol=1e-14, atol=0)
    _, unbiased = grouped_topk(logits, 2, num_expert_group=2, topk_group=1, scoring="sigmoid")
    assert unbiased.tolist() == [[0, 1]]
