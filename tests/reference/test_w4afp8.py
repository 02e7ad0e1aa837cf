"""W4AFP8 (`w4a8-fp8`): int4 codes one per int8 (compressed-tensors int-quantized), symmetric
group scales, e4m3 activations per token. The layout reads as written, codes outside int4
are refused naming the tensor (reference and kernels alike), and the reference quantizes
each GEMM's input to e4m3 per token."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from moecert.kernels import BackendError
from moecert.kernels.native import TorchBackend
from moecert.reference import CheckpointError, MoEProblem, dequantize, make_inputs, moe, synthesize
from moecert.reference.quantize import qdq_per_token
from moecert.reference.schemes import SCHEMES

P = MoEProblem(M=9, K=128, N=64, E=3, topk=2)


def _ckpt(**kw):
    return synthesize("w4a8-fp8", P, seed=1, group_size=32, **kw)


def test_scheme_record():
    s = SCHEMES["w4a8-fp8"]
    assert (s.element, s.weight_bits, s.activation_element) == ("int4", 4, "e4m3")
    assert s.formats[0].layout == "ct-int" and not s.asym and not s.act_order
    assert s.defaults()["group_size"] == 128


def test_layout_as_written():
    ckpt = _ckpt()
    assert set(ckpt.tensors) == {"w13_weight", "w13_weight_scale", "w2_weight",
                                 "w2_weight_scale"}
    w = ckpt.tensors["w13_weight"]
    assert w.dtype == torch.int8 and tuple(w.shape) == (3, 128, 128)
    assert int(w.min()) >= -8 and int(w.max()) <= 7 and int(w.min()) < 0
    assert tuple(ckpt.tensors["w13_weight_scale"].shape) == (3, 128, 4)
    deq = dequantize(ckpt)["w13"]
    s = ckpt.tensors["w13_weight_scale"].double().repeat_interleave(32, dim=2)
    assert torch.equal(deq, w.double() * s)  # code * its group's scale, as stored


@pytest.mark.parametrize("bad", [8, -9, 127])
def test_code_outside_int4_is_refused_naming_the_tensor(bad):
    ckpt = _ckpt()
    tensors = dict(ckpt.tensors, w2_weight=ckpt.tensors["w2_weight"].clone())
    tensors["w2_weight"][1, 5, 7] = bad
    ckpt = replace(ckpt, tensors=tensors)
    with pytest.raises(CheckpointError, match=r"w2_weight.*int4 codes in \[-8, 7\]"):
        dequantize(ckpt)
    backend = TorchBackend()
    with pytest.raises(BackendError, match=r"w2_weight.*int4 codes in \[-8, 7\]"):
        backend.process_weights_after_loading(backend.create_layer(ckpt, P))


def test_reference_quantizes_activations_to_e4m3_per_token():
    ckpt = _ckpt()
    x, w, ids = make_inputs(P, seed=2)
    y = moe(ckpt, x, w, ids, P)
    # the same layer with the GEMM inputs quantized by hand equals it; unquantized does not
    W = dequantize(ckpt)
    xq = qdq_per_token(x.double(), "e4m3")
    rows = []
    for t in range(P.M):
        acc = torch.zeros(P.K, dtype=torch.float64)
        for j in range(P.topk):
            e = int(ids[t, j])
            h = (xq[t] @ W["w13"][e].T).to(torch.bfloat16).double()
            a = (torch.nn.functional.silu(h[:P.N]) * h[P.N:]).to(torch.bfloat16).double()
            acc += float(w[t, j]) * (qdq_per_token(a[None], "e4m3")[0] @ W["w2"][e].T)
        rows.append(acc)
    assert torch.allclose(y, torch.stack(rows), rtol=0, atol=1e-12 * float(y.abs().max()))
