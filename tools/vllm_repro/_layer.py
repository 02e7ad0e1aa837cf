"""Shared by the reproductions: one vLLM 0.32 MoE layer built as vLLM builds it, from vLLM and
torch only. CPU AMX gate forced (vLLM's quantized CPU MoE kernels require it) unless a layer
is built with amx=False."""
import itertools
import tempfile

import torch

NATIVE_AMX = torch.cpu._is_amx_tile_supported
if NATIVE_AMX():  # a served model's other layers ask Linux for AMX tiles first: ask here
    torch.cpu._init_amx()
torch.cpu._is_amx_tile_supported = lambda: True  # AMX gate forced
from vllm.config import VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.distributed import (  # noqa: E402
    init_distributed_environment,
    initialize_model_parallel,
)
from vllm.model_executor.layers.fused_moe import FusedMoEFactory  # noqa: E402
from vllm.model_executor.layers.quantization import get_quantization_config  # noqa: E402

CONFIG = VllmConfig()
with set_current_vllm_config(CONFIG):
    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                 distributed_init_method=f"file://{tempfile.mktemp()}")
    initialize_model_parallel(1, 1)
E, K, N, TOPK, G = 4, 128, 128, 2, 32
LAYER_IDS = itertools.count()  # a fresh layer name per build (vLLM refuses duplicates)
PROJS = (("gate_proj", (N, K)), ("up_proj", (N, K)), ("down_proj", (K, N)))  # (out, in)


def gptq_int4(seed=0, bias=False, dtype=torch.bfloat16, qzeros=0x77777777, zero=8):
    """Symmetric GPTQ int4 (uint4b8) per-expert tensors and their float dequantization
    (u - zero) * s. `qzeros`: the word stored in every qzeros element (GPTQ v1 stores the
    symmetric zero 8 minus one, v2 stores 8)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    dense = {}
    for e in range(E):
        for proj, (n_out, n_in) in (("gate_proj", (N, K)), ("up_proj", (N, K)),
                                    ("down_proj", (K, N))):
            u = torch.randint(0, 16, (n_in, n_out), generator=g)
            s = (torch.rand(n_in // G, n_out, generator=g) * 0.01 + 0.005).to(dtype)
            words = (u.view(n_in // 8, 8, n_out) << (4 * torch.arange(8).view(1, 8, 1))).sum(1)
            out[f"{e}.{proj}.qweight"] = words.to(torch.int64).to(torch.int32)
            out[f"{e}.{proj}.scales"] = s
            # a real checkpoint holds qzeros even when symmetric, and vLLM's loader leaves
            # the parameter uninitialised without them
            out[f"{e}.{proj}.qzeros"] = torch.full((n_in // G, n_out // 8), qzeros,
                                                   dtype=torch.int64).to(torch.int32)
            dense[(e, proj)] = ((u - zero).float() * s.float().repeat_interleave(G, 0)).T
            if bias:
                out[f"{e}.{proj}.bias"] = (torch.randn(n_out, generator=g) * 0.1).to(dtype)
                dense[(e, proj, "b")] = out[f"{e}.{proj}.bias"].float()
    return out, dense


def fp8_block(seed=0):
    """fp8 e4m3 weights, one 128x128 block scale (`weight_scale_inv`, a multiplier) each."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for e in range(E):
        for proj, (o, i) in PROJS:
            out[f"{e}.{proj}.weight"] = torch.randn(o, i, generator=g).to(torch.float8_e4m3fn)
            out[f"{e}.{proj}.weight_scale_inv"] = torch.rand(o // 128, i // 128, generator=g) + 0.5
    return out


def bf16(seed=0):
    """Unquantized bf16 weights. Build with `layer(None, w, amx=False)`: with the gate forced
    vLLM picks X86CPUUnquantizedExperts, and its AMX kernel dies with SIGILL on a CPU without
    AMX."""
    g = torch.Generator().manual_seed(seed)
    return {f"{e}.{proj}.weight": (torch.randn(o, i, generator=g) / i ** 0.5).to(torch.bfloat16)
            for e in range(E) for proj, (o, i) in PROJS}


def layer(d, weights, dtype=torch.bfloat16, bias=False, router_on_input=False, topk=TOPK,
          amx=True):
    """amx=False: the CPU's own AMX answer while vLLM's oracle picks the experts class."""
    torch.cpu._is_amx_tile_supported = (lambda: True) if amx else NATIVE_AMX
    with set_current_vllm_config(CONFIG):
        qc = get_quantization_config(d["quant_method"]).from_config(d) if d else None
        r = FusedMoEFactory(E, topk, K, N, params_dtype=dtype, quant_config=qc,
                            prefix=f"model.layers.{next(LAYER_IDS)}.mlp.experts", has_bias=bias,
                            apply_router_weight_on_input=router_on_input)
        list(r.load_weights(weights.items()))
        return r


def process(r):
    with set_current_vllm_config(CONFIG):
        r.routed_experts.quant_method.process_weights_after_loading(r.routed_experts)


def run(r, x, w, ids):
    with set_current_vllm_config(CONFIG), torch.inference_mode():
        return r.routed_experts.forward_modular(x=x, topk_weights=w.clone(),
                                                topk_ids=ids.to(torch.int32))


def routing(M, dtype=torch.bfloat16, topk=TOPK, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(M, K, generator=g)).to(dtype)
    ids = torch.stack([torch.randperm(E, generator=g)[:topk] for _ in range(M)])
    w = torch.rand(M, topk, generator=g)
    return x, w, ids


def reference(dense, x, w, ids, act_quant=None, bias=False, dtype=torch.bfloat16):
    """float64 MoE of the dense weights (silu), the intermediates rounded to `dtype` as a
    16-bit kernel stores them (gate/up outputs, then silu(gate) * up); act_quant(h), if given,
    applied to each GEMM's input."""
    q = act_quant or (lambda t: t)

    def rnd(t):
        return t.to(dtype).double()

    y = torch.zeros(x.shape[0], K, dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            xt = q(x[t:t + 1].double())
            gate = xt @ dense[(e, "gate_proj")].double().T
            up = xt @ dense[(e, "up_proj")].double().T
            if bias:
                gate, up = gate + dense[(e, "gate_proj", "b")], up + dense[(e, "up_proj", "b")]
            a = rnd(torch.nn.functional.silu(rnd(gate)) * rnd(up))
            o = q(a) @ dense[(e, "down_proj")].double().T
            if bias:
                o = o + dense[(e, "down_proj", "b")]
            y[t] += w[t, j].double() * o[0]
    return y


def int8_per_token(t):
    """Symmetric int8 quantize-dequantize, one scale (amax / 127) per row."""
    s = t.abs().amax(-1, keepdim=True) / 127
    return (t / s).round().clamp(-127, 127) * s


def rel(a, b):
    return float((a.double() - b).norm() / b.norm())


GPTQ4 = {"quant_method": "gptq", "bits": 4, "group_size": G, "desc_act": False, "sym": True}
FP8_BLOCK = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
