"""Redundancy (the `measure_gems` factorial): does a model feature already do a gem's job? G10 may be what spectral norm
already enforces, G6 what NoisyNets already provide. Per (gem, feature), seed by seed, the gem's measured excess over
its null with the feature on against off; Holm over the rows (`rules.decision.redundancy_finding`)."""


from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tune_gems.analysis.pairs.pairing import Cells, paired
from tune_gems.analysis.pairs.excess import add_excess_columns
from tune_gems.analysis.rules.decision import NO_DESIGN, redundancy_finding
from tune_gems.analysis.rules.settings import Thresholds
from tune_gems.stats.inference import holm, rank_test

PAIRS = (("g10", "model.spectral_norm"), ("g6", "model.noisy"))
"""The redundancy questions: G10 vs spectral norm, G6 vs NoisyNets (each may do the other's job)."""

COLUMNS = ["gem", "feature", "finding", "n_seeds", "excess_off", "excess_on", "change", "ci_low", "ci_high",
           "p_adjusted", "on_tost_p_adjusted", "rel_threshold", "note"]


def redundancy_table(
    cells: Cells,
    gems,
    *,
    thresholds: Thresholds | None = None,
    excess: dict[str, tuple[str, str]] | None = None,
    pairs=PAIRS,
) -> pd.DataFrame:
    """One row per (gem, feature) of `pairs` at `thresholds`' alpha, rel_threshold and epoch window."""
    th = thresholds if thresholds is not None else Thresholds()
    alpha, rel_threshold = th.alpha, th.rel_threshold
    known = {g.name: g for g in gems}
    excess = excess or add_excess_columns(cells.long, list(gems))
    rows, ps, pts = [], [], []
    for gem, feature in pairs:
        if gem not in known:
            continue
        col, note = excess[gem]
        mode = f"gems.{gem}.mode"
        row = dict(gem=gem, feature=feature, finding=NO_DESIGN, n_seeds=0, rel_threshold=rel_threshold, note=note,
                   excess_off=math.nan, excess_on=math.nan, change=math.nan, ci_low=math.nan, ci_high=math.nan,
                   p_adjusted=math.nan, on_tost_p_adjusted=math.nan)
        if mode in cells.table.columns and feature in cells.table.columns:
            pr = paired(cells, feature, "true", "false", column=col, k=th.window_length, worst=False,
                        select=lambda t, md=mode: t[md] == "measure")
            if pr.n:
                r = rank_test(pr.diffs[None, :], tail=alpha / 2)
                on = pr.hi_values[np.isfinite(pr.hi_values)]
                ron = rank_test(on[None, :], rope=rel_threshold) if on.size else None
                off = pr.lo_values[np.isfinite(pr.lo_values)]
                row.update(n_seeds=pr.n, change=float(r.estimate[0]), ci_low=float(r.low[0]),
                           ci_high=float(r.high[0]), excess_on=float(np.median(on)) if on.size else math.nan,
                           excess_off=float(np.median(off)) if off.size else math.nan)
                ps.append(float(r.p[0]))
                pts.append(float(ron.p_tost[0]) if ron is not None else math.nan)
                row["_i"] = len(ps) - 1
        rows.append(row)
    pa, pta = holm(np.array(ps)) if ps else [], holm(np.array(pts)) if pts else []
    for row in rows:
        i = row.pop("_i", None)
        if i is None:
            continue
        row["p_adjusted"], row["on_tost_p_adjusted"] = float(pa[i]), float(pta[i])
        row["finding"] = str(redundancy_finding(row["p_adjusted"], row["change"], row["on_tost_p_adjusted"], alpha=alpha))
    return pd.DataFrame(rows, columns=COLUMNS)
