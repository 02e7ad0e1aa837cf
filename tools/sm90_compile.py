"""Compile the grouped MoE GEMM for an H100 (sm90) on a machine without a GPU: no launch, only
Triton's compiler and the ptxas its wheel carries. A small layer of each scheme goes through
the Triton backend's launch path (every other Triton kernel is stubbed out: its outputs are
garbage, only the GEMM's argument types matter), the GEMM's launch is caught and compiled for
sm90 with a prefill tile; printed per variant: Hopper MMAs (`warp_group_dot`) and their waits
in the TTGIR, registers and stack bytes per thread (cuobjdump) and shared memory. The TTGIR
and the cubin go to /tmp/i34c/ (`nvdisasm -c` of the cubin: the SASS). What spills or fails
to build shows here before any device time is spent; timings need the GPU (tools/prefill_sweep.py).

    python tools/sm90_compile.py bf16:both mxfp4:ptx mxfp4:ptx-n64 fp8-w8a8:ch-both

A variant is SCHEME:FLAGS; flags: both (ACC_DOT on and off), ptx (the PTX nibble decodes, int4
in nibble planes: a GPU's layer),
g8 (GROUP_M 8), k128, n64, n256, m256, m64, m32, w4, s3, sw (SWAP_AB), t64 / t32 / t16 (TAIL_M)
(the tile's fields), dec (the
decode tile: BLOCK_M 16, BLOCK_N 128, BLOCK_K 128, 4 warps, 4 stages, which the other flags then
change, as dec-m32-n256-s3-sw),
ch (fp8-w8a8 per channel, dynamic per-token activations), pair (MXFP4's E8M0 scales on
the pairs' partial sums, not folded into the weights), cvt (with MOECERT_TRITON_FP4_CARRY=1:
NVFP4's scales by the hardware e4m3 conversion, as on sm89+), epi (each variant also with the
silu activation in GEMM1's epilogue, gemm_kernel's EPI_ACT, in the default column order),
tma (the weight tile by TMA where it applies, gemm_kernel's TMA_B, as on sm90; without it,
per-thread loads).
The K loop's SASS instructions per step: `python tools/sass_loop.py /tmp/i34c/*.cubin`.
Triton's version here (3.9 on the development machine) is not the GPU machine's (3.6): the
figures show what a tile asks of the registers, not what the GPU machine's build gives.
"""
import os
import re
import sys

os.environ.pop("TRITON_INTERPRET", None)
import torch
import triton
from moecert.kernels.triton_moe import fused_moe, gemm_kernel, kinds, tune_stages
from moecert.kernels.triton_moe.backend import TritonBackend
from moecert.reference import MoEProblem, make_inputs, synthesize
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.tools.tensor_descriptor import TensorDescriptor

captured = []
class Spy:
    def __getitem__(self, grid):
        def launch(*args, **kw):
            captured.append((args, kw))
        return launch
fn = gemm_kernel.moe_gemm_kernel
gemm_kernel.moe_gemm_kernel = Spy()
DT = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.uint8: "u8",
      torch.int8: "i8", torch.int32: "i32", torch.int64: "i64", torch.float8_e4m3fn: "fp8e4nv",
      torch.int16: "i16"}
target = GPUTarget("cuda", 90, 32)

def compile_one(args, kw, tag):
    names = fn.arg_names
    sig, consts, attrs = {}, {}, {}
    vals = list(args) + [None] * (len(names) - len(args))
    for i, name in enumerate(names):
        if name in kw and i >= len(args):
            v = kw[name]
            if name in ("num_warps", "num_stages"):
                continue
            sig[name] = "constexpr"; consts[(i,)] = v
            continue
        v = vals[i]
        if isinstance(v, TensorDescriptor):  # TMA_B's weights
            sig[name] = (f"tensordesc<{DT[v.base.dtype]}"
                         f"[{','.join(str(b) for b in v.block_shape)}]>")
        elif isinstance(v, torch.Tensor):
            sig[name] = "*" + DT[v.dtype]; attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            sig[name] = "i32" if abs(int(v)) < 2**31 else "i64"
            if int(v) % 16 == 0 and int(v) != 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn, sig, consts, attrs)
    k = triton.compile(src, target=target, options={"num_warps": kw["num_warps"],
                                                    "num_stages": kw["num_stages"]})
    ttgir = k.asm["ttgir"]
    n_wgmma = len(re.findall(r"warp_group_dot ", ttgir))
    n_wait = len(re.findall(r"warp_group_dot_wait", ttgir))
    n_mma = len(re.findall(r"tt\.dot ", ttgir))
    import subprocess
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(k.asm["cubin"])
    objdump = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    res = subprocess.run([objdump, "--dump-resource-usage", f.name], capture_output=True,
                         text=True).stdout
    m = re.search(r"REG:(\d+).*?STACK:(\d+)", res)
    tagf = re.sub(r"[^a-z0-9]+", "_", tag.lower())[:80]
    os.makedirs("/tmp/i34c", exist_ok=True); open(f"/tmp/i34c/{tagf}.ttgir", "w").write(ttgir)
    open(f"/tmp/i34c/{tagf}.cubin", "wb").write(k.asm["cubin"])  # SASS: nvdisasm beside
    tag = f"{tag} WSCALE={kw['WSCALE']}"
    print(f"{tag}: wgmma {n_wgmma}, wgmma_wait {n_wait}, tt.dot {n_mma}, "
          f"regs/stack {m.groups() if m else res[-200:]}, shared {k.metadata.shared}", flush=True)
    return k

BACKEND = TritonBackend()
import triton.runtime.jit as _jit

_jit.JITFunction.run = lambda self, *a, **k: None
from moecert.kernels.triton_moe import align as _align


class _Nop:
    def __getitem__(self, grid):
        return lambda *a, **k: None
_align.count_kernel = _Nop(); _align.place_kernel = _Nop()
import moecert.kernels.triton_moe.backend as _b

_b.interpreting = lambda: True
def stage_for(scheme, attrs, K=256, N=256, E=4, M=64):
    P = MoEProblem(M=M, K=K, N=N, E=E, topk=2)
    layer = BACKEND.create_layer(synthesize(scheme, P, seed=1, **attrs), P)
    BACKEND.process_weights_after_loading(layer)
    x, w, ids = make_inputs(P, seed=2)
    return tune_stages.LayerStage(layer, x, w, ids)

PREFILL = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 4,
           "FAST_I4": True}
cases = [a.split(":") for a in sys.argv[1:]]
for scheme, variant in cases:
    attrs = {"group_size": 128} if scheme in ("gptq-int4", "awq-int4") else {}
    if "ptx" in variant:  # what a CUDA sm80+ device gets: int4 in nibble planes, decoded by
        # the PTX, and the plan's choices that follow (W4A8's codes in the compute dtype)
        os.environ["MOECERT_TRITON_NIB_SPAN"] = "128"
        fused_moe.int4_pairs_run_on = lambda device: True
        fused_moe.e4m3_cvt_runs_on = lambda device: True  # sm89+ (MXFP8's E4M3_WORDS)
        fused_moe.fp6_planes_run_on = lambda device: True  # sm80+ (MXFP6's six-bit planes)
    else:
        os.environ.pop("MOECERT_TRITON_NIB_SPAN", None)
        fused_moe.int4_pairs_run_on = lambda device: False
        fused_moe.e4m3_cvt_runs_on = lambda device: False
        fused_moe.fp6_planes_run_on = lambda device: False
    fused_moe.tma_runs_on = (lambda device, _v="tma" in variant: _v)  # TMA_B: sm90's
    if scheme == "fp8-w8a8" and variant.startswith("ch"):
        attrs = {"weight_strategy": "channel", "activation": "dynamic-token"}
    st = stage_for(scheme, attrs)
    cfg = dict(PREFILL)
    if "dec" in variant:  # the decode tile; the flags below change it (dec-n64-sw)
        cfg = {**st.defaults[0], "BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4,
               "num_stages": 4}
    if "g8" in variant: cfg["GROUP_M"] = 8
    if "k128" in variant: cfg["BLOCK_K"] = 128
    if "n64" in variant: cfg["BLOCK_N"] = 64
    if "n256" in variant: cfg["BLOCK_N"] = 256
    if "m256" in variant: cfg["BLOCK_M"] = 256
    if "m64" in variant: cfg["BLOCK_M"] = 64
    if "m32" in variant: cfg["BLOCK_M"] = 32
    if "w4" in variant: cfg["num_warps"] = 4
    if "s3" in variant: cfg["num_stages"] = 3
    if "sw" in variant: cfg["SWAP_AB"] = True
    for tail in ("t64", "t32", "t16"):  # TAIL_M: an expert's last block on a smaller tile
        if tail in variant: cfg["TAIL_M"] = int(tail[1:])
    for acc in ((True, False) if "both" in variant else (None,)):
        captured.clear()
        if acc is not None:
            fused_moe.acc_dot_applies = (lambda *a, _v=acc: _v)
        st.run(1, cfg)
        args, kw = captured[-1]
        if "ptx" in variant: kw = {**kw, "FAST_I4": kinds.I4_PAIRS}
        if "cvt" in variant and kw.get("CARRY") and kw["WSCALE"] == kinds.S_E4M3:
            kw = {**kw, "E4M3_CVT": True}  # what an sm89+ device gets (fused_moe.e4m3_cvt)
        if "pair" in variant and kw["WSCALE"] == kinds.S_E8M0_W:  # MXFP4 unfolded
            kw = {**kw, "WSCALE": kinds.S_E8M0}
        for epi in ((-1, 0) if "epi" in variant else (-1,)):
            kw = {**kw, "EPI_ACT": epi, "SCALE_RUNS": epi == 0 and fused_moe.scale_runs(
                st.weights(1, cfg), cfg["BLOCK_N"], "silu", "halves")}
            if kw.get("TMA_B") and epi == 0:  # the halves' two runs per copy
                q = args[3].base
                args = (*args[:3], fused_moe.tma_weights(q.reshape(q.shape[0], -1, q.shape[-1]),
                                                         2, cfg["BLOCK_N"], kw["BLOCK_K"]),
                        *args[4:])
                kw = {**kw, "TMA_B": 2}
            try:
                compile_one(args, kw, f"{scheme} {variant} acc_dot={kw['ACC_DOT']} epi={epi} "
                                      f"cfg={cfg}")
            except Exception as e:
                print(f"{scheme} {variant}: COMPILE FAILED {type(e).__name__}: {str(e)[:800]}")
