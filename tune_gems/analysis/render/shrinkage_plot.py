"""The confirmation's shrinkage: per gem, the search's (selected, so inflated) gain of its chosen
trial beside the same statistic on the fresh confirmation run (`tune-gems confirm`'s
confirmation.csv: `discovery_gain`, `confirmation_gain`, `shrinkage`).

An arrow per gem runs from the discovery gain to the confirmation gain: how much of a winner's
gain the fresh seeds and paths kept. Data artists carry a `gid`: `discovery:<gem>`,
`confirmation:<gem>` (the two points).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from tune_gems.analysis.render.plots import new_figure

SHRINKAGE_COLUMNS = ("gem", "discovery_gain", "confirmation_gain")


def confirmation_shrinkage(table: pd.DataFrame) -> Figure | None:
    """Discovery and confirmation gain per confirmed gem (rows of `table` with both finite)."""
    if table is None or not len(table) or any(c not in table.columns for c in SHRINKAGE_COLUMNS):
        return None
    t = table[np.isfinite(table["discovery_gain"].astype(float)) & np.isfinite(table["confirmation_gain"].astype(float))]
    if not len(t):
        return None
    fig = new_figure(7.5, 1.8 + 0.6 * len(t))
    ax = fig.subplots()
    ys = np.arange(len(t))[::-1]
    for y, (_, r) in zip(ys, t.iterrows()):
        d, c = float(r["discovery_gain"]), float(r["confirmation_gain"])
        ax.annotate("", xy=(c, y), xytext=(d, y), arrowprops=dict(arrowstyle="->", color="grey"))
        (pd_,) = ax.plot([d], [y], "o", color="tab:orange", ms=7)
        pd_.set_gid(f"discovery:{r['gem']}")
        (pc,) = ax.plot([c], [y], "D", color="tab:green", ms=7)
        pc.set_gid(f"confirmation:{r['gem']}")
        ax.annotate(f"shrinkage {d - c:+.3g}", xy=(max(d, c), y), xytext=(6, 0), textcoords="offset points",
                    va="center", fontsize=8)
    ax.axvline(0.0, color="black", lw=0.8)
    ax.set_yticks(ys, t["gem"].astype(str).tolist())
    lo = float(min(t["discovery_gain"].min(), t["confirmation_gain"].min(), 0.0))
    hi = float(max(t["discovery_gain"].max(), t["confirmation_gain"].max(), 0.0))
    pad = 0.35 * (hi - lo) if hi > lo else 0.5
    ax.set_xlim(lo - 0.1 * pad, hi + pad)
    ax.set_ylim(-0.7, len(t) - 0.3)
    ax.set_xlabel("verdict gain: pseudo-median of the per-seed paired gain, validation alpha Sharpe (annualised)")
    ax.set_title("Discovery (the search's chosen trial) vs confirmation (fresh seeds and paths), per gem", fontsize=10)
    ax.legend(handles=[Line2D([], [], color="tab:orange", marker="o", ls="", label="discovery gain (selected)"),
                       Line2D([], [], color="tab:green", marker="D", ls="", label="confirmation gain")],
              fontsize=8, loc="lower right")
    return fig
