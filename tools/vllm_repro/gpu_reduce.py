"""vLLM's GPU MoE layers against float64 references, one file (vLLM and torch only, no moecert):
the reductions of the failures moecert's GPU gate found on vLLM 0.25.1 (docs/gpu-ci.md,
2026-11-29 11:32), each printed with the readings it is compared against so that a reader can
tell a legitimate other reading from a defect.

    python gpu_reduce.py [fp8-block] [bias] [nvfp4] [ops] [int8] [fp8-tensor] [router]
                         [int8-layer] [int8-router] [mxfp4-rounded] [mxfp4-spread]   # CUDA, vLLM

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
- int8: Quark int8 W8A8 (weights per channel or per tensor, activations per token or one
  static scale) through vLLM's fused_moe Triton kernel, against the file's scales and
  against a kernel that reads the weight scales by the activations' granularity.
- int8-layer: per-tensor Quark int8 (the real quark-int8-tensor folder's scheme): the layer
  vLLM processed read back against what the method should hold (w1 / w3 requantized to the
  larger scale, exactly and through float16 as per_tensor_dequantize holds it on CUDA), and
  the kernel judged on the layer's own tensors: processing and kernel told apart.
- int8-router: Quark int8 per token, top-1, the router weight on the input: fused_experts'
  GEMM1 epilogue multiplies by it, against the modular prepare step's x * r.
- fp8-tensor: vLLM's fp8 with per-tensor weights and dynamic activations at N = 32 / 48 / 128.
- router: the router weight on the input, top-1, on Marlin (MXFP8) and Triton (bf16), against
  the weight applied once to the input and applied again to GEMM1's output.
- mxfp4-rounded: the gpt-oss-format MXFP4 method on Marlin where it rounds the layer up
  (hidden to 256, intermediate to 128), beside unrounded sizes and the same weights written
  at hidden 256 by hand.
- mxfp4-spread: the same method with neighbouring block scales that differ, through each
  MXFP4 backend vLLM offers here (Marlin, its emulation, triton_kernels), at several M.
- nvfp4: a ModelOpt NVFP4 file on a GPU without FP4 tensor cores (Marlin, 16-bit
  activations), gate and up with equal and with different `weight_scale_2`, against both the
  per-shard reading and the one where up takes gate's global scale; and top-1 with the router
  weight applied to the input.
"""
import contextlib
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
              router_on_input=False, round_expert=False, router_twice=False, gate_rounded=False,
              router_on_gemm1=False, clamp=None):
    """dense[(e, proj)]: float64 [out, in]; dense[(e, proj, "b")]: a bias. q1 / q2: each
    GEMM's input quantize-dequantize (None: unquantized). round_expert: each weighted expert
    output rounded to dtype before the sum (a GEMM2 epilogue that stores per assignment);
    router_twice: with router_on_input, the weight applied to the input and again to GEMM1's
    output; gate_rounded: silu(gate) rounded to dtype before it multiplies up (vLLM's CUDA
    silu_and_mul: its activation returns the element type); router_on_gemm1: the router weight
    multiplies GEMM1's output in float32 before it is rounded, the input and the output
    unweighted (fused_experts' own kernel with apply_router_weight_on_input: GEMM1's
    MUL_ROUTED_WEIGHT epilogue); clamp: gate clamped above and up on both sides at this
    limit before silu(gate) * up (vLLM's SILU with a clamp limit, silu_and_mul_with_clamp)."""
    q1, q2 = q1 or (lambda t: t), q2 or (lambda t: t)

    def rnd(t):
        return t.to(dtype).double()

    y = torch.zeros(x.shape[0], K, dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e, wt = int(ids[t, j]), w[t, j].double()
            xt = x[t:t + 1].double()
            if router_on_input:
                xt = rnd(xt * rnd(wt))
            xt = q1(xt)
            h = []
            for proj in ("gate_proj", "up_proj"):
                o = xt @ dense[(e, proj)].T
                if (e, proj, "b") in dense:
                    o = o + dense[(e, proj, "b")]
                h.append(rnd(o * wt if router_twice or router_on_gemm1 else o))
            if clamp is not None:
                h = [h[0].clamp(max=clamp), h[1].clamp(-clamp, clamp)]
            act = torch.nn.functional.silu(h[0])
            a = (rnd(act) if gate_rounded else act) * h[1]
            a = q2(a if fp32_silu else rnd(a))
            o = a @ dense[(e, "down_proj")].T
            if (e, "down_proj", "b") in dense:
                o = o + dense[(e, "down_proj", "b")]
            o = (1.0 if router_on_input or router_on_gemm1 else wt) * o[0]
            y[t] += rnd(o) if round_expert else o
    return y


def per_tensor_reference(dense, x, w, ids, K, quant, dtype=torch.bfloat16, gate_rounded=False):
    """As `reference`, with each GEMM's input quantized by one scale over the whole tensor:
    x for GEMM1, every assignment's silu(gate) * up for GEMM2 (a dynamic per-tensor scale)."""
    def rnd(t):
        return t.to(dtype).double()
    xq = quant(x.double())
    pairs = [(t, j) for t in range(x.shape[0]) for j in range(ids.shape[1])]
    inter = []
    for t, j in pairs:
        e = int(ids[t, j])
        h = [rnd(xq[t:t + 1] @ dense[(e, p)].T) for p in ("gate_proj", "up_proj")]
        act = torch.nn.functional.silu(h[0])
        inter.append(rnd((rnd(act) if gate_rounded else act) * h[1]))
    aq = quant(torch.cat(inter))
    y = torch.zeros(x.shape[0], K, dtype=torch.float64)
    for i, (t, j) in enumerate(pairs):
        y[t] += w[t, j].double() * (aq[i:i + 1] @ dense[(int(ids[t, j]), "down_proj")].T)[0]
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
    router_on_input_readings("nvfp4", experts, dense, K)


def router_on_input_readings(label, experts, dense, K):
    """Top-1 with the router weight on the input, against where the weight goes: the prepare
    step's x * r (every vLLM modular prepare), and that with the weight applied again to
    GEMM1's output (MarlinExperts passes apply_router_weight_on_input on to fused_marlin_moe,
    whose GEMM1 then multiplies by topk_weights:
    `mul_topk_weights=apply_router_weight_on_input`)."""
    for M in (1, 9):
        x, w, ids = routing(M, K, topk=1)
        out, kernel = forward(experts, x, w, ids)
        readings = {
            "applied to the input": reference(dense, x, w, ids, K, router_on_input=True),
            "to the input and to GEMM1's output": reference(
                dense, x, w, ids, K, router_on_input=True, router_twice=True),
            "to the output": reference(dense, x, w, ids, K),
            "not applied": reference(dense, x, torch.ones_like(w), ids, K)}
        cells = ", ".join(f"{k} {rel(out, r):.3e}" for k, r in readings.items())
        print(f"  {label}: router weight on the input, top-1, M={M} {kernel:22s} vs {cells}")


def router():
    """The router weight on the input on Marlin (NVFP4 above, MXFP8 here) and on Triton
    (bf16, unquantized: the control)."""
    print("router weight on the input, top-1")
    K, N = 256, 256
    g = torch.Generator().manual_seed(7)
    weights, dense = {}, {}
    for e in range(E):
        for proj, (o, i) in shapes(K, N).items():
            w = (torch.randn(o, i, generator=g) / i ** 0.5).to(torch.bfloat16)
            weights[f"{e}.{proj}.weight"], dense[(e, proj)] = w, w.double()
    router_on_input_readings("bf16 (Triton)", build(None, None, K, N, weights, topk=1,
                                                     router_on_input=True), dense, K)
    # ModelOpt MXFP8: weight e4m3 [out, in], weight_scale uint8 E8M0 [out, in / 32]
    weights, dense = {}, {}
    for e in range(E):
        for proj, (o, i) in shapes(K, N).items():
            w = torch.randn(o, i, generator=g, dtype=torch.float64) / i ** 0.5
            blocks = w.view(o, i // 32, 32)
            exp = torch.floor(torch.log2(blocks.abs().amax(-1))) - 8  # e4m3's emax 8
            s = torch.exp2(exp)
            codes = e4m3(blocks / s.unsqueeze(-1))
            weights[f"{e}.{proj}.weight"] = codes.view(o, i)
            weights[f"{e}.{proj}.weight_scale"] = (exp + 127).to(torch.uint8)
            dense[(e, proj)] = (codes.double() * s.unsqueeze(-1)).view(o, i)
    d = {"quant_method": "modelopt", "quant_algo": "MXFP8", "kv_cache_quant_algo": None,
         "exclude_modules": []}
    try:
        experts = build(d, "modelopt_mxfp8", K, N, weights, topk=1, router_on_input=True)
    except Exception as e:  # the method's registered name differs by version
        print(f"  mxfp8: {type(e).__name__}: {str(e)[:160]}")
        return
    router_on_input_readings("mxfp8", experts, dense, K)


# --- fp8 per tensor (vLLM's fp8, dynamic activations) -------------------------------------

def fp8_tensor():
    """vLLM's own fp8 file with per-tensor weight scales and dynamic activations (moecert's
    fp8-w8a16 row at N = 32 failed at 0.038 where N >= 48 passed)."""
    d = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic"}
    print("vLLM fp8, per-tensor weights, dynamic activations")
    K = 128
    for N in (32, 48, 128):
        g = torch.Generator().manual_seed(11)
        weights, dense, requant = {}, {}, {}
        for e in range(E):
            scales = {}
            for proj, (o, i) in shapes(K, N).items():
                w = torch.randn(o, i, generator=g, dtype=torch.float64) / i ** 0.5
                s = (w.abs().max() / 448).float().double()
                codes = e4m3(w / s)
                weights[f"{e}.{proj}.weight"] = codes
                weights[f"{e}.{proj}.weight_scale"] = torch.tensor(float(s))
                dense[(e, proj)] = codes.double() * s
                scales[proj] = s
            # vLLM's fp8 processing: w1 and w3 requantized to the larger of their two scales
            s13 = max(scales["gate_proj"], scales["up_proj"])
            for proj in ("gate_proj", "up_proj"):
                requant[(e, proj)] = e4m3(dense[(e, proj)] / s13).double() * s13
            requant[(e, "down_proj")] = dense[(e, "down_proj")]
        def tensor_q(t):
            s = t.abs().max().clamp_min(1e-10) / 448
            return e4m3(t / s).double() * s
        def token_q(t):
            s = t.abs().amax(-1, keepdim=True).clamp_min(1e-10) / 448
            return e4m3(t / s).double() * s
        experts = build(d, "fp8", K, N, weights)
        for M in (1, 9, 64):
            x, w, ids = routing(M, K)
            out, kernel = forward(experts, x, w, ids)
            readings = {"unquantized": reference(dense, x, w, ids, K),
                        "per-tensor dynamic, each GEMM": per_tensor_reference(
                            dense, x, w, ids, K, tensor_q),
                        "per-tensor dynamic, w13 requantized": per_tensor_reference(
                            requant, x, w, ids, K, tensor_q),
                        "+ silu(gate) rounded first": per_tensor_reference(
                            requant, x, w, ids, K, tensor_q, gate_rounded=True),
                        "per-token dynamic": reference(dense, x, w, ids, K, token_q, token_q)}
            cells = "  ".join(f"{k}: {rel(out, r):.3e}" for k, r in readings.items())
            print(f"  N={N:4d} M={M:3d} {kernel:22s} {cells}")


# --- int8 (Quark W8A8 INT8) -----------------------------------------------------------------

def quark_int8_config(weights, inputs):
    """Quark's quantization_config for int8: weights "per_channel" or "per_tensor"; inputs
    "token" (Quark's per_channel + is_dynamic: per token), "static" (per_tensor, calibrated)."""
    def spec(qscheme, dynamic, axis):
        return {"dtype": "int8", "qscheme": qscheme, "ch_axis": axis, "is_dynamic": dynamic,
                "symmetric": True, "group_size": None, "round_method": "half_even",
                "scale_type": "float", "observer_cls": "PerChannelMinMaxObserver"}
    inp = spec("per_channel", True, 1) if inputs == "token" else spec("per_tensor", False, None)
    return {"quant_method": "quark", "global_quant_config": {
        "weight": spec(weights, False, 0 if weights == "per_channel" else None),
        "input_tensors": inp, "output_tensors": None, "bias": None},
        "layer_quant_config": {}, "layer_type_quant_config": {}, "exclude": [],
        "export": {"kv_cache_group": [], "pack_method": "reorder"}}


# the static input scales the int8 files carry (amax 3 into GEMM1, 1 into GEMM2)
INT8_INPUT_SCALES = {"gate_proj": 3.0 / 127, "up_proj": 3.0 / 127, "down_proj": 1.0 / 127}


def int8_weights(K, N, per_channel, static, seed=0):
    """Quark's int8 tensors: weight int8 [out, in], weight_scale fp32 [out] (per channel) or
    0-d (per tensor), input_scale fp32 0-d; every expert's and shard's scales differ."""
    g = torch.Generator().manual_seed(seed)
    out, scales, codes_of = {}, {}, {}
    for e in range(E):
        for proj, (o, i) in shapes(K, N).items():
            w = torch.randn(o, i, generator=g, dtype=torch.float64) / i ** 0.5
            w = w * (0.5 + 2 * torch.rand(o, 1, generator=g, dtype=torch.float64)) * (1 + e)
            s = (w.abs().amax(1) if per_channel else w.abs().max()) / 127
            s = s.float().double()
            codes = torch.round(w / (s.unsqueeze(1) if per_channel else s)).clamp(-128, 127)
            out[f"{e}.{proj}.weight"] = codes.to(torch.int8)
            out[f"{e}.{proj}.weight_scale"] = s.float()
            if static:  # a dynamic layer has no input_scale parameter to load into
                out[f"{e}.{proj}.input_scale"] = torch.tensor(INT8_INPUT_SCALES[proj],
                                                              dtype=torch.float32)
            scales[(e, proj)], codes_of[(e, proj)] = s, codes
    return out, scales, codes_of


def int8_token(t):  # dynamic per token, s = amax / 127
    s = t.abs().amax(-1, keepdim=True).clamp_min(1e-10) / 127
    return torch.round(t / s).clamp(-128, 127) * s


def int8_token_fp32(t):  # vLLM's _per_token_quant_int8: x * (127 / amax) in fp32, half away
    f = t.float()
    amax = f.abs().amax(-1, keepdim=True).clamp_min(1e-10)
    q = f * (127 / amax)
    q = torch.sign(q) * torch.floor(q.abs() + 0.5)
    return q.clamp(-128, 127).double() * (amax / 127).double()


def int8_static(scale):
    return lambda t: torch.round(t / scale).clamp(-128, 127) * scale


def int8():
    """Quark int8 through vLLM's fused_moe Triton kernel: weight scales per channel or per
    tensor, activations per token (dynamic) or one static scale. The kernel takes its
    `per_channel_quant` flag from the activations' per_act_token_quant (fused_experts:
    per_channel_quant=quant_config.per_act_token_quant) and reads the weight scales by it,
    so the readings include what a kernel reading the weight scales by the activations'
    granularity computes."""
    print("Quark int8 W8A8 (vLLM's fused_moe Triton kernel)")
    K, N = 128, 128
    for wq, aq in (("per_channel", "token"), ("per_tensor", "token"),
                   ("per_channel", "static"), ("per_tensor", "static")):
        per_channel = wq == "per_channel"
        weights, scales, codes = int8_weights(K, N, per_channel, aq == "static")
        # what the layer holds after processing: per-tensor w13 requantized to one scale per
        # expert (the larger of gate's and up's), as QuarkW8A8Int8MoEMethod does
        held = {}
        for e in range(E):
            s13 = torch.maximum(scales[(e, "gate_proj")], scales[(e, "up_proj")])
            for proj in PROJS:
                s = scales[(e, proj)]
                dq = codes[(e, proj)] * (s.unsqueeze(1) if per_channel else s)
                if not per_channel and proj != "down_proj":
                    held[(e, proj)] = (torch.round(dq / s13).clamp(-128, 127), s13)
                else:
                    held[(e, proj)] = (codes[(e, proj)], s)
        dense = {k: c * (s.unsqueeze(1) if s.dim() else s) for k, (c, s) in held.items()}
        # the kernel reads one scale per expert at b_scale_ptr + e (per-channel scales:
        # expert 0's channel e) or, with per-token flags and 1-D scales (strides 0),
        # element 0 (expert 0's) for every expert and column
        if per_channel:
            # w13's scales are [gate; up] of expert 0: index e < N is gate's channel e for
            # both shards; w2's: down's channel e
            misread = ("weight scale read at [e] (expert 0's channel e)", {
                k: c * held[(0, "down_proj" if k[1] == "down_proj" else "gate_proj")][1][k[0]]
                for k, (c, s) in held.items()})
        else:
            misread = ("expert 0's weight scale for every expert",
                       {k: c * held[(0, k[1])][1] for k, (c, s) in held.items()})
        if aq == "token":
            q1 = q2 = int8_token
        else:
            q1 = int8_static(INT8_INPUT_SCALES["gate_proj"])
            q2 = int8_static(INT8_INPUT_SCALES["down_proj"])
        experts = build(quark_int8_config(wq, aq), "quark", K, N, weights)
        for M in (1, 9, 17, 64):
            x, w, ids = routing(M, K)
            out, kernel = forward(experts, x, w, ids)
            readings = {"the file's scales": reference(dense, x, w, ids, K, q1, q2),
                        misread[0]: reference(misread[1], x, w, ids, K, q1, q2)}
            readings["the file's scales, silu(gate) rounded first"] = reference(
                dense, x, w, ids, K, q1, q2, gate_rounded=True)
            readings["activations unquantized (W8A16)"] = reference(dense, x, w, ids, K)
            if aq == "token":
                readings["vLLM's fp32 per-token rule"] = reference(
                    dense, x, w, ids, K, int8_token_fp32, int8_token_fp32)
                readings["+ each expert's output rounded"] = reference(
                    dense, x, w, ids, K, int8_token_fp32, int8_token_fp32, round_expert=True)
            cells = "  ".join(f"{k}: {rel(out, r):.3e}" for k, r in readings.items())
            print(f"  weights {wq:11s} inputs {aq:6s} M={M:3d} {kernel:22s} {cells}")


def int8_layer():
    """Per-tensor Quark int8 (the real quark-int8-tensor folder's scheme): the layer vLLM
    processed, read back, against what QuarkW8A8Int8MoEMethod should hold (w1 / w3 requantized
    to the larger of their two scales, the input scales' maximum), and the kernel run on the
    layer's own tensors: processing and kernel told apart."""
    print("Quark int8, per-tensor weights: the processed layer read back")
    K, N = 128, 128
    for aq in ("static", "token"):
        weights, scales, codes = int8_weights(K, N, False, aq == "static")
        experts = build(quark_int8_config("per_tensor", aq), "quark", K, N, weights)
        w13, w2 = experts.w13_weight.cpu().double(), experts.w2_weight.cpu().double()
        s13, s2 = experts.w13_weight_scale.cpu().double(), experts.w2_weight_scale.cpu().double()
        print(f"  inputs {aq}: w13 {tuple(w13.shape)}, w13_weight_scale {tuple(s13.shape)}, "
              f"w2_weight_scale {tuple(s2.shape)}, w13_input_scale "
              f"{getattr(experts, 'w13_input_scale', None)}, w2_input_scale "
              f"{getattr(experts, 'w2_input_scale', None)}")
        own, file = {}, {}
        for e in range(E):
            top = torch.maximum(scales[(e, "gate_proj")], scales[(e, "up_proj")])
            for j, proj in enumerate(("gate_proj", "up_proj")):
                exact = codes[(e, proj)] * scales[(e, proj)] / top
                want = torch.round(exact).clamp(-128, 127)
                got = w13[e, j * N:(j + 1) * N]
                # vLLM's per_tensor_dequantize on CUDA: codes.to(float16) * scale, the 0-d
                # float32 scale cast to float16 first (the binary op's common dtype)
                half = codes[(e, proj)].half().cuda() * scales[(e, proj)].float().cuda()
                via16 = torch.round(half.float() / top.float().cuda()).clamp(-128, 127)
                off = got != want
                print(f"    expert {e} {proj}: scale ratio to the larger "
                      f"{float(scales[(e, proj)] / top):.4f}; held codes off the exact "
                      f"requantization {int(off.sum())} of {want.numel()} (by at most "
                      f"{int((got - want).abs().max())}; exact values there "
                      f"{exact[off][:3].tolist()}, held {got[off][:3].tolist()}), off the "
                      f"float16 rule {int((via16.cpu().double() != got).sum())}, off the "
                      f"file's {int((got != codes[(e, proj)]).sum())}; held scale "
                      f"{float(s13[e]):.6e} vs the larger {float(top):.6e}")
                own[(e, proj)] = got * s13[e]
                file[(e, proj)] = want * top
            got = w2[e]
            print(f"    expert {e} down_proj: codes differing from the file's "
                  f"{int((got != codes[(e, 'down_proj')]).sum())}; held scale "
                  f"{float(s2[e]):.6e} vs the file's {float(scales[(e, 'down_proj')]):.6e}")
            own[(e, "down_proj")] = got * s2[e]
            file[(e, "down_proj")] = codes[(e, "down_proj")] * scales[(e, "down_proj")]
        if aq == "token":
            q1 = q2 = int8_token
        else:
            q1 = int8_static(INT8_INPUT_SCALES["gate_proj"])
            q2 = int8_static(INT8_INPUT_SCALES["down_proj"])
        for M in (1, 9, 64):
            x, w, ids = routing(M, K)
            out, kernel = forward(experts, x, w, ids)
            readings = {"requantized as the method says": reference(file, x, w, ids, K, q1, q2),
                        "+ silu(gate) rounded": reference(file, x, w, ids, K, q1, q2,
                                                         gate_rounded=True),
                        "the layer's own tensors": reference(own, x, w, ids, K, q1, q2),
                        "own + silu(gate) rounded": reference(own, x, w, ids, K, q1, q2,
                                                             gate_rounded=True)}
            cells = "  ".join(f"{k}: {rel(out, r):.3e}" for k, r in readings.items())
            print(f"  inputs {aq:6s} M={M:3d} {kernel:14s} {cells}")


def int8_router():
    """Quark int8 per token, top-1, the router weight on the input: QuarkW8A8Int8MoEMethod
    calls fused_experts itself, whose GEMM1 multiplies its output by the weight
    (MUL_ROUTED_WEIGHT), where the modular kernels' prepare step multiplies the input."""
    print("Quark int8 per channel, per-token inputs, router weight on the input, top-1")
    K, N = 128, 128
    weights, scales, codes = int8_weights(K, N, True, False)
    dense = {k: codes[k] * scales[k].unsqueeze(1) for k in codes}
    experts = build(quark_int8_config("per_channel", "token"), "quark", K, N, weights, topk=1,
                    router_on_input=True)
    for M in (1, 9, 64):
        x, w, ids = routing(M, K, topk=1)
        out, kernel = forward(experts, x, w, ids)
        q = int8_token
        readings = {
            "x * r rounded, then quantized": reference(dense, x, w, ids, K, q, q,
                                                       router_on_input=True),
            "+ silu(gate) rounded": reference(dense, x, w, ids, K, q, q, router_on_input=True,
                                              gate_rounded=True),
            "r on GEMM1's output (fp32)": reference(dense, x, w, ids, K, q, q,
                                                    router_on_gemm1=True),
            "+ silu(gate) rounded ": reference(dense, x, w, ids, K, q, q, router_on_gemm1=True,
                                               gate_rounded=True),
            "r on the output": reference(dense, x, w, ids, K, q, q, gate_rounded=True)}
        cells = "  ".join(f"{k}: {rel(out, r):.3e}" for k, r in readings.items())
        print(f"  M={M:3d} {kernel:14s} {cells}")


# --- mxfp4 on the rounded-up Marlin path ------------------------------------------------------

def mxfp4_weights(K, N, seed=0, hidden_to=None, spread=0, spread_projs=PROJS):
    """The gpt-oss release's MXFP4 tensors per expert: weight uint8 [out, in/2] (low nibble
    first), weight_scale uint8 E8M0 [out, in/32], OCP's floor scale per block of 32.
    hidden_to: the same layer written at a larger hidden size by hand, the extra inputs of
    gate / up and the extra outputs of down zero codes under scale 1.0 (E8M0 127).
    spread: each block's weights first multiplied by 2^j, j drawn in [-spread, spread], so
    that neighbouring blocks' scales differ (randn weights give most blocks one exponent,
    where a kernel reading a neighbour's scale would not show); spread_projs: the projections
    spread (the others keep randn's scales)."""
    g = torch.Generator().manual_seed(seed)
    out, dense = {}, {}
    for e in range(E):
        for proj, (o, i) in shapes(K, N).items():
            w = torch.randn(o, i, generator=g, dtype=torch.float64) / i ** 0.5
            blocks = w.view(o, i // 32, 32)
            if spread and proj in spread_projs:
                blocks = blocks * 2.0 ** torch.randint(-spread, spread + 1, (o, i // 32, 1),
                                                       generator=g)
            exp = torch.floor(torch.log2(blocks.abs().amax(-1))) - 2
            code, val = e2m1_codes(blocks / (2.0 ** exp).unsqueeze(-1))
            code, sbyte = code.view(o, i), (exp + 127).to(torch.uint8)
            deq = (val * (2.0 ** exp).unsqueeze(-1)).view(o, i)
            if hidden_to:
                pad_in = (0, hidden_to - K) if proj != "down_proj" else (0, 0)
                pad_out = (0, 0, 0, hidden_to - K) if proj == "down_proj" else (0, 0)
                code = torch.nn.functional.pad(torch.nn.functional.pad(code, pad_in), pad_out)
                deq = torch.nn.functional.pad(torch.nn.functional.pad(deq, pad_in), pad_out)
                sbyte = torch.nn.functional.pad(torch.nn.functional.pad(
                    sbyte, (0, code.shape[1] // 32 - sbyte.shape[1]), value=127),
                    (0, 0, 0, code.shape[0] - sbyte.shape[0]), value=127)
            out[f"{e}.{proj}.weight"] = (code[:, 0::2] | (code[:, 1::2] << 4)).to(torch.uint8)
            out[f"{e}.{proj}.weight_scale"] = sbyte
            dense[(e, proj)] = deq
    return out, dense


def mxfp4_rounded():
    """vLLM's gpt-oss-format MXFP4 method (Mxfp4MoEMethod, the file config {"quant_method":
    "mxfp4"}) on Marlin rounds the layer's hidden size up to 256 and its intermediate size to
    128 (oracle/mxfp4.py, mxfp4_round_up_hidden_size_and_intermediate_size); the runner pads
    the input with zeros (its _maybe_pad_hidden_states) and the output is cut back. moecert
    read 3.0e-2 at hidden 160 (ci, 2026-11-30) where unrounded layers read 3e-3: here the same
    layers without moecert, beside the same weights written at hidden 256 by hand (no
    rounding), to tell vLLM's rounding path from the kernel at that size."""
    print("gpt-oss-format MXFP4 (Mxfp4MoEMethod), bf16, silu, M = 33, top-2")
    with served_model_config():
        for K, N, hidden_to in ((160, 256, None), (128, 64, None), (512, 64, None),
                                (128, 256, None), (512, 256, None), (160, 256, 256),
                                (128, 128, None), (192, 256, None)):
            weights, dense = mxfp4_weights(K, N, hidden_to=hidden_to)
            Kl = hidden_to or K
            experts = build(MXFP4_FILE, "mxfp4", Kl, N, weights)
            x, w, ids = routing(33, K)
            held = experts.moe_config.hidden_dim
            xp = torch.nn.functional.pad(x, (0, held - K))  # as the runner pads
            out, kernel = forward(experts, xp, w, ids)
            out = out[:, :K]
            ref = {k: v[:, :K] if k[1] != "down_proj" else v[:K] for k, v in dense.items()}
            cells = "  ".join(
                f"{name}: {rel(out, reference(ref, x, w, ids, K, gate_rounded=gr)):.3e}"
                for name, gr in (("reference", False), ("silu(gate) rounded", True)))
            label = f"K={K} written at {hidden_to}" if hidden_to else f"K={K}"
            print(f"  {label:22s} N={N:3d} layer hidden {held} {kernel:14s} {cells}", flush=True)


MXFP4_FILE = {"quant_method": "mxfp4", "modules_to_not_convert": []}


def mxfp4_spread():
    """The gpt-oss-format MXFP4 layer (K 512, N 256, E 4, top-2; no rounding) with randn
    weights whose 32-wide blocks are scaled by 2^j, j in [-2, 2] (so neighbouring block scales
    differ, as in any real checkpoint; plain randn gives most blocks one exponent), through
    each MXFP4 backend vLLM 0.25.1 offers on this GPU (moe_backend: the oracle's own choice,
    "marlin", "emulation", "triton"), at several M; then on Marlin the spread in gate / up
    only, in down only and nowhere, and each token's error at M = 17 with its experts. Each
    output also against the reading with gate / up clamped at 7 (the gpt-oss method's
    swiglu_limit, which its quant config states for any activation)."""
    K, N = 512, 256
    print(f"gpt-oss-format MXFP4, bf16, silu, K {K}, N {N}, E {E}, top-{TOPK}; "
          "rel_fro against float64 with silu(gate) rounded to bf16")
    cases = [("auto", PROJS), ("marlin", PROJS), ("emulation", PROJS), ("triton", PROJS),
             ("marlin", ("gate_proj", "up_proj")), ("marlin", ("down_proj",)), ("marlin", ())]
    before = CONFIG.kernel_config.moe_backend
    with served_model_config():
        for backend, projs in cases:
            weights, dense = mxfp4_weights(K, N, spread=2, spread_projs=projs)
            CONFIG.kernel_config.moe_backend = backend
            try:
                experts = build(MXFP4_FILE, "mxfp4", K, N, weights)
            except Exception as e:  # a backend this GPU or build does not offer
                print(f"  moe_backend={backend:9s}: not built: {type(e).__name__}: "
                      f"{str(e)[:160]}", flush=True)
                continue
            finally:
                CONFIG.kernel_config.moe_backend = before
            cells = []
            for M in (1, 4, 17, 64):
                x, w, ids = routing(M, K)
                out, kernel = forward(experts, x, w, ids)
                ref = reference(dense, x, w, ids, K, gate_rounded=True)
                clamped = reference(dense, x, w, ids, K, gate_rounded=True, clamp=7.0)
                cells.append(f"M={M}: {rel(out, ref):.2e} (clamped at 7: "
                             f"{rel(out, clamped):.2e})")
            spread = "+".join(p.split("_")[0] for p in projs) or "none"
            print(f"  moe_backend={backend:9s} spread {spread:14s} {kernel:26s} "
                  + "  ".join(cells), flush=True)
            if backend == "marlin" and projs == PROJS:
                x, w, ids = routing(17, K)
                out, _ = forward(experts, x, w, ids)
                ref = reference(dense, x, w, ids, K, gate_rounded=True)
                for t in range(17):
                    print(f"    token {t:2d} experts {ids[t].tolist()} weights "
                          f"{[round(float(v), 3) for v in w[t]]} rel "
                          f"{rel(out[t:t + 1], ref[t:t + 1]):.2e}")


@contextlib.contextmanager
def served_model_config():
    """vLLM's current config with a served model's ModelConfig (a Qwen3-MoE's default
    config): vLLM 0.25.1's MXFP4 oracle reads model_config.quantization_config while the
    layer is built."""
    import transformers
    from vllm.config import ModelConfig

    folder = tempfile.mkdtemp(prefix="mxfp4-model-")
    # architectures named: vLLM's ModelConfig refuses the base class a bare config implies
    transformers.AutoConfig.for_model(
        "qwen3_moe", architectures=["Qwen3MoeForCausalLM"]).save_pretrained(folder)
    before = CONFIG.model_config
    CONFIG.model_config = ModelConfig(model=folder, tokenizer=folder, skip_tokenizer_init=True,
                                      dtype=torch.bfloat16)
    try:
        yield
    finally:
        CONFIG.model_config = before


STEPS = {"fp8-block": fp8_block, "ops": ops_check, "bias": bias, "nvfp4": nvfp4,
         "int8": int8, "fp8-tensor": fp8_tensor, "router": router,
         "int8-layer": int8_layer, "int8-router": int8_router, "mxfp4-rounded": mxfp4_rounded,
         "mxfp4-spread": mxfp4_spread}

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
