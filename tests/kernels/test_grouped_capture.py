"""GroupedBackend's forward under CUDA graph capture (`moecert bench --mode graph` captures
`forward`, conformance/performance/timing.py `graph_replays`).

On the CPU: the forward runs with every host-synchronizing torch call refused
(tests/kernels/conftest.py `HostSyncGuard`) and gives what it gives unguarded; the guard
itself catches each kind of call. On CUDA (the lead's GPU run): the forward captured as bench
captures it, replayed on new inputs copied into the captured buffers, is bit for bit an
uncaptured call on them.
"""

from __future__ import annotations

import pytest
import torch
from moecert.conformance.performance.timing import graph_replays
from moecert.kernels import get_backend
from moecert.kernels.platform import platform_of_device
from moecert.kernels.quant_config import Variant
from moecert.reference import MoEProblem, make_inputs, random_checkpoint

BACKEND = get_backend("grouped")
BASE = {"M": 9, "K": 64, "N": 32, "E": 4, "topk": 2}


def half_remote(E: int) -> tuple[int, ...]:
    """An expert map of 2E global experts, every other one on another rank: their
    assignments must add nothing."""
    return tuple(g // 2 if g % 2 == 0 else -1 for g in range(2 * E))



pytestmark = pytest.mark.usefixtures("one_thread")


def _layer(scheme: str, P: MoEProblem, device: str, **attrs):
    layer = BACKEND.create_layer(random_checkpoint(scheme, P, seed=0, device=device, **attrs),
                                 P)
    BACKEND.process_weights_after_loading(layer)
    return layer


def _forward_args(P: MoEProblem, seed: int, device: str) -> tuple:
    """(x, topk_weights, topk_ids, out, expert_num_tokens) as `forward` takes them; batched:
    padding rows past each count hold values too (they must not reach the output)."""
    if P.activation_format == "batched":
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(P.E, P.M, P.K, generator=gen).to(P.torch_dtype)
        counts = torch.randint(0, P.M + 1, (P.E,), generator=gen, dtype=torch.int32)
        return (x.to(device), None, None, torch.empty_like(x, device=device),
                counts.to(device))
    x, w, ids = (t.to(device) for t in make_inputs(P, seed=seed))
    return x, w, ids, torch.empty(P.M, P.K, dtype=P.torch_dtype, device=device), None


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16)


# 16-bit and dequantized weights, each routing form the forward handles; the FP8 path's CPU
# case is in tests/kernels/test_grouped_fp8.py (it needs the GEMM's emulation).
NO_SYNC = [  # (scheme, checkpoint attributes, problem options)
    ("bf16", {}, {"expert_map": half_remote(BASE["E"]), "bias": True}),
    ("bf16", {}, {"activation_format": "batched", "activation": "relu2"}),
    ("gptq-int4", {"group_size": 32}, {"topk": 1, "apply_router_weight_on_input": True}),
    ("fp8-w8a16", {}, {"dtype": "fp16", "activation": "swigluoai"}),
]


@pytest.mark.parametrize("scheme, attrs, options", NO_SYNC,
                         ids=[f"{s}-{i}" for i, (s, _, _) in enumerate(NO_SYNC)])
def test_forward_never_syncs_with_the_host(host_sync_guard, scheme, attrs, options):
    P = MoEProblem(**{**BASE, **options})
    layer = _layer(scheme, P, "cpu", **attrs)
    x, w, ids, want, counts = _forward_args(P, seed=1, device="cpu")
    BACKEND.forward(layer, x, w, ids, want, counts)
    out = torch.full_like(want, torch.nan)
    with host_sync_guard.armed():
        BACKEND.forward(layer, x, w, ids, out, counts)
    assert torch.equal(_bits(out), _bits(want))


@pytest.mark.parametrize("call", [
    lambda t: t.item(), lambda t: t.tolist(), lambda t: t.cpu(), lambda t: bool(t),
    lambda t: int(t), lambda t: t[t > 0], lambda t: t.nonzero(), lambda t: torch.nonzero(t),
    lambda t: torch.unique(t), lambda t: torch.bincount(t), lambda t: torch.tensor([1, 2]),
    lambda t: t.repeat_interleave(t), lambda t: torch.zeros(1, 2)[t > 0, 0],
    lambda t: torch.zeros(1).__setitem__(t > 0, 1.0),
])
def test_the_guard_refuses_each_kind_of_host_read(host_sync_guard, call):
    t = torch.tensor([2])
    call(t)  # unarmed: allowed
    with host_sync_guard.armed(), pytest.raises(host_sync_guard.error):
        call(t)


# --- on CUDA: the capture itself ----------------------------------------------------------

def _capture_issue(scheme: str, P: MoEProblem, attrs: dict) -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA device"
    quant = Variant(**{**Variant.defaults(scheme).__dict__, **attrs})
    why = BACKEND.supports(quant, P, platform_of_device(torch.device("cuda")))
    if why:
        return why
    if quant.activation == "none" and torch.cuda.get_device_capability() not in ((9, 0),
                                                                                 (10, 0)):
        return ("torch._grouped_mm's per-group fallback (off sm90 / sm100) copies offs to the "
                "host: no capture")
    return None


CAPTURED = [  # (scheme, checkpoint attributes, problem options)
    ("bf16", {}, {"expert_map": half_remote(8), "bias": True}),
    ("gptq-int4", {}, {}),
    ("fp8-w8a8", {"weight_strategy": "channel", "activation": "dynamic-token"}, {}),
]


@pytest.mark.parametrize("scheme, attrs, options", CAPTURED, ids=[c[0] for c in CAPTURED])
def test_cuda_graph_replay_is_an_uncaptured_call(scheme, attrs, options):
    P = MoEProblem(**{"M": 64, "K": 256, "N": 128, "E": 8, "topk": 2, **options})
    why = _capture_issue(scheme, P, attrs)
    if why:
        pytest.skip(why)
    layer = _layer(scheme, P, "cuda", **attrs)
    x, w, ids, out, _ = _forward_args(P, seed=1, device="cuda")
    (replay,) = graph_replays([lambda: BACKEND.forward(layer, x, w, ids, out, None)],
                              torch.device("cuda"))
    replay()
    torch.cuda.synchronize()
    first = out.clone()
    x2, w2, ids2, want, _ = _forward_args(P, seed=2, device="cuda")
    for buf, new in ((x, x2), (w, w2), (ids, ids2)):
        buf.copy_(new)
    replay()
    BACKEND.forward(layer, x2, w2, ids2, want, None)
    torch.cuda.synchronize()
    assert not torch.equal(_bits(out), _bits(first)), "the replay did not read the new inputs"
    assert torch.equal(_bits(out), _bits(want))
