"""Every option that takes a path: a missing file, a path with a folder part, a folder where a
file belongs (or a file where a folder belongs) is one line on stderr, "moecert CMD: error:
...", exit 2, never a traceback, and nothing runs (issue 33: `--xfail ./missing.toml` ended
in ValueError)."""

from __future__ import annotations

import pytest
from moecert.conformance.cli import app as cli

SMALL = ["--backend", "torch", "--scheme", "bf16", "-k", "M1.K128.N128.E4.k2/bf16.silu/s0"]

# (argv, what the line says); run in a folder holding a file `afile` and a folder `adir`
CASES = [
    (["run", *SMALL, "--xfail", "./missing.toml"], "--xfail ./missing.toml: no such file"),
    (["run", *SMALL, "--xfail", "sub/missing.toml"], "--xfail sub/missing.toml: no such file"),
    (["run", *SMALL, "--xfail", "missing.toml"], "--xfail missing.toml: no such file"),
    (["run", *SMALL, "--xfail", "adir"], "--xfail adir: is a folder"),
    (["run", *SMALL, "--xfail", "afile"], "--xfail afile: afile: not TOML"),
    (["run", *SMALL, "--results", "afile"], "results folder 'afile' is a file"),
    (["run", *SMALL, "--junit", "nodir/x.xml"], "--junit: nodir/x.xml: no such folder"),
    (["run", *SMALL, "--junit", "adir"], "--junit: adir: is a folder"),
    (["run", "--checkpoint", "./nothere"], "--checkpoint ./nothere: no such folder"),
    (["run", "--checkpoint", "afile"], "--checkpoint afile: a file, not a model folder"),
    (["run", "--checkpoint", "adir"], "--checkpoint adir: adir/config.json"),
    (["run", "--inputs", "./nothere"], "--inputs needs --checkpoint DIR"),
    (["report", "./nothere"], "RESULTS ./nothere: results path nothere does not exist"),
    (["report", "afile"], "RESULTS afile: afile: "),
    (["report", "adir"], "RESULTS adir: no result rows"),
    (["report", "adir", "--md", "nodir/x.md"], "--md: nodir/x.md: no such folder"),
    (["report", "adir", "--html", "adir"], "--html: adir: is a folder"),
    (["report", "adir", "--junit", "./nodir/x.xml"], "--junit: ./nodir/x.xml: no such folder"),
    (["certify", "--backend", "torch", "--out", "afile"], "'afile' is a file, not a folder"),
    (["certify", "--backend", "torch", "--out", "o", "--waivers", "./nothere.toml"],
     "--waivers ./nothere.toml: No such file"),
    (["certify", "--backend", "torch", "--out", "o", "--waivers", "adir"],
     "--waivers adir: Is a directory"),
    (["certify", "--backend", "torch", "--out", "o", "--junit", "nodir/j.xml"],
     "--junit: nodir/j.xml: no such folder"),
    (["certify", "--assemble", "./nothere"], "nothere: no results folder"),
    (["certify", "--verify", "./nothere"], "--verify nothere: no such folder"),
    (["certify", "--verify", "afile"], "--verify afile: no such folder"),
    (["bench", "--marlin-lib", "./nothere.so"], "--marlin-lib ./nothere.so: no such file"),
    (["bench", "--results", "afile", "--model", "qwen3-30b-a3b", "--M", "1"],
     "results folder 'afile' is a file"),
    (["calibrate", "--results", "./nothere"], "--results: results path nothere does not exist"),
    (["calibrate", "--results", "adir", "--out", "nodir/x.csv"],
     "--out: nodir/x.csv: no such folder"),
    (["inspect", "./nothere"], "nothere: expected a model folder"),
    (["inspect", "afile"], "afile: expected a model folder"),
    (["list", "--import", "./x.py"], "--import ./x.py: expected a module name"),
    (["run", *SMALL, "--import", "plugins/x.py"], "--import plugins/x.py: expected a module"),
]


@pytest.mark.parametrize("argv, says", CASES, ids=[" ".join(a[:1] + a[-2:]) for a, _ in CASES])
def test_a_bad_path_is_one_line_and_exit_two(argv, says, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse's own errors (a type= function's UsageError)
        code = e.code
    out, err = capsys.readouterr()
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"moecert {argv[0]}: error: "), lines[0]
    assert says in lines[0], lines[0]
    assert not (tmp_path / "moecert-results").exists() and not (tmp_path / "o").exists()
