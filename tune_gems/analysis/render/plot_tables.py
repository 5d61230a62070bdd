"""The tables the plots are drawn from, written beside them as CSV, so a figure can be checked
against its numbers. The profiles and probabilities of improvement (Agarwal et al. 2021) describe
the verdict's own pairs; the verdict is the test."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tune_gems.analysis import defaults
from tune_gems.analysis.pairs.pairing import window_values
from tune_gems.analysis.verdicts.family import GEM, DesignFamily
from tune_gems.analysis.verdicts.readings import SEEDS
from tune_gems.analysis.verdicts.gem_verdicts import verdict_metric

FINAL_COLUMNS = ["contrast", "kind", "verdict", "decided_by", "seeds", "periods", "effect", "ci_low", "ci_high",
                 "ci_level", "held_out_effect", "held_out_ci_low", "held_out_ci_high", "held_out", "metric", "rope"]

PAIR_COLUMNS = ["gem", "metric", "experiment", "trial_id", "history", "fold", "seed", "seed_index", "arm_measured", "arm_wired",
                "measured", "wired", "measured_diverged", "wired_diverged", "difference", "tied"]
CURVE_COLUMNS = ["experiment", "trial_id", "arm", "config_label", "history", "fold", "epoch", "metric", "n_seeds", "median",
                 "q25", "q75", "never_traded"]
TURNOVER_COLUMN = "val_turnover"
"""A member's validation turnover (docs/evaluation.md): 0 when it never traded."""
PROFILE_COLUMNS = ["gem", "side", "tau", "share_above", "n"]
IMPROVEMENT_COLUMNS = ["gem", "probability", "paired_probability", "n_pairs", "folds", "histories", "tied_share"]
PERIOD_KEYS = ["history", "fold"]
"""What makes a validation period: a fold of a price history (each history its own market; one
history: `history` 0)."""
PROFILE_POINTS = 101
"""Thresholds per performance profile: an even grid over the range of the plotted values."""
TIE_TOLERANCE = 0.0
"""Two values closer than this tie (0: equal bits; an identical outcome is what makes a tie)."""


def paired_seed_table(family: DesignFamily) -> pd.DataFrame:
    """Every seed pair of each gem's wiring comparison (module docstring), one row per pair: the
    family's own pairs (`family.DesignFamily`), with each member's value over the verdict's window."""
    cells, column, k = family.cells, family.column, family.thresholds.window_length
    t = cells.table.set_index("cell")
    rows = []
    for c, pr in zip(family.contrasts, family.pairs):
        if c.kind != GEM or not pr.n or pr.pairs is None or not len(pr.pairs):
            continue
        pairs = pr.pairs
        ends = pd.concat([pd.Series(pairs["end_epoch"].to_numpy(), index=pairs["cell_hi"].to_numpy()),
                          pd.Series(pairs["end_epoch"].to_numpy(), index=pairs["cell_lo"].to_numpy())])
        ends = ends[~ends.index.duplicated()]
        vals = window_values(cells.long[cells.long["cell"].isin(ends.index)], column, ends, k)
        for _, p in pairs.iterrows():
            hi, lo = t.loc[p["cell_hi"]], t.loc[p["cell_lo"]]
            vh, vl = vals.loc[p["cell_hi"]], vals.loc[p["cell_lo"]]
            wired = np.nan if vh["diverged"] else float(vh["value"])
            measured = np.nan if vl["diverged"] else float(vl["value"])
            both = not vh["diverged"] and not vl["diverged"]
            rows.append({
                "gem": c.key.split(".")[1], "metric": column, "experiment": lo["experiment"], "trial_id": lo["trial_id"],
                "history": int(lo["history"]), "fold": int(lo["fold"]), "seed": lo["seed"], "seed_index": int(lo["seed_index"]),
                "arm_measured": lo["arm"], "arm_wired": hi["arm"], "measured": measured, "wired": wired,
                "measured_diverged": bool(vl["diverged"]), "wired_diverged": bool(vh["diverged"]),
                "difference": wired - measured if both else np.nan,
                "tied": bool(both and abs(wired - measured) <= TIE_TOLERANCE)
                or bool(vh["diverged"] and vl["diverged"]),
            })
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


def learning_curve_table(members: pd.DataFrame, *, metric: str = defaults.METRIC) -> pd.DataFrame:
    """Per trial, arm, fold and epoch: the metric's median and IQR over the arm's finite seeds, and the
    share that never traded (turnover 0), which says why a curve is flat."""
    column, _ = verdict_metric(members, metric)
    if not len(members) or column not in members.columns:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    m = members.copy()
    m["arm"] = m["arm"].astype(str) if "arm" in m.columns else "default"
    for key in PERIOD_KEYS:
        m[key] = pd.to_numeric(m[key], errors="coerce").fillna(0).astype(int) if key in m.columns else 0
    m["_v"] = m[column].astype(float).where(np.isfinite(m[column].astype(float)))
    keys = ["experiment", "trial_id", "arm", *PERIOD_KEYS, "epoch"]
    g = m.groupby(keys, sort=True)
    out = g["_v"].agg(n_seeds="count", median="median").reset_index()
    out["q25"] = g["_v"].quantile(0.25).to_numpy()
    out["q75"] = g["_v"].quantile(0.75).to_numpy()
    out["config_label"] = g["config_label"].first().to_numpy()
    if TURNOVER_COLUMN in m.columns:
        turnover = pd.to_numeric(m[TURNOVER_COLUMN], errors="coerce")
        idle = (turnover == 0).astype(float).where(m["_v"].notna() & turnover.notna())
        out["never_traded"] = m.assign(_idle=idle).groupby(keys, sort=True)["_idle"].mean().to_numpy()
    else:
        out["never_traded"] = np.nan
    out["metric"] = column
    return out[CURVE_COLUMNS]


def _grid(values: np.ndarray, points: int) -> np.ndarray:
    fin = values[np.isfinite(values)]
    if not fin.size:
        return np.zeros(1)
    lo, hi = float(fin.min()), float(fin.max())
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    return np.linspace(lo, hi, points)


def performance_profile_table(pairs: pd.DataFrame, points: int = PROFILE_POINTS) -> pd.DataFrame:
    """Per gem and side (measured, wired): share of its pairs' values above each tau of a grid
    over both sides' finite values; a diverged member counts as below every tau."""
    rows = []
    for gem, g in pairs.groupby("gem", sort=False):
        sides = {"measured": np.where(g["measured_diverged"], -np.inf, g["measured"].astype(float)),
                 "wired": np.where(g["wired_diverged"], -np.inf, g["wired"].astype(float))}
        taus = _grid(np.concatenate(list(sides.values())), points)
        for side, v in sides.items():
            share = (v[None, :] > taus[:, None]).mean(axis=1)
            rows += [{"gem": gem, "side": side, "tau": float(tau), "share_above": float(s), "n": int(v.size)}
                     for tau, s in zip(taus, share)]
    return pd.DataFrame(rows, columns=PROFILE_COLUMNS)


def probability_of_improvement(wired: np.ndarray, measured: np.ndarray) -> float:
    """P(X > Y) over every (wired, measured) pair of values, ties counted half (the
    Mann-Whitney U statistic over n m); -inf (diverged) is below everything, and ties itself."""
    x, y = np.asarray(wired, float)[:, None], np.asarray(measured, float)[None, :]
    if not x.size or not y.size:
        return float("nan")
    return float(((x > y).sum() + 0.5 * (x == y).sum()) / (x.size * y.size))


def improvement_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per gem: the probability of improvement, averaged over the validation periods (each fold of
    each price history: module docstring)."""
    rows = []
    pairs = pairs if "history" in pairs.columns else pairs.assign(history=0)
    for gem, g in pairs.groupby("gem", sort=False):
        unpaired, within = [], []
        for _, f in g.groupby(PERIOD_KEYS):
            w = np.where(f["wired_diverged"], -np.inf, f["wired"].astype(float))
            m = np.where(f["measured_diverged"], -np.inf, f["measured"].astype(float))
            unpaired.append(probability_of_improvement(w, m))
            within.append(float(np.mean((w > m) + 0.5 * (w == m))))
        rows.append({"gem": gem, "probability": float(np.mean(unpaired)), "paired_probability": float(np.mean(within)),
                     "n_pairs": int(len(g)), "folds": int(g["fold"].nunique()), "histories": int(g["history"].nunique()),
                     "tied_share": float(g["tied"].mean())})
    return pd.DataFrame(rows, columns=IMPROVEMENT_COLUMNS)


def _value(r: Any, column: str) -> float:
    """A numeric cell of a verdict row (NaN where the column is absent or not a number)."""
    try:
        return float(r.get(column, np.nan))
    except (TypeError, ValueError):
        return np.nan


def _text(r: Any, column: str) -> str:
    v = r.get(column)
    return v if isinstance(v, str) else ""


def final_verdict_table(verdicts: pd.DataFrame | None, placebo: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per contrast: each verdict with its deciding test's estimate and interval, then each null
    arm (decided by its seeds), in `FINAL_COLUMNS`."""
    rows = []
    for _, r in (verdicts if verdicts is not None else pd.DataFrame()).iterrows():
        rows.append({"contrast": str(r["gem"]), "kind": "gem", "verdict": _text(r, "verdict"), "seeds": _value(r, "n_seeds"),
                     "decided_by": _text(r, "decided_by"), "periods": _value(r, "periods_informative"),
                     **{k: _value(r, f"decided_{k}") for k in ("effect", "ci_low", "ci_high", "ci_level")},
                     "held_out_effect": _value(r, "test_effect"), "held_out_ci_low": _value(r, "test_ci_low"),
                     "held_out_ci_high": _value(r, "test_ci_high"), "held_out": _text(r, "held_out"),
                     "metric": _text(r, "outcome"), "rope": _value(r, "rope")})
    rope = rows[0]["rope"] if rows else np.nan
    for _, r in (placebo if placebo is not None else pd.DataFrame()).iterrows():
        kind = _text(r, "kind") or "placebo"
        rows.append({"contrast": f"{r['gem']} placebo" if kind == "placebo" else kind, "kind": kind,
                     "verdict": _text(r, "verdict"), "seeds": _value(r, "n_seeds"), "decided_by": SEEDS,
                     "periods": np.nan, "effect": _value(r, "effect"), "ci_low": _value(r, "ci_low"),
                     "ci_high": _value(r, "ci_high"), "ci_level": _value(r, "ci_level"), "held_out_effect": np.nan,
                     "held_out_ci_low": np.nan, "held_out_ci_high": np.nan, "held_out": "",
                     "metric": _text(r, "outcome"), "rope": rope})
    return pd.DataFrame(rows, columns=FINAL_COLUMNS)
