"""rliable-style plots of a gem's comparison: performance profiles and the probability of
improvement (Agarwal et al. 2021; the numbers are `plot_tables.performance_profile_table` and
`improvement_table`, written as performance_profiles.csv and probability_of_improvement.csv).

Both are descriptions of the verdict's seed pairs, not tests: the verdict decides. Data artists
carry a `gid` (`profile:<gem>:<side>`, `poi:<gem>`) naming the table rows they draw.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from tune_gems.analysis.render.plots import new_figure
from tune_gems.analysis.render.seed_plots import MIN_WIDTH, metric_axis

SIDE_STYLE = {"measured": ("tab:blue", "-"), "wired": ("tab:red", "--")}


def performance_profiles(profile: pd.DataFrame, metric: str = "val_alpha_sharpe", last_k: int | None = None) -> Figure | None:
    """Per gem: the share of seeds whose value exceeds tau, measured and wired (a curve that lies
    above the other everywhere is better at every threshold)."""
    if profile is None or not len(profile):
        return None
    gems = list(dict.fromkeys(profile["gem"]))
    fig = new_figure(max(MIN_WIDTH, 3.8 * len(gems) + 0.8), 4.0)
    axes = np.atleast_1d(fig.subplots(1, len(gems), squeeze=False)[0])
    for ax, gem in zip(axes, gems):
        g = profile[profile["gem"] == gem]
        for side, s in g.groupby("side", sort=False):
            color, ls = SIDE_STYLE.get(side, ("tab:grey", ":"))
            (line,) = ax.step(s["tau"], s["share_above"], where="post", color=color, ls=ls,
                              label=f"{side} ({int(s['n'].iloc[0])} seeds)")
            line.set_gid(f"profile:{gem}:{side}")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("tau: " + metric_axis(metric, last_k, sep="\n"), fontsize=8)
        ax.set_ylabel("share of seeds with value > tau")
        ax.set_title(f"{gem}: performance profile", fontsize=10)
        ax.legend(fontsize=7, loc="lower left")
    fig.suptitle("Performance profiles of each gem's comparison (a diverged seed is below every tau)", fontsize=10)
    return fig


IMPROVEMENT_BARS = (("probability", "all members (rliable: unpaired)", "tab:orange"),
                    ("paired_probability", "seed pairs (paired: what the design compares)", "tab:red"))


def improvement_bars(imp: pd.DataFrame) -> Figure | None:
    """Per gem: P(wired > measured) as bars from 0.5 (no difference), over all members (rliable)
    and over the seed pairs, with the share of tied pairs."""
    if imp is None or not len(imp):
        return None
    fig = new_figure(8.0, 1.8 + 0.8 * len(imp))
    ax = fig.subplots()
    y = np.arange(len(imp))[::-1].astype(float)
    height = 0.36
    for k, (col, what, color) in enumerate(IMPROVEMENT_BARS):
        for yi, (_, r) in zip(y, imp.iterrows()):
            p = float(r[col])
            at = yi + (0.5 - k) * height
            (bar,) = ax.barh([at], [p - 0.5], left=0.5, height=height * 0.9, color=color,
                             label=what if yi == y[0] else None).patches
            bar.set_gid(f"poi:{col}:{r['gem']}")
            note = f"{p:.2f}" + (f" ({int(r['n_pairs'])} pairs, {100 * float(r['tied_share']):.0f}% tie)" if k else "")
            ax.annotate(note, xy=(p, at), xytext=(4 if p >= 0.5 else -4, 0), textcoords="offset points",
                        ha="left" if p >= 0.5 else "right", va="center", fontsize=8)
    ax.axvline(0.5, color="black", lw=0.8, label="0.5: no difference")
    ax.set_yticks(y, imp["gem"].astype(str).tolist())
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("probability of improvement P(wired > measured), ties half, averaged over folds")
    ax.set_title("Probability of improvement (a description of the seed pairs; the verdict is the test)", fontsize=10)
    ax.legend(fontsize=8, loc="lower left")
    return fig
