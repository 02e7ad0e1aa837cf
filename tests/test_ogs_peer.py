"""tools/ogs_peer.py, the triton_kernels peer of gpt-oss-120b MXFP4 (issue 44): it must time
the routings `moecert bench` times, else the two rows move other bytes (until 2026-12-01 its
own draw touched 47 experts at M = 16 where the bench's touch 52 and 53: docs/speed.md, round
eight). The timing itself needs a GPU and triton_kernels; these parts run here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from moecert.conformance.performance import bench
from moecert.reference.models import MODELS

sys.path.insert(0, str(Path(__file__).parents[1] / "tools"))
import ogs_peer

E, K, N, TOPK = ogs_peer.SHAPES["gpt-oss-120b"]


@pytest.mark.parametrize("M", [16, 64])
def test_the_peer_times_the_benchs_own_routings(M):
    """The bench's input sets for this layer (its seed, the L2 of an H200, the checkpoint's
    bytes per expert: MXFP4 codes and E8M0 scales of both linears) hold the same top-k ids, as
    many sets, as the peer's."""
    problem = bench.layer_problem("gpt-oss-120b", MODELS["gpt-oss-120b"], "mxfp4", M)
    per_expert = (2 * N * K + K * N) * (0.5 + 1 / 32)
    sets = bench.input_sets(problem, per_expert, 0.0, torch.device("cpu"), 60 << 20,
                            bench.Plan("cpu", (), (), {}).seed + 1)
    peer = ogs_peer.bench_routings(M, "gpt-oss-120b", "cpu")
    assert len(peer) == len(sets) >= 2
    for ids, s in zip(peer, sets, strict=True):
        assert torch.equal(ids, s.ids.long())


def test_forced_logits_make_routing_pick_exactly_the_ids():
    """routing() selects by top-k of the logits: each row's chosen experts must be its top-k,
    whatever the noise elsewhere (and the softmax weights stay finite)."""
    for seed in range(20):
        gen = torch.Generator().manual_seed(seed)
        ids = torch.stack([torch.randperm(E, generator=gen)[:TOPK] for _ in range(64)])
        logits = ogs_peer.forced_logits(ids, E)
        top = torch.topk(logits, TOPK, dim=-1).indices
        assert torch.equal(top.sort(-1).values, ids.sort(-1).values)
        assert torch.isfinite(torch.softmax(logits, -1)).all()
