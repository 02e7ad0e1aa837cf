"""The protocol's guarantees for every built-in backend that can run here: process-once,
reload equivalence, and clear errors for bad input before any kernel runs."""

from __future__ import annotations

import pytest
import torch
from moecert.kernels import BackendError, UnsupportedError, get_backend
from moecert.kernels.layer import PROCESSED
from moecert.reference import MoEProblem, make_batched_inputs, make_inputs, synthesize

PROBLEM = MoEProblem(M=9, K=128, N=64, E=4, topk=2, bias=True)
# One checkpoint per backend where a repeated conversion would scramble the weights:
# packed int4 with zero points and act order (torch, triton, grouped), symmetric int4 (xpu).
CASES = {
    "torch": ("gptq-int4", dict(group_size=32, sym=False, act_order=True,
                                checkpoint_format="gptq")),
    "grouped": ("gptq-int4", dict(group_size=32, sym=False, act_order=True,
                                  checkpoint_format="gptq")),
    "xpu": ("ct-int4", dict(group_size=32)),
    "triton": ("awq-int4", dict(group_size=32)),
}


BACKENDS = ("torch", "xpu", "triton", "grouped")
# The GPU when there is one (triton runs there compiled), else the CPU (triton interpreted).
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _inputs(seed):
    return tuple(t.to(DEVICE) for t in make_inputs(PROBLEM, seed=seed))


def _checkpoint(name, seed=0, problem=PROBLEM):
    scheme, attrs = CASES[name]
    return synthesize(scheme, problem, seed=seed, **attrs).to(DEVICE)


def _layer(backend, ckpt, problem=PROBLEM):
    layer = backend.create_layer(ckpt, problem)
    backend.process_weights_after_loading(layer)
    return layer


def _state(layer):
    return {n: t.clone() for n, t in layer.named_buffers()}


def _assert_same_state(a, b):
    assert a.keys() == b.keys()
    for n in a:
        assert a[n].dtype == b[n].dtype and torch.equal(a[n], b[n]), n


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param == "triton":
        request.getfixturevalue("triton_runs_here")
    return get_backend(request.param)


def test_second_process_call_is_a_no_op(backend):
    ckpt = _checkpoint(backend.name)
    layer = _layer(backend, ckpt)
    x, w, ids = _inputs(1)
    before, y1 = _state(layer), backend.apply(layer, x, w, ids)
    backend.process_weights_after_loading(layer)
    assert getattr(layer, PROCESSED) is True
    _assert_same_state(before, _state(layer))
    assert torch.equal(y1, backend.apply(layer, x, w, ids))


def test_reload_into_a_processed_layer_equals_a_fresh_load(backend):
    first, second = _checkpoint(backend.name, seed=0), _checkpoint(backend.name, seed=1)
    layer = _layer(backend, first)
    backend.load_weights(layer, second)
    assert getattr(layer, PROCESSED) is False
    backend.process_weights_after_loading(layer)
    fresh = _layer(backend, second)
    _assert_same_state(_state(fresh), _state(layer))
    x, w, ids = _inputs(2)
    assert torch.equal(backend.apply(fresh, x, w, ids), backend.apply(layer, x, w, ids))


def test_layer_does_not_alias_the_checkpoint(backend):
    ckpt = _checkpoint(backend.name)
    saved = {n: t.clone() for n, t in ckpt.tensors.items()}
    layer = _layer(backend, ckpt)
    x, w, ids = _inputs(3)
    y = backend.apply(layer, x, w, ids)
    for n, t in ckpt.tensors.items():
        assert torch.equal(t, saved[n]), f"{n} changed by loading or processing"
    for t in ckpt.tensors.values():
        t.zero_()  # the layer must hold its own copies
    assert torch.equal(y, backend.apply(layer, x, w, ids))


# --- bad input: a clear error naming the argument, and no kernel launch ----------------------

@pytest.fixture
def ready(backend, monkeypatch):
    """A processed layer and good inputs; forward fails the test if bad input reaches it."""
    layer = _layer(backend, _checkpoint(backend.name))
    x, w, ids = _inputs(4)

    def no_launch(*args, **kwargs):
        raise AssertionError("bad input reached the kernel")

    monkeypatch.setattr(backend, "forward", no_launch)
    return backend, layer, x, w, ids


BAD_APPLY = {
    "x dtype": (lambda x, w, ids: (x.float(), w, ids), {}, "hidden_states: expected dtype"),
    "x shape": (lambda x, w, ids: (x[:, :-1], w, ids), {}, r"hidden_states: expected shape"),
    "x device": (lambda x, w, ids: (x.to("meta"), w, ids), {}, "hidden_states: expected device"),
    "ids too big": (lambda x, w, ids: (x, w, ids.clone().fill_(PROBLEM.E)), {},
                    r"topk_ids: expected values in \[0, 3\], found values in \[4, 4\]"),
    "ids negative": (lambda x, w, ids: (x, w, ids - 5), {}, "topk_ids: expected values in"),
    "ids float": (lambda x, w, ids: (x, w, ids.float()), {}, "topk_ids: expected dtype"),
    "ids shape": (lambda x, w, ids: (x, w, ids[:, :1]), {}, "topk_ids: expected shape"),
    "weights dtype": (lambda x, w, ids: (x, w.half(), ids), {}, "topk_weights: expected dtype"),
    "weights missing": (lambda x, w, ids: (x, None, ids), {}, "topk_weights: expected a float32"),
    "out dtype": (lambda x, w, ids: (x, w, ids),
                  {"out": torch.empty(PROBLEM.M, PROBLEM.K, device=DEVICE)},
                  "out: expected torch.bfloat16"),
    "unknown option": (lambda x, w, ids: (x, w, ids), {"activation": "gelu"},
                       "apply options: expected expert_num_tokens only, found activation"),
}


@pytest.mark.parametrize("case", sorted(BAD_APPLY))
def test_bad_apply_input_raises_before_the_kernel(ready, case):
    backend, layer, x, w, ids = ready
    mutate, opts, message = BAD_APPLY[case]
    with pytest.raises(BackendError, match=message):
        backend.apply(layer, *mutate(x, w, ids), **opts)


def test_apply_before_processing(backend):
    layer = backend.create_layer(_checkpoint(backend.name), PROBLEM)
    x, w, ids = _inputs(5)
    with pytest.raises(BackendError, match="process_weights_after_loading before apply"):
        backend.apply(layer, x, w, ids)


def test_layer_of_another_backend(backend):
    other = get_backend("torch" if backend.name != "torch" else "xpu")
    layer = _layer(other, _checkpoint(other.name))
    x, w, ids = _inputs(5)
    with pytest.raises(BackendError, match=f"layer: expected a layer of backend '{backend.name}'"):
        backend.apply(layer, x, w, ids)


def _edit(ckpt, fn):
    tensors = dict(ckpt.tensors)
    fn(tensors)
    return type(ckpt)(**{**ckpt.__dict__, "tensors": tensors})


BAD_CHECKPOINT = {
    "missing tensor": (lambda t: t.pop("w2_bias"), "w2_bias: expected a tensor"),
    "unexpected tensor": (lambda t: t.update(w13_extra=torch.zeros(1, device=DEVICE)),
                          "^w13_extra: expected only the tensors of .*, found a tensor of another"),
    "bias dtype": (lambda t: t.update(w13_bias=t["w13_bias"].to(torch.int32)),
                   "w13_bias: expected dtype"),
    "bias shape": (lambda t: t.update(w2_bias=t["w2_bias"][:, :-1]),
                   r"w2_bias: expected shape \[4, 128\], found \[4, 127\]"),
}


@pytest.mark.parametrize("case", sorted(BAD_CHECKPOINT))
def test_bad_checkpoint_raises_at_create_layer(backend, case):
    edit, message = BAD_CHECKPOINT[case]
    with pytest.raises(BackendError, match=message):
        backend.create_layer(_edit(_checkpoint(backend.name), edit), PROBLEM)


def test_weight_shape_disagreeing_with_the_problem(backend):
    wider = MoEProblem(M=9, K=256, N=64, E=4, topk=2, bias=True)
    with pytest.raises(BackendError, match=r"expected shape \["):
        backend.create_layer(_checkpoint(backend.name), wider)


def test_reload_with_a_different_quantization(backend):
    layer = _layer(backend, _checkpoint(backend.name))
    other = _checkpoint(backend.name)
    other = type(other)(**{**other.__dict__, "group_size": 64})
    with pytest.raises(BackendError, match="checkpoint: expected the layer's quantization"):
        backend.load_weights(layer, other)


def test_forcing_an_unclaimed_combination():
    xpu = get_backend("xpu")
    asym = synthesize("gptq-int4", PROBLEM, seed=0, group_size=32, sym=False)
    reason = xpu.supports(asym, PROBLEM)
    assert reason
    with pytest.raises(UnsupportedError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        xpu.create_layer(asym, PROBLEM)


def test_batched_layer_needs_expert_num_tokens():
    torch_backend = get_backend("torch")
    problem = MoEProblem(M=6, K=128, N=64, E=4, topk=1, activation_format="batched")
    layer = _layer(torch_backend, synthesize("bf16", problem, seed=0).to(DEVICE), problem)
    x, counts = (t.to(DEVICE) for t in make_batched_inputs(problem, seed=1))
    with pytest.raises(BackendError, match="expert_num_tokens: expected an int32 tensor"):
        torch_backend.apply(layer, x, None, None)
    with pytest.raises(BackendError, match=r"expert_num_tokens: expected values in \[0, 6\]"):
        torch_backend.apply(layer, x, None, None, expert_num_tokens=counts + 7)
    y = torch_backend.apply(layer, x, None, None, expert_num_tokens=counts)
    assert y.shape == x.shape
