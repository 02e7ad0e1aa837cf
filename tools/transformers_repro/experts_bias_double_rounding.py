"""transformers' gpt-oss experts add each linear's bias to the product already rounded to
bf16: two roundings where the layer's value has one (transformers 5.24.0, every experts
implementation: eager, grouped_mm, batched_mm).

`GptOssExperts.forward` (models/gpt_oss/modeling_gpt_oss.py, lines 108 and 110) computes
`current_state @ self.down_proj[e] + self.down_proj_bias[e]` in bf16: the matmul's float32
accumulator is rounded to bf16, then the bias is added and the sum rounded again.
integrations/moe.py does the same in `_batched_linear` (line 107, `out.add_(bias)`) and
`_grouped_linear` (line 419, "We should be able to pass bias to the grouped_mm call, but it's
not yet supported"). A single rounding of product + bias (torch.addmm, a fused kernel's
epilogue, vLLM's MoE) gives the nearest bf16 value of the layer's output; the double rounding
can land one bf16 step away, here where the product falls on a tie.

One expert, hidden size 32, intermediate size 32, one token x = e_0. Gate column 0 of the
token is 8 (clamped to 7), up 0, so the activation's channel 0 is exactly 7 (bf16: 7 *
sigmoid(11.9) rounds to 7). down_proj[0, 0] = 3.4375, bias 0.0625: product 24.0625 (not a
bf16 value: the bf16 step at 16..32 is 0.125, 24.0625 is a tie and rounds to 24.0), the
exact output 24.125 is a bf16 value.

    python tools/transformers_repro/experts_bias_double_rounding.py    # torch, transformers

Expected: output[0, 0] = 24.125 (7 * 3.4375 + 0.0625, a bf16 value). Found (transformers
5.24.0, torch 2.13.0+cpu): 24.0 with each of the three implementations, one bf16 step off;
torch.addmm of the same bf16 tensors gives 24.125. moecert's exact tier (structured inputs
whose every product + bias is a bf16 value) sees 3 to 9 elements of 2176 to 8192 differ by
one step on gpt-oss MXFP4 and bf16 layers with biases; the accuracy checks pass (one extra
rounding is within the bf16 tolerance). Upstream: none found on transformers' tracker
(searched 2026-11-28: "GptOssExperts bias bf16 rounding", "grouped_mm bias"); the same
double rounding was fixed in a test reference in NVIDIA/TensorRT-LLM PR #17505, and torch's
grouped_mm has no bias argument yet (pytorch/pytorch issue #191652).
"""

import torch
import transformers
from transformers.models.gpt_oss.configuration_gpt_oss import GptOssConfig
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

H = N = 32


def experts(implementation: str) -> GptOssExperts:
    config = GptOssConfig(hidden_size=H, intermediate_size=N, num_local_experts=1,
                          num_experts_per_tok=1)
    config._experts_implementation = implementation
    m = GptOssExperts(config).to(torch.bfloat16)
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        m.gate_up_proj[0, 0, 0] = 8.0  # gate channel 0 (even column) of input 0; up 0
        m.down_proj[0, 0, 0] = 3.4375  # [E, in, out]
        m.down_proj_bias[0, 0] = 0.0625
    return m.eval()


def main():
    x = torch.zeros(1, H, dtype=torch.bfloat16)
    x[0, 0] = 1.0
    ids = torch.zeros(1, 1, dtype=torch.int64)
    weights = torch.ones(1, 1, dtype=torch.bfloat16)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    m = experts("eager")
    act = m._apply_gate(x @ m.gate_up_proj[0] + m.gate_up_proj_bias[0])
    single = torch.addmm(m.down_proj_bias[0], act, m.down_proj[0])
    print(f"activation channel 0: {act[0, 0].item()}; torch.addmm (one rounding): "
          f"{single[0, 0].item()}")
    bad = False
    for impl in ("eager", "grouped_mm", "batched_mm"):
        with torch.inference_mode():
            y = experts(impl)(x, ids, weights)
        print(f"{impl:11s} output[0, 0] = {y[0, 0].item()} (expected 24.125)")
        bad |= y[0, 0].item() != 24.125
    print("BUG: the bias is added to the bf16-rounded product (two roundings)" if bad
          else "ok: product + bias rounded once")


if __name__ == "__main__":
    main()
