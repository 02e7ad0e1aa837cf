"""The report's plots (matplotlib, Agg), each returned as a base64 PNG for embedding in one
HTML page; None when there is nothing to plot. Labels from results files are drawn as pixels,
never inserted as markup."""

from __future__ import annotations

import base64
import io

import numpy as np

from .report import Report
from .schema import STATUSES

# One colour per status, worst (red) to best (green); skip grey.
STATUS_COLOURS = {"crash": "#7f0000", "timeout": "#b30000", "error": "#e34a33", "fail": "#fc8d59",
                  "oversize": "#9e9ac8",
                  "xfail": "#fdd49e", "unsupported": "#d9d9d9", "pass": "#74c476",
                  "skip": "#f0f0f0"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    _pyplot().close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def status_matrix(report: Report) -> str | None:
    """The worst status of each (backend, scheme) x check, as coloured cells."""
    from matplotlib.colors import ListedColormap

    matrix = report.matrix
    if matrix.empty:
        return None
    plt = _pyplot()
    codes = np.array([[STATUSES.index(v) if isinstance(v, str) else np.nan for v in row]
                      for row in matrix.astype(object).to_numpy()], dtype=float)
    fig, ax = plt.subplots(figsize=(1.1 * matrix.shape[1] + 3, 0.35 * matrix.shape[0] + 1.5))
    cmap = ListedColormap([STATUS_COLOURS[s] for s in STATUSES])
    ax.imshow(codes, cmap=cmap, vmin=-0.5, vmax=len(STATUSES) - 0.5, aspect="auto")
    for (i, j), code in np.ndenumerate(codes):
        if not np.isnan(code):
            ax.text(j, i, STATUSES[int(code)], ha="center", va="center", fontsize=7)
    ax.set_xticks(range(matrix.shape[1]), [str(c) for c in matrix.columns], rotation=40,
                  ha="right", fontsize=8)
    ax.set_yticks(range(matrix.shape[0]), [f"{b} / {s}" for b, s in matrix.index], fontsize=8)
    ax.set_title("worst status per check")
    return _png(fig)


def used_by_group(report: Report) -> str | None:
    """Every judged row's used (error / tolerance), one line per backend and scheme;
    the threshold at 1 and the watch line at 0.8."""
    from .frames import USED_WATCH

    rows = report.rows[report.rows["used"].notna()]
    if rows.empty:
        return None
    plt = _pyplot()
    groups = rows.groupby(["backend", "scheme"], observed=True)["used"]
    labels = [f"{b} / {s}" for b, s in groups.groups]
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(labels) + 1.5))
    for i, (_, values) in enumerate(groups):
        shown = np.clip(values.to_numpy(dtype=float), 1e-4, 1e3)
        jitter = (np.random.default_rng(i).random(len(shown)) - 0.5) * 0.3
        colours = np.where(values.to_numpy(dtype=float) > 1, "#d7301f", "#2b8cbe")
        ax.scatter(shown, i + jitter, s=12, c=colours, alpha=0.7)
    ax.axvline(1.0, color="#d7301f", lw=1, label="threshold (fails above)")
    ax.axvline(USED_WATCH, color="#fc8d59", lw=1, ls="--", label=f"watch {USED_WATCH}")
    ax.set_xscale("log")
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_xlabel("used: error / tolerance (worst gated metric of the row; an exact 0 is "
                  "drawn at 1e-4)")
    ax.legend(fontsize=8, loc="lower right")
    return _png(fig)


def used_histogram(report: Report) -> str | None:
    """How close the judged rows come to their thresholds, per backend."""
    rows = report.rows[report.rows["used"].notna()]
    if rows.empty:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.5))
    bins = np.logspace(-4, 1, 31)
    per_backend = [(str(b), np.clip(g["used"].to_numpy(dtype=float), 1e-4, 10))
                   for b, g in rows.groupby("backend", observed=True)]
    ax.hist([v for _, v in per_backend], bins=bins, label=[b for b, _ in per_backend],
            stacked=True)
    ax.axvline(1.0, color="#d7301f", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("used (1 = at the threshold; zeros drawn at 1e-4)")
    ax.set_ylabel("rows")
    ax.legend(fontsize=8)
    return _png(fig)


def baseline_changes(report: Report) -> str | None:
    """What changed against the baseline: each (case, check)'s tolerance used, baseline
    against this run (new failures red, rows whose error grew orange), and with `moecert
    bench` rows in both, the kernel time per scheme and M as a ratio to the baseline's."""
    from .frames import REGRESSIONS

    base, now = report.baseline, report.rows
    if base is None or report.changes is None:
        return None
    keys = ["case_id", "check"]
    pair = now[[*keys, "used", "status"]].merge(base[[*keys, "used"]], on=keys,
                                                  suffixes=("", "_base")).dropna(
        subset=["used", "used_base"])
    timed = _time_ratios(base, now)
    if pair.empty and timed.empty:
        return None
    plt = _pyplot()
    panels = 1 + (not timed.empty)
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.5), squeeze=False)
    ax = axes[0][0]
    if len(pair):
        kinds = report.changes.set_index("case_id")["change"].astype(str)
        regressed = set(report.changes.loc[report.changes["change"].isin(REGRESSIONS),
                                           "case_id"])
        colour = ["#d7301f" if kinds.get(c) == "new_failure" else
                  "#fc8d59" if c in regressed else "#2b8cbe" for c in pair["case_id"]]
        x = np.clip(pair["used_base"].to_numpy(dtype=float), 1e-4, 1e3)
        y = np.clip(pair["used"].to_numpy(dtype=float), 1e-4, 1e3)
        ax.scatter(x, y, s=10, c=colour, alpha=0.7)
        ax.plot([1e-4, 1e3], [1e-4, 1e3], color="#999", lw=0.8)
        ax.axhline(1.0, color="#d7301f", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("tolerance used in the baseline (exact 0 drawn at 1e-4)")
    ax.set_ylabel("tolerance used in this run (fails above 1)")
    ax.set_title("error: red new failure, orange regressed, blue unchanged", fontsize=9)
    if not timed.empty:
        ax = axes[0][1]
        labels = [f"{s} M={m}" for s, m in timed.index]
        ax.barh(range(len(timed)), timed.to_numpy(), color=np.where(timed > 1, "#fc8d59",
                                                                    "#74c476"))
        ax.axvline(1.0, color="#333", lw=0.8)
        ax.set_yticks(range(len(timed)), labels, fontsize=7)
        ax.set_xlabel("kernel time / baseline's (median over the scheme's rows)")
    return _png(fig)


def floor_by_scheme(report: Report) -> str | None:
    """The `moecert bench` rows as % of the binding floor (frames.floor_points) against M,
    one panel per model layer, one line per backend and scheme: where each kernel stands
    against the device's memory and compute floors, and at which M it falls away."""
    from .frames import floor_points

    if report.bench is None or report.bench.empty:
        return None
    points = floor_points(report.bench)
    if points.empty:
        return None
    plt = _pyplot()
    models = list(dict.fromkeys(points["model"].astype(str)))
    cols = min(len(models), 2)
    rows = -(-len(models) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4 * rows), squeeze=False)
    for ax, model in zip(axes.flat, models, strict=False):
        mine = points[points["model"].astype(str) == model]
        for (backend, config), line in mine.groupby(["backend", "config"], observed=True):
            ax.plot(line["M"].to_numpy(dtype=float), line["floor_pct"].to_numpy(dtype=float),
                    marker="o", ms=3, lw=1, label=f"{backend} / {config}")
        ax.axhline(100, color="#999", lw=0.8)
        ax.set_xscale("log", base=2)
        ms = sorted(set(mine["M"].tolist()))
        ax.set_xticks(ms, [str(m) for m in ms])
        ax.set_ylim(0, 110)
        ax.set_title(model, fontsize=9)
        ax.set_xlabel("M (tokens per call)")
        ax.set_ylabel("% of the binding floor (memory or compute)")
        ax.legend(fontsize=6, ncol=2)
    for ax in list(axes.flat)[len(models):]:
        ax.set_visible(False)
    fig.tight_layout()
    return _png(fig)


def _time_ratios(base, now):
    """Median kernel-time ratio (this run / baseline) per (scheme, M) over matched rows."""
    import pandas as pd

    keys = ["case_id"]
    t0 = base.dropna(subset=["kernel_s"]).groupby(keys)["kernel_s"].median()
    t1 = now.dropna(subset=["kernel_s"]).drop_duplicates("case_id").set_index("case_id")
    both = t1.join(t0.rename("base"), how="inner")
    if both.empty:
        return pd.Series(dtype=float)
    ratio = both["kernel_s"] / both["base"]
    return ratio.groupby([both["scheme"].astype(str), both["M"]]).median()
