"""A bit-exact emulator of the few PTX instructions gemm_kernel's weight decodes are written
in (mov, prmt, shl, shr, and, lop3, fma.rn.bf16x2), so that a CPU test can run an inline-asm
string on chosen registers: the decodes' bit placement is checked without a GPU. A packed
fma whose result bf16 cannot hold exactly raises (the decodes claim exact products, so no
rounding mode needs modelling)."""

from __future__ import annotations

import math
import re

import torch

MASK = 0xFFFFFFFF


def _bf16(bits: int) -> float:
    return float(torch.tensor([bits - (1 << 16) if bits & 0x8000 else bits],
                              dtype=torch.int16).view(torch.bfloat16).double())


def _bf16_bits(value: float) -> int:
    t = torch.tensor([value], dtype=torch.float64)
    b = t.to(torch.bfloat16)
    if float(b.double()) != value or (value == 0 and math.copysign(1, value) != math.copysign(
            1, float(b.double()))):
        raise ArithmeticError(f"{value!r} is not a bf16 value: the fma rounded")
    return int(b.view(torch.int16)) & 0xFFFF


def _prmt(a: int, b: int, sel: int) -> int:
    src = (b << 32) | a  # bytes 0-3 from a, 4-7 from b
    out = 0
    for i in range(4):
        byte = (sel >> (4 * i)) & 0x7  # (no sign-replicate modes here: bit 3 is 0)
        assert not (sel >> (4 * i)) & 0x8, "prmt sign replication is not emulated"
        out |= ((src >> (8 * byte)) & 0xFF) << (8 * i)
    return out


def _lop3(a: int, b: int, c: int, lut: int) -> int:
    out = 0
    for bit in range(32):
        idx = (((a >> bit) & 1) << 2) | (((b >> bit) & 1) << 1) | ((c >> bit) & 1)
        out |= ((lut >> idx) & 1) << bit
    return out


def _fma_bf16x2(a: int, b: int, c: int) -> int:
    out = 0
    for lane in (0, 1):
        x, y, z = ((v >> (16 * lane)) & 0xFFFF for v in (a, b, c))
        out |= _bf16_bits(_bf16(x) * _bf16(y) + _bf16(z)) << (16 * lane)
    return out


def run(asm: str, args: list[int], outputs: int) -> list[int]:
    """Run `asm` (an inline_asm_elementwise string: $0.. the outputs, then the inputs) on
    the 32-bit input registers `args`; the output registers' values."""
    regs = {f"${outputs + i}": v & MASK for i, v in enumerate(args)}

    def val(tok: str) -> int:
        tok = tok.strip()
        if tok in regs:
            return regs[tok]
        return int(tok, 0) & MASK

    for line in asm.splitlines():
        line = line.strip().rstrip(";")
        if not line or line in "{}" or line.startswith(".reg"):
            continue
        op, rest = line.split(None, 1)
        d, *src = [t.strip() for t in rest.split(",")]
        if op in ("mov.b32",):
            regs[d] = val(src[0])
        elif op == "prmt.b32":
            regs[d] = _prmt(val(src[0]), val(src[1]), val(src[2]))
        elif op == "shl.b32":
            regs[d] = (val(src[0]) << val(src[1])) & MASK
        elif op == "shr.u32":
            regs[d] = val(src[0]) >> val(src[1])
        elif op == "and.b32":
            regs[d] = val(src[0]) & val(src[1])
        elif op == "lop3.b32":
            regs[d] = _lop3(val(src[0]), val(src[1]), val(src[2]), val(src[3]))
        elif op == "fma.rn.bf16x2":
            regs[d] = _fma_bf16x2(val(src[0]), val(src[1]), val(src[2]))
        else:
            raise NotImplementedError(f"PTX {op!r} is not emulated")
    assert re.findall(r"\$\d+", asm), "no registers in the asm"
    return [regs[f"${i}"] for i in range(outputs)]


def lanes(word: int) -> tuple[float, float]:
    """A 32-bit register's two bf16 lanes as floats (low lane first)."""
    return _bf16(word & 0xFFFF), _bf16(word >> 16)


def bf16_pair(lo: float, hi: float) -> int:
    """Two exact bf16 values as one 32-bit register (low lane first)."""
    return _bf16_bits(lo) | (_bf16_bits(hi) << 16)
