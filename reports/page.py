"""The HTML report: one self-contained page a maintainer opens to find what broke and why.

    html(report, title)   the page: nothing fetched, every string from the results escaped

What it holds, top to bottom: the verdict; what changed against a baseline (plotted); with
`moecert bench` rows, their % of the floor per scheme and M (plotted) and their table; the
status heat-map (backend x scheme rows, check columns, labels on top; a cell filters the case
table to its cases, and the table's filter bar, sticky, names the cell); the failures grouped
by signature, one line per bug (reports/groups.py: backend, check and how it failed, across
schemes; one scale bug failing 36 cases is one group; what its members share and where they
differ); a panel per failing case (its metrics against their thresholds, where the error sits
as small pictures, the rerun command); every case in a table that sorts (click a header) and
filters (backend, scheme, check, status, id text), failing cases first; the tolerance plots
and tables. A few lines of plain script do the sorting, filtering and opening; no framework,
no network.
"""

from __future__ import annotations

import html as html_lib
import json
import math

import pandas as pd

from .frames import REGRESSIONS, _metric_used
from .groups import failure_groups
from .report import Report
from .schema import STATUSES, thresholds_of

FAILING_PANELS = 200  # failing cases with a panel each; the rest are in the table
_esc = html_lib.escape


def _num(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return ""
    return f"{v:.4g}" if isinstance(v, float) else str(v)


# --- pieces ----------------------------------------------------------------------------------

_STATUS_CSS = {"crash": "#7f0000", "timeout": "#b30000", "error": "#e34a33", "fail": "#fc8d59",
               "oversize": "#9e9ac8", "xfail": "#fdd49e", "unsupported": "#e0e0e0",
               "pass": "#a1d99b", "skip": "#f5f5f5"}


def _heatmap(report: Report) -> str:
    """Backend x scheme rows, check columns, the header row sticky at the top; a cell
    filters the case table to its backend, scheme and check."""
    matrix = report.matrix
    if matrix.empty:
        return "<p>(no rows)</p>"
    checks = [str(c) for c in matrix.columns]
    head = "".join(f"<th>{_esc(c)}</th>" for c in checks)
    body = []
    for (backend, scheme), row in matrix.iterrows():
        cells = []
        for check, status in zip(checks, row.tolist(), strict=True):
            if not isinstance(status, str):
                cells.append("<td></td>")
                continue
            filt = _esc(json.dumps({"backend": str(backend), "scheme": str(scheme),
                                    "check": check}), quote=True)
            cells.append(f'<td class="cell" style="background:{_STATUS_CSS[status]}">'
                         f'<a href="#cases-view" data-filter="{filt}">{_esc(status)}</a></td>')
        body.append(f"<tr><th>{_esc(str(backend))} / {_esc(str(scheme))}</th>"
                    + "".join(cells) + "</tr>")
    return (f'<div class="scroll"><table class="heat"><thead><tr><th>backend / scheme</th>'
            f"{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>")


def _groups_html(groups: list[dict], panel_ids: dict[str, str]) -> str:
    if not groups:
        return "<p>No failing cases.</p>"
    parts = []
    for i, g in enumerate(groups):
        s = g["signature"]
        shared = ", ".join(f"{k} {_esc(v)}" for k, v in s.items()
                           if v and k not in ("backend", "check"))
        also = "; ".join(f"{_esc(c)} in {n}" for c, n in sorted(g["also"].items()))
        also = f"<p>their other failing checks: {also}</p>" if also else ""
        varies = "; ".join(f"{_esc(k)}: {_esc(', '.join(v[:12]))}"
                           + (f" and {len(v) - 12} more" if len(v) > 12 else "")
                           for k, v in g["varies"].items()) or "nothing but the case id"
        members = ", ".join(
            f'<a href="#{panel_ids[m["case_id"]]}" class="open">{_esc(str(m["case_id"]))}</a>'
            if m["case_id"] in panel_ids else _esc(str(m["case_id"]))
            for m in g["rows"][:60])
        more = f" and {len(g['rows']) - 60} more" if len(g["rows"]) > 60 else ""
        parts.append(f'<div class="group" id="group-{i}"><p class="headline"><b>'
                     f"{_esc(g['headline'])}</b></p>"
                     + (f"<p>they also share: {shared}</p>" if shared else "")
                     + f"<p>they differ in: {varies}</p>{also}"
                     f'<details><summary>members</summary><p class="ids">{members}{more}'
                     "</p></details></div>")
    return "\n".join(parts)


def _bars(values: list[float], label: str, width: int = 320, height: int = 56) -> str:
    """A small inline SVG bar chart of non-negative values (nothing but numbers in it)."""
    values = [v if isinstance(v, int | float) and math.isfinite(v) else 0.0 for v in values]
    if not values:
        return ""
    top = max(values) or 1.0
    w = width / len(values)
    bars = "".join(f'<rect x="{i * w:.1f}" y="{height - height * v / top:.1f}" '
                   f'width="{max(w - 1, 0.5):.1f}" height="{height * v / top:.1f}"/>'
                   for i, v in enumerate(values))
    return (f'<figure class="bars"><svg width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img">{bars}</svg>'
            f"<figcaption>{_esc(label)} ({len(values)}; max {top:.3g})</figcaption></figure>")


_PROFILE_AXES = (("expert", "error per expert (rel. Frobenius over its rows)"),
                 ("token", "error per token (output row)"),
                 ("column", "error per output column (the hidden dimension K)"))


def _panel(row: dict, panel_id: str, rerun: str) -> str:
    """A failing case's panel: metrics against thresholds, where the error sits, rerun."""
    metrics = []
    for metric, threshold in thresholds_of(row).items():
        value = row.get(metric)
        used = _metric_used(metric, value, threshold)
        limit = (f"[{threshold[0]:.7g}, {threshold[1]:.7g}]" if isinstance(threshold, tuple)
                 else f"{threshold:.7g}")
        bad = used is not None and used > 1
        metrics.append(f'<tr{" class=over" if bad else ""}><td>{_esc(metric)}</td>'
                       f"<td>{_num(value)}</td><td>{_esc(limit)}</td>"
                       f"<td>{'' if used is None else f'{used:.3g}'}</td></tr>")
    table = ("<table><thead><tr><th>metric</th><th>value</th><th>threshold</th>"
             f"<th>used</th></tr></thead><tbody>{''.join(metrics)}</tbody></table>"
             if metrics else "")
    pictures = ""
    profile = row.get("error_profile")
    if isinstance(profile, str) and profile:
        try:
            data = json.loads(profile)
        except ValueError:
            data = {}
        pictures = "".join(_bars(data.get(axis, []), label) for axis, label in _PROFILE_AXES
                           if data.get(axis))
    return (f'<details class="case" id="{panel_id}"><summary><b>{_esc(str(row["status"]))}'
            f"</b> {_esc(str(row['check']))} <code>{_esc(str(row['case_id']))}</code>"
            f"</summary>{table}<div class=\"pics\">{pictures}</div>"
            f"<pre>{_esc(str(row.get('message') or ''))}</pre>"
            f"<p>rerun:</p><pre class=\"rerun\">{_esc(rerun)}</pre></details>")


_CASE_COLUMNS = ("status", "backend", "scheme", "check", "case_id", "used", "duration_s")


def _case_table(report: Report, panel_ids: dict[str, str]) -> str:
    """Every case, failing first (frames.cases' order), sortable and filterable."""
    cases = report.cases
    head = "".join(f'<th data-col="{i}">{_esc(c)}</th>' for i, c in enumerate(_CASE_COLUMNS))
    rows = []
    for r in cases.to_dict("records"):
        cells = []
        for c in _CASE_COLUMNS:
            v = r.get(c)
            text = _esc(_num(v))
            if c == "case_id" and r["case_id"] in panel_ids:
                text = f'<a href="#{panel_ids[r["case_id"]]}" class="open">{text}</a>'
            sort = (f' data-v="{v:.6g}"' if isinstance(v, float) and math.isfinite(v)
                    else f' data-v="{STATUSES.index(str(v))}"' if c == "status" else "")
            cells.append(f"<td{sort}>{text}</td>")
        rows.append(f'<tr class="st-{_esc(str(r["status"]))}">{"".join(cells)}</tr>')
    selects = "".join(
        f'<label>{name} <select data-key="{i}" data-name="{name}"><option value="">all</option>'
        + "".join(f"<option>{_esc(str(v))}</option>"
                  for v in sorted({str(x) for x in cases[name].dropna()}))
        + "</select></label> " for i, name in enumerate(_CASE_COLUMNS) if name in (
            "status", "backend", "scheme", "check"))
    # the filter bar stays in view (sticky) while the table below it scrolls, and says which
    # heat-map cell, if any, set its filters
    return (f'<section id="cases-view"><div class="filters">{selects}<label>id contains '
            f'<input type="search" data-key="4"></label> <b id="shown"></b> '
            f'<span id="from-cell"></span> <button type="button" id="show-all">show all'
            f"</button></div>"
            f'<div class="scroll tall"><table id="cases" class="sortable"><thead><tr>{head}'
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div></section>")


def _frame_table(frame: pd.DataFrame) -> str:
    if frame is None or frame.empty:
        return "<p>(none)</p>"
    frame = frame.dropna(axis=1, how="all")
    head = "".join(f'<th data-col="{i}">{_esc(str(c))}</th>' for i, c in enumerate(frame.columns))
    body = "".join("<tr>" + "".join(
        f'<td{f" data-v={v:.6g}" if isinstance(v, float) and math.isfinite(v) else ""}>'
        f"{_esc(_num(v))}</td>" for v in row) + "</tr>"
        for row in frame.astype(object).itertuples(index=False))
    return (f'<div class="scroll"><table class="sortable"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def _img(png: str | None, alt: str) -> str:
    return "" if png is None else f'<img alt="{_esc(alt)}" src="data:image/png;base64,{png}">'


# --- the page --------------------------------------------------------------------------------

_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:1400px}
table{border-collapse:collapse;font-size:12px;margin:.4em 0}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#f2f2f2}h1{font-size:20px}h2{font-size:17px;margin-top:1.4em}
.verdict{font-size:16px;font-weight:600;padding:.5em;border-radius:4px}
.bad{background:#fde2e1}.good{background:#e3f6e5}img{max-width:100%}
pre{background:#f6f6f6;padding:.4em;white-space:pre-wrap;word-break:break-all;font-size:12px}
.scroll{overflow:auto;max-height:70vh}.scroll.tall{max-height:80vh}
.heat thead th,.sortable thead th{position:sticky;top:0;z-index:1}
.heat thead th{writing-mode:vertical-rl;transform:rotate(180deg);height:7em}
.heat td.cell{text-align:center}.heat td.cell a{color:#111;text-decoration:none;display:block}
.sortable th{cursor:pointer}.sortable th.asc:after{content:" \\25B2"}
.sortable th.desc:after{content:" \\25BC"}
tr.st-crash td,tr.st-timeout td,tr.st-error td,tr.st-fail td{background:#fde2e1}
tr.over td{background:#fde2e1}.group{border-left:4px solid #fc8d59;padding-left:.6em}
.case{border:1px solid #ddd;margin:.3em 0;padding:.2em .5em}.case[open]{background:#fffdf5}
.pics{display:flex;gap:1em;flex-wrap:wrap}.bars rect{fill:#d7301f}
.bars svg{background:#fafafa;border:1px solid #ddd}figcaption{font-size:11px}
.filters label{margin-right:.8em}.ids{font-size:12px}
.filters{position:sticky;top:0;z-index:3;background:#fff;padding:.4em 0;
 border-bottom:1px solid #ccc}#from-cell{background:#fff3c4;padding:0 .3em}
#from-cell:empty{display:none}.scroll.tall{max-height:calc(100vh - 4em)}"""

_SCRIPT = """
(function(){
function val(td){var v=td.getAttribute('data-v');return v===null?td.textContent:parseFloat(v);}
document.querySelectorAll('table.sortable').forEach(function(t){
 t.querySelectorAll('thead th').forEach(function(th,i){th.addEventListener('click',function(){
  var asc=!th.classList.contains('asc');t.querySelectorAll('th').forEach(function(h){
   h.classList.remove('asc','desc');});th.classList.add(asc?'asc':'desc');
  var body=t.tBodies[0],rows=Array.from(body.rows);rows.sort(function(a,b){
   var x=val(a.cells[i]),y=val(b.cells[i]);if(x===y)return 0;
   var r=(typeof x==='number'&&typeof y==='number')?x-y:String(x).localeCompare(String(y));
   return asc?r:-r;});rows.forEach(function(r){body.appendChild(r);});});});});
var table=document.getElementById('cases');
var inputs=document.querySelectorAll('.filters [data-key]');
function filter(){if(!table)return;var n=0;Array.from(table.tBodies[0].rows).forEach(function(r){
  var ok=true;inputs.forEach(function(e){var k=+e.getAttribute('data-key'),v=e.value;
   if(!v)return;var t=r.cells[k].textContent;
   if(e.tagName==='SELECT'?t!==v:t.toLowerCase().indexOf(v.toLowerCase())<0)ok=false;});
  r.style.display=ok?'':'none';n+=ok;});
 var s=document.getElementById('shown');
 if(s)s.textContent=n+' of '+table.tBodies[0].rows.length+' cases shown';}
var fromCell=document.getElementById('from-cell');
function byHand(){if(fromCell)fromCell.textContent='';filter();}
inputs.forEach(function(e){e.addEventListener('input',byHand);e.addEventListener('change',byHand);});
var showAll=document.getElementById('show-all');
if(showAll)showAll.addEventListener('click',function(){inputs.forEach(function(e){e.value='';});
 byHand();});
document.querySelectorAll('[data-filter]').forEach(function(a){a.addEventListener('click',function(){
  var f=JSON.parse(a.getAttribute('data-filter'));inputs.forEach(function(e){
   var name=e.getAttribute('data-name');
   if(name)e.value=(name in f)?f[name]:'';});
  if(fromCell)fromCell.textContent='filtered by the heat-map cell '+[f.backend,f.scheme,f.check]
   .join(' / ');filter();});});
function openHash(){var id=location.hash.slice(1);var el=id&&document.getElementById(id);
 if(el&&el.tagName==='DETAILS'){el.open=true;el.scrollIntoView();}}
document.querySelectorAll('a.open').forEach(function(a){a.addEventListener('click',function(){
  var el=document.getElementById(a.getAttribute('href').slice(1));if(el)el.open=true;});});
window.addEventListener('hashchange',openHash);openHash();filter();
})();
"""


def html(report: Report, title: str = "moecert report") -> str:
    """The page (see the module docstring)."""
    from . import plots

    bad = report.exit_code != 0
    failing = (report.failing.drop_duplicates("case_id").head(FAILING_PANELS)
               .to_dict("records"))
    panel_ids = {r["case_id"]: f"case-{i}" for i, r in enumerate(failing)}
    groups = failure_groups(report.rows)
    body = [f"<h1>{_esc(title)}</h1>",
            f'<p class="verdict {"bad" if bad else "good"}">{_esc(report.verdict())}</p>',
            f"<p>run {_esc(', '.join(report.run_ids()))}: {len(report.cases)} cases, "
            f"{report.failed_cases} failing, {len(groups)} failure group(s)</p>"]
    if report.changes is not None:
        regressions = report.changes[report.changes["change"].isin(REGRESSIONS)]
        body += ["<h2>Against the baseline</h2>",
                 f"<p>{len(regressions)} regression(s), {len(report.changes)} change(s)</p>",
                 _img(plots.baseline_changes(report), "what changed against the baseline"),
                 _frame_table(report.changes)]
    if report.bench is not None and len(report.bench):
        body += ["<h2>Timings (moecert bench)</h2>",
                 _img(plots.floor_by_scheme(report), "% of the floor per scheme and M"),
                 _frame_table(report.bench)]
    body += ["<h2>Status: backend x scheme x check</h2>",
             "<p>A cell shows the worst status of its claimed cases; click it to list them "
             "below.</p>", _heatmap(report),
             f"<h2>Failures by signature ({len(groups)}): backend, check, how it failed</h2>",
             _groups_html(groups, panel_ids)]
    if failing:
        shown = (f" (the first {FAILING_PANELS})" if report.failed_cases > FAILING_PANELS
                 else "")
        body += [f"<h2>Failing cases{shown}</h2>"]
        body += [_panel(r, panel_ids[r["case_id"]], report.rerun(r)) for r in failing]
    body += ['<h2 id="cases-title">Cases</h2>', _case_table(report, panel_ids),
             "<h2>Tolerance used by every judged row</h2>",
             _img(plots.used_by_group(report), "tolerance used per backend and scheme"),
             "<h2>Tolerance used, the most per entry</h2>", _frame_table(report.used),
             "<h2>Slowest cases</h2>", _frame_table(report.slowest)]
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(body) + f"\n<script>{_SCRIPT}</script>\n</body></html>\n")
