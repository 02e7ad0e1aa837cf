"""MXFP6 (OCP MX v1.0 FP6 E2M3 / E3M2, AMD Quark's storage): the element records against the
OCP definition, the packing against hand-computed bytes, the Quark loader rule, the shape
rule, and the kernels' own widening against the reference's decode. docs/mxfp6.md has the
facts and their sources."""

from __future__ import annotations

import pytest
import torch
from moecert.kernels.codecs import widen_to_e4m3
from moecert.reference import CheckpointError, MoEProblem
from moecert.reference.elements import decode, element_codes, encode_stored
from moecert.reference.loader.producers import detect
from moecert.reference.schemes import checkpoint_shape_issue, get_scheme
from moecert.reference.schemes.elements import ELEMENTS

# OCP MX v1.0 §5.3.2: (exponent bias, largest value, smallest subnormal, all 32 magnitudes)
OCP_FP6 = {
    "e2m3": (1, 7.5, 0.125, [m / 8 for m in range(8)]
             + [(8 + m) / 8 * 2.0**e for e in range(0, 3) for m in range(8)]),
    "e3m2": (3, 28.0, 0.0625, [m / 16 for m in range(4)]
             + [(4 + m) / 4 * 2.0**e for e in range(-2, 5) for m in range(4)]),
}


@pytest.mark.parametrize("name", list(OCP_FP6))
def test_element_record_is_the_ocp_format(name):
    bias, top, step, magnitudes = OCP_FP6[name]
    el = ELEMENTS[name]
    assert (el.bits, el.exp_bias, el.max, el.storage) == (6, bias, top, torch.uint8)
    assert list(el.values[:32]) == magnitudes
    assert list(el.values[32:]) == [-v for v in magnitudes]  # code 32 + c is -value(c)
    assert el.values[1] == step and not el.nan_codes  # every code finite
    ours = decode(torch.arange(64), name)
    assert ours.tolist() == list(el.values)
    assert torch.signbit(ours[32])  # -0.0


def test_quark_packing_golden_bytes():
    """Codes v0..v3 = 1, 2, 3, 4 -> the 24-bit word 1 | 2<<6 | 3<<12 | 4<<18 = 0x103081,
    stored low byte first (Quark's Pack_fp6: byte2, byte1, byte0 = 0x81, 0x30, 0x10)."""
    el = ELEMENTS["e2m3"]
    codes = torch.tensor([1, 2, 3, 4, 63, 0, 32, 31])
    stored = encode_stored(decode(codes, el), el)
    word = 1 | 2 << 6 | 3 << 12 | 4 << 18
    second = 63 | 0 << 6 | 32 << 12 | 31 << 18
    assert stored.tolist() == [word & 0xFF, word >> 8 & 0xFF, word >> 16,
                               second & 0xFF, second >> 8 & 0xFF, second >> 16]
    assert element_codes(stored, el).tolist() == codes.tolist()


@pytest.mark.parametrize("name", list(OCP_FP6))
def test_every_byte_pattern_round_trips(name):
    el = ELEMENTS[name]
    stored = torch.randint(0, 256, (5, 96), generator=torch.Generator().manual_seed(3),
                           dtype=torch.int32).to(torch.uint8)
    codes = element_codes(stored, el)
    assert codes.shape == (5, 128) and int(codes.max()) < 64
    assert torch.equal(encode_stored(decode(codes, el), el), stored)


@pytest.mark.parametrize("name", list(OCP_FP6))
def test_kernels_widening_equals_the_reference_decode(name):
    """The kernels' own unpacking and bit-field decode (convert.widen_to_e4m3) gives the
    reference's values for every code, as e4m3 values (exact)."""
    el = ELEMENTS[name]
    codes = torch.arange(64).repeat(3)[torch.randperm(192, generator=torch.Generator()
                                                      .manual_seed(1))]
    stored = encode_stored(decode(codes, el), el).view(2, 72)
    widened = widen_to_e4m3(stored, el)
    assert widened.dtype == torch.float8_e4m3fn and widened.shape == (2, 96)
    want = decode(codes, el).view(2, 96)
    assert torch.equal(widened.to(torch.float64), want)
    assert torch.equal(torch.signbit(widened.to(torch.float32)), torch.signbit(want))


def _quark_config(dtype: str, inputs: bool) -> dict:
    spec = {"dtype": dtype, "qscheme": "per_group", "group_size": 32, "ch_axis": -1,
            "scale_format": "e8m0", "scale_calculation_mode": "even", "is_dynamic": False}
    return {"quantization_config": {"quant_method": "quark", "global_quant_config": {
        "weight": spec, "input_tensors": {**spec, "is_dynamic": True} if inputs else None}}}


@pytest.mark.parametrize("name", list(OCP_FP6))
def test_quark_rule(name):
    found = detect(_quark_config(f"fp6_{name}", False), None, None, "uint8")
    assert (found.producer, found.scheme, found.attrs) == ("quark", f"mxfp6-{name}",
                                                           {"activation": "none"})
    with pytest.raises(CheckpointError, match=f"scheme mxfp6-{name} not supported yet"):
        detect(_quark_config(f"fp6_{name}", True), None, None, "uint8")


def test_shape_rule_needs_whole_groups_of_four():
    quant = type("Q", (), {"scheme": "mxfp6-e2m3", "group_size": 32,
                           "checkpoint_format": None})()
    assert checkpoint_shape_issue(quant, MoEProblem(M=1, K=128, N=64, E=2, topk=1)) is None
    issue = checkpoint_shape_issue(quant, MoEProblem(M=1, K=130, N=64, E=2, topk=1))
    assert issue.tensor == "w13_weight" and "4 e2m3 elements per 3 bytes" in issue.expected
    assert get_scheme("mxfp6-e3m2").elements_per_byte == pytest.approx(4 / 3)


@pytest.mark.parametrize("name", list(OCP_FP6))
def test_widening_in_chunks_is_the_widening_at_once(monkeypatch, name):
    """widen_to_e4m3 runs over chunks of rows (issue 43: its temporaries are ~60 bytes per
    element); a chunk that splits an expert's rows gives the bytes of one pass over all."""
    import moecert.kernels.codecs as codecs

    el = ELEMENTS[name]
    stored = torch.randint(0, 256, (3, 5, 24), generator=torch.Generator().manual_seed(4),
                           dtype=torch.int32).to(torch.uint8)
    whole = widen_to_e4m3(stored, el)
    monkeypatch.setattr(codecs, "WIDEN_CHUNK_ELEMENTS", 2 * 32)  # two rows of 32 a chunk
    chunked = widen_to_e4m3(stored, el)
    assert whole.shape == chunked.shape == (3, 5, 32)
    assert torch.equal(whole.view(torch.uint8), chunked.view(torch.uint8))
