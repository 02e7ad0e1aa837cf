"""No 8-bit tensor on the way to W4A8's 16-bit dot (issue 44, round twelve). Triton gives both
operands of a dot the 8-bit register layout (kWidth 4) when a tensor feeding one of them has
8-bit elements, and the bf16 operand then loads without ldmatrix and is gathered by register
moves: W4A8's int8 activation codes did that to the int4 planes' decode tile, whose PTX
decode multiplies them in the compute dtype (470 SASS instructions a K step against
gptq-int4's 325; 344 with the codes quantized into the compute dtype; 1.06-1.13x faster
decode on an H200: docs/speed.md). Checked here under the interpreter: the values, the host's
choice, and that a launch handed codes in a dtype it does not multiply in converts them back
with the same bits. (AWQ's uint8 zero points do the same to its unswapped tiles, 433 against
344 instructions; in int16 its tuned swapped tiles ran 2-8% slower: not kept.)"""

from __future__ import annotations

import pytest
import torch
from _gemm import record_launches
from moecert.kernels.triton_moe.interpret import load_interpreted_kernels

load_interpreted_kernels()  # before the kernel modules are bound below

from moecert.kernels.triton_moe import configs, fused_moe, kinds, quant  # noqa: E402
from moecert.kernels.triton_moe.backend import TritonBackend  # noqa: E402
from moecert.reference import MoEProblem, make_inputs, synthesize  # noqa: E402

BACKEND = TritonBackend()

pytestmark = pytest.mark.usefixtures("interpreted")


def _layer(scheme: str, P: MoEProblem, **attrs):
    layer = BACKEND.create_layer(synthesize(scheme, P, seed=5, **attrs), P)
    BACKEND.process_weights_after_loading(layer)
    return layer


@pytest.mark.parametrize("mode", ["token", "tensor", "static"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_int8_codes_in_a_float_dtype_are_the_int8_codes(mode, dtype):
    torch.manual_seed(0)
    x = (torch.randn(5, 96) * 3).to(torch.bfloat16)
    given = torch.tensor([0.05]) if mode == "static" else None
    codes, scales = quant.quantize_int8(x, mode, given=given)
    wide, wide_scales = quant.quantize_int8(x, mode, given=given, dtype=dtype)
    assert codes.dtype == torch.int8 and wide.dtype == dtype
    assert codes.abs().max() > 64  # the codes span the range, not a few small values
    assert torch.equal(wide.to(torch.int8), codes) and torch.equal(wide_scales, scales)
    assert torch.equal(wide.to(torch.float32), codes.to(torch.float32))


@pytest.mark.parametrize("span, pairs, want", [
    (128, True, torch.bfloat16),  # a GPU's planes: the PTX decode multiplies in bf16
    (0, True, torch.int8),  # the checkpoint's nibble order: the int8 dot
    (128, False, torch.int8),  # no PTX decode here (MOECERT_TRITON_I4_PAIRS=0, a CPU)
])
def test_w4a8_codes_take_the_compute_dtype_only_where_the_planes_decode_runs(
        monkeypatch, span, pairs, want):
    from moecert.kernels.triton_moe import backend

    P = MoEProblem(M=4, K=256, N=128, E=4, topk=2)
    monkeypatch.setenv(configs.NIB_SPAN_ENV, str(span))
    layer = _layer("w4a8-int8", P)
    assert layer.meta["w13_nib_span"] == span
    monkeypatch.setattr(fused_moe, "int4_pairs_run_on", lambda device: pairs)
    for p in ("w13", "w2"):
        # the interpreter multiplies in fp32 (fused_moe.dot_mode): a GPU's native dot here
        w = {**backend._weights(layer, p), "dot": kinds.DOT_NATIVE}
        assert fused_moe.int8_codes_dtype(w, layer.device) == want
        assert fused_moe.int8_codes_dtype({**w, "kind": kinds.W_INT8}, layer.device) == torch.int8
    # the plan asks the same function, once per linear
    monkeypatch.setattr(fused_moe, "int8_codes_dtype", lambda w, device: torch.float16)
    layer.meta.pop("triton_plan", None)
    plan = backend._plan(layer)
    assert plan["w13_codes"] == plan["w2_codes"] == torch.float16


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_codes_in_a_dtype_the_launch_does_not_multiply_in_are_converted_with_the_same_bits(
        monkeypatch, dtype):
    """The plan may say bf16 codes (a GPU's planes) while a tile without FAST_I4, or this
    interpreter, multiplies int8 ones: moe_gemm converts them, and the output is the bits of
    int8 codes from the start."""
    from moecert.kernels.triton_moe import backend

    P = MoEProblem(M=8, K=256, N=128, E=4, topk=2, dtype=dtype)
    layer = _layer("w4a8-int8", P)
    x, w, ids = make_inputs(P, seed=6)
    # the activations' dtype and the ACT kind of each launch
    handed = record_launches(monkeypatch, lambda args, kw: (args[0].dtype, kw["ACT"]))
    want = BACKEND.apply(layer, x, w, ids, out=torch.empty_like(x))
    plan = backend._plan(layer)
    assert plan["w13_codes"] == torch.int8  # the interpreter multiplies int8 codes
    plan["w13_codes"] = plan["w2_codes"] = P.torch_dtype
    got = BACKEND.apply(layer, x, w, ids, out=torch.empty_like(x))
    assert want.abs().max() > 0
    assert len(handed) == 4 and set(handed) == {(torch.int8, kinds.A_INT8)}, handed
    assert torch.equal(got, want)


@pytest.mark.parametrize("scheme, attrs, words", [
    ("mxfp8", {}, True),
    ("mxfp6-e2m3", {}, True),  # held as e4m3 bytes: the same kernel
    ("mxfp8", {"activation": "mxfp8"}, False),  # MX activations: the dot is not bf16 x bf16
    ("fp8-w8a8", {}, False),
])
def test_e4m3_words_only_for_mxfp8_weights_with_16_bit_activations(monkeypatch, scheme, attrs,
                                                                   words):
    """gemm_kernel's E4M3_WORDS (MXFP8's weights read as 16-bit words of two columns and
    converted by the hardware, `_e4m3_words`): where the conversion runs (sm89+), for a
    native dot of 16-bit activations, unless MOECERT_TRITON_E4M3_WORDS=0."""
    from moecert.kernels.triton_moe import backend

    monkeypatch.setenv(configs.FP6_PLANES_ENV, "0")  # MXFP6 as the e4m3 bytes it widens to
    P = MoEProblem(M=4, K=256, N=128, E=4, topk=2)
    layer = _layer(scheme, P, **attrs)
    act = backend.activation_kind(layer.quant)
    w = {**backend._weights(layer, "w13"), "dot": kinds.DOT_NATIVE}
    device = layer.device
    monkeypatch.setattr(fused_moe, "e4m3_cvt_runs_on", lambda device: True)
    assert bool(fused_moe.e4m3_words(w, act, False, device)) is words
    assert not fused_moe.e4m3_words(w, act, True, device)  # an accumulating dot: not these tiles
    assert not fused_moe.e4m3_words({**w, "dot": kinds.DOT_IEEE}, act, False, device)
    monkeypatch.setenv(configs.E4M3_WORDS_ENV, "0")
    assert not fused_moe.e4m3_words(w, act, False, device)
    monkeypatch.setenv(configs.E4M3_WORDS_ENV, "1")
    assert bool(fused_moe.e4m3_words(w, act, False, device)) is words
    monkeypatch.setenv(configs.E4M3_WORDS_ENV, "yes")
    with pytest.raises(ValueError, match="MOECERT_TRITON_E4M3_WORDS"):
        fused_moe.e4m3_words(w, act, False, device)
    monkeypatch.delenv(configs.E4M3_WORDS_ENV)
    monkeypatch.setattr(fused_moe, "e4m3_cvt_runs_on", lambda device: False)  # before sm89
    assert not fused_moe.e4m3_words(w, act, False, device)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_e4m3_words_decode_times_the_scale_only_where_that_is_exact(monkeypatch, dtype):
    """Which E4M3_WORDS decode an MXFP8 layer's words get (round fourteen): from the bit
    fields times their E8M0 scale, so that a tile spans several scale blocks
    (E4M3_SCALED_WORDS: the config's BLOCK_K, not the 32 columns of one scale), in bf16
    only, for a layer without a NaN byte and with every E8M0 byte inside
    E8M0_WORDS_MIN..MAX; else the hardware conversion scaled per tile (E4M3_CVT_WORDS). The
    decodes' values are checked on a GPU (test_e4m3_words_cuda.py): the PTX does not run
    here."""
    from moecert.kernels.triton_moe import backend, gemm_kernel, heuristics

    P = MoEProblem(M=4, K=256, N=128, E=4, topk=2, dtype=dtype)
    layer = _layer("mxfp8", P)
    act = backend.activation_kind(layer.quant)
    monkeypatch.setattr(fused_moe, "e4m3_cvt_runs_on", lambda device: True)

    def words():
        w = {**backend._weights(layer, "w13"), "dot": kinds.DOT_NATIVE}
        mode = fused_moe.e4m3_words(w, act, False, layer.device)
        block_k = heuristics.weights_block_k(w, 128, P.K, act)
        assert block_k == (128 if mode == gemm_kernel.E4M3_SCALED_WORDS else 32), (mode, block_k)
        return mode

    scaled = (gemm_kernel.E4M3_SCALED_WORDS if dtype == "bf16"
              else gemm_kernel.E4M3_CVT_WORDS)
    assert words() == scaled
    q, s = layer.get("w13_w"), layer.get("w13_s")
    for byte in (gemm_kernel.E8M0_WORDS_MAX + 1,  # 2^(E - 7) past bf16's range
                 gemm_kernel.E8M0_WORDS_MIN - 1):  # a subnormal weight value
        s.view(torch.uint8)[0, 0, 0] = byte
        assert words() == gemm_kernel.E4M3_CVT_WORDS, byte
    s.view(torch.uint8)[0, 0, 0] = gemm_kernel.E8M0_WORDS_MIN
    assert words() == scaled
    for nan in (0x7F, 0xFF):  # e4m3fn's NaNs: the bit fields would read 480 and -480
        kept = int(q.view(torch.uint8)[1, 2, 3])
        q.view(torch.uint8)[1, 2, 3] = nan
        assert words() == gemm_kernel.E4M3_CVT_WORDS
        q.view(torch.uint8)[1, 2, 3] = kept
    assert words() == scaled


def test_e4m3_finite_reads_every_nan_byte():
    """`fused_moe.e4m3_finite`: 0x7F is the int8 view's largest byte and 0xFF the uint8
    view's, so two reductions find either NaN anywhere; every other byte passes."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    finite = codes[(codes != 0x7F) & (codes != 0xFF)]
    assert fused_moe.e4m3_finite(finite.view(torch.float8_e4m3fn))
    for nan in (0x7F, 0xFF):
        q = finite.clone()
        q[17] = nan
        assert not fused_moe.e4m3_finite(q.view(torch.float8_e4m3fn))
    assert not fused_moe.e4m3_finite(torch.empty(0, dtype=torch.float8_e4m3fn))


@pytest.mark.parametrize("scheme", ["mxfp6-e2m3", "mxfp6-e3m2"])
def test_fp6_planes_only_where_their_decode_is_exact(monkeypatch, scheme):
    """MXFP6 in six-bit planes (round fifteen, MOECERT_TRITON_FP6_PLANES=1): a bf16 layer whose
    linears' K are whole spans and whose E8M0 bytes all lie in the element's
    e8m0_words_range; then no e4m3 words (there are none), BLOCK_K the span whatever the
    tile says, its own config key reading MXFP8's tiles until tuned. Else, unset and with
    MOECERT_TRITON_FP6_PLANES=0, the e4m3 bytes."""
    from moecert.kernels.triton_moe import backend, gemm_kernel, heuristics, layout
    from moecert.reference.schemes import ELEMENTS

    el = ELEMENTS[scheme.removeprefix("mxfp6-")]
    monkeypatch.setattr(fused_moe, "e4m3_cvt_runs_on", lambda device: True)

    def planes(P, **env):
        with monkeypatch.context() as m:
            for name, value in env.items():
                m.setenv(name, value)
            ckpt = synthesize(scheme, P, seed=5)
            layer = BACKEND.create_layer(ckpt, P)
            BACKEND.process_weights_after_loading(layer)
        return ckpt, layer, "six-bit planes" in BACKEND.describe(layer)

    P = MoEProblem(M=4, K=256, N=128, E=4, topk=2)
    assert not planes(P)[2]  # a candidate: off unless asked for
    monkeypatch.setenv(configs.FP6_PLANES_ENV, "1")
    ckpt, layer, on = planes(P)
    assert on and layer.get("w13_w").shape == (4, 256, 192)
    act = backend.activation_kind(layer.quant)
    w = {**backend._weights(layer, "w13"), "dot": kinds.DOT_NATIVE}
    assert w["constexprs"]["FP6_EXP"] == el.exp_bits and not w["e4m3_scaled"]
    assert fused_moe.e4m3_words(w, act, False, layer.device) == gemm_kernel.E4M3_BYTES
    for config_k in (64, 256):
        assert heuristics.weights_block_k(w, config_k, P.K, act) == layout.FP6_SPAN
    assert heuristics.weight_key(w) == "W_MXFP8_FP6"
    assert heuristics.KEY_FALLBACK["W_MXFP8_FP6"] == "W_MXFP8"
    assert not planes(P, **{configs.FP6_PLANES_ENV: "0"})[2]
    assert not planes(MoEProblem(M=4, K=256, N=128, E=4, topk=2, dtype="fp16"))[2]
    assert not planes(MoEProblem(M=4, K=192, N=128, E=4, topk=2))[2]  # w13's K: 1.5 spans
    # one E8M0 byte just outside the element's range, then just inside
    lo, hi = gemm_kernel.e8m0_words_range(el.name)
    name = next(n for n in ckpt.tensors if "w2" in n and "scale" in n)
    for byte, fits in ((lo - 1, False), (hi + 1, False), (lo, True), (hi, True)):
        scales = ckpt.tensors[name]
        kept = int(scales.view(torch.uint8).flatten()[5])
        scales.view(torch.uint8).flatten()[5] = byte
        layer = BACKEND.create_layer(ckpt, P)
        BACKEND.process_weights_after_loading(layer)
        assert ("six-bit planes" in BACKEND.describe(layer)) == fits, byte
        scales.view(torch.uint8).flatten()[5] = kept


@pytest.mark.parametrize(("scheme", "env", "pinned"), [
    ("gptq-int4", {configs.NIB_SPAN_ENV: "128"}, True),  # int4 nibble planes
    ("mxfp6-e2m3", {configs.FP6_PLANES_ENV: "1"}, True),  # six-bit planes
    ("mxfp6-e2m3", {}, False),  # e4m3 bytes: BLOCK_K is the tile's choice
    ("bf16", {}, False),
], ids=["int4-planes", "fp6-planes", "fp6-bytes", "bf16"])
def test_the_tuner_climbs_block_k_only_where_it_is_a_choice(monkeypatch, scheme, env, pinned):
    """Planes fix BLOCK_K to their span (heuristics.weights_block_k), so the tuner's grid for
    such a GEMM holds the start's BLOCK_K alone (LayerStage.weight_choices): its neighbours in
    BLOCK_K would time the same kernel again."""
    from moecert.kernels.triton_moe import tune, tune_stages

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    P = MoEProblem(M=4, K=256, N=128, E=4, topk=2)
    layer = _layer(scheme, P, **({"group_size": 128} if scheme == "gptq-int4" else {}))
    x, w, ids = make_inputs(P, seed=2)
    stage = tune_stages.LayerStage(layer, x, w, ids)
    for g in (1, 2):
        start = {**stage.defaults[g - 1], "BLOCK_K": 64}
        assert bool(stage.weights(g, start)["constexprs"]["NIB_SPAN"]) == pinned
        grid = tune._gemm_grid(stage, g, start, tune.GRID, None)
        assert grid["BLOCK_K"] == ((64,) if pinned else tune.GRID["BLOCK_K"]), (g, grid)
