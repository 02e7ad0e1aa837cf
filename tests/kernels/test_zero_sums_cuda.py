"""Int4 zero points from the activation sums (gemm_kernel's ZERO_SUMS) compiled on a CUDA sm80+
GPU, where the codes decode by the planes' PTX (skipped elsewhere; the interpreter's checks and
the host's choice are in test_zero_sums.py): each GEMM of an AWQ layer against the zero points
inside the decode (MOECERT_TRITON_ZERO_SUMS=0) on the same inputs, within the tuner's reorder
bound, on the tile shapes the tuned files run AWQ in, bf16 and fp16."""

from __future__ import annotations

import os

import pytest
import torch
from _zero_sums import TILES, both


def _sm80() -> bool:
    return (torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
            and torch.cuda.get_device_capability() >= (8, 0))


pytestmark = pytest.mark.skipif(not _sm80(), reason="needs a CUDA sm80+ GPU, compiled Triton")


@pytest.mark.parametrize("tile", sorted(TILES))
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_zero_sums_give_the_decodes_sum(monkeypatch, dtype, tile):
    from moecert.kernels.triton_moe import fused_moe, tune
    from moecert.reference import MoEProblem

    P = MoEProblem(M=40, K=1024, N=768, E=4, topk=2, dtype=dtype)
    for gemm, (sums, decode, bound) in both(monkeypatch, P, tile, "cuda").items():
        assert torch.isfinite(sums).all() and sums.abs().max() > 0
        assert tune.disagreement(sums, decode, bound) is None, (gemm, tile)
    assert fused_moe.int4_pairs_run_on(torch.device("cuda"))  # the PTX planes decode ran


def test_a_wrong_activation_sum_is_caught(monkeypatch):
    """Sums doubled move both GEMMs past the bound: the comparison can fail here too."""
    from moecert.kernels.triton_moe import fused_moe, tune
    from moecert.reference import MoEProblem

    real = fused_moe.activation_sums
    monkeypatch.setattr(fused_moe, "activation_sums", lambda a, block_k: 2 * real(a, block_k))
    P = MoEProblem(M=8, K=512, N=256, E=4, topk=2)
    for gemm, (sums, decode, bound) in both(monkeypatch, P, "swapped", "cuda").items():
        assert tune.disagreement(sums, decode, bound) is not None, gemm
