"""Int4 zero points from the activation sums (gemm_kernel's ZERO_SUMS) compiled on a CUDA sm80+
GPU, where the codes decode by the planes' PTX (skipped elsewhere; the interpreter's checks and
the host's choice are in test_zero_sums.py): each GEMM of an AWQ layer against the zero points
inside the decode (MOECERT_TRITON_ZERO_SUMS=0) on the same inputs, within the tuner's reorder
bound, on the tile shapes the tuned files run AWQ in, bf16 and fp16."""

from __future__ import annotations

import os

import pytest
import torch
from _zero_sums import TILES, assert_agree, assert_doubled_sums_caught


def _sm80() -> bool:
    return (torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
            and torch.cuda.get_device_capability() >= (8, 0))


pytestmark = pytest.mark.skipif(not _sm80(), reason="needs a CUDA sm80+ GPU, compiled Triton")


@pytest.mark.parametrize("tile", sorted(TILES))
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_zero_sums_give_the_decodes_sum(monkeypatch, dtype, tile):
    from moecert.kernels.triton_moe import fused_moe
    from moecert.reference import MoEProblem

    assert_agree(monkeypatch, MoEProblem(M=40, K=1024, N=768, E=4, topk=2, dtype=dtype), tile,
                 "cuda")
    assert fused_moe.int4_pairs_run_on(torch.device("cuda"))  # the PTX planes decode ran


def test_a_wrong_activation_sum_is_caught(monkeypatch):
    """Sums doubled move both GEMMs past the bound: the comparison can fail here too."""
    from moecert.reference import MoEProblem

    assert_doubled_sums_caught(monkeypatch, MoEProblem(M=8, K=512, N=256, E=4, topk=2),
                               "swapped", "cuda")
