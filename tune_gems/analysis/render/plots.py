"""PNG plots of the analysis (matplotlib, Agg canvas).

Figures are built with `matplotlib.figure.Figure` and an Agg canvas directly, never through
pyplot, so importing the analysis does not switch a notebook's backend and works headless.
Each function returns the Figure (or None when there is nothing to draw).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from tune_gems.analysis import defaults
from tune_gems.contracts.config_label import ARM_SUFFIX, short_labels
from tune_gems.contracts.gem_manifest import LEGACY_MANIFEST, GemEntry

FOREST_PNG = "gem_effects.png"
SHARPE_PNG = "sharpe_distributions.png"
MAGNITUDES_PNG = "gem_magnitudes.png"
IMPORTANCES_PNG = "importances.png"
_MODE_STYLE = {"measure": ("tab:blue", "-"), "wire": ("tab:red", "--")}


def new_figure(w: float, h: float) -> Figure:
    """A figure on its own Agg canvas (never pyplot: no backend switch in a notebook)."""
    fig = Figure(figsize=(w, h), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def group_labels(final: pd.DataFrame) -> pd.Series:
    """Each member's configuration as the Sharpe tables name it: its label, with ` | arm <arm>`
    for an arm of a multi-arm trial (tune_gems.analysis.describe.variance.split_arms)."""
    label = final["config_label"].astype(str)
    if "arm" not in final.columns:
        return label
    multi = final.groupby(["experiment", "trial_id"])["arm"].transform("nunique") > 1
    return label.where(~multi, label + ARM_SUFFIX + final["arm"].astype(str))


def sharpe_distributions(final: pd.DataFrame) -> Figure | None:
    """Per configuration: each member's Sharpe at the final epoch (points) and the median (bar),
    validation and test side by side, one row of panels per walk-forward fold; a seed's members
    in the arms of one trial are joined by a line (the design is paired: compare lines, not
    clouds). Axis names are the short labels (what tells the configurations apart).

    `final` = included final-epoch members (see `final_members`): excluded trials are not drawn.
    Each configuration's points carry the gid `members:<fold>:<column>:<label>`, each seed's line
    `seed:<fold>:<column>:<experiment>:<trial>:<seed index>`."""
    if final is None or not len(final):
        return None
    final = final.assign(_group=group_labels(final).to_numpy(),
                         fold=final["fold"].fillna(0).astype(int) if "fold" in final.columns else 0)
    labels = sorted(final["_group"].unique())
    short = dict(zip(labels, short_labels(labels)))
    folds = sorted(final["fold"].unique())
    pos_of = {lab: len(labels) - i for i, lab in enumerate(labels)}  # the first label on top
    fig = new_figure(12, 0.9 + (0.4 * len(labels) + 0.9) * len(folds) + 0.5)
    axes = fig.subplots(len(folds), 2, squeeze=False, sharey=True)
    pair_key = [k for k in ("experiment", "trial_id", "seed_index") if k in final.columns]
    for row, fold in enumerate(folds):
        f = final[final["fold"] == fold]
        for ax, col, title in zip(axes[row], ("val_sharpe", "test_sharpe"), ("validation", "test")):
            if col not in f.columns:
                continue
            v = f[col].astype(float)
            f_ok = f[np.isfinite(v)]
            if len(pair_key) == 3:
                for key, seed in f_ok.groupby(pair_key):
                    if seed["_group"].nunique() > 1:
                        seed = seed.assign(_y=seed["_group"].map(pos_of)).sort_values("_y")
                        (line,) = ax.plot(seed[col].astype(float), seed["_y"], color="grey", lw=0.6, alpha=0.5, zorder=1)
                        line.set_gid(f"seed:{fold}:{col}:{':'.join(map(str, key))}")
            for lab in labels:
                d = f_ok.loc[f_ok["_group"] == lab, col].astype(float).to_numpy()
                if not d.size:
                    continue
                pts = ax.scatter(d, np.full(d.size, pos_of[lab]), s=14, alpha=0.7, color="tab:blue", zorder=2)
                pts.set_gid(f"members:{fold}:{col}:{lab}")
                ax.plot([np.median(d)] * 2, [pos_of[lab] - 0.3, pos_of[lab] + 0.3], color="black", lw=2, zorder=3)
            ax.set_yticks([pos_of[lab] for lab in labels], [short[lab] for lab in labels], fontsize=8)
            ax.axvline(0.0, color="grey", lw=0.8)
            ax.set_xlabel(f"{title} Sharpe, annualised (final epoch, per member)")
            ax.set_title(f"{title}" + (f", fold {fold}" if len(folds) > 1 else ""), fontsize=10)
    fig.legend(handles=[Line2D([], [], color="tab:blue", marker="o", ls="", ms=4, label="member"),
                        Line2D([], [], color="black", lw=2, label="median"),
                        Line2D([], [], color="grey", lw=0.8, label="one seed across its trial's arms (paired)")],
               fontsize=8, loc="outside lower center", ncols=3)
    fig.suptitle("Sharpe per configuration at the final epoch", fontsize=11)
    return fig


def gem_magnitude_curves(traj: pd.DataFrame, rel_threshold: float = defaults.REL_THRESHOLD,
                         gems: Sequence[GemEntry] = LEGACY_MANIFEST) -> Figure | None:
    """Per gem of the experiment's manifest (`gems`): mean value (top) and value / C51 loss
    (bottom) over epochs, one line per mode; one column of panels per gem."""
    if traj is None or not len(traj):
        return None
    fig = new_figure(4.0 * len(gems), 6.5)
    axes = fig.subplots(2, len(gems), squeeze=False)
    for j, gem in enumerate(g.name for g in gems):
        g = traj[traj["gem"] == gem]
        for i, (col, ylabel) in enumerate((("mean", "gem value"), ("rel_mean", "gem / C51 loss"))):
            ax = axes[i, j]
            for mode, gm in g.groupby("mode"):
                color, ls = _MODE_STYLE.get(mode, ("tab:grey", ":"))
                ax.plot(gm["epoch"], gm[col].astype(float), color=color, ls=ls, marker="o", ms=3, label=mode)
            if col == "rel_mean":
                ax.axhline(rel_threshold, color="black", lw=0.8, ls=":", label=f"threshold {rel_threshold:g}")
            vals = g[col].astype(float)
            if len(vals) and (vals > 0).all() and vals.max() > vals.min():
                ax.set_yscale("log")
            ax.set_xlabel("epoch")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel(ylabel)
            if i == 0:
                ax.set_title(g["metric"].iloc[0] if len(g) else f"{gem} (no data)")
            if len(g) or col == "rel_mean":
                ax.legend(fontsize=8)
    return fig


IMPORTANCE_FEW_TRIALS = 20
"""Below this many complete trials a study's importances are drawn with a caveat on the plot:
an evaluator fitted to a handful of points can put 0.99 on one parameter by chance."""


def importance_bars(imp: pd.DataFrame, few: int = IMPORTANCE_FEW_TRIALS) -> Figure | None:
    """Horizontal bars of parameter importance, one panel per study; a study with fewer than
    `few` complete trials carries the caveat on its panel."""
    if imp is None or not len(imp):
        return None
    imp = imp[imp["param"].notna()]
    if not len(imp):
        return None
    studies = list(dict.fromkeys(imp["study"]))
    n_rows = max(len(imp[imp["study"] == s]) for s in studies)
    fig = new_figure(6.0 * len(studies), 1.6 + 0.4 * n_rows)
    axes = np.atleast_1d(fig.subplots(1, len(studies)))
    for ax, s in zip(axes, studies):
        d = imp[imp["study"] == s].sort_values("importance")
        bars = ax.barh(d["param"].astype(str), d["importance"].astype(float), color="tab:green", label="importance")
        for bar, param in zip(bars.patches, d["param"].astype(str)):
            bar.set_gid(f"importance:{s}:{param}")
        n = int(d["n_complete"].max()) if "n_complete" in d.columns and d["n_complete"].notna().any() else 0
        ax.set_xlim(0.0, 1.0)
        ax.set_xlabel("importance (Optuna's default evaluator; sums to 1 per study)")
        ax.set_title(f"{s}: {n} complete trial(s)", fontsize=10)
        if n < few:
            ax.text(0.98, 0.04, f"caveat: only {n} complete trial(s) (fewer than {few}):\nimportances this few "
                    "trials give are unstable", transform=ax.transAxes, ha="right", va="bottom", fontsize=8,
                    color="tab:red", bbox=dict(facecolor="white", edgecolor="tab:red", alpha=0.9), gid="caveat")
        ax.legend(fontsize=7, loc="upper right")
    return fig


def forest(verdicts: pd.DataFrame, placebo: pd.DataFrame | None = None) -> Figure | None:
    """Forest plot: per gem (and placebo arm) the effect of wiring with its interval.

    The interval is the verdict's family-wise one (`ci_level`); the shaded band is +-ROPE; a
    point at +-inf (most seeds diverged on one side) is drawn at the axis edge with an arrow."""
    rows = []
    for _, r in verdicts.iterrows():
        if np.isfinite(r.get("n_seeds", np.nan)) and r["n_seeds"] > 0 and not pd.isna(r.get("effect")):
            rows.append((f"{r['gem']}: {r['verdict']}", r["effect"], r["ci_low"], r["ci_high"], "tab:blue"))
    if placebo is not None:
        for _, r in placebo.iterrows():
            kind = r.get("kind") if isinstance(r.get("kind"), str) else "placebo"
            name = f"{r['gem']} placebo" if kind == "placebo" else kind
            rows.append((f"{name}: {r['verdict']}", r["effect"], r["ci_low"], r["ci_high"], "tab:grey"))
    if not rows:
        return None
    vals = np.array([[e, lo, hi] for _, e, lo, hi, _ in rows], float)
    fin = vals[np.isfinite(vals)]
    rope = float(verdicts["rope"].iloc[0]) if "rope" in verdicts and len(verdicts) else 0.0
    span = max(float(np.abs(fin).max()) if fin.size else 1.0, rope) * 1.25 or 1.0
    fig = new_figure(8, 1.4 + 0.5 * len(rows))
    ax = fig.subplots()
    ax.axvspan(-rope, rope, color="tab:green", alpha=0.12, label=f"ROPE +-{rope:g}")
    ax.axvline(0.0, color="black", lw=0.8)
    for i, (label, e, lo, hi, color) in enumerate(rows):
        y = len(rows) - 1 - i
        lo_c, hi_c, e_c = (float(np.clip(v, -span, span)) for v in (lo, hi, e))
        ax.plot([lo_c, hi_c], [y, y], color=color, lw=2)
        ax.plot([e_c], [y], "o", color=color)
        for v, vc in ((lo, lo_c), (hi, hi_c)):
            if not np.isfinite(v):
                ax.annotate("", xy=(vc, y), xytext=(vc * 0.9, y), arrowprops=dict(arrowstyle="->", color=color))
    ax.set_yticks(range(len(rows)), [r[0] for r in reversed(rows)], fontsize=8)
    ax.set_xlim(-span, span)
    metric = str(verdicts["outcome"].iloc[0]) if "outcome" in verdicts and len(verdicts) else "metric"
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel(f"wired - measured {metric}, annualised (Hodges-Lehmann, family-wise CI)")
    ax.set_title("Effect of wiring each gem, with the verdict's interval (and the null arms)", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def save(fig: Figure | None, path: Path) -> bool:
    """Write `fig` as PNG; False (nothing written) when there was nothing to draw."""
    if fig is None:
        return False
    fig.savefig(path, format="png")
    return True
