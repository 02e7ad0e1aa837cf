"""The format facts are data that the code obeys: element records agree with the reference's
own bit-field decoders, every value a format record rejects is refused by the reference (and
by the kernels' conversion), and the records list every NaN code of the elements they store.
"""

from __future__ import annotations

import math

import pytest
import torch
from moecert.kernels import get_backend
from moecert.reference import SCHEMES, CheckpointError, MoEProblem, dequantize, random_checkpoint
from moecert.reference.elements import decode, encode, round_to
from moecert.reference.schemes import format_record
from moecert.reference.schemes.elements import ELEMENTS, EXPONENT, FLOAT
from moecert.reference.schemes.tensors import tensor_name

CODED = [e for e in ELEMENTS.values() if e.kind in (FLOAT, EXPONENT)]
_PROBLEM = MoEProblem(M=4, K=256, N=128, E=2, topk=2)


@pytest.mark.parametrize("el", CODED, ids=lambda e: e.name)
def test_the_code_table_is_the_reference_decoder(el):
    """The records' table (Python's ldexp on the fields) and the reference's torch decoder
    (the same fields, its own arithmetic) give every code the same value, NaN where NaN."""
    ours = decode(torch.arange(el.codes), el)
    table = torch.tensor(el.values, dtype=torch.float64)
    assert torch.equal(torch.isnan(ours), torch.isnan(table))
    assert torch.isnan(table).sum() == len(el.nan_codes)
    finite = ~torch.isnan(table)
    assert torch.equal(ours[finite], table[finite])
    assert torch.equal(torch.signbit(ours[finite]), torch.signbit(table[finite]))


@pytest.mark.parametrize(("name", "top", "emax", "min_exp"),
                         [("e4m3", 448.0, 8, -6), ("e2m1", 6.0, 2, 0)])
def test_float_element_facts_match_the_ocp_specs(name, top, emax, min_exp):
    el = ELEMENTS[name]
    assert (el.max, el.emax, el.min_normal_exp) == (top, emax, min_exp)


def test_e8m0_is_two_to_the_code_minus_127_with_one_nan():
    el = ELEMENTS["e8m0"]
    assert el.values[127] == 1.0 and el.values[0] == 2.0**-127 and el.values[254] == 2.0**127
    assert el.nan_codes == (0xFF,) and math.isnan(el.values[0xFF])


@pytest.mark.parametrize("el", [e for e in CODED if e.kind == FLOAT], ids=lambda e: e.name)
def test_encode_inverts_decode_and_rounding_lands_on_codes(el):
    codes = torch.tensor([c for c in range(el.codes) if c not in el.nan_codes])
    assert torch.equal(encode(decode(codes, el), el), codes)
    x = torch.randn(4096, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    r = round_to(x * el.max / 3, el)
    assert torch.equal(decode(encode(r, el), el), r)
    with pytest.raises(ValueError, match=el.name.upper()):
        encode(torch.tensor([el.max * 2]), el)
    for bad in (math.nan, math.inf, -math.inf):  # codes outside the element's range
        with pytest.raises(ValueError, match=el.name.upper()):
            encode(torch.tensor([1.0, bad], dtype=torch.float64), el)


def _stored_forms():
    for name, s in SCHEMES.items():
        for f in s.formats:
            yield name, {"checkpoint_format": f.name} if f.name else {}


def test_records_reject_every_nan_code_of_the_elements_they_store():
    for name, attrs in _stored_forms():
        s = SCHEMES[name]
        rejected = {(r.role, r.bits) for r in format_record(
            random_checkpoint(name, _PROBLEM, **attrs)).rejected}
        if s.quantized and s.weight_element.kind == FLOAT and s.elements_per_byte == 1:
            assert {("weight", c) for c in s.weight_element.nan_codes} <= rejected, name
        if s.scale_element is not None:
            assert {("scale", c) for c in s.scale_element.nan_codes} <= rejected, name



def _rejected_cases():
    for name, attrs in _stored_forms():
        ckpt = random_checkpoint(name, _PROBLEM, seed=1, **attrs)
        for r in format_record(ckpt).rejected:
            yield pytest.param(name, attrs, r, id=f"{name}-{attrs.get('checkpoint_format')}-"
                               f"{r.role}-{r.what}")


def _write(ckpt, rejected):
    name = tensor_name(ckpt, "w13", rejected.role)
    tensors = {k: v.clone() for k, v in ckpt.tensors.items()}
    t = tensors[name]
    if rejected.bits is None:
        t[(0,) * t.dim()] = rejected.value
    else:
        t.view(torch.uint8)[(0,) * t.dim()] = rejected.bits
    return name, type(ckpt)(**{**ckpt.__dict__, "tensors": tensors})


@pytest.mark.parametrize(("scheme", "attrs", "rejected"), list(_rejected_cases()))
def test_every_rejected_value_is_refused_by_name(scheme, attrs, rejected):
    """The reference's dequantize and the torch backend's conversion both refuse each value
    the record lists, naming the tensor (the harness's `malformed` check asks every backend
    the same)."""
    ckpt = random_checkpoint(scheme, _PROBLEM, seed=1, **attrs)
    dequantize(ckpt)  # valid as drawn
    name, bad = _write(ckpt, rejected)
    with pytest.raises(CheckpointError, match=name):
        dequantize(bad)
    torch_backend = get_backend("torch")
    with pytest.raises(Exception, match=name):
        layer = torch_backend.create_layer(bad, _PROBLEM)
        torch_backend.process_weights_after_loading(layer)
