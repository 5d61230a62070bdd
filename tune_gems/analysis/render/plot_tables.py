"""The tables the analysis's plots are drawn from (written beside them as CSV files).

Each plot draws one of these tables and nothing else, so a reader can check a figure against
its numbers and a test can read the plotted data back from the figure and compare:

- `paired_seed_table`: per gem, every seed pair of the verdict's own comparison (the same cells,
  metric, last-k window and placebo filter as `verdicts.gem_verdicts`, through
  `pairing.paired`): the measured and the wired member's value, their fold and seed, whether
  either diverged, whether the pair ties;
- `learning_curve_table`: the verdict metric per epoch over each arm's seeds (median and
  interquartile range), per trial, arm and fold;
- `performance_profile_table`: per gem and side of its comparison, the share of seed pairs
  whose value exceeds each threshold tau (the performance profile of Agarwal et al. 2021,
  "Deep RL at the edge of the statistical precipice": a diverged member never exceeds any);
- `improvement_table`: per gem, the probability of improvement P(wired > measured) of the same
  paper (the Mann-Whitney statistic with ties counted half, over every wired and measured member
  of a fold, averaged over folds as rliable averages over tasks), beside its paired form (the
  share of seed pairs in which the wired member does better, ties half: what the design
  compares) and the share of tied pairs. Descriptive: the verdict (the signed-rank test, Holm
  over gems) is the test.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from tune_gems.analysis import defaults
from tune_gems.analysis.pairs.pairing import Cells, paired, window_values
from tune_gems.analysis.pairs.selectors import MEASURE, WIRE, placebo_selectors
from tune_gems.analysis.verdicts.gem_verdicts import verdict_metric
from tune_gems.contracts.gem_manifest import GemEntry

PAIR_COLUMNS = ["gem", "metric", "experiment", "trial_id", "fold", "seed", "seed_index", "arm_measured", "arm_wired",
                "measured", "wired", "measured_diverged", "wired_diverged", "difference", "tied"]
CURVE_COLUMNS = ["experiment", "trial_id", "arm", "config_label", "fold", "epoch", "metric", "n_seeds", "median",
                 "q25", "q75"]
PROFILE_COLUMNS = ["gem", "side", "tau", "share_above", "n"]
IMPROVEMENT_COLUMNS = ["gem", "probability", "paired_probability", "n_pairs", "folds", "tied_share"]
PROFILE_POINTS = 101
"""Thresholds per performance profile: an even grid over the range of the plotted values."""
TIE_TOLERANCE = 0.0
"""Two values closer than this tie (0: equal bits; an identical outcome is what makes a tie)."""


def paired_seed_table(cells: Cells, gems: Sequence[GemEntry], members: pd.DataFrame, *,
                      last_k: int = defaults.LAST_K, placebo_weight: float = defaults.PLACEBO_WEIGHT,
                      metric: str = defaults.METRIC) -> pd.DataFrame:
    """Every seed pair of each gem's wiring comparison (module docstring), one row per pair."""
    column, _ = verdict_metric(members, metric)
    t = cells.table.set_index("cell")
    rows = []
    for g in gems:
        mode = f"gems.{g.name}.mode"
        real, _ = placebo_selectors(g, placebo_weight)
        pr = paired(cells, mode, WIRE, MEASURE, column=column, k=last_k, ignore=(f"gems.{g.name}.weight",), select=real)
        if not pr.n or pr.pairs is None or not len(pr.pairs):
            continue
        pairs = pr.pairs
        ends = pd.concat([pd.Series(pairs["end_epoch"].to_numpy(), index=pairs["cell_hi"].to_numpy()),
                          pd.Series(pairs["end_epoch"].to_numpy(), index=pairs["cell_lo"].to_numpy())])
        ends = ends[~ends.index.duplicated()]
        vals = window_values(cells.long[cells.long["cell"].isin(ends.index)], column, ends, last_k)
        for _, p in pairs.iterrows():
            hi, lo = t.loc[p["cell_hi"]], t.loc[p["cell_lo"]]
            vh, vl = vals.loc[p["cell_hi"]], vals.loc[p["cell_lo"]]
            wired = np.nan if vh["diverged"] else float(vh["value"])
            measured = np.nan if vl["diverged"] else float(vl["value"])
            both = not vh["diverged"] and not vl["diverged"]
            rows.append({
                "gem": g.name, "metric": column, "experiment": lo["experiment"], "trial_id": lo["trial_id"],
                "fold": int(lo["fold"]), "seed": lo["seed"], "seed_index": int(lo["seed_index"]),
                "arm_measured": lo["arm"], "arm_wired": hi["arm"], "measured": measured, "wired": wired,
                "measured_diverged": bool(vl["diverged"]), "wired_diverged": bool(vh["diverged"]),
                "difference": wired - measured if both else np.nan,
                "tied": bool(both and abs(wired - measured) <= TIE_TOLERANCE)
                or bool(vh["diverged"] and vl["diverged"]),
            })
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


def learning_curve_table(members: pd.DataFrame, *, metric: str = defaults.METRIC) -> pd.DataFrame:
    """Per trial, arm, fold and epoch: the verdict metric's median and interquartile range over
    the arm's seeds (finite values: a diverged member's epochs are left out, `n_seeds` says how
    many remain)."""
    column, _ = verdict_metric(members, metric)
    if not len(members) or column not in members.columns:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    m = members.copy()
    m["arm"] = m["arm"].astype(str) if "arm" in m.columns else "default"
    m["fold"] = pd.to_numeric(m["fold"], errors="coerce").fillna(0).astype(int) if "fold" in m.columns else 0
    m["_v"] = m[column].astype(float).where(np.isfinite(m[column].astype(float)))
    keys = ["experiment", "trial_id", "arm", "fold", "epoch"]
    g = m.groupby(keys, sort=True)
    out = g["_v"].agg(n_seeds="count", median="median").reset_index()
    out["q25"] = g["_v"].quantile(0.25).to_numpy()
    out["q75"] = g["_v"].quantile(0.75).to_numpy()
    out["config_label"] = g["config_label"].first().to_numpy()
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
    """Per gem: the probability of improvement, averaged over folds (module docstring)."""
    rows = []
    for gem, g in pairs.groupby("gem", sort=False):
        unpaired, within = [], []
        for _, f in g.groupby("fold"):
            w = np.where(f["wired_diverged"], -np.inf, f["wired"].astype(float))
            m = np.where(f["measured_diverged"], -np.inf, f["measured"].astype(float))
            unpaired.append(probability_of_improvement(w, m))
            within.append(float(np.mean((w > m) + 0.5 * (w == m))))
        rows.append({"gem": gem, "probability": float(np.mean(unpaired)), "paired_probability": float(np.mean(within)),
                     "n_pairs": int(len(g)), "folds": int(g["fold"].nunique()), "tied_share": float(g["tied"].mean())})
    return pd.DataFrame(rows, columns=IMPROVEMENT_COLUMNS)
