"""The per-fold forest plot of walk-forward verdicts: each fold's effect with its interval, and
the pooled estimate as a diamond (issue 31 item 3).

It draws a per-fold table, one row per gem and fold: `fold`, `effect`, `ci_low`, `ci_high`,
`seeds`, `tied_share` and the fold's validation dates `start`, `end` (a `gem` column when
several gems share the figure), and the pooled estimate per gem (`effect`, `ci_low`,
`ci_high`): the intervals the verdict itself used, given by its caller, never recomputed here.
Infinite bounds (an interval the seeds cannot close) are drawn to the axis edge with an arrow.
Data artists carry a `gid`: `fold:<gem>:<fold>` (the interval), `pooled:<gem>` (the diamond).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Polygon

from tune_gems.analysis.render.plots import new_figure
from tune_gems.analysis.render.seed_plots import metric_axis

DIAMOND_HALF_HEIGHT = 0.3


def _span(values: np.ndarray, rope: float) -> float:
    fin = values[np.isfinite(values)]
    return max(float(np.abs(fin).max()) if fin.size else 1.0, rope) * 1.25 or 1.0


def _clip(v: float, span: float) -> float:
    return float(np.clip(v, -span, span))


def _row_label(r: pd.Series) -> str:
    dates = f" ({r['start']}..{r['end']})" if "start" in r and "end" in r and pd.notna(r["start"]) else ""
    ties = f", {100 * float(r['tied_share']):.0f}% tie" if "tied_share" in r and pd.notna(r["tied_share"]) else ""
    seeds = int(r["pairs"]) if "pairs" in r and pd.notna(r["pairs"]) else int(r["seeds"])
    empty = "" if pd.notna(r["effect"]) or ties.endswith("100% tie") else ", no estimate"
    return f"fold {int(r['fold'])}{dates}: {seeds} seeds{ties}{empty}"


def _draw_pooled(ax, p: pd.Series, gem: str, span: float) -> str:
    """The pooled estimate at y = 0: a diamond over its interval, or (no interval: e.g. too few
    periods to pool with one) a diamond marker at the estimate; returns the row's label."""
    lo, e, hi = (float(p[c]) for c in ("ci_low", "effect", "ci_high"))
    if not np.isfinite(e):
        return "pooled: no estimate"
    if np.isnan(lo) or np.isnan(hi):
        (mark,) = ax.plot([_clip(e, span)], [0], "D", color="tab:red", ms=7, label="pooled (no interval)")
        mark.set_gid(f"pooled:{gem}")
        return "pooled (no interval)"
    lo, e, hi = (_clip(v, span) for v in (lo, e, hi))
    h = DIAMOND_HALF_HEIGHT
    diamond = Polygon([(lo, 0), (e, h), (hi, 0), (e, -h)], closed=True, color="tab:red", alpha=0.8,
                      label="pooled: the verdict's interval")
    diamond.set_gid(f"pooled:{gem}")
    ax.add_patch(diamond)
    return "pooled"


def fold_forest(per_fold: pd.DataFrame, pooled: pd.DataFrame, *, rope: float, metric: str = "val_alpha_sharpe",
                title: str = "wired - measured") -> Figure | None:
    """Per gem: one row per fold (effect and interval), the pooled diamond below, the ROPE band."""
    if per_fold is None or not len(per_fold):
        return None
    pooled = pooled if pooled is not None else pd.DataFrame(columns=["gem", "effect", "ci_low", "ci_high"])
    per_fold = per_fold.assign(gem=per_fold["gem"] if "gem" in per_fold.columns else "")
    pooled = pooled.assign(gem=pooled["gem"] if "gem" in pooled.columns else "").set_index("gem")
    gems = list(dict.fromkeys(per_fold["gem"]))
    vals = np.concatenate([per_fold[["effect", "ci_low", "ci_high"]].to_numpy(float).ravel(),
                           pooled[["effect", "ci_low", "ci_high"]].to_numpy(float).ravel()])
    span = _span(vals, rope)
    n_rows = int(per_fold.groupby("gem").size().max()) + 1
    fig = new_figure(8.5 * len(gems), 1.8 + 0.45 * n_rows)
    axes = np.atleast_1d(fig.subplots(1, len(gems), squeeze=False)[0])
    for ax, gem in zip(axes, gems):
        rows = per_fold[per_fold["gem"] == gem].sort_values("fold")
        ax.axvspan(-rope, rope, color="tab:green", alpha=0.12, label=f"ROPE +-{rope:g}")
        ax.axvline(0.0, color="black", lw=0.8)
        labels = []
        for y, (_, r) in zip(range(len(rows), 0, -1), rows.iterrows()):
            lo, hi, e = (float(r[c]) for c in ("ci_low", "ci_high", "effect"))
            first = y == len(rows)
            (line,) = ax.plot([_clip(lo, span), _clip(hi, span)], [y, y], color="tab:blue", lw=2,
                              label="fold effect, interval at its level" if first else None)
            line.set_gid(f"fold:{gem}:{int(r['fold'])}")
            ax.plot([_clip(e, span)], [y], "s", color="tab:blue", ms=5)
            for v in (lo, hi):
                if not np.isfinite(v):
                    edge = _clip(v, span)
                    ax.annotate("", xy=(edge, y), xytext=(edge * 0.9, y), arrowprops=dict(arrowstyle="->", color="tab:blue"))
            labels.append((y, _row_label(r)))
        if gem in pooled.index:
            labels.append((0, _draw_pooled(ax, pooled.loc[gem], gem, span)))
        ax.set_yticks([y for y, _ in labels], [t for _, t in labels], fontsize=8)
        ax.set_xlim(-span, span)
        ax.set_ylim(-0.7, len(rows) + 0.7)
        ax.set_xlabel(f"{title}: {metric_axis(metric)}", fontsize=8)
        ax.set_title(f"{gem}: effect per walk-forward fold" if gem else "effect per walk-forward fold", fontsize=10)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=3, fontsize=7, frameon=False)
    return fig
