"""Every built-in backend gives the same output, bit for bit, whatever the strides of the
checkpoint tensors and inputs it receives: the layer keeps contiguous copies of the checkpoint
(kernels/layer.py) and `apply` hands kernels contiguous routing tensors (kernels/base.py), so
the kernels see the very bytes of the contiguous case.

Before those copies (measured at this module's shapes) the triton backend read an MXFP8
`weight_scale` held column-major as if it were row-major (relative error 0.52 to the
contiguous output with w13's scales strided, 0.41 with w2's), read a strided
`expert_num_tokens` wrongly (0.47), and raised a bare AssertionError on column-major weights.
(The torch backend's float32 GEMM on column-major weights may also sum in another order: at
E = 3, one element of 896 came out one ulp off; right numbers, not the contiguous case's bits.)
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from moecert.conformance.harness.strides import restrided
from moecert.kernels import get_backend
from moecert.kernels.xpu import SCHEMES as XPU_SCHEMES
from moecert.reference import (
    SCHEME_NAMES,
    MoEProblem,
    make_batched_inputs,
    make_inputs,
    synthesize,
)

# tiny: the triton backend runs interpreted on a CPU
PROBLEM = MoEProblem(M=7, K=128, N=128, E=2, topk=2)
# (backend, scheme) for every scheme each backend claims (xpu: standard format only)
CLAIMED = [(b, s) for b in ("torch", "triton") for s in SCHEME_NAMES] + [
    ("xpu", s) for s in XPU_SCHEMES]


def _output(backend, ckpt, args: tuple, problem: MoEProblem, **opts) -> torch.Tensor:
    layer = backend.create_layer(ckpt, problem)
    backend.process_weights_after_loading(layer)
    return backend.apply(layer, *args, **opts)


def _restride(ckpt, names=None):
    return replace(ckpt, tensors={n: restrided(t) if names is None or n in names else t
                                  for n, t in ckpt.tensors.items()})


def _assert_same_bits(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    differ = int((a.view(torch.int16) != b.view(torch.int16)).sum())
    rel = float((a.double() - b.double()).norm() / b.double().norm())
    assert differ == 0, f"{differ} of {a.numel()} elements differ, relative error {rel:.3g}"


def _backend_for(name: str, scheme: str, problem: MoEProblem, request):
    if name == "triton":
        request.getfixturevalue("triton_runs_here")
    backend = get_backend(name)
    assert backend.supports(scheme, problem) is None
    return backend


@pytest.mark.parametrize("name, scheme", CLAIMED)
def test_every_tensor_strided_gives_the_same_output(name, scheme, request):
    backend = _backend_for(name, scheme, PROBLEM, request)
    ckpt = synthesize(scheme, PROBLEM, seed=1)
    inputs = make_inputs(PROBLEM, seed=2)
    want = _output(backend, ckpt, inputs, PROBLEM)
    got = _output(backend, _restride(ckpt), tuple(map(restrided, inputs)), PROBLEM)
    _assert_same_bits(got, want)


# one tensor at a time, the cases: column-major MXFP8 scales beside contiguous weights
# (silently wrong numbers), column-major fp8 weights (a bare AssertionError)
@pytest.mark.parametrize("scheme, tensor", [("mxfp8", "w13_weight_scale"),
                                            ("mxfp8", "w2_weight_scale"),
                                            ("fp8-w8a16", "w13_weight")])
@pytest.mark.parametrize("name", ["torch", "triton"])
def test_one_strided_fp8_tensor_gives_the_same_output(name, scheme, tensor, request):
    backend = _backend_for(name, scheme, PROBLEM, request)
    ckpt = synthesize(scheme, PROBLEM, seed=3)
    assert not restrided(ckpt.tensors[tensor]).is_contiguous()
    inputs = make_inputs(PROBLEM, seed=4)
    want = _output(backend, ckpt, inputs, PROBLEM)
    _assert_same_bits(_output(backend, _restride(ckpt, {tensor}), inputs, PROBLEM), want)


@pytest.mark.parametrize("name", ["torch", "triton"])
def test_strided_batched_inputs_give_the_same_output(name, request):
    P = replace(PROBLEM, activation_format="batched")
    backend = _backend_for(name, "gptq-int4", P, request)
    ckpt = synthesize("gptq-int4", P, seed=5)
    x, counts = make_batched_inputs(P, seed=6)
    want = _output(backend, ckpt, (x, None, None), P, expert_num_tokens=counts)
    got = _output(backend, ckpt, (restrided(x), None, None), P,
                  expert_num_tokens=restrided(counts))
    _assert_same_bits(got, want)
