"""vLLM's GPU MoE layers against float64 references, one file (vLLM and torch only, no moecert):
the reductions of the failures moecert's GPU gate found on vLLM 0.25.1 (docs/gpu-ci.md,
2026-11-29 11:32), each printed with the readings it is compared against so that a reader can
tell a legitimate other reading from a defect.

    python gpu_reduce.py [fp8-block] [bias] [nvfp4] [ops]     # on a CUDA machine with vLLM

Each layer is built as vLLM's model loader builds it: the quant config of a checkpoint's
quantization_config, the MoE layer factory, per-expert tensors through the runner's
load_weights, process_weights_after_loading, the kernel config the runner makes before the
first forward, the modular forward it calls after routing. The references are float64 from the
same stored tensors; gate/up and silu(gate) * up are rounded to the activation dtype, as a
16-bit kernel stores them. A correct kernel lands at the rounding level of one reading
(rel_fro ~1e-3 to 1e-2 here); a wrong one far from every reading.

- fp8-block: DeepSeek-V3's fp8 (128 x 128 weight blocks, `weight_scale_inv`, dynamic
  activations) against: activations unquantized; 1 x 128 fp8 groups per token (s = amax / 448)
  with the intermediate rounded to bf16 before its quantization; the same with silu * up
  quantized from fp32 (vLLM's fused `silu_and_mul_per_block_quant`).
- ops: vLLM's two activation quantizers of that path (`per_token_group_quant_fp8`,
  `silu_and_mul_per_block_quant`) against the same rule written in torch: codes that differ
  and the scales' largest relative difference.
- bias: unquantized experts with expert biases, bf16 and fp16 (moecert: every Triton scheme
  failed at fp16 with biases, rel_fro 0.17, where vLLM 0.32 on the CPU passes).
- nvfp4: a ModelOpt NVFP4 file on a GPU without FP4 tensor cores (Marlin, 16-bit
  activations), gate and up with equal and with different `weight_scale_2`, against both the
  per-shard reading and the one where up takes gate's global scale; and top-1 with the router
  weight applied to the input.
"""
import itertools
import sys
import tempfile

import torch
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.distributed import init_distributed_environment, initialize_model_parallel
from vllm.model_executor.layers.fused_moe import layer as fused_moe_layer
from vllm.model_executor.layers.quantization import get_quantization_config

E, TOPK = 4, 2
CONFIG = VllmConfig()
FACTORY = getattr(fused_moe_layer, "FusedMoEFactory", None) or fused_moe_layer.FusedMoE
LAYER_IDS = itertools.count()
PROJS = ("gate_proj", "up_proj", "down_proj")
F8 = torch.float8_e4m3fn
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])

with set_current_vllm_config(CONFIG):
    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                 distributed_init_method=f"file://{tempfile.mktemp()}")
    initialize_model_parallel(1, 1)
    from vllm.v1.worker.workspace import init_workspace_manager
    init_workspace_manager(torch.device("cuda"))


def shapes(K, N):
    return {"gate_proj": (N, K), "up_proj": (N, K), "down_proj": (K, N)}  # (out, in)


def e4m3(t):
    return t.clamp(-448, 448).to(F8)


def build(d, method, K, N, weights, dtype=torch.bfloat16, bias=False, topk=TOPK,
          router_on_input=False):
    with set_current_vllm_config(CONFIG), torch.device("cuda"):
        qc = get_quantization_config(method).from_config(d) if d else None
        r = FACTORY(E, topk, K, N, params_dtype=dtype, quant_config=qc, has_bias=bias,
                    apply_router_weight_on_input=router_on_input,
                    prefix=f"model.layers.{next(LAYER_IDS)}.mlp.experts")
        list(r.load_weights({k: v.cuda() for k, v in weights.items()}.items()))
        experts = r.routed_experts
        experts.quant_method.process_weights_after_loading(experts)
        experts._ensure_moe_quant_config_init()  # as the runner does before each forward
    return experts


def forward(experts, x, w, ids):
    with set_current_vllm_config(CONFIG), torch.inference_mode():
        out = experts.forward_modular(x=x.cuda(), topk_weights=w.cuda().float(),
                                      topk_ids=ids.cuda().to(torch.int32))
    kernel = getattr(getattr(experts.quant_method, "moe_kernel", None), "fused_experts", None)
    return out.double().cpu(), type(kernel).__name__ if kernel is not None else "?"


def routing(M, K, dtype=torch.bfloat16, topk=TOPK, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g).to(dtype)
    ids = torch.stack([torch.randperm(E, generator=g)[:topk] for _ in range(M)])
    w = torch.rand(M, topk, generator=g)
    return x, w, ids


def reference(dense, x, w, ids, K, q1=None, q2=None, dtype=torch.bfloat16, fp32_silu=False,
              router_on_input=False):
    """dense[(e, proj)]: float64 [out, in]; dense[(e, proj, "b")]: a bias. q1 / q2: each
    GEMM's input quantize-dequantize (None: unquantized)."""
    q1, q2 = q1 or (lambda t: t), q2 or (lambda t: t)

    def rnd(t):
        return t.to(dtype).double()

    y = torch.zeros(x.shape[0], K, dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e, wt = int(ids[t, j]), w[t, j].double()
            xt = x[t:t + 1].double()
            if router_on_input:
                xt = rnd(xt * wt)
            xt = q1(xt)
            h = []
            for proj in ("gate_proj", "up_proj"):
                o = xt @ dense[(e, proj)].T
                if (e, proj, "b") in dense:
                    o = o + dense[(e, proj, "b")]
                h.append(rnd(o))
            a = torch.nn.functional.silu(h[0]) * h[1]
            a = q2(a if fp32_silu else rnd(a))
            o = a @ dense[(e, "down_proj")].T
            if (e, "down_proj", "b") in dense:
                o = o + dense[(e, "down_proj", "b")]
            y[t] += (1.0 if router_on_input else wt) * o[0]
    return y


def rel(a, b):
    return float((a - b).norm() / b.norm())


def fp8_groups(t, group=128, pow2=False):
    """Per-token 1 x group e4m3 quantize-dequantize, s = amax / 448 (vLLM's dynamic rule);
    pow2: s rounded up to a power of two (DeepGEMM's UE8M0 scales, which vLLM's
    per_token_group_quant_fp8 uses wherever DeepGEMM loads and VLLM_USE_DEEP_GEMM_E8M0=1,
    its default)."""
    v = t.view(t.shape[0], -1, group)
    s = v.abs().amax(-1, keepdim=True).clamp_min(1e-10) / 448
    if pow2:
        s = torch.exp2(torch.ceil(torch.log2(s)))
    return (e4m3(v / s).double() * s).view_as(t)


def fp8_groups_pow2(t):
    return fp8_groups(t, pow2=True)


# --- fp8 block --------------------------------------------------------------------------

def fp8_block_weights(K, N, seed=0):
    g = torch.Generator().manual_seed(seed)
    out, dense = {}, {}
    for e in range(E):
        for proj, (o, i) in shapes(K, N).items():
            w = torch.randn(o, i, generator=g, dtype=torch.float64) / i ** 0.5
            w = w * (1 + 3 * torch.rand(o, 1, generator=g, dtype=torch.float64))  # rows differ
            blocks = w.view(o // 128, 128, i // 128, 128)
            s = (blocks.abs().amax((1, 3)) / 448).float()  # [o/128, i/128]
            s_full = s.double().repeat_interleave(128, 0).repeat_interleave(128, 1)
            codes = e4m3(w / s_full)
            out[f"{e}.{proj}.weight"] = codes
            out[f"{e}.{proj}.weight_scale_inv"] = s
            dense[(e, proj)] = codes.double() * s_full
    return out, dense


def fp8_block():
    d = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
         "weight_block_size": [128, 128]}
    print("fp8 block 128 x 128, dynamic activations (DeepSeek-V3's quantization_config)")
    for K, N in ((256, 256), (512, 256), (256, 512), (1024, 512)):
        weights, dense = fp8_block_weights(K, N)
        experts = build(d, "fp8", K, N, weights)
        for M in (1, 9, 64):
            x, w, ids = routing(M, K)
            out, kernel = forward(experts, x, w, ids)
            readings = {
                "activations unquantized": reference(dense, x, w, ids, K),
                "fp8 groups, bf16 intermediate": reference(dense, x, w, ids, K, fp8_groups,
                                                           fp8_groups),
                "fp8 groups, fp32 silu*up": reference(dense, x, w, ids, K, fp8_groups,
                                                      fp8_groups, fp32_silu=True),
                "fp8 groups on GEMM1 only": reference(dense, x, w, ids, K, fp8_groups),
                "fp8 groups, power-of-two scales": reference(dense, x, w, ids, K,
                                                             fp8_groups_pow2, fp8_groups_pow2),
            }
            cells = "  ".join(f"{k}: {rel(out, r):.3e}" for k, r in readings.items())
            print(f"  K={K:5d} N={N:5d} M={M:3d} {kernel:22s} {cells}")


def ops_check():
    from vllm import _custom_ops as ops
    from vllm.model_executor.layers.quantization.utils.fp8_utils import (
        per_token_group_quant_fp8,
    )
    print("vLLM's activation quantizers of the fp8 block path against torch")
    g = torch.Generator().manual_seed(3)
    for M, N in ((9, 256), (64, 512), (1, 1024)):
        t = (torch.randn(M, 2 * N, generator=g) * 3).to(torch.bfloat16)
        gate, up = t[:, :N].double(), t[:, N:].double()
        a = torch.nn.functional.silu(gate) * up
        for name, call, src in (
            ("per_token_group_quant_fp8", lambda t=t, N=N: per_token_group_quant_fp8(
                t[:, :N].cuda().contiguous(), 128), gate),
            ("silu_and_mul_per_block_quant", lambda t=t: ops.silu_and_mul_per_block_quant(
                t.cuda(), group_size=128, quant_dtype=F8), a),
        ):
            try:
                q, s = call()
            except Exception as e:
                print(f"  {name} M={M} N={N}: {type(e).__name__}: {str(e)[:120]}")
                continue
            q, s = q.cpu(), s.float().cpu()
            if s.shape != (M, N // 128):  # column-major scales come as [N/128, M] views
                s = s.reshape(M, N // 128) if s.numel() == M * N // 128 else s
            v = src.view(M, -1, 128)
            deq = (q.double().view(M, -1, 128) * s.double().unsqueeze(-1)).view(M, N)
            cells = []
            for rule, pow2 in (("amax/448", False), ("amax/448 up to 2^k", True)):
                s_ref = v.abs().amax(-1) / 448
                if pow2:
                    s_ref = torch.exp2(torch.ceil(torch.log2(s_ref)))
                codes_ref = e4m3(v / s_ref.unsqueeze(-1)).view(M, N)
                differ = int((q.float() != codes_ref.float()).sum())
                ds = float(((s.double() - s_ref).abs() / s_ref).max())
                cells.append(f"{rule}: codes differing {differ}, scales max rel diff {ds:.2e}")
            print(f"  {name:30s} M={M:3d} N={N:5d} ({M * N} codes) {'; '.join(cells)}; "
                  f"dequantized rel_fro vs the exact input {rel(deq, src):.3e}")


# --- biases -----------------------------------------------------------------------------

def bias():
    print("unquantized experts with biases")
    K = N = 128
    for dtype in (torch.bfloat16, torch.float16):
        g = torch.Generator().manual_seed(5)
        weights, dense = {}, {}
        for e in range(E):
            for proj, (o, i) in shapes(K, N).items():
                w = (torch.randn(o, i, generator=g) / i ** 0.5).to(dtype)
                b = (torch.randn(o, generator=g) * 0.1).to(dtype)
                weights[f"{e}.{proj}.weight"], weights[f"{e}.{proj}.bias"] = w, b
                dense[(e, proj)], dense[(e, proj, "b")] = w.double(), b.double()
        no_bias = {k: v for k, v in dense.items() if len(k) == 2}
        for has_bias in (False, True):
            experts = build(None, None, K, N, weights if has_bias else
                            {k: v for k, v in weights.items() if k.endswith("weight")},
                            dtype=dtype, bias=has_bias)
            x, w, ids = routing(9, K, dtype)
            out, kernel = forward(experts, x, w, ids)
            loaded = {n: f"{float(getattr(experts, n).float().norm()):.3g}"
                      for n in ("w13_bias", "w2_bias") if hasattr(experts, n)}
            readings = {"with biases": dense, "without": no_bias,
                        "w13's only": {k: v for k, v in dense.items()
                                       if len(k) == 2 or k[1] != "down_proj"},
                        "w2's only": {k: v for k, v in dense.items()
                                      if len(k) == 2 or k[1] == "down_proj"}}
            cells = ", ".join(f"{name} {rel(out, reference(d, x, w, ids, K, dtype=dtype)):.3e}"
                              for name, d in readings.items())
            print(f"  {dtype!s:15s} layer biases {has_bias!s:5s} {kernel:22s} bias norms in "
                  f"the layer {loaded}; vs the reference {cells}")


# --- nvfp4 ------------------------------------------------------------------------------

def e2m1_codes(v):
    """Nearest e2m1 value of each |v| <= 6 (ties to the even code), sign kept: the 4-bit
    code (bit 3 the sign) and its value."""
    mag = v.abs().clamp(max=6.0)
    idx = (mag.unsqueeze(-1) - E2M1.double()).abs().argmin(-1)
    return idx | ((v < 0).long() << 3), E2M1.double()[idx] * torch.where(v < 0, -1.0, 1.0)


def nvfp4_weights(K, N, up_global_ratio, seed=0):
    """ModelOpt's NVFP4 tensors: weight uint8 [out, in/2] (low nibble first), weight_scale e4m3
    [out, in/16], weight_scale_2 and input_scale fp32 scalars. up's global scale is gate's
    times `up_global_ratio` (1: equal, as ModelOpt writes them)."""
    g = torch.Generator().manual_seed(seed)
    out, dense = {}, {}
    for e in range(E):
        gs_gate = None
        for proj, (o, i) in shapes(K, N).items():
            w = torch.randn(o, i, generator=g, dtype=torch.float64) / i ** 0.5
            gs = (w.abs().max() / (448 * 6)).float().double()  # as stored (fp32)
            if proj == "gate_proj":
                gs_gate = gs
            elif proj == "up_proj":
                gs = (gs_gate * up_global_ratio).float().double()
            blocks = w.view(o, i // 16, 16)
            bs = e4m3(blocks.abs().amax(-1) / (6 * gs)).double()
            bs = torch.where(bs > 0, bs, torch.ones_like(bs))
            code, val = e2m1_codes(blocks / (bs * gs).unsqueeze(-1))
            code = code.view(o, i)
            out[f"{e}.{proj}.weight"] = (code[:, 0::2] | (code[:, 1::2] << 4)).to(torch.uint8)
            out[f"{e}.{proj}.weight_scale"] = bs.to(F8)
            out[f"{e}.{proj}.weight_scale_2"] = torch.tensor(float(gs), dtype=torch.float32)
            out[f"{e}.{proj}.input_scale"] = torch.tensor(1.0 / 448, dtype=torch.float32)
            dense[(e, proj)] = (val * (bs * gs).unsqueeze(-1)).view(o, i)
    return out, dense


def nvfp4():
    d = {"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": None,
         "exclude_modules": [], "group_size": 16}
    print("ModelOpt NVFP4 (16-bit activations on a GPU without FP4 MMA)")
    K, N = 256, 256
    for ratio in (1.0, 0.6):
        weights, dense = nvfp4_weights(K, N, ratio)
        as_one = {k: (v / ratio if k[1] == "up_proj" else v) for k, v in dense.items()}
        experts = build(d, "modelopt_fp4", K, N, weights)
        for M in (1, 9, 64):
            x, w, ids = routing(M, K)
            out, kernel = forward(experts, x, w, ids)
            print(f"  up/gate weight_scale_2 {ratio:.1f} M={M:3d} {kernel:22s} vs per-shard "
                  f"globals {rel(out, reference(dense, x, w, ids, K)):.3e}, vs gate's for "
                  f"both {rel(out, reference(as_one, x, w, ids, K)):.3e}")
    weights, dense = nvfp4_weights(K, N, 1.0)
    experts = build(d, "modelopt_fp4", K, N, weights, topk=1, router_on_input=True)
    x, w, ids = routing(9, K, topk=1)
    out, kernel = forward(experts, x, w, ids)
    print(f"  router weight on the input, top-1, M=9 {kernel:22s} vs applied to the input "
          f"{rel(out, reference(dense, x, w, ids, K, router_on_input=True)):.3e}, vs to the "
          f"output {rel(out, reference(dense, x, w, ids, K)):.3e}, vs not applied "
          f"{rel(out, reference(dense, x, torch.ones_like(w), ids, K)):.3e}")


STEPS = {"fp8-block": fp8_block, "ops": ops_check, "bias": bias, "nvfp4": nvfp4}

if __name__ == "__main__":
    import vllm
    print(f"vLLM {vllm.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}; "
          f"E {E}, top-{TOPK}")
    for name in sys.argv[1:] or STEPS:
        try:
            STEPS[name]()
        except Exception as e:  # one step's failure said, the others still run
            import traceback
            traceback.print_exc()
            print(f"{name}: {type(e).__name__}: {str(e)[:200]}")
