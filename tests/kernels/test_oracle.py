"""The selection oracle: priority order, reasons for every candidate passed over, the error
when nothing claims a scheme, and the built-in choice on every simulated platform."""

from __future__ import annotations

import pytest
from moecert.kernels import NoBackendError, Platform, Variant, get_backend, select_backend
from moecert.kernels import oracle as oracle_module
from moecert.kernels.platform import SIMULATED_PLATFORMS
from moecert.kernels.registry import BUILTINS, register_backend, unregister_backend
from moecert.reference import SCHEMES, MoEProblem
from moecert.reference.schemes import scheme_variants

PROBLEM = MoEProblem(M=16, K=2048, N=768, E=128, topk=8)


class _Fake:
    """A backend whose claims are given: `refuse` maps a scheme to the reason it refuses."""

    def __init__(self, name, refuse=None, unavailable=None):
        self.name, self.refuse, self.unavailable = name, refuse or {}, unavailable
        self.seen_platforms = []

    def available(self):
        return self.unavailable

    def supports(self, scheme, problem, platform=None):
        self.seen_platforms.append(platform)
        return self.refuse.get(Variant.of(scheme).scheme)

    def create_layer(self, checkpoint, problem): ...
    def load_weights(self, layer, checkpoint): ...
    def process_weights_after_loading(self, layer): ...
    def apply(self, layer, hidden_states, topk_weights, topk_ids, *, out=None, **opts): ...


@pytest.fixture
def fakes(monkeypatch):
    """Two fake backends as the whole priority list of every platform, whatever else is
    installed."""
    a = _Fake("fake-a", refuse={"awq-int4": "zero points not supported"})
    b = _Fake("fake-b", refuse={"awq-int4": "bias not supported", "fp8-w8a16": "no fp8"})
    for f in (a, b):
        register_backend(f)
    monkeypatch.setattr(oracle_module, "PRIORITY", {k: ("fake-a", "fake-b") for k in
                                                    oracle_module.PRIORITY})
    # every backend registered now (entry points too: vllm, transformers where installed)
    # counts as built in, so that none joins the list; one registered by a test still does
    monkeypatch.setattr(oracle_module, "BUILTINS",
                        {**BUILTINS, **dict.fromkeys(oracle_module.backend_names(), "")})
    yield a, b
    for f in (a, b):
        unregister_backend(f.name)


def test_first_claiming_backend_wins(fakes):
    a, _ = fakes
    sel = select_backend("gptq-int4", PROBLEM, Platform.cuda((9, 0)))
    assert sel.backend is a and sel.reasons == {}
    a.refuse["gptq-int4"] = "group size 128 needs N % 128 == 0"
    sel = select_backend("gptq-int4", PROBLEM, Platform.cuda((9, 0)))
    assert sel.name == "fake-b"
    assert sel.reasons == {"fake-a": "group size 128 needs N % 128 == 0"}


def test_no_backend_lists_every_candidate_and_reason(fakes):
    with pytest.raises(NoBackendError) as info:
        select_backend("awq-int4", PROBLEM, Platform.xpu())
    # backends installed by entry point (vllm) add their own reasons: these are the fakes'
    fakes_only = {k: v for k, v in info.value.reasons.items() if k.startswith("fake-")}
    assert fakes_only == {"fake-a": "zero points not supported", "fake-b": "bias not supported"}
    message = str(info.value)
    assert "no backend for awq-int4 awq g128 asym on xpu" in message
    assert "fake-a: zero points not supported" in message
    assert "fake-b: bias not supported" in message


def test_the_platform_reaches_the_claims(fakes):
    a, _ = fakes
    platform = Platform.rocm("gfx950")
    select_backend("bf16", PROBLEM, platform)
    assert a.seen_platforms[-1] == platform


def test_availability_counts_only_on_the_real_platform(fakes):
    a, b = fakes
    a.unavailable = "driver missing"
    assert select_backend("bf16", PROBLEM, Platform.cuda((9, 0))).backend is a
    real = Platform.current()
    sel = select_backend("bf16", PROBLEM, real)
    assert sel.backend is b and sel.reasons == {"fake-a": "unavailable: driver missing"}


def test_vendor_backends_come_after_the_builtins():
    vendor = _Fake("vendor-x")
    register_backend(vendor)
    try:
        for kind, builtin in oracle_module.PRIORITY.items():
            names = oracle_module.priority(Platform(kind, capability=(9, 0)),
                                           Variant.of("bf16"))
            # built-ins first, then entry-point backends, then those registered at run time
            assert names[:len(builtin)] == builtin and names[-1] == "vendor-x"
    finally:
        unregister_backend("vendor-x")


def test_a_vendor_backend_without_a_platform_argument(fakes):
    class Plain(_Fake):
        def supports(self, scheme, problem):  # the protocol's two-argument form
            return None

    plain = Plain("plain")
    register_backend(plain)
    try:
        fakes[0].refuse["bf16"] = fakes[1].refuse["bf16"] = "no"
        assert select_backend("bf16", PROBLEM, Platform.cpu()).backend is plain
    finally:
        unregister_backend("plain")


# --- built-in backends ------------------------------------------------------------------------

@pytest.mark.parametrize("platform", SIMULATED_PLATFORMS, ids=str)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_has_a_backend_on_every_platform(platform, scheme):
    for quant in scheme_variants(scheme):
        sel = select_backend(quant, PROBLEM, platform)
        assert sel.backend.supports(quant, PROBLEM, platform=platform) is None
        for name, why in sel.reasons.items():
            assert why, f"{name} passed over without a reason"


def _problem(**kw):
    return MoEProblem(**{"M": 16, "K": 2048, "N": 768, "E": 128, "topk": 8, **kw})


def _quant(scheme, **kw):
    return Variant(**{**Variant.defaults(scheme).__dict__, **kw})


# (platform, config, problem, selected backend, {passed-over backend: its exact reason})
SELECTIONS = [
    (Platform.cpu(), _quant("gptq-int4"), _problem(), "torch", {}),
    (Platform.cuda((9, 0)), _quant("gptq-int4", sym=False, act_order=True), _problem(bias=True),
     "triton", {}),
    (Platform.cuda((8, 0)), _quant("fp8-w8a16"), _problem(), "torch",
     {"triton": "fp8 e4m3 weights need compute capability >= 8.9 (sm80)"}),
    (Platform.cuda((7, 5)), _quant("bf16"), _problem(), "torch",
     {"triton": "compute capability >= 8.0 needed (sm75)"}),
    (Platform.rocm("gfx942"), _quant("mxfp8"), _problem(), "torch",
     {"triton": "fp8 e4m3fn weights need rocm gfx950 (OCP fp8); gfx942 is assumed to lack "
                "e4m3fn in Triton (gfx942 has e4m3fnuz)"}),
    (Platform.rocm("gfx950"), _quant("mxfp8"), _problem(), "triton", {}),
    (Platform.xpu(), _quant("gptq-int4"), _problem(bias=True), "xpu", {}),
    (Platform.xpu(), _quant("ct-int4", group_size=32), _problem(), "xpu", {}),
    (Platform.xpu(), _quant("gptq-int4", sym=False), _problem(), "torch",
     {"xpu": "zero points not supported (symmetric int4 only)"}),
    (Platform.xpu(), _quant("ct-int4", act_order=True), _problem(), "torch",
     {"xpu": "act-order not supported"}),
    (Platform.xpu(), _quant("gptq-int4"), _problem(activation_format="batched"), "torch",
     {"xpu": "batched activation format not supported"}),
    (Platform.xpu(), _quant("awq-int4"), _problem(), "torch",
     {"xpu": "scheme awq-int4 not supported (symmetric int4 GPTQ or compressed-tensors only)"}),
    (Platform.xpu(), _quant("gptq-int4"), _problem(activation="relu2"), "torch",
     {"xpu": "activation relu2 not supported"}),
    # (a group of 16 is no gptq-int4 variant: the Variant refuses it before any backend is
    # asked, tests/reference/test_variant.py)
]


@pytest.mark.parametrize(("platform", "quant", "problem", "chosen", "reasons"), SELECTIONS,
                         ids=[f"{p}-{q.describe()}-{c}" for p, q, _, c, _ in SELECTIONS])
def test_builtin_selection_and_reasons(platform, quant, problem, chosen, reasons):
    sel = select_backend(quant, problem, platform)
    assert sel.name == chosen
    assert sel.reasons == reasons


def test_a_shape_no_checkpoint_holds_is_refused_before_any_backend_is_asked(fakes):
    """N = 96 is no multiple of group 64: no checkpoint exists, so no backend is asked."""
    a, b = fakes
    with pytest.raises(NoBackendError) as info:
        select_backend(_quant("gptq-int4", group_size=64), _problem(N=96), Platform.xpu())
    assert info.value.no_checkpoint == ("group_size: expected a group size dividing w2's "
                                        "input dimension 96, found 64")
    assert f"no checkpoint of it can hold this problem ({info.value.no_checkpoint})" in str(
        info.value)
    assert info.value.reasons == {}
    assert a.seen_platforms == b.seen_platforms == []


@pytest.mark.parametrize(("backend", "quant", "problem", "platform", "reason"), [
    ("triton", _quant("bf16"), _problem(), Platform.cpu(),
     "platform cuda or rocm only (cpu needs TRITON_INTERPRET=1)"),
    ("triton", _quant("bf16"), _problem(), Platform.xpu(), "platform cuda or rocm only"),
    ("xpu", _quant("ct-int4", group_size=-1), _problem(K=2044), Platform.xpu(),
     "int4 packing needs K % 8 == 0 and N % 8 == 0"),
])
def test_reason_strings_outside_selection(backend, quant, problem, platform, reason):
    assert get_backend(backend).supports(quant, problem, platform=platform) == reason
