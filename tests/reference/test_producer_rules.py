"""Every producer rule of `reference/loader/producers.py`, fed its producer's config with one
key changed at a time: the reading (producer, scheme, variant) changes, or the refusal names
the key, or the key is one the reader declares not read (with why) for that rule. A key the
reader reads but ignores a change of, or a key it does not know, fails.

The base configs are the producer fixtures' own (tests/fixtures/checkpoints, written by the
pinned tools), and for rules no fixture holds, a fixture's config with the keys the tool
changes for that preset (compressed-tensors 0.19's preset_scheme, GPTQModel's bits, Quark's
dtypes)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from moecert.reference import CheckpointError
from moecert.reference.loader.producers import RULES, UNUSED, detect

ROOT = Path(__file__).parents[1] / "fixtures" / "checkpoints"


def _qc(name: str, file: str = "config.json") -> dict:
    data = json.loads((ROOT / name / file).read_text())
    return data.get("quantization_config", data)


def _edit(qc: dict, **paths) -> dict:
    """A copy of `qc` with each dotted path (`__` for a dot) set to its value."""
    out = copy.deepcopy(qc)
    for path, value in paths.items():
        *head, last = path.split("__")
        node = out
        for k in head:
            node = node[k]
        node[last] = value
    return out


_G = "config_groups__group_0__"
_MX8_INPUT = _qc("ct-mxfp8-qwen3moe")["config_groups"]["group_0"]["input_activations"]
_QUARK_FP8 = {"dtype": "fp8_e4m3"}
_ALGO = "quantization_config.quant_algo"  # the key ModelOpt W4A8 AWQ's refusal names

# id -> (the config as the tool writes it, (scheme, variant) it reads as, or the key a refusal
# names)
BASES = {
    "ct-w4a16-asym": (_qc("ct-w4a16-asym-qwen3moe"), "ct-int4"),
    "ct-w4a16-sym": (_qc("ct-w4a16-sym-qwen3moe"), "ct-int4"),
    "ct-w8a16-int": (_edit(_qc("ct-w4a16-sym-qwen3moe"), **{_G + "weights__num_bits": 8}),
                     "ct-int8"),
    "ct-w4afp8": (_qc("ct-w4afp8-qwen3moe"), "w4a8-fp8"),
    "ct-w8a8-int8": (_qc("ct-w8a8-int8-qwen3moe"), "int8-w8a8"),
    "ct-w8a16-int8": (_edit(_qc("ct-w8a8-int8-qwen3moe"), **{_G + "input_activations": None}),
                      "int8-w8a16"),
    "ct-fp8-block": (_qc("ct-fp8-block-qwen3moe"), "fp8-w8a8"),
    "ct-fp8-channel": (_qc("ct-fp8-channel-qwen3moe"), "fp8-w8a8"),
    "ct-fp8-static": (_qc("ct-fp8-static-qwen3moe"), "fp8-w8a8"),
    "ct-fp8-a16": (_edit(_qc("ct-fp8-channel-qwen3moe"), **{_G + "input_activations": None}),
                   "fp8-w8a16"),
    "ct-nvfp4-a16": (_edit(_qc("ct-nvfp4-qwen3moe"), **{_G + "input_activations": None}),
                     "nvfp4"),
    "ct-nvfp4": (_qc("ct-nvfp4-qwen3moe"), "nvfp4"),
    "ct-mxfp4-a16": (_qc("ct-mxfp4-qwen3moe"), "mxfp4"),
    "ct-mxfp4-mxfp8": (_edit(_qc("ct-mxfp4-qwen3moe"), **{_G + "input_activations": _MX8_INPUT}),
                       "mxfp4"),
    # compressed-tensors 0.19 preset_scheme MXFP4 (llm-compressor's "MXFP4"): W4A4
    "ct-mxfp4-w4a4": (_qc("ct-mxfp4-w4a4-qwen3moe"), "mxfp4"),
    "ct-mxfp8-a16": (_edit(_qc("ct-mxfp8-qwen3moe"), **{_G + "input_activations": None}),
                     "mxfp8"),
    "ct-mxfp8": (_qc("ct-mxfp8-qwen3moe"), "mxfp8"),
    "gptqmodel-gptq-asym": (_qc("gptqmodel-gptq-asym-qwen3moe"), "gptq-int4"),
    "gptqmodel-gptq-descact": (_qc("gptqmodel-gptq-descact-qwen3moe"), "gptq-int4"),
    "gptqmodel-gptq-v2": (_qc("gptqmodel-gptq-v2-qwen3moe"), "gptq-int4"),
    "gptqmodel-gptq-int8": (_edit(_qc("gptqmodel-gptq-asym-qwen3moe"), bits=8), "gptq-int8"),
    "gptqmodel-awq": (_qc("gptqmodel-awq-gemm-qwen3moe"), "awq-int4"),
    "autoround-default": (_qc("autoround-default-qwen3moe"), "gptq-int4"),
    "autoround-default-int8": (_edit(_qc("autoround-default-qwen3moe"), bits=8), "gptq-int8"),
    "autoround-gptq": (_qc("autoround-gptq-qwen3moe"), "gptq-int4"),
    "modelopt-fp8": (_qc("modelopt-fp8-qwen3moe"), "fp8-w8a8"),
    "modelopt-nvfp4": (_qc("modelopt-nvfp4-qwen3moe"), "nvfp4"),
    "modelopt-mxfp8": (_qc("modelopt-mxfp8-qwen3moe"), "mxfp8"),
    "modelopt-nvfp4-hf-quant": ({"quant_method": "modelopt", **_qc(
        "modelopt-nvfp4-qwen3moe", "hf_quant_config.json")["quantization"]}, "nvfp4"),
    # ModelOpt INT4 AWQ: config.json restates quant_algo only, the rest is in
    # hf_quant_config.json (read from there); W4A8's quant_algo on the same file is refused
    # (the W4A8 preset's export fails in ModelOpt 0.47 here, tools/producers/README.md)
    "modelopt-int4-awq": ({**_qc("modelopt-int4-awq-qwen3moe", "hf_quant_config.json")[
        "quantization"], **_qc("modelopt-int4-awq-qwen3moe")}, "modelopt-int4-awq"),
    "modelopt-int4-awq-hf-quant": ({"quant_method": "modelopt", **_qc(
        "modelopt-int4-awq-qwen3moe", "hf_quant_config.json")["quantization"]},
        "modelopt-int4-awq"),
    "modelopt-w4a8-awq": (_edit(_qc("modelopt-int4-awq-qwen3moe"), quant_algo="W4A8_AWQ"),
                          _ALGO),
    "modelopt-mxfp8-hf-quant": ({"quant_method": "modelopt", **_qc(
        "modelopt-mxfp8-qwen3moe", "hf_quant_config.json")["quantization"]}, "mxfp8"),
    "quark-int8-channel": (_qc("quark-int8-channel-qwen3moe"), "int8-w8a8"),
    "quark-int8-tensor": (_qc("quark-int8-tensor-qwen3moe"), "int8-w8a8"),
    "quark-int8-a16": (_edit(_qc("quark-int8-channel-qwen3moe"),
                             global_quant_config__input_tensors=None), "int8-w8a16"),
    "quark-fp8": (_edit(_qc("quark-int8-tensor-qwen3moe"),
                        global_quant_config__weight__dtype="fp8_e4m3",
                        global_quant_config__input_tensors__dtype="fp8_e4m3"), "fp8-w8a8"),
    "quark-mxfp4-w4a4": (_qc("quark-mxfp4-w4a4-qwen3moe"), "mxfp4"),
    "quark-int4-wo32": (_qc("quark-int4-wo32-qwen3moe"), "quark-int4"),
    "quark-mxfp6-e2m3": (_qc("quark-mxfp6-e2m3-qwen3moe"), "mxfp6-e2m3"),
    "quark-mxfp6-e3m2": (_qc("quark-mxfp6-e3m2-qwen3moe"), "mxfp6-e3m2"),
    **{f"quark-mxfp6-{el}-w6a6": (_edit(
        _qc(f"quark-mxfp6-{el}-qwen3moe"), global_quant_config__input_tensors={
            **_qc(f"quark-mxfp6-{el}-qwen3moe")["global_quant_config"]["weight"],
            "is_dynamic": True}), "global_quant_config.input_tensors") for el in ("e2m3", "e3m2")},
    "gpt-oss": (_qc("gptoss-mxfp4-release"), "mxfp4"),
    "deepseek-fp8": (_qc("deepseekv3-fp8-release"), "fp8-w8a8"),
}


def _read(qc: dict):
    return detect({"quantization_config": qc}, None, None, "bf16")


def _reading(d) -> tuple:
    return d.producer, d.scheme, tuple(sorted(d.attrs.items()))


def _leaves(node, path=()):
    """(path, value) of every leaf of a JSON config: a non-dict value, or an empty dict."""
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from _leaves(v, (*path, k))
    else:
        yield path, node


def _changed(value):
    """Another value of the same kind: what a tool writes for another setting."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1 if value in (0, -1) else value * 2
    if isinstance(value, float):
        return value * 2 + 1
    if isinstance(value, str):
        return "0.17.0" if re.fullmatch(r"[\d.]+", value) else f"{value}_other"
    if isinstance(value, list):
        return ["other"]
    if isinstance(value, dict):  # an empty one
        return {"other": 1}
    return 7  # null


def _set(qc: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(qc)
    node = out
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return out


def test_every_rule_has_a_base_config():
    hit = set()
    for qc, _ in BASES.values():
        try:
            hit.add(id(_read(qc).rule))
        except CheckpointError:
            pass
    missing = [f"{r.scheme} {dict(r.match)}" for r in RULES
               if not r.unsupported and id(r) not in hit]
    assert missing == []


@pytest.mark.parametrize("name", sorted(BASES))
def test_each_config_key_changes_the_reading_or_is_refused_or_declared_not_read(name):
    qc, want = BASES[name]
    if "." in want:  # a preset moecert refuses: the refusal names the key
        with pytest.raises(CheckpointError, match=re.escape(want)):
            _read(qc)
        return
    base = _read(qc)
    assert base.scheme == want
    unknown = [k for k, why in base.not_read.items() if "does not know" in why]
    assert unknown == [], f"keys the {base.producer} reader does not declare: {unknown}"
    unused = [k for k, why in base.not_read.items() if why.startswith(UNUSED)]
    assert unused == [], f"keys the {base.scheme} rule should read: {unused}"
    declared = {k.split(": quantization_config.", 1)[1] for k in base.not_read}
    silent = []
    for path, value in _leaves(qc):
        dotted = ".".join(path)
        try:
            reading = _read(_set(qc, path, _changed(value)))
        except CheckpointError as e:
            assert dotted in str(e) or any(dotted.startswith(d + ".") for d in declared), \
                f"{dotted}: the refusal does not name the key: {e}"
            continue
        if _reading(reading) != _reading(base):
            continue
        if dotted in declared or any(dotted.startswith(d + ".") for d in declared):
            continue
        silent.append(dotted)
    assert silent == [], f"{name}: a change of these keys is read as the same scheme, " \
        "neither refused nor declared not read"


@pytest.mark.parametrize("name", ["ct-mxfp4-w4a4", "quark-mxfp4-w4a4"])
def test_mxfp4_w4a4_files_read_as_mxfp4_activations_not_mxfp8_nor_16_bit(name):
    """Issue 30 item 3 and issue 42 item 4: llm-compressor's MXFP4 preset was read as MXFP4
    weights with MXFP8 activations, then refused; it and Quark's OCP MXFP4 W4A4 (the real
    tools' files) are W4A4: e2m1 activations per 32, dynamic."""
    d = _read(BASES[name][0])
    # Quark states the rule its inputs' MX scales follow (test_mxfp4_w4a4.py), "even"
    rule = {"mx_scale_rule": "even"} if name.startswith("quark") else {}
    assert (d.scheme, d.attrs) == ("mxfp4", {"activation": "mxfp4", **rule})
    assert _read(BASES["ct-mxfp4-mxfp8"][0]).attrs == {"activation": "mxfp8"}
    assert _read(BASES["ct-mxfp4-a16"][0]).attrs == {"activation": "none"}


def _expected_and_found(message: str) -> tuple[set[str], str]:
    """The values a refusal says it expected (`expected A / B (...)`) and the one it found."""
    expected = message.split(": expected ", 1)[1].split(" (", 1)[0]
    return set(expected.split(" / ")), message.rsplit(", found ", 1)[1]


@pytest.mark.parametrize(("key", "value"), [("dtype", "fp6_e2m3"), ("scale_format", "e8m0"),
                                            ("dtype", "uint4"), ("qscheme", "per_channel")])
def test_a_refusal_never_expects_what_it_found(key, value):
    """Issue 42: Quark's int4_wo_32 was refused with "weight.group_size: expected None / 32
    ..., found 32". A refusal names only what the nearest rules want and the file fails."""
    qc = _edit(_qc("quark-int4-wo32-qwen3moe"), **{f"global_quant_config__weight__{key}": value})
    with pytest.raises(CheckpointError) as err:
        _read(qc)
    expected, found = _expected_and_found(str(err.value))
    assert found not in expected, str(err.value)
