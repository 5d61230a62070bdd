"""A trial's objective's standard error and df (`objective_se`, `objective_df`), so a noise-aware
sampler can weigh trials: from the units the objective averages (seed pairs, informative pairs at
sqrt(pi / 3) sd / sqrt(n), members); n - 1 df (docs/results.md)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tune_gems.design.arm_sets import CONTROL, PROPOSAL, without_arm
from tune_gems.stats.inference import ARE_WILCOXON, worst_outcome_difference
from tune_gems.stats.metrics import (ARM_SEPARATOR, FOLD_PREFIX, GAIN_METRICS, GEM_GAIN_PREFIX, HISTORY_FOLD_JOIN,
                                     HISTORY_PREFIX, VERDICT_GAIN, VERDICT_GAIN_PREFIX)

OBJECTIVE_SE, OBJECTIVE_DF = "objective_se", "objective_df"
PAIR_KEYS = ["history", "fold", "seed_index"]
"""A seed pair: one seed index in one fold of one history (the trainer's pair key)."""
NONE = (math.nan, math.nan)


def objective_noise(objective: str, member_rows: list[dict], epoch: int, last_k: int,
                    aliases: dict[str, str] | None = None) -> tuple[float, float]:
    """(standard error, df) of `objective` at `epoch` from every epoch's member rows so far."""
    base = objective.removesuffix("_lastk")
    verdict = base.startswith(VERDICT_GAIN)
    first = epoch - last_k + 1 if base != objective or verdict else epoch
    m = pd.DataFrame([r for r in member_rows if first <= r["epoch"] <= epoch])
    arms = _gain_arms(base, aliases or {}) if len(m) else None
    if arms is not None:
        v = _per_member(m, arms[0])
        pairs = v[v["arm"] == arms[1]].merge(v[v["arm"] == arms[2]], on=PAIR_KEYS, suffixes=("_hi", "_lo"))
        hi, lo, hi_div, lo_div = (pairs[c].to_numpy() for c in ("value_hi", "value_lo", "diverged_hi", "diverged_lo"))
        if not verdict:  # a mean gain is NaN where a member diverged, and so is its error
            return _se(np.where(hi_div | lo_div, math.nan, hi - lo))
        d = worst_outcome_difference(hi.astype(float), lo.astype(float), hi_div.astype(bool), lo_div.astype(bool))
        informative = d[~np.isnan(d) & (d != 0)]  # ties carry no rank weight
        return _se(informative, ARE_WILCOXON) if np.isfinite(informative).all() else (math.inf, informative.size - 1.0)
    column, cell = _member_cell(base, m) if len(m) else (None, None)
    if column is None:
        return NONE
    v = _per_member(m[cell], column)
    return _se(v.loc[~v["diverged"], "value"].to_numpy())


def _gain_arms(base: str, aliases: dict[str, str]) -> tuple[str, str, str] | None:
    """(member column, arm, the arm it is compared with) of a gain objective; None for another."""
    if base in GAIN_METRICS:
        return base.removesuffix("_gain"), PROPOSAL, CONTROL
    if base == VERDICT_GAIN:
        return "val_alpha_sharpe", PROPOSAL, CONTROL
    for prefix in (VERDICT_GAIN_PREFIX, GEM_GAIN_PREFIX):
        if base.startswith(prefix):
            without = without_arm(base.removeprefix(prefix))
            return "val_alpha_sharpe", PROPOSAL, aliases.get(without, without)
    return None


def _member_cell(name: str, m: pd.DataFrame) -> tuple[str | None, pd.Series]:
    """The member column a history column averages and its members (`@<arm>`, `@fold<k>`,
    `@history<h>[.fold<k>]`); None where it is no mean of a member column."""
    head, _, suffix = name.partition(ARM_SEPARATOR)
    cell = pd.Series(True, index=m.index)
    for part in suffix.split(HISTORY_FOLD_JOIN) if suffix else ():
        index = next(((k, int(part.removeprefix(p))) for p, k in ((FOLD_PREFIX, "fold"), (HISTORY_PREFIX, "history"))
                      if part.startswith(p) and part.removeprefix(p).isdigit()), None)
        cell &= (m[index[0]] == index[1]) if index else (m["arm"] == part)
    for column in (head, head.removesuffix("_mean")):
        if column in m.columns and column not in ("epoch", "member", "seed", "diverged", *PAIR_KEYS):
            return column, cell
    return None, cell


def _per_member(m: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per member its column's mean over the window, its arm and pair key, and whether it diverged
    there (or holds a value that is not finite)."""
    values = pd.to_numeric(m[column], errors="coerce").astype(float)
    g = m.assign(_v=values, _bad=m["diverged"].astype(bool) | ~np.isfinite(values)).groupby("member", sort=True)
    return g[["arm", *PAIR_KEYS]].first().assign(value=g["_v"].mean(), diverged=g["_bad"].any())


def _se(x: np.ndarray, factor: float = 1.0) -> tuple[float, float]:
    """factor x sd / sqrt(n) and n - 1 df; NaN where a value is missing or fewer than two."""
    if x.size < 2 or not np.isfinite(x).all():
        return math.nan, (x.size - 1.0 if x.size and not np.isnan(x).any() else math.nan)
    return float(factor * x.std(ddof=1) / math.sqrt(x.size)), float(x.size - 1)
