"""Renderings of a `Report` (reports/report.py): they format its frames and compute nothing.

    terminal(report)   the summary `moecert report` prints
    markdown(report)   for a CI job summary (GitHub's step summary): short, failing first
    html(report)       one self-contained page (reports/page.py)
    junit(rows, ...)   JUnit XML: one testcase per (case, check), classname backend.scheme,
                       and one failing testcase for a verdict that is not green

Every string from a results file is escaped for its format: HTML by pandas' to_html and
html.escape, Markdown cells with HTML entities and escaped pipes, XML by ElementTree.
"""

from __future__ import annotations

import html as html_lib
import math
import re
import xml.etree.ElementTree as ET

import pandas as pd

from .frames import REGRESSIONS
from .frames import failing as failing_rows
from .groups import failure_groups
from .report import Report
from .schema import FAILING, thresholds_of

# Row statuses JUnit shows as <skipped> (FAILING ones are failures and errors).
JUNIT_SKIPPED = ("skip", "unsupported", "xfail", "oversize")
FAILING_SHOWN = 20  # failing cases listed in full; the rest are counted
_NUMBER = "{:.3g}".format
_PRECISE = "{:.7g}".format  # a cosine floor of 0.9998779 must not read as 1


# --- terminal ----------------------------------------------------------------------------------

def terminal(report: Report) -> str:
    parts = ["cases by backend x scheme and status:",
             report.counts.loc[:, (report.counts != 0).any()].to_string(), "",
             "tolerance used, the most per entry (error / threshold; 1 = at the threshold):",
             _numbers(report.used).to_string(index=False) if len(report.used)
             else "  (no row was judged by a tolerance entry)"]
    if report.bench is not None and len(report.bench):
        parts += ["", "timings (moecert bench; % of the memory and compute floors):",
                  _bench_table(report.bench).to_string(index=False)]
    if report.changes is not None:
        parts += ["", "against the baseline:",
                  report.changes.to_string(index=False) if len(report.changes)
                  else "  no change"]
    cases = _failing_cases(report)
    if len(cases):
        groups = failure_groups(report.rows)
        parts += ["", f"{report.failed_cases} failing case(s) in {len(groups)} group(s), one "
                      "line per bug (backend, check, how it failed):"]
        parts += [f"  {g['headline']}" for g in groups[:FAILING_SHOWN]]
        if len(groups) > FAILING_SHOWN:
            parts.append(f"  and {len(groups) - FAILING_SHOWN} more group(s)")
        parts += ["", f"{report.failed_cases} failing case(s):"]
        for row in cases.head(FAILING_SHOWN).to_dict("records"):
            parts += [f"  {row['status']:<8} {row['check']:<14} {row['case_id']}",
                      f"           {_first_line(row['message'])[:300]}",
                      f"           rerun: {report.rerun(row)}"]
    parts += ["", *_unfinished(report), report.verdict()]
    return "\n".join(parts)


def _unfinished(report: Report) -> list[str]:
    """How to finish a run that did not (its journal's resume command), before the verdict."""
    c = report.completion
    if c is None or c.complete:
        return []
    how = [f"resume with: {command}" for command in c.resume] or [
        "(no resume command recorded: run it again)"]
    return [f"the run did not finish ({c.words().removeprefix('not finished: ')}):", *how]


# --- Markdown ----------------------------------------------------------------------------------

def markdown(report: Report, title: str = "moecert report") -> str:
    runs = ", ".join(report.run_ids())
    lines = [f"## {md_text(title)}: {md_text(report.verdict())}", "",
             f"run {md_text(runs)}: {len(report.cases)} cases, "
             f"{report.rows['backend'].nunique()} backend(s), "
             f"{report.rows['scheme'].nunique()} scheme(s)", ""]
    regressions = report.regressions
    if regressions is not None and len(regressions):
        shown = regressions.head(FAILING_SHOWN)[["change", "case_id", "check", "metric", "base",
                                                 "current"]]
        lines += [f"### Regressions ({len(regressions)})", "",
                  markdown_table(shown.dropna(axis=1, how="all")), ""]
        lines += _more(len(regressions))
    cases = _failing_cases(report)
    if len(cases):
        groups = failure_groups(report.rows)
        lines += [f"### Failures by group ({len(groups)}): one line per bug", ""]
        lines += [f"- {md_text(g['headline'])}" for g in groups[:FAILING_SHOWN]]
        lines += ["", *_more(len(groups))]
        shown = cases.head(FAILING_SHOWN).assign(message=cases["message"].map(_short))
        lines += [f"### Failing cases ({len(cases)})", "",
                  markdown_table(shown[["status", "check", "case_id", "message"]]), ""]
        lines += _more(len(cases))
    if report.bench is not None and len(report.bench):
        lines += ["### Timings", "", markdown_table(_bench_table(report.bench)), ""]
    lines += ["### Cases by backend x scheme", "",
              markdown_table(report.counts.loc[:, (report.counts != 0).any()].reset_index()), ""]
    lines += _details("Tolerance used, the most per entry",
                      markdown_table(_numbers(report.used)))
    if len(cases):
        commands = "\n".join(report.rerun(r) for r in cases.head(FAILING_SHOWN)
                             .to_dict("records"))
        lines += _details("Rerun commands", f"```\n{commands}\n```")
    if report.changes is not None:
        others = report.changes[~report.changes["change"].isin(REGRESSIONS)]
        if len(others):
            lines += _details(f"Other changes against the baseline ({len(others)})",
                              markdown_table(others))
    return "\n".join(lines).rstrip() + "\n"


def _more(n: int) -> list[str]:
    return [f"and {n - FAILING_SHOWN} more", ""] if n > FAILING_SHOWN else []


def _short(text, width: int = 100) -> str:
    first = _first_line(text)
    return first if len(first) <= width else first[:width - 3] + "..."


def _details(summary: str, body: str) -> list[str]:
    return ["<details>", f"<summary>{html_lib.escape(summary)}</summary>", "", body, "",
            "</details>", ""]


def markdown_table(frame: pd.DataFrame) -> str:
    """A frame as a Markdown table, every cell escaped (`moecert certify` uses it too)."""
    if frame.empty:
        return "(none)"
    frame = frame.astype(object).where(frame.notna(), "")
    clean = frame.map(md_text)
    clean.columns = [md_text(c) for c in clean.columns]
    return clean.to_markdown(index=False)


def md_text(value) -> str:
    """A cell's text with its HTML and table syntax escaped, on one line."""
    text = _NUMBER(value) if isinstance(value, float) else str(value)
    return html_lib.escape(" ".join(text.split())).replace("|", "\\|")


# --- HTML --------------------------------------------------------------------------------------

def html(report: Report, title: str = "moecert report") -> str:
    """One page, nothing fetched: reports/page.py."""
    from .page import html as page

    return page(report, title)


def _html_table(frame: pd.DataFrame, index: bool = False) -> str:
    if frame.empty:
        return "<p>(none)</p>"
    return frame.to_html(index=index, escape=True, na_rep="", border=0,
                         float_format=_NUMBER)


def _img(png_base64: str | None) -> str:
    if png_base64 is None:
        return "<p>(nothing to plot)</p>"
    return f'<img alt="plot" src="data:image/png;base64,{png_base64}">'


# --- JUnit -------------------------------------------------------------------------------------

def junit(rows: pd.DataFrame, rerun_prefix: str | None = None,
          name: str = "moecert", verdict=None) -> str:
    """JUnit XML of result rows: one testcase per (case, check), classname `backend.scheme`,
    name the problem id and check. A failing row is a <failure> ("fail") or an <error>
    (crash, timeout, error) whose message is the check and its metric against the threshold,
    the full message and rerun command in the body; a skip, unsupported, xfail or oversize
    row is <skipped>, and a pass row passes (the oracle row of a case the backend does not
    claim too: it checked the oracle), so the counts are the store's row statuses.

    CI systems show JUnit, not exit codes: when the verdict is not green (`verdict`, a
    reports.verdict.Verdict or anything with `green` and `line`; default the rows' own run
    verdict, as `moecert run` and `moecert report` give it) one more testcase, classname
    `moecert.verdict`, fails, named for the verdict and carrying its reason. A run in which
    no claimed case ran a check, or whose cases were all too large for the machine, then
    reads as failing where it would have read as all skipped."""
    from .frames import rerun_command
    from .verdict import tally_frame
    from .verdict import verdict as run_verdict

    suite = ET.Element("testsuite", name=name)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_time = 0.0
    for row in rows.sort_values(["case_id", "check"]).to_dict("records"):
        duration = row["duration_s"] if _finite(row["duration_s"]) else 0.0
        total_time += duration
        case = ET.SubElement(suite, "testcase", classname=_xml(f"{row['backend']}.{row['scheme']}"),
                             name=_xml(f"{row['problem_id']}::{row['check']}"),
                             time=f"{duration:.3f}")
        counts["tests"] += 1
        status = str(row["status"])
        if status in FAILING:
            kind = "failure" if status == "fail" else "error"
            counts["failures" if kind == "failure" else "errors"] += 1
            detail = ET.SubElement(case, kind, message=_xml(junit_message(row)), type=status)
            detail.text = _xml(f"{row['message']}\n\nrerun: "
                               f"{rerun_command(row, rerun_prefix)}")
        elif status in JUNIT_SKIPPED:
            counts["skipped"] += 1
            why = _first_line(row["message"]) or status
            ET.SubElement(case, "skipped", message=_xml(f"{status}: {why}"
                                                        if status == "oversize" else why))
    if verdict is None:
        verdict = run_verdict(tally_frame(rows))
    if not verdict.green:
        counts["tests"] += 1
        counts["failures"] += 1
        case = ET.SubElement(suite, "testcase", classname=f"{name}.verdict",
                             name=_xml(verdict_name(verdict.line)), time="0.000")
        ET.SubElement(case, "failure", message=_xml(verdict.line), type="verdict").text = \
            _xml(verdict.line)
    suite.attrib.update({k: str(v) for k, v in counts.items()}, time=f"{total_time:.3f}")
    root = ET.Element("testsuites", **{k: str(v) for k, v in counts.items()})
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") \
        + "\n"


def verdict_name(line: str) -> str:
    """The verdict testcase's name: the verdict and its reason, without the per-backend
    counts in parentheses ("not green: no claimed case ran a check")."""
    return re.sub(r" \((backend .*|no cases ran)\)$", "", line.removeprefix("moecert: "))


def junit_message(row) -> str:
    """The first line of a failing row's JUnit message: status and check, then the metric
    farthest past its threshold against that threshold where a tolerance entry judged the
    row, else the row's own first line."""
    head = f"{row['status']} {row['check']}"
    thresholds = thresholds_of(row)
    if thresholds and _finite(row.get("used")):
        from .frames import _metric_used

        metric, threshold = max(thresholds.items(), key=lambda kv: _metric_used(
            kv[0], row[kv[0]], kv[1]) if _finite(row[kv[0]]) else -1.0)
        value = row[metric]
        limit = (f"[{_PRECISE(threshold[0])}, {_PRECISE(threshold[1])}]"
                 if isinstance(threshold, tuple) else _PRECISE(threshold))
        return (f"{head}: {metric} {_PRECISE(value)} against threshold {limit} "
                f"(used {_NUMBER(row['used'])})")
    first = _first_line(row["message"])
    return f"{head}: {first}" if first else head


# --- shared ------------------------------------------------------------------------------------

def _bench_table(bench: pd.DataFrame) -> pd.DataFrame:
    """The timings as read: one decimal for us and GB/s, %, two for the Marlin ratio; a row
    not timed shows its status and message."""
    digits = {"us": 1, "achieved_GBps": 1, "memory_floor_pct": 1, "compute_floor_pct": 1,
              "ratio_to_marlin": 2}
    out = bench.drop(columns=["case_id", "message"]).assign(
        note=bench["message"].where(bench["status"] != "pass", "").map(_short))
    for col, d in digits.items():
        out[col] = out[col].map(lambda v, d=d: "" if pd.isna(v) else f"{v:.{d}f}")
    return out.rename(columns={"achieved_GBps": "GB/s", "memory_floor_pct": "%mem_floor",
                               "compute_floor_pct": "%flop_floor",
                               "ratio_to_marlin": "x_marlin"})


def _failing_cases(report: Report) -> pd.DataFrame:
    """One row per failing case: its worst failing row, with case_json and device."""
    rows = failing_rows(report.rows)
    return rows.drop_duplicates("case_id").reset_index(drop=True)


def _numbers(frame: pd.DataFrame) -> pd.DataFrame:
    """Floats at 3 significant digits (for to_string and to_markdown)."""
    return frame.apply(lambda s: s.map(_NUMBER, na_action="ignore")
                       if s.dtype.kind == "f" else s)


def _first_line(text) -> str:
    return str(text).splitlines()[0] if isinstance(text, str) and text else ""


def _finite(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _xml(text: str) -> str:
    """XML 1.0 cannot carry control characters: they are dropped."""
    return _CONTROL.sub("", str(text))
