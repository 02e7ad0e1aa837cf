"""vLLM 0.32 loads checkpoint values the format rejects and computes with them. One value at
index 0 of w13's tensor of a role (expert 0's gate_proj, first element): a NaN / zero /
negative weight scale, an e4m3 NaN code in an fp8 weight, a NaN / infinite bf16 weight. Per
case: what vLLM holds there after its loader, whether loading or
process_weights_after_loading raised, and the forward's NaN / inf count or its rel_fro
against the same layer built from the clean tensors. vLLM and torch only."""
import math

import torch
from _layer import FP8_BLOCK, GPTQ4, bf16, fp8_block, gptq_int4, layer, process, rel, routing, run

SCHEMES = {  # name: (quantization_config, clean checkpoint tensors, layer kwargs)
    "gptq-int4": (GPTQ4, gptq_int4()[0], {}),
    "fp8-block": (FP8_BLOCK, fp8_block(), {}),
    "bf16": (None, bf16(), {"amx": False}),  # the CPU's own AMX answer (none here)
}
NEG = "negative"  # the clean scale with its sign flipped
CASES = [  # scheme, checkpoint tensor (expert 0), vLLM parameter, value at index 0
    ("gptq-int4", "gate_proj.scales", "w13_scales", math.nan),
    ("gptq-int4", "gate_proj.scales", "w13_scales", 0.0),
    ("gptq-int4", "gate_proj.scales", "w13_scales", NEG),
    ("fp8-block", "gate_proj.weight_scale_inv", "w13_weight_scale_inv", math.nan),
    ("fp8-block", "gate_proj.weight_scale_inv", "w13_weight_scale_inv", 0.0),
    ("fp8-block", "gate_proj.weight_scale_inv", "w13_weight_scale_inv", NEG),
    ("fp8-block", "gate_proj.weight", "w13_weight", 0x7F),  # e4m3 NaN codes (a raw byte)
    ("fp8-block", "gate_proj.weight", "w13_weight", 0xFF),
    ("bf16", "gate_proj.weight", "w13_weight", math.nan),
    ("bf16", "gate_proj.weight", "w13_weight", math.inf),
    ("bf16", "gate_proj.weight", "w13_weight", -math.inf),
]


def corrupt(t, value):
    t = t.clone()
    if t.dtype == torch.float8_e4m3fn:
        t.view(torch.uint8).view(-1)[0] = value
    else:
        t.view(-1)[0] = -t.view(-1)[0] if value is NEG else value
    return t


def shown(v):
    if v.dtype == torch.float8_e4m3fn:
        return f"0x{int(v.view(torch.uint8)):02X}"
    return f"{float(v):.4g}"


x, wt, ids = routing(17)
clean, control = {}, []
for name, (d, w, kw) in SCHEMES.items():
    outs = []
    for _ in range(2):  # built twice: the control that a clean rebuild gives rel_fro 0
        r = layer(d, w, **kw)
        process(r)
        outs.append(run(r, x, wt, ids).double())
    clean[name] = outs[0]
    control.append(f"{name} {r.routed_experts.quant_method.experts_cls.__name__} "
                   f"{rel(outs[1], outs[0]):.0e}")
print("clean layers: experts class, rel_fro of a second clean build against the first\n  "
      + ", ".join(control))
print(f"{'scheme':10} {'checkpoint tensor':28} {'value':9} {'vLLM holds':10} "
      f"{'load + process':15} forward")
raised = 0
for name, tensor, param, value in CASES:
    d, w, kw = SCHEMES[name]
    key = f"0.{tensor}"
    bad = dict(w, **{key: corrupt(w[key], value)})
    row = f"{name:10} {key:28} {shown(bad[key].view(-1)[0]):9}"
    try:
        r = layer(d, bad, **kw)
        held = shown(getattr(r.routed_experts, param).reshape(-1)[0])
        process(r)
    except Exception as e:
        raised += 1
        print(f"{row} {'':10} raised {type(e).__name__}: {e}")
        continue
    y = run(r, x, wt, ids)
    n_bad = int((~y.isfinite()).sum())
    out = (f"NaN/inf in {n_bad} of {y.numel()}" if n_bad else
           f"finite, rel_fro {rel(y, clean[name]):.2e}")
    print(f"{row} {held:10} {'accepted':15} {out}")
print(f"{len(CASES) - raised} of {len(CASES)} accepted at load (the finding holds if all are)")
