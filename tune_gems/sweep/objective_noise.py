"""A trial's objective with its standard error and degrees of freedom (`objective_se`,
`objective_df` beside `objective` in every Tune result, trials.parquet and the Optuna trial's user
attributes), so that a noise-aware sampler or a ResultGrid reader can weigh trials.

Both come from the units the objective averages, read from the trial's member rows (docs/results.md):
- a paired gain (`val_sharpe_gain`, `val_alpha_sharpe_gain`, `gain_<g>`, their `_lastk` forms):
  its seed pairs (proposal minus control at one seed index of one history and fold): sd / sqrt(n)
  over the n pairs, n - 1 df;
- the verdict's statistic (`verdict_gain`, `verdict_gain_<g>`), a Hodges-Lehmann pseudo-median:
  its informative (untied) pairs, sqrt(pi / 3) sd / sqrt(n) (its efficiency under normal noise),
  n - 1 df; infinite where a diverged side makes a difference infinite;
- a mean over members (`<column>_mean`, its `_lastk` form, `@<arm>`, `@fold<k>`, `@history<h>`
  cells, a gem column, `loss`): sd / sqrt(n) over the non-diverged members, n - 1 df, the members
  taken as independent (members of one seed index share their initial weights across arms: for a
  difference between arms, optimise a gain);
- anything else (a spread, a count, the speed): NaN, df NaN.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tune_gems.design.arm_sets import CONTROL, PROPOSAL, without_arm
from tune_gems.stats.inference import ARE_WILCOXON, worst_outcome_difference
from tune_gems.stats.metrics import (
    ARM_SEPARATOR, FOLD_PREFIX, GAIN_METRICS, GEM_GAIN_PREFIX, HISTORY_FOLD_JOIN, HISTORY_PREFIX, VERDICT_GAIN,
    VERDICT_GAIN_PREFIX,
)

OBJECTIVE_SE, OBJECTIVE_DF = "objective_se", "objective_df"
PAIR_KEYS = ["history", "fold", "seed_index"]
"""What makes a seed pair: one seed index in one fold of one history (the trainer's pair key)."""
NONE = (math.nan, math.nan)


def objective_noise(objective: str, member_rows: list[dict], epoch: int, last_k: int,
                    aliases: dict[str, str] | None = None) -> tuple[float, float]:
    """(standard error, degrees of freedom) of `objective` at `epoch` from the trial's member rows
    of every epoch so far (Trainer.member_history); `last_k` the window of the `_lastk` objectives
    and the verdict's statistic (trainer.objective_last_k); `aliases` the arms' other names."""
    base = objective.removesuffix("_lastk")
    window = base != objective or base.startswith(VERDICT_GAIN)
    first = epoch - last_k + 1 if window else epoch
    m = pd.DataFrame([r for r in member_rows if first <= r["epoch"] <= epoch])
    if not len(m):
        return NONE
    gain = _gain_arms(base, aliases or {})
    if gain is not None:
        d = _pair_differences(m, *gain, worst=base.startswith(VERDICT_GAIN))
        return _pseudo_median_se(d) if base.startswith(VERDICT_GAIN) else _mean_se(d)
    column, cell = _member_cell(base, m)
    if column is None:
        return NONE
    v = _per_member(m[cell], column)
    return _mean_se(v.loc[~v["diverged"], "value"].to_numpy())


def _gain_arms(base: str, aliases: dict[str, str]) -> tuple[str, str, str] | None:
    """(member column, arm, arm it is compared with) of a gain objective; None for any other."""
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
    """The member column a history column averages and the members it averages over (its
    `@<arm>`, `@fold<k>`, `@history<h>[.fold<k>]` cell); None where it is no mean of a member column."""
    head, _, suffix = name.partition(ARM_SEPARATOR)
    cell = pd.Series(True, index=m.index)
    for part in suffix.split(HISTORY_FOLD_JOIN) if suffix else ():
        for prefix, key in ((FOLD_PREFIX, "fold"), (HISTORY_PREFIX, "history")):
            if part.startswith(prefix) and part.removeprefix(prefix).isdigit():
                cell &= m[key] == int(part.removeprefix(prefix))
                break
        else:
            cell &= m["arm"] == part
    for column in (head, head.removesuffix("_mean") if head.endswith("_mean") else None):
        if column in m.columns and column not in ("epoch", "member", "seed", "diverged", *PAIR_KEYS):
            return column, cell
    return None, cell


def _per_member(m: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per member its `column` over the window (mean), its arm and pair key, and whether it
    diverged there (or has a value that is not finite)."""
    values = pd.to_numeric(m[column], errors="coerce").astype(float)
    g = m.assign(_v=values, _bad=m["diverged"].astype(bool) | ~np.isfinite(values)).groupby("member", sort=True)
    out = g[["arm", *PAIR_KEYS]].first()
    return out.assign(value=g["_v"].mean(), diverged=g["_bad"].any())


def _pair_differences(m: pd.DataFrame, column: str, hi: str, lo: str, worst: bool) -> np.ndarray:
    """Arm `hi` minus arm `lo` at each seed pair; a diverged member NaN, or (`worst`) the worst outcome."""
    v = _per_member(m, column)
    pairs = v[v["arm"] == hi].merge(v[v["arm"] == lo], on=PAIR_KEYS, suffixes=("_hi", "_lo"))
    a, b = pairs["value_hi"].to_numpy(float), pairs["value_lo"].to_numpy(float)
    if worst:
        return worst_outcome_difference(a, b, pairs["diverged_hi"].to_numpy(bool), pairs["diverged_lo"].to_numpy(bool))
    return np.where(pairs["diverged_hi"] | pairs["diverged_lo"], math.nan, a - b)


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    """A mean's standard error and df; NaN where a value is missing (the mean is NaN too)."""
    if x.size < 2 or not np.isfinite(x).all():
        return NONE
    return float(x.std(ddof=1) / math.sqrt(x.size)), float(x.size - 1)


def _pseudo_median_se(d: np.ndarray) -> tuple[float, float]:
    """A Hodges-Lehmann pseudo-median's standard error and df from its informative (untied) pairs."""
    informative = d[~np.isnan(d) & (d != 0)]
    n = informative.size
    if n < 2:
        return math.nan, float(max(n - 1, 0))
    if not np.isfinite(informative).all():
        return math.inf, float(n - 1)
    return float(ARE_WILCOXON * informative.std(ddof=1) / math.sqrt(n)), float(n - 1)
