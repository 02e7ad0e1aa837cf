"""`moecert certify`: bundles that certify, bundles that must not, and --verify's exit codes.

The certify suite is thousands of cases, so the suite is patched to a handful: one real run
of two torch cases through the worker processes (module fixture), and bundles assembled from
synthetic rows of real case ids for everything else."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from moecert.conformance.certification import bundle, certify
from moecert.conformance.cli import app as cli
from moecert.conformance.cli import run_command
from moecert.conformance.harness import suites
from moecert.conformance.harness.checks import FULL, LIGHT
from moecert.reports.store import _frame, load, write_parquet

RUN = "run-t"


def _cases(schemes=("fp16",), per_scheme=3):
    """A few real torch cases of the smoke suite: one full-depth and light ones per scheme."""
    out = []
    for scheme in schemes:
        cases = suites.build_suite("smoke", ["torch"], [scheme])
        out += [cases[0], *[c for c in cases if c.depth == "light"][:per_scheme - 1]]
    return out


def _patch_suite(mp, cases) -> list:
    """The suite (any name) patched to `cases`, where certify and `moecert run` build it."""
    def build(name, backends=None, schemes=None):
        return [c for c in cases if backends is None or c.backend in backends]

    mp.setattr(suites, "build_suite", build)
    mp.setattr(run_command, "build_suite", build)
    return cases


@pytest.fixture
def small_suite(monkeypatch):
    return _patch_suite(monkeypatch, _cases(("fp16", "bf16")))


def _rows(case, status="pass", claimed=True, drop=(), message="ok"):
    """A case's rows, one per check of its depth; `status` of its accuracy row, or
    {check: status}."""
    checks = [c for c in (FULL if case.depth == "full" else LIGHT) if c not in drop]
    status = status if isinstance(status, dict) else {"accuracy": status}
    return [{"run_id": RUN, "suite": "certify", "case_id": case.case_id,
             "backend": case.backend, "scheme": case.scheme, "device": "cpu",
             "check": check, "claimed": claimed,
             "status": status.get(check, "pass"),
             "message": message, "duration_s": 0.1, "case_json": case.to_json(),
             "finished_at": "2026-01-01T00:00:00+00:00"} for check in checks]


def _synthetic(folder: Path, cases, *, statuses=None, shards=((0, 1),), waivers=None,
               suite="certify", drop=None, skip_message=None) -> Path:
    """A certify output folder as the shards leave it, from synthetic rows of `cases`:
    `statuses` {case index: status (of _rows)}, `drop` {case index: checks left out}."""
    results = folder / "results"
    results.mkdir(parents=True)
    statuses, drop = statuses or {}, drop or {}
    for index, count in shards:
        rows = []
        for i, case in enumerate(cases):
            if suites.shard([case], index, count):
                rows += _rows(case, statuses.get(i, "pass"), drop=drop.get(i, ()),
                              message="ok" if skip_message is None else skip_message)
        label = "certify" + (f".shard{index}of{count}" if count > 1 else "")
        path = write_parquet(_frame(rows), results / f"{RUN}.{label}.parquet")
        record = certify.shard_record(RUN, suite, "torch", (index, count), len(rows), "cpu",
                                      waivers=waivers, results=path.name)
        (certify.record_path(path)).write_text(json.dumps(record))
    return folder


def _assemble(folder):
    return certify.assemble(folder)


def _verify(folder, capsys):
    capsys.readouterr()
    code = certify.verify(folder)
    return code, capsys.readouterr().out


def _first(folder, name="CERTIFICATE.txt"):
    return (folder / name).read_text().splitlines()[0]


# --- a real run -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_bundle(tmp_path_factory):
    """`moecert certify --backend torch` through the worker processes, the suite patched to
    two cases (one full, one light)."""
    cases = _cases(("fp16",), per_scheme=2)
    out = tmp_path_factory.mktemp("real") / "bundle"
    with pytest.MonkeyPatch.context() as mp:
        _patch_suite(mp, cases)
        code = cli.main(["certify", "--backend", "torch", "--out", str(out), "--device", "cpu"])
        verified = certify.verify(out)
    return out, code, verified, cases


@pytest.fixture
def real_copy(real_bundle, tmp_path, monkeypatch):
    """A copy of the real bundle, the suite patched as it was run (so it verifies)."""
    _patch_suite(monkeypatch, real_bundle[3])
    return shutil.copytree(real_bundle[0], tmp_path / "copy")


def test_a_real_run_certifies_and_verifies(real_bundle):
    out, code, verified, cases = real_bundle
    first = _first(out)
    assert code == 0 and verified == 0, first
    assert first.startswith("CERTIFIED: backend torch on ") and "2 pass" in first
    assert _first(out, "SUMMARY.md") == first
    assert f"<title>{first}" in (out / "report.html").read_text()
    names = {line.split("  ", 1)[1] for line in (out / "SHA256SUMS").read_text().splitlines()}
    assert {"CERTIFICATE.txt", "SUMMARY.md", "report.html", "manifest.json",
            "environment.json", "tolerances.toml"} <= names
    assert any(n.startswith("results/") and n.endswith(".parquet") for n in names)
    assert (out / "tolerances.toml").read_bytes() == certify.TOLERANCES_PATH.read_bytes()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["verdict"] == "CERTIFIED" and manifest["expected_cases"] == 2
    env = json.loads((out / "environment.json").read_text())[0]
    assert {"torch", "triton", "moecert", "driver", "backend_version", "device_name"} <= set(env)
    assert set(load(out / "results")["case_id"]) == {c.case_id for c in cases}


@pytest.mark.parametrize("name", ["CERTIFICATE.txt", "tolerances.toml", "results/*.parquet"])
def test_one_byte_changed_fails_verify(real_copy, capsys, name):
    out = real_copy
    assert _verify(out, capsys)[0] == 0
    (path,) = out.glob(name)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    code, text = _verify(out, capsys)
    assert code == 1 and "1 of " in text and "do not match SHA256SUMS" in text
    assert f"{path.relative_to(out).as_posix()}: sha256 differs" in text


def test_a_file_added_or_removed_fails_verify(real_copy, capsys):
    out = real_copy
    (out / "results" / "extra.parquet").write_bytes(b"x")
    assert _verify(out, capsys)[0] == 1
    (out / "results" / "extra.parquet").unlink()
    assert _verify(out, capsys)[0] == 0
    (out / "environment.json").unlink()
    code, text = _verify(out, capsys)
    assert code == 1 and "environment.json: listed in SHA256SUMS but missing" in text


# --- what certifies and what does not ------------------------------------------------------

def test_a_complete_green_run_certifies(small_suite, tmp_path, capsys):
    folder = _synthetic(tmp_path, small_suite)
    line, code = _assemble(folder)
    assert code == 0 and line.startswith("CERTIFIED: ") and "6 pass" in line
    assert _verify(folder, capsys)[0] == 0


def test_a_bundle_missing_one_case_is_not_certifying(small_suite, tmp_path, capsys):
    folder = _synthetic(tmp_path, small_suite[:-1])
    line, code = _assemble(folder)
    assert code == 1 and line.startswith("NOT CERTIFIED: incomplete: 1 case(s) "
                                         f"({small_suite[-1].case_id})")
    assert _first(folder) == line == _first(folder, "SUMMARY.md")
    code, text = _verify(folder, capsys)
    assert code == 1 and "5 of 6 cases present" in text


def test_rows_of_one_scheme_only_are_a_reduced_run(small_suite, tmp_path):
    folder = _synthetic(tmp_path, [c for c in small_suite if c.scheme == "fp16"])
    line, code = _assemble(folder)
    assert code == 1 and "incomplete: 3 case(s)" in line


def test_a_case_without_every_check_is_a_reduced_run(small_suite, tmp_path):
    line, code = _assemble(_synthetic(tmp_path, small_suite, drop={0: ("exact",)}))
    assert code == 1 and "reduced run: 1 case(s)" in line and small_suite[0].case_id in line


def test_a_check_skipped_without_a_reason_is_not_certifying(small_suite, tmp_path):
    line, code = _assemble(_synthetic(tmp_path, small_suite, statuses={1: "skip"},
                                      skip_message=""))
    assert code == 1 and "skipped without a reason" in line


@pytest.mark.parametrize("status", ["fail", "crash", "timeout", "error", "xfail"])
def test_any_failing_state_is_a_failure(small_suite, tmp_path, status):
    line, code = _assemble(_synthetic(tmp_path, small_suite, statuses={2: status}))
    assert code == 1 and "1 case(s)" in line and "failed" in line and "1 fail" in line


def test_a_waived_failure_certifies_and_an_unwaived_one_does_not(small_suite, tmp_path,
                                                                 capsys):
    bad = small_suite[2].case_id
    waivers = (f'[[waiver]]\ncase_id = "{bad}"\ncheck = "accuracy"\n'
               'reason = "tracked in vendor#7"\n')
    line, code = _assemble(_synthetic(tmp_path / "w", small_suite, statuses={2: "fail"},
                                      waivers=waivers))
    assert code == 0 and line.startswith("CERTIFIED: ") and "1 waived" in line
    certificate = (tmp_path / "w" / "CERTIFICATE.txt").read_text()
    assert f"waived:      {bad}: tracked in vendor#7" in certificate
    assert (tmp_path / "w" / "waivers.toml").read_text() == waivers
    assert json.loads((tmp_path / "w" / "manifest.json").read_text())["waived"] == [
        {"case_id": bad, "reason": "tracked in vendor#7"}]
    assert _verify(tmp_path / "w", capsys)[0] == 0
    # the same failure, the waiver on another check only: not waived
    other = waivers.replace('check = "accuracy"', 'check = "reload"')
    line, code = _assemble(_synthetic(tmp_path / "o", small_suite, statuses={2: "fail"},
                                      waivers=other))
    assert code == 1 and line.startswith("NOT CERTIFIED: ") and "failed" in line
    # a case failing two checks, one of them waived: not waived
    two = {0: {"accuracy": "fail", "exact": "fail"}}
    first = waivers.replace(bad, small_suite[0].case_id)
    line, code = _assemble(_synthetic(tmp_path / "t", small_suite, statuses=two, waivers=first))
    assert code == 1 and "1 fail" in line and "0 waived" in line


def test_shards_merge_and_a_missing_shard_is_a_reduced_run(small_suite, tmp_path, capsys):
    line, code = _assemble(_synthetic(tmp_path / "both", small_suite, shards=((0, 2), (1, 2))))
    assert code == 0 and line.startswith("CERTIFIED: "), line
    assert _verify(tmp_path / "both", capsys)[0] == 0
    line, code = _assemble(_synthetic(tmp_path / "one", small_suite, shards=((0, 2),)))
    assert code == 1 and "reduced run: 1 of 2 shard(s) (1/2) missing" in line


def test_another_suite_is_not_certifying(small_suite, tmp_path):
    line, code = _assemble(_synthetic(tmp_path, small_suite, suite="smoke"))
    assert code == 1 and "reduced run: suite smoke, not certify" in line


def test_a_forged_verdict_with_fresh_hashes_fails_verify(small_suite, tmp_path, capsys):
    folder = _synthetic(tmp_path, small_suite, statuses={0: "fail"})
    line, code = _assemble(folder)
    assert code == 1
    forged = "CERTIFIED: " + line.split(": ", 1)[1]
    for name in ("CERTIFICATE.txt", "SUMMARY.md"):
        path = folder / name
        path.write_text(forged + "\n" + path.read_text().split("\n", 1)[1])
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "first_line": forged}))
    bundle.write_sums(folder)
    code, text = _verify(folder, capsys)
    assert code == 1 and "intact" in text and "not the verdict its results give" in text


def test_verify_of_a_non_bundle_exits_two(tmp_path, capsys):
    assert certify.verify(tmp_path / "nothing") == 2
    assert certify.verify(tmp_path) == 2  # an empty folder
    (tmp_path / "SHA256SUMS").write_text("not a sums line\n")
    (tmp_path / "manifest.json").write_text("{}")
    assert certify.verify(tmp_path) == 2
    err = capsys.readouterr().err
    assert "not a bundle" in err and "SHA256SUMS: line 1" in err and "Traceback" not in err


def test_usage_errors_exit_two_before_running(tmp_path, capsys):
    bad = tmp_path / "w.toml"
    bad.write_text('[[waiver]]\ncase_id = "x"\n')
    argv = ["certify", "--backend", "torch", "--out", str(tmp_path / "o"), "--device", "cpu"]
    assert cli.main([*argv, "--waivers", str(bad)]) == 2
    assert "waiver entry 0 needs reason" in capsys.readouterr().err
    assert cli.main([*argv, "--shard", "0/2"]) == 2
    assert "--shard needs --run-id" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # no subsetting flag exists
        cli.main([*argv, "--scheme", "fp16"])
    assert e.value.code == 2
    assert cli.main(["certify", "--verify", str(tmp_path), "--backend", "torch"]) == 2
    assert not (tmp_path / "o" / "results").exists() or not any(
        (tmp_path / "o" / "results").iterdir())


def test_a_shard_that_passed_waits_with_exit_zero(tmp_path, monkeypatch, capsys):
    light = [c for c in suites.build_suite("smoke", ["torch"], ["fp16"]) if c.depth == "light"]
    cases = _patch_suite(monkeypatch, light[:6])
    out = tmp_path / "bundle"
    for index in (0, 1):  # each shard holds at least one case
        assert suites.shard(cases, index, 2)
    code = cli.main(["certify", "--backend", "torch", "--out", str(out), "--device", "cpu",
                     "--shard", "0/2", "--run-id", "r1"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "run: green: all" in text
    assert "shard 0/2 passed; waiting for 1 of 2 shard(s) (1/2)" in text
    assert not (out / "SHA256SUMS").exists()
