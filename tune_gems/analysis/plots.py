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
from matplotlib.ticker import MaxNLocator

from tune_gems.analysis import defaults
from tune_gems.contracts.gem_manifest import LEGACY_MANIFEST, GemEntry

FOREST_PNG = "gem_effects.png"
SHARPE_PNG = "sharpe_distributions.png"
MAGNITUDES_PNG = "gem_magnitudes.png"
IMPORTANCES_PNG = "importances.png"
_MODE_STYLE = {"measure": ("tab:blue", "-"), "wire": ("tab:red", "--")}


def _figure(w: float, h: float) -> Figure:
    fig = Figure(figsize=(w, h), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _hbox(ax, data, positions) -> None:
    kw = dict(positions=positions, widths=0.6, showfliers=False)
    try:  # matplotlib >= 3.10
        ax.boxplot(data, orientation="horizontal", **kw)
    except TypeError:
        ax.boxplot(data, vert=False, **kw)


def sharpe_distributions(final: pd.DataFrame) -> Figure | None:
    """Per configuration: box + jittered points of member Sharpe, validation and test panels.

    `final` = included final-epoch members (see `final_members`): excluded trials are not drawn.
    """
    if final is None or not len(final):
        return None
    labels = sorted(final["config_label"].astype(str).unique())
    fig = _figure(12, 1.0 + 0.45 * len(labels) + 1.0)
    rng = np.random.default_rng(0)  # jitter only
    for ax, col, title in zip(fig.subplots(1, 2, sharey=True), ("val_sharpe", "test_sharpe"), ("validation", "test")):
        data = []
        for lab in labels:
            v = final.loc[final["config_label"] == lab, col].astype(float) if col in final else pd.Series(dtype=float)
            data.append(v[np.isfinite(v)].to_numpy())
        pos = np.arange(1, len(labels) + 1)
        drawn = [i for i, d in enumerate(data) if d.size]
        if drawn:
            _hbox(ax, [data[i] for i in drawn], pos[drawn])
        for i, d in enumerate(data):
            ax.scatter(d, pos[i] + rng.uniform(-0.15, 0.15, d.size), s=10, alpha=0.6, color="tab:blue")
        ax.set_yticks(pos, labels, fontsize=8)
        ax.axvline(0.0, color="grey", lw=0.8)
        ax.set_xlabel(f"{title} Sharpe (final epoch, per member)")
        ax.set_title(title)
    return fig


def gem_magnitude_curves(traj: pd.DataFrame, rel_threshold: float = defaults.REL_THRESHOLD,
                         gems: Sequence[GemEntry] = LEGACY_MANIFEST) -> Figure | None:
    """Per gem of the experiment's manifest (`gems`): mean value (top) and value / C51 loss
    (bottom) over epochs, one line per mode; one column of panels per gem."""
    if traj is None or not len(traj):
        return None
    fig = _figure(4.0 * len(gems), 6.5)
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


def importance_bars(imp: pd.DataFrame) -> Figure | None:
    """Horizontal bars of parameter importance, one panel per study."""
    if imp is None or not len(imp):
        return None
    imp = imp[imp["param"].notna()]
    if not len(imp):
        return None
    studies = list(dict.fromkeys(imp["study"]))
    n_rows = max(len(imp[imp["study"] == s]) for s in studies)
    fig = _figure(6.0 * len(studies), 1.2 + 0.4 * n_rows)
    axes = np.atleast_1d(fig.subplots(1, len(studies)))
    for ax, s in zip(axes, studies):
        d = imp[imp["study"] == s].sort_values("importance")
        ax.barh(d["param"].astype(str), d["importance"].astype(float), color="tab:green")
        ax.set_xlabel("importance (Optuna default evaluator, sums to 1)")
        ax.set_title(str(s))
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
    fig = _figure(8, 1.4 + 0.5 * len(rows))
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
    ax.set_xlabel(f"wired - measured {metric} (Hodges-Lehmann, family-wise CI)")
    ax.legend(fontsize=8, loc="lower right")
    return fig


def save(fig: Figure | None, path: Path) -> bool:
    """Write `fig` as PNG; False (nothing written) when there was nothing to draw."""
    if fig is None:
        return False
    fig.savefig(path, format="png")
    return True
