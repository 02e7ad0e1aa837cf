"""The HTML report as a person uses it, in headless Chromium: a planted bug's run (every
weight scale x1.005) renders, its failures fold into one signature, the case table sorts and
filters, a heat-map cell filters it, and a failing case's panel opens with its pictures. Where
MOECERT_REQUIRE_CHROMIUM is set (.ci/run sets it after installing Chromium) a missing Chromium
fails the test; elsewhere it skips, so the README's test command passes on a machine without
one.

The screenshots land in the test's tmp folder (`page.png`, `after-actions.png`,
`cell-click.png`: right after a heat-map click): look at them after a change to the page."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pandas as pd
import pytest
from moecert.conformance.harness.execute import run_cases
from moecert.conformance.harness.suites import build_suite
from moecert.conformance.mutants import register_mutants
from moecert.reports import load, render
from moecert.reports.page import failure_groups
from moecert.reports.report import Report
from moecert.reports.store import write_parquet

MUTANT = "mutant-scales-x1.005"
# What the page's own script is asked to do, and what it saw, written into the page.
ACTIONS = """
<script>
(function(){
var out={};var t=document.getElementById('cases');var rows=function(){
 return Array.from(t.tBodies[0].rows).filter(function(r){return r.style.display!=='none';});};
out.first_status=t.tBodies[0].rows[0].cells[0].textContent;
var used=t.querySelectorAll('thead th')[5];used.click();
out.asc=rows().map(function(r){return r.cells[5].textContent;}).filter(Boolean).map(parseFloat);
used.click();
out.desc=rows().map(function(r){return r.cells[5].textContent;}).filter(Boolean).map(parseFloat);
var sel=document.querySelector('select[data-name=backend]');sel.value='torch';
sel.dispatchEvent(new Event('change'));
out.filtered=rows().map(function(r){return r.cells[1].textContent;});
sel.value='';sel.dispatchEvent(new Event('change'));
var cell=document.querySelector('.heat a[data-filter]');cell.click();
out.cell=JSON.parse(cell.getAttribute('data-filter'));
out.after_cell=rows().map(function(r){return [r.cells[1].textContent,r.cells[2].textContent];});
var inView=function(el){var b=el.getBoundingClientRect();
 return b.top>=0&&b.bottom<=window.innerHeight&&b.height>0;};
var bar=document.querySelector('.filters'),shown=document.getElementById('shown');
out.scrolled=window.scrollY;out.bar_in_view=inView(bar);out.shown_in_view=inView(shown);
out.shown=shown.textContent;out.from_cell=document.getElementById('from-cell').textContent;
window.scrollBy(0,400);
out.bar_in_view_after_scroll=inView(bar);out.shown_in_view_after_scroll=inView(shown);
out.bar_top_after_scroll=Math.round(bar.getBoundingClientRect().top);
var sel2=document.querySelector('select[data-name=status]');sel2.value='';
sel2.dispatchEvent(new Event('change'));
out.from_cell_after_hand=document.getElementById('from-cell').textContent;
cell.click();
var link=document.querySelector('.group a.open');link.click();
var panel=document.getElementById(link.getAttribute('href').slice(1));
out.panel_open=panel.open;out.panel_svgs=panel.querySelectorAll('svg rect').length;
out.panel_rerun=panel.querySelector('pre.rerun').textContent;
document.body.insertAdjacentHTML('afterbegin',
 '<pre id="test-result">'+JSON.stringify(out).replace(/</g,'\\\\u003c')+'</pre>');
})();
</script>
"""


def _chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser",
                                               "google-chrome")) if p), None)


@pytest.fixture(scope="module")
def browser():
    path = _chromium()
    if path is None:
        if os.environ.get("MOECERT_REQUIRE_CHROMIUM"):
            pytest.fail("no chromium here: .ci/run installs it (apt-get install chromium)")
        pytest.skip("no chromium here (apt-get install chromium)")
    return path


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A small run of the planted bug beside the correct torch backend: its rows' folder."""
    register_mutants()
    folder = tmp_path_factory.mktemp("planted")
    light = [c for c in build_suite("smoke", [MUTANT, "torch"], ["gptq-int4"])
             if c.depth == "light"]
    cases = ([c for c in light if c.backend == MUTANT][:8]
             + [c for c in light if c.backend == "torch"][:4])
    # as `moecert run --import moecert.conformance.mutants.all` journals them
    rows = [{**r, "imports": "moecert.conformance.mutants.all"}
            for r in run_cases(cases, "cpu", run_id="planted")]
    write_parquet(pd.DataFrame(rows), folder / "planted.smoke.parquet")
    return folder


def _headless(browser: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                           "--disable-dev-shm-usage", "--allow-file-access-from-files",
                           *args], capture_output=True, text=True, timeout=120)


def test_the_planted_bug_is_one_signature(planted):
    rows = load(planted)
    groups = failure_groups(rows)
    failing = rows.loc[rows["status"] == "fail", "case_id"].nunique()
    assert failing >= 3 and len(groups) == 1, [g["headline"] for g in groups]
    top = groups[0]
    assert top["metric"] == "norm_ratio" and top["direction"] == "above"
    assert len(top["rows"]) == failing
    assert top["headline"].startswith(f"{MUTANT}: accuracy fails in {failing} case(s) of 1 "
                                      "scheme(s) (gptq-int4): norm_ratio above its threshold")
    assert 1.005 < top["value"] < 1.02  # x1.005 on both GEMMs' weights: about 1.01
    # the harness recorded where the error sits: evenly over the experts, as a scale bug does
    profile = json.loads(top["rows"][0]["error_profile"])
    assert set(profile) == {"expert", "token", "column"}
    assert sum(v > 0 for v in profile["expert"]) >= 2  # (an expert no token chose shows 0)


def test_the_page_sorts_filters_and_opens_a_failing_case(planted, browser, tmp_path):
    report = Report.build(load(planted))
    page = render.html(report)
    assert "http://" not in page and "https://" not in page and "<link" not in page
    (tmp_path / "page.html").write_text(page, encoding="utf-8")
    shot = _headless(browser, "--window-size=1400,1800", f"--screenshot={tmp_path}/page.png",
                     f"file://{tmp_path}/page.html")
    assert (tmp_path / "page.png").stat().st_size > 10_000, shot.stderr[-2000:]
    tested = page.replace("</body>", ACTIONS + "</body>")
    (tmp_path / "tested.html").write_text(tested, encoding="utf-8")
    dom = _headless(browser, "--dump-dom", f"file://{tmp_path}/tested.html").stdout
    found = re.search(r'<pre id="test-result">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    out = json.loads(found[1].replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
                     .replace("&quot;", '"'))
    assert out["first_status"] == "fail"  # failing cases first
    assert out["asc"] == sorted(out["asc"]) and out["desc"] == sorted(out["desc"], reverse=True)
    assert out["asc"] and out["filtered"] and set(out["filtered"]) == {"torch"}
    assert out["after_cell"] and {tuple(r) for r in out["after_cell"]} == {
        (out["cell"]["backend"], out["cell"]["scheme"])}
    # the heat-map click jumps to the table with its filter bar and counter in view, and
    # they stay in view (sticky) as the page scrolls on; the bar says which cell filtered
    assert out["scrolled"] > 0 and out["bar_in_view"] and out["shown_in_view"], out
    assert out["bar_in_view_after_scroll"] and out["shown_in_view_after_scroll"], out
    assert out["bar_top_after_scroll"] == 0, out
    assert out["shown"] == f"{len(out['after_cell'])} of {len(report.cases)} cases shown"
    cell = out["cell"]
    assert out["from_cell"] == (f"filtered by the heat-map cell {cell['backend']} / "
                                f"{cell['scheme']} / {cell['check']}")
    assert out["from_cell_after_hand"] == ""  # a filter set by hand: no cell named
    assert out["panel_open"] is True and out["panel_svgs"] > 0
    assert out["panel_rerun"].startswith("moecert run --device cpu --import "
                                         "moecert.conformance.mutants.all --case ")
    _headless(browser, "--window-size=1400,1800", f"--screenshot={tmp_path}/after-actions.png",
              f"file://{tmp_path}/tested.html")
    assert (tmp_path / "after-actions.png").stat().st_size > 10_000
    # what a person sees right after clicking a heat-map cell and scrolling on a little
    # (look at it after a change). Headless Chromium paints a scrolled window blank: the
    # body is made the scroll container for the picture, which sticky follows the same way.
    clicked = page.replace("</head>", "<style>html{height:100%;overflow:hidden}body{height:"
                                      "calc(100% - 3em);overflow:auto}</style></head>").replace(
        "</body>", "<script>document.querySelector('.heat a[data-filter]').click();"
                   "document.body.scrollBy(0,200);</script></body>")
    (tmp_path / "cell-click.html").write_text(clicked, encoding="utf-8")
    _headless(browser, "--window-size=1400,900", f"--screenshot={tmp_path}/cell-click.png",
              f"file://{tmp_path}/cell-click.html")
    assert (tmp_path / "cell-click.png").stat().st_size > 10_000


def test_strings_from_results_are_escaped(planted, tmp_path):
    rows = load(planted)
    evil = "<script>alert(1)</script>"
    rows["message"] = rows["message"].where(rows["status"] != "fail", evil)
    page = render.html(Report.build(rows))
    assert evil not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_against_a_baseline_the_page_plots_what_changed(planted):
    rows = load(planted)
    base = rows.copy()
    failing = base["status"] == "fail"
    base.loc[failing, "status"] = "pass"  # the baseline: before the bug was planted
    base.loc[failing, "used"] = base.loc[failing, "used"] / 4
    base["run_id"] = "before"
    report = Report.build(rows, baseline=base)
    assert report.exit_code == 1 and report.verdict().startswith(
        "REGRESSED against the baseline: ") and "new failure(s)" in report.verdict()
    page = render.html(report)
    head = page.split("<h2>Status")[0]
    assert "<h2>Against the baseline</h2>" in head
    assert 'alt="what changed against the baseline" src="data:image/png;base64,' in head
