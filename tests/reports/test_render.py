"""The renderings: HTML self-contained with its plots and every results string escaped,
Markdown escaped and failing first, JUnit parsed back."""

from __future__ import annotations

import base64
import math
import re
import xml.etree.ElementTree as ET

from moecert.conformance.calibration.calibrate import summarize
from moecert.reports import load, render
from moecert.reports.report import Report

EVIL = "<script>alert(1)</script>"


def _report(tmp_path, synthetic, baseline=False):
    rows = [synthetic.case_rows("ok"),
            synthetic.case_rows("bad", status="fail", used=2.0, rel_fro=8e-3,
                                message=f"rel_fro 8.0e-03 > 4.0e-03 {EVIL}\nsecond line"),
            synthetic.case_rows("evil", backend=EVIL, message=EVIL),
            synthetic.case_rows("unclaimed", claimed=False)]
    frame = load(synthetic.write(tmp_path / "r", rows))
    base = load(synthetic.write(tmp_path / "b", [synthetic.case_rows("bad", run="b")])) \
        if baseline else None
    return Report.build(frame, base), frame


def test_html_embeds_its_plots_and_escapes_every_results_string(tmp_path, synthetic):
    report, _ = _report(tmp_path, synthetic, baseline=True)
    page = render.html(report)
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    # the baseline's changes, the tolerance used per group (the heat-map is a table now)
    assert len(images) == 2
    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in images)
    assert page.lower().count("<script") == 1  # the page's own few lines, none from results
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # shown as text
    assert not re.search(r'(src|href)="(http|//)', page)  # nothing fetched


def test_markdown_is_failing_first_escaped_and_collapsible(tmp_path, synthetic):
    report, _ = _report(tmp_path, synthetic)
    text = render.markdown(report)
    assert text.splitlines()[0].startswith("## moecert report: not green: 1 case(s) failed")
    assert text.index("### Failing cases") < text.index("### Cases by backend x scheme")
    assert "<script" not in text and "&lt;script&gt;" in text
    assert "<details>" in text and "moecert run --device cpu --case" in text


def test_junit_parses_back_one_testcase_per_case_and_check(tmp_path, synthetic):
    _, frame = _report(tmp_path, synthetic)
    root = ET.fromstring(render.junit(frame, "moecert run --device cpu"))
    cases = root.findall("testsuite/testcase")
    # one per row, and the run's verdict (a case failed: not green)
    assert len(cases) == len(frame) + 1 == 9
    verdict = cases[-1]
    assert verdict.get("classname") == "moecert.verdict"
    assert verdict.get("name") == "not green: 1 case(s) failed: 1 fail"
    cases = cases[:-1]
    by_name = {(c.get("classname"), c.get("name")): c for c in cases}
    bad = by_name["torch.fp16", "fp16/bad/s0::accuracy"]
    failure = bad.find("failure")
    # the metric farthest past its threshold, against the threshold
    assert failure.get("message") == ("fail accuracy: rel_fro 0.008 against threshold 0.004 "
                                      "(used 2)")
    assert "second line" in failure.text
    assert "rerun: moecert run --device cpu --case '{" in failure.text
    skipped = [c for c in cases if c.find("skipped") is not None]
    # as the store has them: the claims row unsupported, the (synthetic) accuracy row passed
    assert {c.get("name") for c in skipped} == {"fp16/unclaimed/s0::claims"}
    assert root.get("failures") == "2" and root.get("skipped") == "1"
    assert int(root.get("skipped")) == frame["status"].isin(render.JUNIT_SKIPPED).sum()
    assert f"{EVIL}.fp16" in {c.get("classname") for c in cases}  # XML-escaped, read back


def test_calibrate_summarizes_loaded_results_with_rows_no_entry_judged(tmp_path, synthetic):
    setup = {**synthetic.case_rows("b")[1], "status": "error", "tolerance": None,
             "used": None, "rel_fro": None}
    frame = load(synthetic.write(tmp_path / "r", [synthetic.case_rows("a")[1], setup]))
    assert frame["tolerance"].isna().sum() == 1
    summary = {r["metric"]: r for r in summarize(frame)}
    assert summary["rel_fro"]["rows"] == 1 and math.isclose(summary["rel_fro"]["max"], 1e-3)
