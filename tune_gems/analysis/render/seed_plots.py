"""Plots of the seeds themselves: each seed pair of a gem's comparison, and the learning curves.

Drawn from `plot_tables` (paired_seeds.csv, learning_curves.csv) and nothing else. Every data
artist carries a `gid` naming the table row(s) it draws (`pair:<gem>:<row>`,
`curve:<trial>:<arm>:<fold>`, `band:...`), so the figure can be read back and checked
against its table. Figures are built like those of `plots` (Agg canvas, no pyplot).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from tune_gems.analysis.render.plots import new_figure
from tune_gems.contracts.config_label import short_labels

MIN_WIDTH = 6.5
"""Inches: a one-panel figure still has room for its title."""
MAX_CURVE_PANELS = 12
"""Learning-curve panels at most (trials x folds): the best trials by objective first."""
FOLD_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")
METRIC_WORDS = {"val_alpha_sharpe": "validation alpha Sharpe", "val_sharpe": "validation Sharpe",
                "test_alpha_sharpe": "test alpha Sharpe", "test_sharpe": "test Sharpe"}


def metric_axis(column: str, last_k: int | None = None, sep: str = " ") -> str:
    """An axis label with units: Sharpe ratios are annualised (config env.periods_per_year);
    `sep` "\n" puts the units on a line of their own."""
    words = METRIC_WORDS.get(column, column)
    window = f", mean of the last {last_k} epochs" if last_k else ""
    return f"{words}{sep}(annualised{window})"


def fold_color(fold: int) -> str:
    return FOLD_COLORS[int(fold) % len(FOLD_COLORS)]


def paired_seeds(pairs: pd.DataFrame, last_k: int | None = None) -> Figure | None:
    """Per gem: one line per seed pair from its measured to its wired member, coloured by
    fold; a diverged member is drawn at the panel's bottom edge (the worst outcome)."""
    if pairs is None or not len(pairs):
        return None
    pairs = pairs.reset_index(drop=True)
    gems = list(dict.fromkeys(pairs["gem"]))
    fig = new_figure(max(MIN_WIDTH, 3.6 * len(gems) + 1.0), 4.8)
    axes = np.atleast_1d(fig.subplots(1, len(gems), squeeze=False)[0])
    for ax, gem in zip(axes, gems):
        g = pairs[pairs["gem"] == gem]
        finite = np.concatenate([g["measured"].to_numpy(float), g["wired"].to_numpy(float)])
        finite = finite[np.isfinite(finite)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (-1.0, 1.0)
        pad = 0.08 * (hi - lo) if hi > lo else 0.5
        floor = lo - pad  # where a diverged member is drawn
        for i, r in g.iterrows():
            y = [floor if r["measured_diverged"] else r["measured"], floor if r["wired_diverged"] else r["wired"]]
            dashed = bool(r["measured_diverged"] or r["wired_diverged"])
            (line,) = ax.plot([0, 1], y, color=fold_color(r["fold"]), alpha=0.6, lw=1.2, marker="o", ms=3,
                              ls="--" if dashed else "-")
            line.set_gid(f"pair:{gem}:{i}")
        ax.set_xlim(-0.25, 1.25)
        ax.set_ylim(floor - pad, hi + pad)
        ax.set_xticks([0, 1], ["measured", "wired"])
        ax.set_xlabel(f"{gem}'s mode (all else alike)", fontsize=9)
        ax.set_ylabel(metric_axis(str(g["metric"].iloc[0]), last_k, sep="\n"), fontsize=9)
        tied = float(g["tied"].mean())
        ax.set_title(f"{gem}: {len(g)} seed pair(s), {100 * tied:.0f}% tie", fontsize=10)
        handles = [Line2D([], [], color=fold_color(f), marker="o", ms=3, label=f"fold {f}")
                   for f in sorted(g["fold"].unique())]
        if (g["measured_diverged"] | g["wired_diverged"]).any():
            handles.append(Line2D([], [], color="grey", ls="--", label="a side diverged (drawn at the bottom)"))
        ax.legend(handles=handles, fontsize=7, loc="best")
    fig.suptitle("Each seed pair of the verdict's comparison, measured to wired", fontsize=11)
    return fig


def _panels(curves: pd.DataFrame, order: Sequence[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[int], int]:
    """(trials drawn, folds, trials left out): the first trials of `order` that have curves, as
    many as MAX_CURVE_PANELS allows with every fold."""
    folds = sorted(int(f) for f in curves["fold"].unique())
    have = list(dict.fromkeys(zip(curves["experiment"], curves["trial_id"])))
    ranked = [k for k in order if k in have] + [k for k in have if k not in order]
    n = max(1, MAX_CURVE_PANELS // len(folds))
    return ranked[:n], folds, max(0, len(ranked) - n)


def learning_curves(curves: pd.DataFrame, order: Sequence[tuple[str, str]] = (),
                    titles: dict[tuple[str, str], str] | None = None) -> Figure | None:
    """Per trial (rows, best objective first: `order`) and fold (columns): each arm's median
    verdict metric over its seeds per epoch, with the interquartile range as a band; `titles`
    names a trial's panels (default: its id)."""
    if curves is None or not len(curves):
        return None
    trials, folds, left_out = _panels(curves, order)
    fig = new_figure(4.2 * len(folds) + 1.5, 2.9 * len(trials) + 0.8)
    axes = fig.subplots(len(trials), len(folds), squeeze=False)
    column = str(curves["metric"].iloc[0])
    for i, (exp, trial) in enumerate(trials):
        t = curves[(curves["experiment"] == exp) & (curves["trial_id"] == trial)]
        arms = list(dict.fromkeys(t["arm"]))
        labels = t.drop_duplicates("arm").set_index("arm")["config_label"].reindex(arms).astype(str).tolist()
        shown = dict(zip(arms, short_labels(labels) if len(arms) > 1 else labels))
        for j, fold in enumerate(folds):
            ax = axes[i, j]
            for k, arm in enumerate(arms):
                c = t[(t["arm"] == arm) & (t["fold"] == fold)].sort_values("epoch")
                if not len(c):
                    continue
                color = f"C{k % 10}"
                gid = f"{trial}:{arm}:{fold}"
                (line,) = ax.plot(c["epoch"], c["median"], color=color, marker="o", ms=3,
                                  label=f"{arm}: {shown[arm]}" if shown[arm] != arm else arm)
                line.set_gid(f"curve:{gid}")
                band = ax.fill_between(c["epoch"].to_numpy(float), c["q25"].to_numpy(float), c["q75"].to_numpy(float),
                                       color=color, alpha=0.18, lw=0)
                band.set_gid(f"band:{gid}")
            ax.axhline(0.0, color="grey", lw=0.6)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("epoch")
            ax.set_ylabel(metric_axis(column, sep="\n"), fontsize=8)
            name = (titles or {}).get((exp, trial), f"trial {trial}")
            ax.set_title(name + (f", fold {fold}" if len(folds) > 1 else ""), fontsize=9)
            ax.legend(fontsize=6, loc="best")
    more = f"; {left_out} more trial(s) in learning_curves.csv" if left_out else ""
    fig.suptitle(f"Learning curves per arm: median over seeds, band = interquartile range{more}", fontsize=11)
    return fig
