"""The transformers backends (issue 36): the adapter's glue without transformers (import
guard, the model folder it writes, the declared reading), and transformers' own layer where
transformers is importable (the main test environment has none: those tests skip there;
`tox -e transformers` runs them)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from moecert.conformance.harness import numerics as harness_numerics
from moecert.conformance.harness.cases import Case
from moecert.conformance.harness.execute import run_cases
from moecert.conformance.harness.suites import build_model_suite, build_suite
from moecert.kernels import Variant
from moecert.kernels.transformers_engine import backend as tb
from moecert.kernels.transformers_engine import folder, one_layer
from moecert.kernels.vllm_checkpoint import quantization_config
from moecert.reference import MoEProblem, load_checkpoint, moe, synthesize
from safetensors.torch import load_file

SMALL = MoEProblem(M=5, K=128, N=128, E=3, topk=2)
# what the eager experts declare besides (their bf16 index_add_ of the routed sum)
EAGER_SUM = {"sum_in_activation_dtype": True}


def _summed(backend, declared: dict) -> dict:
    return {**declared, **EAGER_SUM} if backend.implementation == "eager" else declared
BACKENDS = [tb.TransformersBackend(), tb.TransformersGroupedMmBackend(),
            tb.TransformersBatchedMmBackend()]


@pytest.fixture
def no_transformers(monkeypatch):
    """transformers' import failing, whether or not it is installed."""
    def missing():
        raise ImportError("No module named 'transformers'")
    monkeypatch.setattr(tb, "_transformers", missing)
    tb._import_error.cache_clear()
    yield
    tb._import_error.cache_clear()


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_without_transformers_available_and_supports_say_why(no_transformers, backend):
    why = backend.available()
    assert why is not None and "transformers is not importable" in why
    assert backend.supports(Variant.of("bf16"), SMALL) == why
    assert backend.version.startswith("transformers - (")


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


@pytest.mark.parametrize("scheme,attrs", [("bf16", {}),
                                          ("fp8-w8a16", {"weight_strategy": "block"}),
                                          ("ct-int4", {"group_size": 32})])
def test_folder_holds_the_checkpoint_per_expert_with_the_producers_config(tmp_path, scheme,
                                                                         attrs):
    ckpt = synthesize(scheme, SMALL, seed=2, **attrs)
    before = {n: _bits(t).clone() for n, t in ckpt.tensors.items()}
    quant = Variant.of(ckpt)
    folder.write(tmp_path, quant, ckpt.tensors, SMALL)
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["hidden_size"], config["moe_intermediate_size"], config["num_experts"],
            config["num_experts_per_tok"]) == (SMALL.K, SMALL.N, SMALL.E, SMALL.topk)
    table = quantization_config(quant)
    if table is None:
        assert "quantization_config" not in config
    else:  # the producer's config, plus the exclusion of the model's other modules
        qc = config["quantization_config"]
        assert {k: v for k, v in qc.items() if k in table and k != "ignore"} == \
            {k: v for k, v in table.items() if k != "ignore"}
        assert quantization_config(quant) == table  # the table's dict is not modified
    files = load_file(str(tmp_path / "model.safetensors"))
    weight = "weight_packed" if quant.layout == "ct" else "weight"
    w13 = ckpt.tensors[f"w13_{weight}"]
    for e in range(SMALL.E):
        gate = files[f"{folder.PREFIX}.{e}.gate_proj.{weight}"]
        up = files[f"{folder.PREFIX}.{e}.up_proj.{weight}"]
        assert torch.equal(_bits(torch.cat([gate, up])), _bits(w13[e]))
    for n, t in ckpt.tensors.items():  # the checkpoint is never modified
        assert torch.equal(_bits(t), before[n])


class _Declares:
    def __init__(self, d):
        self.d = d

    def numerics(self, layer):
        return dict(self.d)


def test_weights_dequantized_reading_is_the_unquantized_scheme_on_rounded_weights():
    ckpt = synthesize("fp8-w8a16", SMALL, seed=4, weight_strategy="block")
    decl = harness_numerics.declared(_Declares({"weights_dequantized": "bfloat16"}), None)
    assert harness_numerics.reading_scheme(ckpt, decl) == ("bf16", "none")
    read = harness_numerics.reading(ckpt, decl)
    assert read.scheme == "bf16" and read.tensors["w13_weight"].dtype == torch.bfloat16
    g = torch.Generator().manual_seed(0)
    x = torch.randn(SMALL.M, SMALL.K, generator=g).bfloat16()
    ids = torch.randint(0, SMALL.E, (SMALL.M, SMALL.topk), generator=g)
    w = torch.rand(SMALL.M, SMALL.topk, generator=g)
    # the reading differs from the checkpoint by the bf16 rounding of the weights only
    a, b = moe(read, x, w, ids, SMALL), moe(ckpt, x, w, ids, SMALL)
    rel = ((a - b).norm() / b.norm()).item()
    assert 0 < rel < 1e-2
    # an unquantized checkpoint of that dtype reads as itself; bad declarations are refused
    bf16 = synthesize("bf16", SMALL, seed=4)
    assert harness_numerics.reading(bf16, decl) is bf16
    with pytest.raises(harness_numerics.NumericsError, match="weights_dequantized"):
        harness_numerics.declared(_Declares({"weights_dequantized": "float32"}), None)
    with pytest.raises(harness_numerics.NumericsError, match="contradicts"):
        harness_numerics.declared(_Declares({"weights_dequantized": "bfloat16",
                                             "activation": "dynamic-token"}), None)


# --- transformers itself ---------------------------------------------------------------------

needs_transformers = pytest.mark.skipif(tb._import_error() is not None,
                                        reason="needs transformers (tox -e transformers)")


def _inputs(P):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(P.M, P.K, generator=g).to(P.torch_dtype)
    ids = torch.randint(0, P.E, (P.M, P.topk), generator=g)
    w = torch.rand(P.M, P.topk, generator=g)
    return x, w, ids


@needs_transformers
@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_bf16_layer_is_transformers_experts_module(backend):
    ckpt = synthesize("bf16", SMALL, seed=1)
    layer = backend.create_layer(ckpt, SMALL)
    backend.process_weights_after_loading(layer)
    assert type(layer.experts).__name__ == "Qwen3MoeExperts"
    assert f"({backend.implementation})" in backend.describe(layer)
    assert backend.numerics(layer) == _summed(backend, {})
    x, w, ids = _inputs(SMALL)
    got = backend.apply(layer, x, w, ids).double()
    want = moe(ckpt, x, w, ids, SMALL)
    assert ((got - want).norm() / want.norm()).item() < 1e-2


@needs_transformers
def test_fp8_block_layer_declares_what_the_quantizer_made_of_it():
    backend = tb.TransformersBackend()
    ckpt = synthesize("fp8-w8a8", SMALL, seed=1)  # DeepSeek-V3 fp8 blocks: FineGrainedFP8
    layer = backend.create_layer(ckpt, SMALL)
    # on a CPU the quantizer dequantizes at load: bf16 weights, declared
    assert "FineGrainedFP8HfQuantizer(dequantize)" in backend.describe(layer)
    # the file's dynamic fp8 activations are not quantized by the unquantized layer: declared
    assert backend.numerics(layer) == {"weights_dequantized": "bfloat16", "activation": "none",
                                       **EAGER_SUM}


@needs_transformers
def test_fp16_checkpoint_in_a_bf16_model_declares_the_cast():
    backend = tb.TransformersBackend()
    layer = backend.create_layer(synthesize("fp16", SMALL, seed=1), SMALL)
    assert backend.numerics(layer) == {"weights_dequantized": "bfloat16", **EAGER_SUM}


@needs_transformers
def test_claims_are_transformers_refusals_or_the_adapters_limits():
    b = tb.TransformersBackend()
    assert b.supports(Variant.of("bf16"), SMALL) is None
    awq = Variant("awq-int4", group_size=128, sym=False, checkpoint_format="awq")
    why = b.supports(awq, SMALL)
    assert why.startswith("transformers 5.") and "refuses it" in why
    biased = MoEProblem(M=1, K=128, N=128, E=3, topk=2, bias=True)
    assert "bias" in b.supports(Variant.of("bf16"), biased)
    # gpt-oss: swigluoai with biases, in its release's formats
    oss = MoEProblem(M=1, K=128, N=128, E=3, topk=2, bias=True, activation="swigluoai")
    mxfp4 = Variant.of(synthesize("mxfp4", oss, seed=0))
    assert b.supports(mxfp4, oss) is None and b.supports(Variant.of("bf16"), oss) is None
    assert "(GptOssExperts) always adds" in b.supports(mxfp4, replace(oss, bias=False))
    assert "a silu case has no such file" in b.supports(mxfp4, replace(oss, activation="silu",
                                                                        bias=False))
    assert "formats of its release" in b.supports(Variant.of("ct-int4"), oss)
    block = Variant("fp8-w8a8", weight_strategy="block", activation="dynamic-group")
    assert "not a multiple of 128" in b.supports(block, MoEProblem(M=1, K=128, N=48, E=3,
                                                                   topk=2))


# --- gpt-oss ---------------------------------------------------------------------------------

GPTOSS = Path(__file__).parents[1] / "fixtures" / "checkpoints" / "gptoss-mxfp4-release"
OSS = MoEProblem(M=9, K=128, N=64, E=3, topk=2, bias=True, activation="swigluoai")


@pytest.mark.parametrize("scheme", ["mxfp4", "bf16"])
def test_gpt_oss_folder_reads_back_as_the_checkpoint(tmp_path, scheme):
    """The swigluoai case's folder is gpt-oss's (the release's MXFP4 blocks or transformers'
    bf16 [E, in, out] layout, biases, gate/up rows interleaved); the reference's reader of
    gpt-oss folders reads it back as the checkpoint, tensor for tensor (K = 2N: gate_up
    square, which only the layout, not the shape, orients)."""
    ckpt = synthesize(scheme, OSS, seed=2)
    folder.write(tmp_path, Variant.of(ckpt), ckpt.tensors, OSS)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "gpt_oss" and config["num_local_experts"] == OSS.E
    assert ("quantization_config" in config) == (scheme == "mxfp4")
    read = load_checkpoint(tmp_path, 0)
    assert read.checkpoint.scheme == scheme and read.activation == "swigluoai"
    for name, t in ckpt.tensors.items():
        assert torch.equal(read.checkpoint.tensors[name], t), name


@needs_transformers
@pytest.mark.parametrize("layer_index", [0, 1])
def test_gptoss_release_layer_is_transformers_gptoss_experts(layer_index):
    """The release folder's layer through from_pretrained: transformers' GptOssExperts, its
    MXFP4 quantizer dequantizing to bf16 on this CPU (declared), and the output against the
    declared reading of the folder's own checkpoint (swigluoai on interleaved rows, biases):
    close at the bf16 tolerance, and far from the same weights read with gate and up split
    (a layer that de-interleaved them would fail)."""
    backend = tb.TransformersBackend()
    ml = load_checkpoint(GPTOSS, layer_index)
    P = ml.problem(7)
    layer = backend.create_layer(ml.checkpoint, P)
    assert type(layer.experts).__name__ == "GptOssExperts"
    assert "Mxfp4HfQuantizer(dequantize)" in backend.describe(layer)
    assert not layer.unread and not layer.uninitialized
    decl = harness_numerics.declared(backend, layer)
    assert decl == {"weights_dequantized": "bfloat16", "bias_after_rounding": True, **EAGER_SUM}
    read = harness_numerics.reading(ml.checkpoint, decl)
    x, w, ids = _inputs(P)
    got = backend.apply(layer, x, w, ids).double()
    want = moe(read, x, w, ids, P)
    assert ((got - want).norm() / want.norm()).item() < 1e-2
    split = moe(read, x, w, ids, replace(P, activation="swigluoai-split"))
    assert ((got - split).norm() / split.norm()).item() > 0.1


@needs_transformers
def test_synthesized_mxfp4_swigluoai_runs_through_a_gpt_oss_folder():
    backend = tb.TransformersBackend()
    ckpt = synthesize("mxfp4", OSS, seed=3)
    layer = backend.create_layer(ckpt, OSS)
    assert type(layer.experts).__name__ == "GptOssExperts"
    assert backend.numerics(layer) == {"weights_dequantized": "bfloat16",
                                       "bias_after_rounding": True, **EAGER_SUM}
    x, w, ids = _inputs(OSS)
    got = backend.apply(layer, x, w, ids).double()
    want = moe(harness_numerics.reading(ckpt, backend.numerics(layer)), x, w, ids, OSS)
    assert ((got - want).norm() / want.norm()).item() < 1e-2


@needs_transformers
@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_gpt_oss_experts_pass_the_exact_tier_as_gpt_oss_defines_the_bias(backend):
    """transformers' gpt-oss experts add each bias to the bf16-rounded product, as OpenAI's
    gpt-oss reference does (declared `bias_after_rounding`): the exact tier's structured
    inputs, judged bit for bit against that reading, pass in every implementation (they
    failed on 3 to 9 elements against product + bias rounded once, an expected failure
    before)."""
    cases = [c for c in build_suite("smoke", backends=[backend.name], schemes=["mxfp4"])
             if c.case_id.startswith(f"{backend.name}/mxfp4/") and "swigluoai.bias" in c.case_id
             and c.problem.M == 17]  # MXFP8 inputs: activation none declared, exact skips
    assert cases
    rows = run_cases(cases, checks=["exact"])
    sums = ", sum_in_activation_dtype=True" if backend.implementation == "eager" else ""
    assert [(r["status"], r["numerics"]) for r in rows] == [
        ("pass", "weights_dequantized=bfloat16, bias_after_rounding=True" + sums)] * len(cases), \
        rows


@needs_transformers
@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_top8_of_64_experts_pass_the_exact_tier_as_each_implementation_sums(backend):
    """64 experts, top-8 (Qwen2-MoE-like): the eager experts add the eight bf16 expert outputs
    into a bf16 buffer in expert order (declared `sum_in_activation_dtype`), grouped_mm and
    batched_mm sum them in float32: each passes the exact tier bit for bit against its own
    reading (eager failed on 433 of 2176 elements against the sum rounded once)."""
    P64 = {"E": 64, "K": 128, "M": 17, "N": 64, "activation": "silu", "activation_format":
           "standard", "apply_router_weight_on_input": False, "bias": False, "dtype": "bf16",
           "expert_map": None, "seed": 0, "topk": 8}
    case = Case.from_json(json.dumps({"attrs": {}, "backend": backend.name, "depth": "full",
                                      "problem": P64, "scheme": "bf16", "seed": 0,
                                      "source": None, "strided": False}))
    rows = run_cases([case], checks=["exact", "accuracy"])
    assert [r["status"] for r in rows] == ["pass", "pass"], rows
    assert rows[0]["numerics"] == ("sum_in_activation_dtype=True"
                                   if backend.implementation == "eager" else "")


@needs_transformers
@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_a_folder_layer_declines_the_reload_with_its_reason(backend):
    """A model folder's layer is read by transformers from the folder itself; the reload
    check's second checkpoint (the folder's tensors, experts rotated) is no folder: the
    adapter declines it and the check skips, saying why (an error row before, expected on
    the eager backend only); the exact tier skips likewise where the adapter does not claim
    the synthesized checkpoint of the folder's variant (ct MXFP4: gpt-oss's producer)."""
    cases = build_model_suite("smoke", str(FIXTURES / "ct-mxfp4-qwen3moe"), [1],
                              [backend.name])[:1]
    rows = {r["check"]: r for r in run_cases(cases, checks=["reload", "exact"])}
    assert rows["reload"]["status"] == "skip", rows["reload"]
    assert "declines the reload" in rows["reload"]["message"]
    assert "ct-mxfp4-qwen3moe layer 1" in rows["reload"]["message"]
    assert rows["exact"]["status"] == "skip", rows["exact"]
    assert "gpt-oss" in rows["exact"]["message"]
    layer = backend.create_layer(synthesize("bf16", SMALL, seed=1), SMALL)
    assert backend.reload_declined(layer, synthesize("bf16", SMALL, seed=2)) is None


# --- one decoder layer of a model folder (one_layer.py) --------------------------------------

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"


def _weight_map(name):
    return json.loads((FIXTURES / name / "model.safetensors.index.json").read_text())["weight_map"]


def test_one_layer_of_a_sharded_folder_opens_only_the_shards_holding_it():
    """DeepSeek-V3 in three shards (layer 0 dense, in shard 1 only; layer 2 in shards 2 and
    3): layer 2's selection opens shards 2 and 3, holds every layer-2 tensor under the
    one-layer model's names and nothing else, and makes layer 0 of a one-layer model of the
    MoE kind with the quantization config's layer names relabelled."""
    name = "ct-w4a16-asym-deepseekv3-sharded"
    wm = _weight_map(name)
    view = one_layer.select(FIXTURES / name, 2)
    try:
        assert view.files == sorted({f for k, f in wm.items() if k.startswith("model.layers.2.")})
        assert "model-00001-of-00003.safetensors" not in view.files
        want = {"model.layers.0." + k.removeprefix("model.layers.2.") for k in wm
                if k.startswith("model.layers.2.")}
        assert set(view.state_dict) == want
    finally:
        view.close()
    cfg = view.config
    assert cfg["num_hidden_layers"] == 1 and cfg["first_k_dense_replace"] == 0
    # the file's exclusion list names layers 1 and 2's routers: layer 2's is the one layer's
    ignore = cfg["quantization_config"]["ignore"]
    assert "model.layers.0.mlp.gate" in ignore and "model.layers.2.mlp.gate" in ignore
    assert one_layer.relabel(["model.layers.1.x", r"re:.*layers\.3\.y", "layers.5.z"], 3) == \
        ["model.layers.2.x", r"re:.*layers\.0\.y", "layers.5.z"]


def test_one_layer_config_keeps_the_layers_kind(tmp_path):
    config = json.loads((GPTOSS / "config.json").read_text())
    cfg = one_layer.one_layer_config(config, 1)
    assert cfg["layer_types"] == [config["layer_types"][1]] and cfg["num_hidden_layers"] == 1
    # a model_type without a known one-layer form: the whole folder, said why
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "olmoe"}))
    assert "no one-layer form known" in one_layer.select(tmp_path, 1)


class _Recorder:
    """safetensors' safe_open, recording the files opened and the tensors read."""

    def __init__(self, real):
        self.real, self.opened, self.read = real, [], set()

    def __call__(self, path, *args, **kwargs):
        self.opened.append(Path(path).name)
        return _Handle(self, self.real(path, *args, **kwargs))


class _Handle:
    def __init__(self, rec, h):
        self.rec, self.h = rec, h

    def keys(self):
        return self.h.keys()

    def get_slice(self, key):
        return _Slice(self.rec, key, self.h.get_slice(key))

    def __exit__(self, *a):
        return self.h.__exit__(*a)


class _Slice:
    def __init__(self, rec, key, s):
        self.rec, self.key, self.s = rec, key, s

    def __getitem__(self, item):
        self.rec.read.add(self.key)
        return self.s[item]

    def __getattr__(self, name):
        return getattr(self.s, name)


@needs_transformers
@pytest.mark.parametrize("name,layer_index", [("deepseekv3-fp8-release", 1),
                                              ("gptoss-mxfp4-release", 1),
                                              ("ct-w4a16-sym-mixtral-sharded", 1)])
def test_a_folder_layer_loads_alone_and_as_from_the_whole_folder(monkeypatch, name,
                                                                 layer_index):
    """The adapter hands transformers layer L's tensors only: every tensor read is layer L's
    (layer 0's never, the experts' always where transformers reads them), and the experts
    equal those of transformers' own load of the whole folder, bit for bit (its quantizer
    dequantized them the same way). Mixtral: the experts are left unread either way (the
    finding of mixtral_experts_unread.py), so only the reads are compared."""
    rec = _Recorder(one_layer.safe_open)
    monkeypatch.setattr(one_layer, "safe_open", rec)
    backend = tb.TransformersBackend()
    ml = load_checkpoint(FIXTURES / name, layer_index)
    layer = backend.create_layer(ml.checkpoint, ml.problem(3))
    prefix = f"model.layers.{layer_index}."
    assert rec.read and all(k.startswith(prefix) for k in rec.read), rec.read
    assert "alone" in backend.describe(layer)
    whole = tb._transformers()["model"].from_pretrained(FIXTURES / name, dtype=torch.bfloat16)
    experts = whole.model.layers[layer_index].mlp.experts
    if name.startswith("ct-w4a16-sym-mixtral"):
        assert layer.unread and not any(".experts." in k for k in rec.read)
        return
    assert any(".experts." in k for k in rec.read)
    for pname, p in experts.named_parameters():
        assert torch.equal(dict(layer.experts.named_parameters())[pname], p), pname


@pytest.mark.parametrize("scheme", ["fp8-w8a8", "fp8-w8a16"])
def test_fp8_folder_leaves_the_other_modules_unconverted_by_transformers_rule(scheme):
    """On cuda FineGrainedFP8 keeps fp8 parameters, and a converted module the folder has no
    tensors for is initialized by normal_, which cuda does not implement for fp8 (every fp8
    case errored on the H200): the exclusion list must match by transformers' own rule."""
    rule = pytest.importorskip("transformers.quantizers.quantizers_utils").should_convert_module
    cfg = folder.model_config(Variant.of(scheme), SMALL)["quantization_config"]
    skip = cfg["modules_to_not_convert"]
    for name in ("model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.o_proj",
                 "model.layers.0.mlp.gate", "lm_head"):
        assert not rule(name, skip), (name, skip)
    assert rule("model.layers.0.mlp.experts", skip), skip


def test_fp8_on_a_gpu_is_not_claimed_without_transformers_hub_kernel(monkeypatch):
    """transformers keeps fp8 weights on a GPU and runs them with a kernel it fetches from
    the hub; the GPU machines reach no hub: a reason, not an error in every case."""
    pytest.importorskip("transformers")
    hub = pytest.importorskip("transformers.integrations.hub_kernels")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on an H200
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: (9, 0))
    monkeypatch.setitem(hub._KERNEL_MODULE_MAPPING, "finegrained-fp8", None)
    monkeypatch.setattr(hub, "is_kernels_available", lambda: False)
    monkeypatch.setattr(tb, "_claims", {})  # the process's claims memo: this machine changed
    why = tb.TransformersBackend().supports(Variant.of("fp8-w8a8"), SMALL)
    assert why is not None and "finegrained-fp8" in why and "hub" in why
    assert tb.TransformersBackend().supports(Variant.of("bf16"), SMALL) is None
