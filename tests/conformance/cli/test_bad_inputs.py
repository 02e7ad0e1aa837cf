"""Issue 40 items 4 and 9: the bad inputs that still ended in a traceback, an error row or
silence are one line on stderr, "moecert CMD: error: ...", naming the variable, option or
field and what was expected, exit 2, and nothing written (no results folder, no unfinished
journal); the pytest plugin says the same as a usage error (exit 4). `--import` of a module
that registers no backend says so; an unregistered planted-bug backend names the module that
registers it; help texts name no source paths; bench builds a variant the one way the
checkpoint is built (`moecert tune` saying "error:": tests/conformance/performance/test_tune.py)."""

from __future__ import annotations

import json
import re

import pytest
from moecert.conformance.cli import app as cli
from moecert.conformance.harness import checkpoint_cache, memory
from moecert.conformance.harness.option_values import UsageError
from moecert.kernels import Variant
from moecert.kernels.native import TorchBackend
from moecert.kernels.registry import register_backend, unregister_backend
from moecert.kernels.triton_moe import configs

pytest_plugins = ["pytester"]

SMALL = ["--backend", "torch", "--scheme", "bf16", "-k", "M1.K128.N128.E4.k2/bf16.silu/s0"]
# a case as a failure's rerun line prints it (gptq-int4, group 32, on torch)
CASE = {"attrs": {"group_size": 32}, "backend": "torch", "depth": "full",
        "problem": {"E": 4, "K": 128, "M": 17, "N": 128, "activation": "silu",
                    "activation_format": "standard", "apply_router_weight_on_input": False,
                    "bias": False, "dtype": "bf16", "expert_map": None, "seed": 0,
                    "topk": 2},
        "routing": "random", "scheme": "gptq-int4", "seed": 0, "strided": False}


def _case(attrs=None, **problem) -> str:
    case = json.loads(json.dumps(CASE))
    case["attrs"] = CASE["attrs"] if attrs is None else attrs
    case["problem"].update(problem)
    return json.dumps(case)


def _main(argv, capsys) -> tuple[int, str, str]:
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse's own errors (a type= function's UsageError)
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def _one_usage_line(code, out, err, command: str, says: str) -> str:
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"moecert {command}: error: "), lines[0]
    assert says in lines[0], lines[0]
    return lines[0]


# (variable, value, what the line says after "NAME='value': ")
BAD_ENVIRONMENT = [
    (memory.HOST_MEMORY_VARIABLE, "abc", "expected a size above 0 such as 24G"),
    (memory.HOST_MEMORY_VARIABLE, "-1", "expected a size above 0 such as 24G"),
    (memory.HOST_MEMORY_VARIABLE, "0", "expected a size above 0 such as 24G"),
    (memory.HOST_MEMORY_VARIABLE, "12X", "expected a size above 0 such as 24G"),
    (checkpoint_cache.CACHE_VARIABLE, "afile", "is a file; expected a folder"),
    (checkpoint_cache.CACHE_VARIABLE, "afile/below", "afile is a file; expected a folder"),
    (configs.SPLIT_K_ENV, "3", "expected a power of two"),
    (configs.NIB_SPAN_ENV, "1", "expected 0 or a power of two"),
    ("MOECERT_TRITON_I4_PAIRS", "off", "expected 0 (the per-element int4 decode) or 1"),
    ("MOECERT_TRITON_E4M3_WORDS", "yes", "expected 0 (fp8 bytes) or 1 (16-bit words"),
    ("MOECERT_TRITON_ZERO_SUMS", "on",
     "expected 1 (zero points from the activation sums, the default) or 0"),
    ("MOECERT_TRITON_DEQUANT_ROWS", "-1", "expected rows per expert (an integer >= 0) or off"),
    ("MOECERT_TRITON_FP4_SCALE_WORDS", "yes",
     "expected 1 (plane scales in 32-bit words, the default) or 0"),
    ("MOECERT_TRITON_FP4_LEAN", "yes", "expected 1 (the lean e2m1 decode step, the default) or 0"),
    ("MOECERT_TRITON_FP4_CARRY", "2", "expected 1 (e2m1 words whose sign the multiply"),
    ("MOECERT_TRITON_FP4_SCALE_BF16", "on",
     "expected 1 (block scales decoded into bf16 at load) or 0 (the scale bytes"),
    ("MOECERT_TRITON_FUSED_ACT", "yes",
     "expected 1 (the activation in GEMM1's epilogue, the default), 0"),
    ("MOECERT_TRITON_FP6_PLANES", "yes", "expected 1 (six-bit planes where they fit) or 0"),
    ("MOECERT_TRITON_TAIL_M", "24", "expected 0 (every block on the whole tile) or a power of"),
    ("MOECERT_TRITON_TAIL_M", "8", "expected 0 (every block on the whole tile) or a power of"),
    ("MOECERT_TRITON_ONE_DOT", "yes", "expected 1 (a tile's four plane products as one dot)"
     " or 0 (four dots, one a plane)"),
    ("MOECERT_TRITON_TMA_B", "on", "expected 1 (the weight tile by TMA where it applies)"
     " or 0 (per-thread loads)"),
    ("MOECERT_TRITON_CONFIG_DIR", "afile", "expected a folder of tuned-config files"),
]


@pytest.mark.parametrize("name, value, says", BAD_ENVIRONMENT,
                         ids=[f"{n}={v}" for n, v, _ in BAD_ENVIRONMENT])
def test_a_bad_variable_is_one_line_before_anything_runs(name, value, says, tmp_path,
                                                         monkeypatch, capsys):
    """The MOECERT_HOST_MEMORY=abc of the issue left a ValueError traceback, exit 1 and an
    unfinished .jsonl; MOECERT_CACHE_DIR naming a file was silently no cache."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv(name, value)
    code, out, err = _main(["run", *SMALL, "--results", "R"], capsys)
    line = _one_usage_line(code, out, err, "run", says)
    assert f"error: {name}={value!r}: " in line
    assert not (tmp_path / "R").exists()  # no results folder, no unfinished journal


def test_every_variable_read_is_declared_with_its_check():
    """Each front end checks READERS; a value each reader accepts passes, and unset is
    unset (the variables of moecert's settings, none left out)."""
    from moecert.conformance.harness.environment import READERS, check_environment

    # every variable the Triton backend reads is a configs.*_ENV name
    triton = {getattr(configs, name) for name in dir(configs) if name.endswith("_ENV")}
    assert set(READERS) == {memory.HOST_MEMORY_VARIABLE, checkpoint_cache.CACHE_VARIABLE,
                            *triton}
    check_environment({})
    check_environment({memory.HOST_MEMORY_VARIABLE: "24G", configs.SPLIT_K_ENV: "4",
                       configs.NIB_SPAN_ENV: "128", configs.I4_PAIRS_ENV: "0",
                       configs.E4M3_WORDS_ENV: "0", configs.ZERO_SUMS_ENV: "0",
                       configs.DEQUANT_ROWS_ENV: "off", configs.FP4_SCALE_WORDS_ENV: "1",
                       configs.FP4_LEAN_ENV: "1", configs.FP4_CARRY_ENV: "1",
                       configs.FP4_SCALE_BF16_ENV: "1", configs.FUSED_ACT_ENV: "adjacent",
                       configs.FP6_PLANES_ENV: "1", configs.TAIL_M_ENV: "32",
                       configs.ONE_DOT_ENV: "0", configs.TMA_B_ENV: "0",
                       configs.CONFIG_DIR_ENV: str(configs.CONFIG_DIR)})
    with pytest.raises(UsageError, match="MOECERT_HOST_MEMORY='lots'"):
        check_environment({memory.HOST_MEMORY_VARIABLE: "lots"})


def test_the_cache_variable_names_a_folder_it_may_create(tmp_path):
    assert checkpoint_cache.named_folder({}) is None
    deep = tmp_path / "not" / "yet"
    assert checkpoint_cache.named_folder({checkpoint_cache.CACHE_VARIABLE: str(deep)}) == deep
    assert not deep.exists()  # nothing made before a checkpoint is written


def _plugin_session(pytester, *args):
    """A pytest session on the conformance suite in a process of its own, the session's
    folder importable there."""
    return pytester.runpytest_subprocess(
        "--pyargs", "moecert.conformance", "-p", "no:cacheprovider", "-c", "/dev/null",
        "--rootdir", str(pytester.path), "--moecert-backend", "torch", "--moecert-scheme",
        "bf16", "-k", "M1.K128.N128.E4.k2/bf16.silu/", "--co", *args)


def test_the_plugin_refuses_a_bad_variable_as_a_usage_error(pytester, monkeypatch):
    monkeypatch.setenv(memory.HOST_MEMORY_VARIABLE, "abc")
    result = _plugin_session(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: MOECERT_HOST_MEMORY='abc': expected a size above 0*"])
    assert len([line for line in result.stderr.lines if line.strip()]) == 1


@pytest.mark.parametrize("run_id, says", [
    ("a" * 300, "run id aaaaaaaaaaaaaaaaaaaa... of 300 characters: at most 100"),
    ("a/b", "run id 'a/b': use letters, digits"),
    ("a.b", "run id 'a.b': use letters, digits"),
])
def test_a_run_id_that_cannot_name_a_file_is_refused_up_front(run_id, says, tmp_path,
                                                              monkeypatch, capsys):
    """300 characters were an OSError from opening the journal."""
    monkeypatch.chdir(tmp_path)
    for command in ("run", "bench"):
        argv = [command, *(SMALL if command == "run" else ["--backend", "torch"]),
                "--run-id", run_id, "--results", "R"]
        line = _one_usage_line(*_main(argv, capsys), command, says)
        assert "--run-id" in line
    assert not (tmp_path / "R").exists()


@pytest.mark.parametrize("case, says", [
    (_case({"group_size": 7}), "attrs.group_size: expected one of (-1, 32, 64, 128), found 7"),
    (_case({"sym": "yes"}), "attrs.sym: expected True or False, found 'yes'"),
    (_case({"weight_strategy": "block"}), "attrs.weight_strategy: expected one of"),
    (_case({"group_size": 64}, K=96), "group_size: expected a group size dividing w13's input"
                                      " dimension 96, found 64"),
    (_case(topk=7), "problem.topk: expected <= 4 experts, found 7"),
])
def test_a_case_that_is_no_variant_is_a_usage_error(case, says, tmp_path, monkeypatch, capsys):
    """group_size 7 was an error row of a run that exited 1."""
    monkeypatch.chdir(tmp_path)
    line = _one_usage_line(*_main(["run", "--case", case, "--results", "R"], capsys), "run",
                           says)
    assert "--case" in line
    assert not (tmp_path / "R").exists()


def test_inputs_naming_a_folder_says_it_is_a_folder(tmp_path, monkeypatch, capsys):
    """It said "no such file"."""
    from pathlib import Path

    folder = Path(__file__).parents[2] / "fixtures/checkpoints/ct-fp8-static-qwen3moe"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    _one_usage_line(*_main(["run", "--checkpoint", str(folder), "--layer", "1", "--inputs", "adir",
                            "--results", "R"], capsys), "run",
                    "--inputs adir: is a folder; expected a safetensors file")


def test_a_named_marlin_anchor_must_exist(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lib.so").write_text("")
    _one_usage_line(*_main(["bench", "--marlin-lib", "lib.so", "--marlin-anchor", "none.py"],
                           capsys), "bench", "--marlin-anchor none.py: no such file")
    monkeypatch.setenv("MOECERT_MARLIN_ANCHOR", "none.py")
    _one_usage_line(*_main(["bench", "--marlin-lib", "lib.so"], capsys), "bench",
                    "MOECERT_MARLIN_ANCHOR=none.py: no such file")


# --- item 9 -----------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["run", "--backend", "mutant-awq-order", "--list-cases"],
                                  ["list", "--backend", "mutant-awq-order"]])
def test_an_unregistered_mutant_names_the_module_that_registers_it(argv, capsys, monkeypatch):
    from moecert.kernels import registry

    # a test before this one in the same process may have registered the mutants (the
    # registry is the process's): this one is about a process that has not
    registry.backend_names()  # loaded, so that the entries below are the whole registry
    monkeypatch.setattr(registry, "_registry", {
        name: b for name, b in registry._registry.items() if not name.startswith("mutant-")})
    _one_usage_line(*_main(argv, capsys), argv[0],
                    "unknown backend 'mutant-awq-order': a planted-bug backend of "
                    "moecert's, registered by --import moecert.conformance.mutants.all")


def test_an_import_that_registers_no_backend_says_so():
    """`--import moecert.conformance.mutants` registered nothing, silently (a process of its
    own: the package is imported afresh there)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "moecert.conformance.cli", "list",
                           "--no-backends", "--import", "moecert.conformance.mutants"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == ("warning: --import moecert.conformance.mutants: imported, "
                                   "but it registered no backend (its backends: --import "
                                   "moecert.conformance.mutants.all)")


def test_the_plugin_warns_of_an_import_that_registers_no_backend(pytester, monkeypatch):
    pytester.makepyfile(registers_nothing="X = 1\n")
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    result = _plugin_session(pytester, "--moecert-import", "registers_nothing")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["*--moecert-import registers_nothing: imported, but it "
                                 "registered no backend*"])


SUBCOMMANDS = ["list", *(name for name, _, _ in cli.SUBCOMMANDS)]


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_help_names_no_source_path(command, capsys):
    """certify --waivers named conformance/certification/waivers.py, bench --marlin-anchor a
    folder beside the checkout: a user of the wheel has neither."""
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    paths = re.findall(r"\S*(?:\.py\b|\b(?:reference|kernels|conformance|reports|shared)/)\S*",
                       text)
    assert not paths, paths


class _VariantRecorder(TorchBackend):
    """The torch backend, recording the variant bench asks it to claim and the variant of
    the checkpoint it is given."""

    name = "variant-recorder"

    def __init__(self):
        super().__init__()
        self.asked, self.given = set(), set()

    def supports(self, quant, problem, **kw):
        self.asked.add(quant)
        return super().supports(quant, problem, **kw)

    def create_layer(self, ckpt, problem):
        self.given.add(Variant.of(ckpt))
        return super().create_layer(ckpt, problem)


def test_bench_claims_the_variant_its_checkpoint_has(tmp_path, capsys):
    """w4a8-int8 with checkpoint_format=gptq: bench asked for sym False (the defaults
    replaced) while the checkpoint it built was sym True (the variant built from the
    attributes)."""
    recorder = _VariantRecorder()
    register_backend(recorder)
    try:
        code, out, err = _main(["bench", "--backend", recorder.name, "--scheme", "w4a8-int8",
                                "--variant", "checkpoint_format=gptq", "--layer",
                                "tiny=4,128,128,2", "--M", "3", "--repeats", "2", "--warmup",
                                "1", "--mode", "apply", "--results", str(tmp_path),
                                "--run-id", "a"], capsys)
    finally:
        unregister_backend(recorder.name)
    want = Variant("w4a8-int8", checkpoint_format="gptq")
    assert want.sym is True
    assert recorder.asked == {want}, recorder.asked
    assert recorder.given == {want} and code == 0, out + err
