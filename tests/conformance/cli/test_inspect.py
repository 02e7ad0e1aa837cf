"""`moecert inspect DIR`: per MoE layer the scheme, variant, producer, shapes, what is not
read and why, and which backends claim it; a bad folder is one line and exit 2."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from moecert.conformance.cli.app import main

sys.path.insert(0, str(Path(__file__).parents[2] / "reference"))
import test_loader as loader_tests


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {case: loader_tests.producer_folder(root, case)[2]
            for case in ("deepseek-fp8", "gpt-oss-mxfp4", "gptq-v1-act-order")}


def test_inspect_lists_each_moe_layer(folders, capsys):
    assert main(["inspect", str(folders["deepseek-fp8"])]) == 0
    out = capsys.readouterr().out
    assert "1 MoE layer, producer fp8-release" in out
    assert "decoder layers without routed experts" not in out  # layer 1 only in this folder
    assert "layer 1: fp8-w8a8 [weight_strategy=block activation=dynamic-group]" in out
    assert "E=4 K=128 N=128 topk=2 activation=silu dtype=bf16 bias=False" in out
    assert "not read: shared experts: a dense MLP every token takes" in out
    assert "not read: router: read into ModelLayer.router" in out
    assert "not read: attention:" in out and "not read: embeddings:" in out
    assert "torch" in out.split("claimed by: ")[1].splitlines()[0].split(", ")
    assert "not by grouped: activation quantization dynamic-group not supported" in out


def test_inspect_gptq_and_gpt_oss(folders, capsys):
    assert main(["inspect", str(folders["gptq-v1-act-order"])]) == 0
    out = capsys.readouterr().out
    assert ("gptq-int4 [group_size=32 sym=True checkpoint_format=gptq act_order=True]"
            in out)
    assert main(["inspect", str(folders["gpt-oss-mxfp4"])]) == 0
    out = capsys.readouterr().out
    assert "activation=swigluoai dtype=bf16 bias=True" in out and "producer gpt-oss" in out


def test_inspect_bad_folder_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("moecert inspect: error: ")
    assert "expected a model folder, found no such file or directory" in err
    (tmp_path / "config.json").write_text("{}")
    assert main(["inspect", str(tmp_path)]) == 2
    assert "no weights" in capsys.readouterr().err


def test_inspect_names_the_dense_layers(tmp_path, capsys):
    ckpt, qc = loader_tests.ct_w4a16()
    folder = loader_tests.qwen3_folder(tmp_path, ckpt, qc)  # layer 0 dense, layer 1 MoE
    assert main(["inspect", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "1 MoE layer, producer llm-compressor; decoder layers without routed experts (not " \
        "read): 0" in out
    assert "layer 1: ct-int4 [group_size=32 sym=True checkpoint_format=ct-0.18 " \
        "act_order=False]" in out
