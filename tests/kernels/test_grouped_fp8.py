"""GroupedBackend's FP8 row-wise path (kernels/grouped.py, torch._scaled_grouped_mm).

torch has no CPU kernel for torch._scaled_grouped_mm, so the CPU tests put a float64 emulation
of its documented semantics (with its documented operand checks) in the backend's one call,
`grouped.scaled_grouped_mm`, and check everything around it: the claims and reasons, the
weight operands and their per-channel scales, bit for bit the reference on the exact tier's
structured inputs, and the torch backend's output on random ones; planted bugs (w1 / w3
scales swapped, one scale where one per token is due, scales for the wrong rows) fail them.
The CUDA tests run the real kernel (sm90; they skip elsewhere).
"""

from __future__ import annotations

import pytest
import torch
from moecert.conformance.harness.cases import Case
from moecert.conformance.harness.exact import structured_inputs
from moecert.conformance.harness.execute import run_case
from moecert.kernels import get_backend, grouped
from moecert.kernels.layer import MoELayer
from moecert.kernels.platform import Platform
from moecert.kernels.quant_config import Variant
from moecert.reference import MoEProblem, moe, random_checkpoint, synthesize

BACKEND = get_backend("grouped")
TORCH = get_backend("torch")
SM90 = Platform.cuda((9, 0))
# K off 16: w2's rows and w13's columns padded
BASE = {"M": 33, "K": 72, "N": 40, "E": 4, "topk": 2}
ROWWISE = [("channel", "dynamic-token"), ("tensor", "static-tensor"),
           ("channel", "static-tensor"), ("tensor", "dynamic-token")]
# The largest relative difference of an output row (`_worst_row`) to the torch backend under
# the emulation. The two share the quantizers and weights; they differ where this backend
# rounds each assignment's y to bf16 before the top-k sum (2^-9 relative per assignment; none
# with top-k 1 or batched) and where the float32 and float64 sums of h straddle a bf16
# midpoint, which moves q2's e4m3 codes by a step (rare on the CPU). Measured over
# RANDOM_CASES: 0 to 0.0042 (Frobenius over the whole output: 0 to 0.0042); the planted bugs
# below give 0.57 and more (Frobenius: 0.010 to 0.99, too close for one scale per tensor,
# whose harm is in the small rows).
CPU_BOUND = 2.0**-6


pytestmark = pytest.mark.usefixtures("one_thread")


def emulated_scaled_grouped_mm(a, b, scale_a, scale_b, offs):
    """torch._scaled_grouped_mm's 2D x 3D row-wise semantics (kernels/grouped.py's docstring
    cites them) in float64, after its operand checks: each row's e4m3 products summed
    exactly, times scale_a[row] and scale_b[group] in float32, rounded to bf16."""
    assert a.dtype == b.dtype == torch.float8_e4m3fn, (a.dtype, b.dtype)
    assert a.dim() == 2 and a.stride(1) == 1 and a.stride(0) % 16 == 0, "A row-major"
    assert b.dim() == 3 and b.stride(1) == 1 and b.stride(2) % 16 == 0, "B column-major"
    assert a.shape[1] == b.shape[1] and a.shape[1] % 16 == 0 and b.shape[2] % 16 == 0
    assert scale_a.dtype == scale_b.dtype == torch.float32
    assert scale_a.shape == (a.shape[0],) and scale_a.is_contiguous()
    assert scale_b.shape == (b.shape[0], b.shape[2]) and scale_b.stride(1) == 1
    assert offs.dtype == torch.int32 and offs.shape == (b.shape[0],) and b.shape[0] < 1024
    ends = offs.tolist()
    assert ends == sorted(ends) and ends[-1] <= a.shape[0], ends
    # rows past offs[-1] are ignored and their output rows never written: NaN here, so that
    # a caller reading them shows
    out = torch.full((a.shape[0], b.shape[2]), torch.nan, dtype=torch.float32,
                     device=a.device)
    start = 0
    for g, end in enumerate(ends):
        acc = (a[start:end].double() @ b[g].double()).to(torch.float32)
        out[start:end] = acc * scale_a[start:end, None] * scale_b[g]
        start = end
    return out.to(torch.bfloat16)


@pytest.fixture
def emulated(monkeypatch):
    monkeypatch.setattr(grouped, "scaled_grouped_mm", emulated_scaled_grouped_mm)


def _q(strategy: str = "block", activation: str = "dynamic-group", scheme: str = "fp8-w8a8",
       **kw) -> Variant:
    return Variant(**{**Variant.defaults(scheme).__dict__,
                          "weight_strategy": strategy, "activation": activation, **kw})


def _grouped_layer(ckpt, P: MoEProblem) -> MoELayer:
    """The backend's processed layer, built past create_layer's claims (which decline FP8 on
    a platform without the kernel: the emulation stands in for it)."""
    layer = MoELayer(BACKEND.name, Variant.of(ckpt), P, ckpt.tensors["w13_weight"].device)
    BACKEND.load_weights(layer, ckpt)
    BACKEND.process_weights_after_loading(layer)
    return layer


def _inputs(P: MoEProblem, seed: int, device="cpu"):
    """x with rows 2^-6 to 2^6 apart (a per-token scale matters), distinct experts per token,
    router weights in (0, 1); batched: every expert's rows, counts below the capacity."""
    gen = torch.Generator(device=device).manual_seed(seed)
    if P.activation_format == "batched":
        T = P.M
        x = torch.randn(P.E, T, P.K, generator=gen, device=device)
        x *= 2.0 ** torch.randint(-6, 7, (P.E, T, 1), generator=gen, device=device)
        counts = torch.randint(1, T + 1, (P.E,), generator=gen, device=device)
        return x.to(P.torch_dtype), None, None, {"expert_num_tokens": counts.to(torch.int32)}
    x = torch.randn(P.M, P.K, generator=gen, device=device)
    x *= 2.0 ** torch.randint(-6, 7, (P.M, 1), generator=gen, device=device)
    ids = torch.rand(P.M, P.global_num_experts, generator=gen, device=device).argsort(1)
    weights = torch.rand(P.M, P.topk, generator=gen, device=device)
    return x.to(P.torch_dtype), weights, ids[:, :P.topk].contiguous(), {}


def _both(ckpt, P: MoEProblem, seed: int = 0):
    """(this backend's output, the torch backend's) on random inputs, float64."""
    x, w, ids, opts = _inputs(P, seed, ckpt.tensors["w13_weight"].device)
    layer = _grouped_layer(ckpt, P)
    ref = TORCH.create_layer(ckpt, P)
    TORCH.process_weights_after_loading(ref)
    return (BACKEND.apply(layer, x, w, ids, **opts).double(),
            TORCH.apply(ref, x, w, ids, **opts).double())


def _rel(out: torch.Tensor, want: torch.Tensor) -> float:
    return float((out - want).norm() / want.norm())


def _worst_row(out: torch.Tensor, want: torch.Tensor) -> float:
    """The largest relative difference of one output row (a token; batched: an expert's
    row): rows 2^12 apart in size each count, not only the largest."""
    d = (out - want).flatten(0, -2).norm(dim=-1)
    n = want.flatten(0, -2).norm(dim=-1)
    return float((d / n.clamp(min=torch.finfo(torch.float64).tiny))[n > 0].max())


def _checkpoint(strategy: str, activation: str, P: MoEProblem, seed: int = 1):
    """A synthesized checkpoint whose w3 shard (per-tensor) or w3 rows (per-channel) carry 3x
    the w1 scales' size, so that swapping the halves' scales is never a near no-op."""
    ckpt = synthesize("fp8-w8a8", P, seed=seed, weight_strategy=strategy,
                      activation=activation)
    s = ckpt.tensors["w13_weight_scale"]
    if strategy == "tensor":
        s[:, 1] *= 3
    else:
        s[:, P.w13_rows // 2:] *= 3
    return ckpt


RANDOM_CASES = [(s, a, o) for s, a in ROWWISE for o in ({},)] + [
    ("channel", "dynamic-token", {"activation_format": "batched", "activation": "relu2"}),
    ("tensor", "static-tensor", {"expert_map": (0, -1, 1, -1, 2, 3), "activation": "gelu"}),
    ("channel", "dynamic-token", {"topk": 1, "apply_router_weight_on_input": True,
                                  "activation": "swigluoai"}),
    ("tensor", "dynamic-token", {"K": 64, "N": 32, "E": 8, "topk": 4}),  # nothing padded
]


@pytest.mark.parametrize("strategy, activation, options", [
    pytest.param(s, a, o, id=f"{s}-{a}-{i}") for i, (s, a, o) in enumerate(RANDOM_CASES)])
def test_emulated_matches_torch_backend(emulated, strategy, activation, options):
    P = MoEProblem(**{**BASE, **options})
    assert BACKEND.supports(_q(strategy, activation), P, SM90) is None
    out, want = _both(_checkpoint(strategy, activation, P), P)
    assert _worst_row(out, want) <= CPU_BOUND


@pytest.mark.parametrize("strategy", ["channel", "tensor"])
def test_structured_inputs_bit_for_bit(emulated, strategy):
    """The exact tier's structure (static-tensor e4m3: the one it builds) with power-of-two
    scales that differ between w1 and w3 rows: any scale in a wrong slot changes bits."""
    P = MoEProblem(M=9, K=64, N=32, E=4, topk=2)
    case = Case("grouped", Variant("fp8-w8a8", weight_strategy=strategy,
                                   activation="static-tensor"), P, seed=3)
    s = structured_inputs(case)
    out = BACKEND.apply(_grouped_layer(s.checkpoint, P), s.x, s.topk_weights, s.topk_ids)
    want = moe(s.checkpoint, s.x, s.topk_weights, s.topk_ids, P).to(P.torch_dtype)
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))


@pytest.mark.parametrize("strategy, activation, options", [
    ("channel", "dynamic-token", {}),
    ("tensor", "static-tensor", {"activation_format": "batched"}),  # exact tier included
])
def test_every_harness_check_under_emulation(emulated, monkeypatch, strategy, activation,
                                             options):
    """The harness's own checks (accuracy, determinism, token order, reload, canonical, exact,
    ...) on the emulated kernel, the claims asked as on an sm90 GPU."""
    real = grouped.scaled_claims
    monkeypatch.setattr(grouped, "scaled_claims", lambda q, P, platform: real(q, P, SM90))
    P = MoEProblem(**{"M": 17, "K": 128, "N": 128, "E": 4, "topk": 2, **options})
    rows = run_case(Case("grouped", Variant("fp8-w8a8", weight_strategy=strategy,
                                            activation=activation), P, seed=5))
    ran = {r["check"]: r["status"] for r in rows if r["status"] != "skip"}
    assert {"accuracy", "determinism", "canonical", "reload"} <= set(ran), ran
    assert set(ran.values()) == {"pass"}, rows


@pytest.mark.parametrize("strategy, activation, options", [
    pytest.param(s, a, o, id=f"{s}-{a}-{i}") for i, (s, a, o) in enumerate(RANDOM_CASES[4:7])])
def test_forward_never_syncs_with_the_host(host_sync_guard, monkeypatch, strategy, activation,
                                           options):
    """The FP8 forward under the guard of tests/kernels/conftest.py (the CPU's stand-in for a
    CUDA graph capture), the emulated GEMM let through as the device kernel it stands for;
    the same bits as unguarded."""
    def device_kernel(*args):
        with host_sync_guard.paused():
            return emulated_scaled_grouped_mm(*args)

    monkeypatch.setattr(grouped, "scaled_grouped_mm", device_kernel)
    P = MoEProblem(**{**BASE, **options})
    layer = _grouped_layer(_checkpoint(strategy, activation, P), P)
    x, w, ids, opts = _inputs(P, seed=2)
    counts = opts.get("expert_num_tokens")
    want = BACKEND.apply(layer, x, w, ids, **opts)
    out = torch.full_like(want, torch.nan)
    with host_sync_guard.armed():
        BACKEND.forward(layer, x, w, ids, out, counts)
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))


# --- planted bugs: the checks above must catch each -------------------------------------

def _swap_w13_scale_halves(real):
    def swapped(layer, p):
        w, scale = real(layer, p)
        if p == "w13":
            half = layer.problem.w13_rows // 2
            scale = torch.cat([scale[:, half:2 * half], scale[:, :half], scale[:, 2 * half:]], 1)
        return w, scale
    return swapped


def _one_scale_for_all_rows(real):
    def per_tensor(t, mode, static_scale, element):
        codes, scale = real(t, mode, static_scale, element)
        top = scale.max() if scale.numel() else scale.new_ones(())
        q = (codes * scale[:, None] / top).clamp(-448, 448).to(torch.float8_e4m3fn)
        return q.to(torch.float32), top.expand_as(scale).contiguous()
    return per_tensor


def _scales_of_the_wrong_rows(a, b, scale_a, scale_b, offs):
    return emulated_scaled_grouped_mm(a, b, scale_a.roll(1), scale_b, offs)


@pytest.mark.parametrize("strategy, activation, plant", [
    ("tensor", "static-tensor", "swap w1/w3 scales"),
    ("channel", "dynamic-token", "swap w1/w3 scales"),
    ("channel", "dynamic-token", "one scale for every token"),
    ("tensor", "dynamic-token", "scales of the wrong rows"),
])
def test_planted_bugs_are_caught(emulated, monkeypatch, strategy, activation, plant):
    P = MoEProblem(**BASE)
    if plant == "swap w1/w3 scales":
        monkeypatch.setattr(grouped, "scaled_gemm_weight",
                            _swap_w13_scale_halves(grouped.scaled_gemm_weight))
    elif plant == "one scale for every token":
        monkeypatch.setattr(grouped, "quantize_rows",
                            _one_scale_for_all_rows(grouped.quantize_rows))
    else:
        monkeypatch.setattr(grouped, "scaled_grouped_mm", _scales_of_the_wrong_rows)
    out, want = _both(_checkpoint(strategy, activation, P), P)
    assert _worst_row(out, want) > CPU_BOUND


def test_structured_inputs_catch_swapped_scales(emulated, monkeypatch):
    monkeypatch.setattr(grouped, "scaled_gemm_weight",
                        _swap_w13_scale_halves(grouped.scaled_gemm_weight))
    with pytest.raises(AssertionError):
        test_structured_inputs_bit_for_bit(None, "tensor")


# --- weights, claims --------------------------------------------------------------------

@pytest.mark.parametrize("strategy", ["channel", "tensor"])
def test_weight_operands(strategy):
    """One scale per output channel (per-tensor: the shard's on each of its rows), padding
    rows and columns zero with scale 1; the e4m3 codes are the checkpoint's."""
    P = MoEProblem(**BASE)
    ckpt = _checkpoint(strategy, "dynamic-token", P)
    layer = _grouped_layer(ckpt, P)
    for p, (n_out, n_in) in (("w13", (P.w13_rows, P.K)), ("w2", (P.K, P.N))):
        w, scale = grouped.scaled_gemm_weight(layer, p)
        assert w.dtype == torch.float8_e4m3fn and w.shape[1] % 16 == 0 and w.shape[2] % 16 == 0
        assert scale.dtype == torch.float32 and scale.shape == w.shape[:2]
        stored = ckpt.tensors[f"{p}_weight"]
        assert torch.equal(w[:, :n_out, :n_in].view(torch.uint8), stored.view(torch.uint8))
        assert not w[:, n_out:].view(torch.uint8).any() and not w[:, :, n_in:].view(
            torch.uint8).any()
        s = ckpt.tensors[f"{p}_weight_scale"].float()
        if strategy == "channel":
            want = s.view(P.E, n_out)
        elif s.dim() == 2:  # w1 / w3 shard scales
            want = s.repeat_interleave(n_out // 2, dim=1)
        else:
            want = s.view(P.E, 1).expand(P.E, n_out)
        assert torch.equal(scale[:, :n_out], want)
        assert bool((scale[:, n_out:] == 1).all())
    w13_scale = grouped.scaled_gemm_weight(layer, "w13")[1]
    assert not torch.equal(w13_scale[:, :P.N], w13_scale[:, P.N:2 * P.N])  # distinct halves


def test_claims_the_rowwise_combinations_on_sm90_only():
    P = MoEProblem(**BASE)
    for strategy, activation in ROWWISE:
        q = _q(strategy, activation)
        assert BACKEND.supports(q, P, SM90) is None
        for platform in (Platform.cpu(), Platform.cuda((10, 0)), Platform.cuda((8, 9)),
                         Platform.rocm("gfx942"), Platform.xpu()):
            why = BACKEND.supports(q, P, platform)
            assert why is not None and "sm90 only" in why and str(platform) in why, why
    assert "no CPU kernel" in BACKEND.supports(_q("channel", "dynamic-token"), P,
                                               Platform.cpu())


@pytest.mark.parametrize("q, options, reason", [
    (_q("block", "dynamic-group"), {}, "activation quantization dynamic-group not supported"),
    (_q("channel", "dynamic-group"), {}, "dynamic-token or static-tensor activations"),
    (_q("block", "dynamic-token"), {}, "weight_strategy block not supported"),
    (_q("block", "static-tensor"), {}, "channel or tensor weight scales"),
    (_q("channel", "dynamic-token", scheme="int8-w8a8"), {}, "no int8 grouped GEMM"),
    (_q("tensor", "static-tensor", scheme="int8-w8a8"), {}, "no int8 grouped GEMM"),
    (_q("channel", "dynamic-token"), {"dtype": "fp16"}, "writes bf16 only"),
    (_q("tensor", "static-tensor"), {"bias": True}, "bias not supported"),
    (_q("channel", "dynamic-token"), {"E": 1024}, "at most 1023 groups"),
])
def test_declines_what_is_not_rowwise(q, options, reason):
    why = BACKEND.supports(q, MoEProblem(**{**BASE, **options}), SM90)
    assert why is not None and reason in why and "torch._scaled_grouped_mm" in why, why


# --- the real kernel --------------------------------------------------------------------

def _cuda_sm90() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA device"
    if not hasattr(torch, "_scaled_grouped_mm"):
        return f"torch {torch.__version__} has no torch._scaled_grouped_mm"
    cap = torch.cuda.get_device_capability(0)
    return None if cap == (9, 0) else f"torch._scaled_grouped_mm's kernel is sm90; this is {cap}"


needs_sm90 = pytest.mark.skipif(_cuda_sm90() is not None, reason=_cuda_sm90() or "")
# Mixtral-8x7B's layer at M = 1024, a Qwen3-30B-A3B-like one (E = 128, topk 8), a small one
# whose K and N need padding
CUDA_SHAPES = {
    "mixtral-M1024": {"M": 1024, "K": 4096, "N": 14336, "E": 8, "topk": 2},
    "qwen3-M256": {"M": 256, "K": 2048, "N": 768, "E": 128, "topk": 8},
    "small-padded": {"M": 77, "K": 200, "N": 104, "E": 6, "topk": 3},
}


@needs_sm90
@pytest.mark.parametrize("shape", list(CUDA_SHAPES))
def test_cuda_gemm_against_its_emulation(shape):
    """The real kernel against the float64 emulation, both GEMMs' shapes with uneven groups
    (one empty): per element within one bf16 ulp of the emulation's value (its output
    rounding) plus 2^-12 of sum |a_k b_k| * scales (float32 accumulation, and the FP8 MMA's
    narrower partial sums promoted every few k-blocks: DeepSeek-V3's report measures ~14
    bits), and in Frobenius norm within 2^-8."""
    S = CUDA_SHAPES[shape]
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows, E = S["M"] * S["topk"], S["E"]
    cut = torch.sort(torch.randint(0, rows + 1, (E - 1,), generator=gen, device="cuda")).values
    cut[0] = cut[1] if E > 2 else cut[0]  # an empty group
    offs = torch.cat([cut, torch.tensor([rows], device="cuda")]).to(torch.int32)
    for k, n in ((S["K"], 2 * S["N"]), (S["N"], S["K"])):
        k, n = -(-k // 16) * 16, -(-n // 16) * 16
        a = torch.randn(rows, k, generator=gen, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(E, n, k, generator=gen, device="cuda").to(torch.float8_e4m3fn)
        sa = torch.rand(rows, generator=gen, device="cuda") + 0.5
        sb = (torch.rand(E, n, generator=gen, device="cuda") + 0.5) / k**0.5
        out = grouped.scaled_grouped_mm(a, b.transpose(1, 2), sa, sb, offs).double()
        want = emulated_scaled_grouped_mm(a, b.transpose(1, 2), sa, sb, offs).double()
        mass = torch.empty_like(want)
        start = 0
        for g, end in enumerate(offs.tolist()):
            mass[start:end] = a[start:end].double().abs() @ b[g].double().abs().T
            start = end
        mass *= sa.double()[:, None]
        ulp = 2.0 ** (torch.frexp(want.abs().clamp(min=2.0**-126))[1].double() - 8)
        sb_rows = torch.repeat_interleave(sb.double(), torch.diff(offs, prepend=offs.new_zeros(
            1)).long(), dim=0)
        allowed = ulp + 2.0**-12 * mass * sb_rows
        excess = ((out - want).abs() - allowed).max().item()
        rel = _rel(out, want)
        print(f"{shape} k={k} n={n}: rel_fro {rel:.3g}, worst excess over the bound {excess:.3g}")
        assert excess <= 0 and rel <= 2.0**-8, (rel, excess)


@needs_sm90
@pytest.mark.parametrize("strategy, activation", ROWWISE[:2])
@pytest.mark.parametrize("shape", list(CUDA_SHAPES))
def test_cuda_backend_against_torch_backend(shape, strategy, activation):
    """The layer on the real kernel against the torch backend (float32 GEMMs of the same
    dequantized values, TF32 off). They share q1's codes; they differ by y's bf16 rounding
    before the top-k sum (<= 2^-9 relative), by h's bf16 rounding where the two float32
    accumulations straddle a midpoint, and by q2's e4m3 codes such an h moves one step
    (2^-3 relative; an h moved by one bf16 ulp, 2^-8, moves its code with probability
    ~2^-8 / 2^-3). Even with every h one ulp off, the rms of those code moves is
    sqrt(2^-8 * 2^-3) ~ 2^-5.5 of a: the bound is 2^-5 in Frobenius norm. A plumbing bug
    (wrong scale slot or rows) is of order 1."""
    P = MoEProblem(**CUDA_SHAPES[shape])
    assert BACKEND.supports(_q(strategy, activation), P) is None
    ckpt = random_checkpoint("fp8-w8a8", P, seed=1, device="cuda", weight_strategy=strategy,
                             activation=activation)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        out, want = _both(ckpt, P)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    rel = _rel(out, want)
    print(f"{shape} {strategy} {activation}: to the torch backend rel_fro {rel:.3g}, worst "
          f"row {_worst_row(out, want):.3g}")
    assert rel <= 2.0**-5
