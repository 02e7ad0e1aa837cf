"""NVFP4 in the kernels (convert.py, native.py, activations.py): the torch backend's kernel
format reads both conventions and keeps w1's and w3's global scales apart, its own e2m1
rounding and NVFP4 activation qdq agree with the reference's, the XPU backend declines with
a reason (the Triton backend's NVFP4 tests are in test_triton_backend.py)."""

from __future__ import annotations

import torch
from moecert.kernels.activations import qdq_nvfp4, round_e2m1
from moecert.kernels.registry import get_backend
from moecert.reference import MoEProblem, canonicalize, make_inputs, moe, synthesize
from moecert.reference.elements import round_to_e2m1
from moecert.reference.quantize import qdq_nvfp4 as reference_qdq_nvfp4

P = MoEProblem(M=7, K=32, N=16, E=3, topk=2)


def _processed(ckpt, problem=P):
    backend = get_backend("torch")
    layer = backend.create_layer(ckpt, problem)
    backend.process_weights_after_loading(layer)
    return backend, layer


def test_round_e2m1_matches_the_reference_on_every_tie():
    v = torch.arange(-56, 57, dtype=torch.float32) / 8  # a 1/8 grid over [-7, 7]: every tie
    assert torch.equal(round_e2m1(v).double(), round_to_e2m1(v.double()))


def test_qdq_matches_the_reference():
    x = torch.randn(5, 64, generator=torch.Generator().manual_seed(0)) * 3
    s = torch.tensor([0.002])
    g = 1 / s  # float32, as convert.py reads a ModelOpt input_scale
    got = qdq_nvfp4(x, g, s).double()
    # the same float32 steps: the same e2m1 codes and e4m3 block scales; bs * alpha is
    # float32 here (one rounding)
    assert torch.allclose(got, reference_qdq_nvfp4(x.double(), g.double(), s.double()),
                          rtol=2e-7, atol=0)


def test_canonical_export_both_conventions():
    for fmt in ("modelopt", "ct"):
        ckpt = synthesize("nvfp4", P, seed=2, checkpoint_format=fmt)
        backend, layer = _processed(ckpt)
        exported, want = backend.canonical_weights(layer), canonicalize(ckpt)
        for p in ("w13", "w2"):
            e = exported[p]
            assert torch.equal(e.codes, want[p].codes)
            assert torch.equal(e.scales, want[p].scales)
            assert torch.equal(e.global_scale, want[p].global_scale)
        g = exported["w13"].global_scale[0]
        assert g[0] != g[-1]  # w1 and w3 keep their own global scale


def test_torch_backend_close_to_the_reference_w4a4():
    ckpt = synthesize("nvfp4", P, seed=5, checkpoint_format="ct", activation="nvfp4")
    x, w, ids = make_inputs(P, seed=6)[:3]
    backend, layer = _processed(ckpt)
    out = backend.apply(layer, x, w, ids).double()
    ref = moe(ckpt, x, w, ids, P)
    assert (out - ref).norm() / ref.norm() < 4e-3


def test_xpu_declines_with_a_reason():
    ckpt = synthesize("nvfp4", P, seed=2)
    why = get_backend("xpu").supports(ckpt, P)
    assert why and "nvfp4" in why
