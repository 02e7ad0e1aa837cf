"""Which side of the failing NVFP4 prefill-decode CUDA test is off (issue 44, docs/speed.md
"Round four, measured"): the test's own weights (tests/kernels/test_fp4_scale_bf16_cuda.py,
`_described`), decoded by `dequant.dequantize` four ways (scale words or bf16 scales; the
PTX decode or the bit-field one, both compiled), each against the codes' values computed here
in torch from the format's code tables (float64, then the compute dtype), and a count of
where two sides differ only in the sign of a zero.

    python tools/i44_prefill_diag.py [--scale nvfp4|mxfp4-folded] [--N 200] [--K 1024]

Prints one line per decode and the first differing elements; exit 1 where a decode is off.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "kernels"))


def _values(scale: str, N: int, K: int) -> torch.Tensor:
    """The decoded weights [E, N, K] in bf16 from the raw codes the test draws (its generator
    and order), by the format facts' code tables: the independent side."""
    import test_fp4_scale_bf16_cuda as t
    from moecert.reference.schemes import ELEMENTS

    gen = torch.Generator().manual_seed(7)
    q = torch.randint(0, 256, (t.E, N, K // 2), dtype=torch.uint8, generator=gen)
    _, cols, element, s = t._scales(scale, N, K, gen)
    codes = torch.stack([q & 0xF, q >> 4], dim=-1).flatten(-2).to(torch.int64)
    e2m1 = torch.tensor(ELEMENTS["e2m1"].values, dtype=torch.float64)[codes]
    scales = torch.tensor(ELEMENTS[element].values, dtype=torch.float64)[s.to(torch.int64)]
    return (e2m1 * scales.repeat_interleave(cols, dim=-1)).to(torch.bfloat16)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="nvfp4", choices=["nvfp4", "mxfp4-folded"])
    ap.add_argument("--N", type=int, default=200)
    ap.add_argument("--K", type=int, default=1024)
    args = ap.parse_args(argv)
    import test_fp4_scale_bf16_cuda as t
    from moecert.kernels.triton_moe import dequant

    want = _values(args.scale, args.N, args.K).cuda()
    bad = 0
    for bf16 in (False, True):
        w = t._described(args.scale, args.N, args.K, True, bf16)
        for fast in (True, False):
            out = torch.empty(t.E * args.N * args.K, dtype=torch.bfloat16, device="cuda")
            dense = dequant.dequantize(w, out, fast)["q"].view(want.shape)
            bits = dense.view(torch.int16) != want.view(torch.int16)
            value = dense.float() != want.float()
            signed_zero = bits & ~value
            name = f"{'bf16 scales' if bf16 else 'scale words'}, {'PTX' if fast else 'bit-field'}"
            print(f"{name}: {int(bits.sum())} of {bits.numel()} differ in bits, "
                  f"{int(value.sum())} in value, {int(signed_zero.sum())} only in a zero's sign")
            if bool(value.any()):
                bad += 1
                for idx in value.nonzero()[:8].tolist():
                    e, n, k = idx
                    print(f"  e{e} n{n} k{k}: got {dense[e, n, k].item()!r} want "
                          f"{want[e, n, k].item()!r}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
