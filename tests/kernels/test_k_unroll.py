"""K_UNROLL tiles per K-loop step (fused_moe `_k_range`), under the Triton interpreter.

Unrolled, the loop adds the same tiles' products in the same order: the output must be the
same bits as the K_UNROLL = 1 launch, for every weight format (nibbles and bytes, symmetric
and with zero points, float and E8M0 scales), with a last step whose second tile lies past K
(zero activations, clamped weight rows, the last scale column: never read past the end), and
under split-K, where a step's second tile may lie in the next split's range.
"""

from __future__ import annotations

import pytest
import torch
from moecert.kernels.triton_moe.interpret import load_interpreted_kernels

load_interpreted_kernels()  # before the kernel modules are bound below

from moecert.kernels.triton_moe import tune_stages  # noqa: E402
from moecert.kernels.triton_moe.backend import TritonBackend  # noqa: E402
from moecert.reference import MoEProblem, make_inputs, synthesize  # noqa: E402

BACKEND = TritonBackend()


pytestmark = pytest.mark.usefixtures("interpreted")


@pytest.fixture
def launches(spy_launches):
    """The kernel's launches: the K_UNROLL and EVEN_K of each."""
    return spy_launches("K_UNROLL", "EVEN_K")


# (id, scheme, checkpoint attributes)
CASES = [
    ("gptq-int4-g32", "gptq-int4", {"group_size": 32}),        # nibbles, symmetric
    ("awq-int4-g32", "awq-int4", {"group_size": 32}),          # nibbles, zero points
    ("gptq-int8-g32", "gptq-int8", {"group_size": 32}),        # unsigned bytes, zero points
    ("mxfp4", "mxfp4", {}),                                    # e2m1 nibbles, E8M0 scales
    ("fp8-w8a16-channel", "fp8-w8a16", {"weight_strategy": "channel"}),  # e4m3 bytes
]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32 if t.element_size() == 4 else torch.int16)


# at BLOCK_K 32, steps of 64 columns. K = 128: whole steps, also split in two (64 + 64);
# K = 96: a last tile past K (split: 64 + 32); K = 192: whole steps, but split in two of 96
# columns, each split's last step has its second tile in the next split's range
@pytest.mark.parametrize(("K", "even_whole", "even_split"),
                         [(128, True, True), (96, False, False), (192, True, False)],
                         ids=["whole-steps", "tile-past-K", "tile-past-split"])
@pytest.mark.parametrize("split_k", [1, 2], ids=["one-launch", "split-k"])
@pytest.mark.parametrize(("scheme", "attrs"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_unrolled_steps_give_the_same_bits(scheme, attrs, K, even_whole, even_split,
                                            split_k, launches, monkeypatch):
    # e2m1 codes in the checkpoint's order, the 32-column tile these steps are counted in
    # (in planes the tile is 64 columns: tests/kernels/test_fp4_planes.py unrolls those)
    from moecert.kernels.triton_moe import backend

    monkeypatch.setattr(backend, "_tile_fp4", lambda layer: None)
    P = MoEProblem(M=3, K=K, N=64, E=2, topk=2, bias=True)
    layer = BACKEND.create_layer(synthesize(scheme, P, seed=1, **attrs), P)
    BACKEND.process_weights_after_loading(layer)
    x, w, ids = make_inputs(P, seed=2)
    stage = tune_stages.LayerStage(layer, x, w, ids)
    one = {**stage.defaults[0], "BLOCK_N": 64, "BLOCK_K": 32, "SPLIT_K": split_k}
    launches.seen.clear()
    once = _bits(stage.run(1, one).clone())
    twice = _bits(stage.run(1, {**one, "K_UNROLL": 2}))
    phases = 2 if split_k > 1 else 1  # PARTIAL and REDUCE launches
    even = even_split if split_k > 1 else even_whole
    assert launches.seen == [(1, True)] * phases + [(2, even)] * phases
    assert torch.equal(twice, once)
