"""How much Sharpe varies per configuration across trials and seeds (the project's origin: one
configuration's best Sharpe anywhere in [15.72, 31.94]), at each trial's final epoch; failed and
diverged trials are counted, never averaged in."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tune_gems.analysis import defaults
from tune_gems.analysis.describe.descriptive import iqm, stratified_bootstrap_ci
from tune_gems.analysis.read.outcomes import KEY, trial_outcomes

STAT_NAMES = ("mean", "std", "var", "min", "max", "best_min", "best_max", "iqm", "iqm_ci_low", "iqm_ci_high")


def final_members(members: pd.DataFrame, trials: pd.DataFrame) -> pd.DataFrame:
    """Member rows at each trial's final epoch; `included`: in an `ok` trial with a finite `val_sharpe`."""
    outcomes = trial_outcomes(trials, members)
    if not len(members):
        return members.assign(outcome=pd.Series(dtype=object), included=pd.Series(dtype=bool))
    last = members.groupby(KEY, sort=False)["epoch"].transform("max")
    fin = members[members["epoch"] == last].copy()
    fin = fin.merge(outcomes[KEY + ["outcome"]], on=KEY, how="left")
    fin["included"] = (fin["outcome"] == "ok") & np.isfinite(fin["val_sharpe"].astype(float))
    return fin.reset_index(drop=True)


def _sharpe_stats(sub: pd.DataFrame, col: str, prefix: str, n_boot, confidence, seed) -> dict:
    vals = sub[col].astype(float)
    ok = sub[np.isfinite(vals)]
    v = ok[col].astype(float).to_numpy()
    groups = [g[col].astype(float).to_numpy() for _, g in ok.groupby(KEY, sort=False)]
    best = [g.max() for g in groups]
    res = {f"{prefix}_n": int(v.size)}
    if v.size:
        est, lo, hi = stratified_bootstrap_ci(groups, statistic="iqm", n_boot=n_boot, confidence=confidence, seed=seed)
        res.update({f"{prefix}_mean": float(v.mean()),
                    f"{prefix}_std": float(v.std(ddof=1)) if v.size > 1 else math.nan,
                    f"{prefix}_var": float(v.var(ddof=1)) if v.size > 1 else math.nan, f"{prefix}_min": float(v.min()),
                    f"{prefix}_max": float(v.max()), f"{prefix}_best_min": float(min(best)),
                    f"{prefix}_best_max": float(max(best)), f"{prefix}_iqm": iqm(v), f"{prefix}_iqm_ci_low": lo,
                    f"{prefix}_iqm_ci_high": hi})
    else:
        for s in STAT_NAMES:
            res[f"{prefix}_{s}"] = math.nan
    return res


def sharpe_variance(members: pd.DataFrame, trials: pd.DataFrame, *, by: str | list[str] = "config_label",
                    n_boot: int = defaults.N_BOOT, confidence: float = defaults.CONFIDENCE,
                    seed: int = defaults.SEED) -> pd.DataFrame:
    """Sharpe spread per value of `by` at each trial's final epoch, validation and test: counts, then
    per metric n, mean, std / var (ddof=1 over all members), min, max, the range of each trial's best
    member, and the IQM with its stratified bootstrap interval."""
    by = [by] if isinstance(by, str) else list(by)
    outcomes = trial_outcomes(trials, members)
    fin = final_members(members, trials)
    rows = []
    for key, tr in outcomes.groupby(by, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key))
        counts = tr["outcome"].value_counts()
        row["n_trials"] = int(counts.get("ok", 0))
        row["n_failed"] = int(counts.get("failed", 0))
        row["n_diverged"] = int(counts.get("diverged", 0))
        sel = fin
        for k, v in zip(by, key):
            sel = sel[sel[k] == v]
        used = sel[sel["included"]]
        row["n_members"] = int(len(used))
        row["n_members_excluded"] = int(((sel["outcome"] == "ok") & ~sel["included"]).sum())
        for col in ("val_sharpe", "test_sharpe"):
            data = used if col in used.columns else used.assign(**{col: np.nan})
            row.update(_sharpe_stats(data, col, col, n_boot, confidence, seed))
        row["experiments"] = ",".join(sorted(tr["experiment"].astype(str).unique()))
        rows.append(row)
    return pd.DataFrame(rows)


def split_arms(trials: pd.DataFrame, members: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every arm of a multi-arm trial as its own pseudo-trial (`<trial>/<arm>`, `<label> | arm <arm>`):
    the Sharpe tables describe one configuration each."""
    if "arm" not in members.columns or not len(members):
        return trials, members
    n_arms = members.groupby(KEY)["arm"].nunique()
    multi = n_arms[n_arms > 1].index
    if not len(multi):
        return trials, members
    mkey = pd.MultiIndex.from_frame(members[KEY])
    is_multi = mkey.isin(multi)
    m = members.copy()
    m.loc[is_multi, "config_label"] = m.loc[is_multi, "config_label"].astype(str) + " | arm " + m.loc[is_multi, "arm"].astype(str)
    # each arm's own label (its members', tune_gems.analysis.read.labels.apply_arm_labels), not the trial's
    arm_labels = m.loc[is_multi, KEY + ["arm", "config_label"]].drop_duplicates(KEY + ["arm"])
    m.loc[is_multi, "trial_id"] = m.loc[is_multi, "trial_id"].astype(str) + "/" + m.loc[is_multi, "arm"].astype(str)
    t_multi = trials.drop(columns="config_label").merge(arm_labels, on=KEY, how="inner")
    t_multi["trial_id"] = t_multi["trial_id"].astype(str) + "/" + t_multi["arm"].astype(str)
    tkey = pd.MultiIndex.from_frame(trials[KEY])
    t = pd.concat([trials[~tkey.isin(multi)], t_multi.drop(columns="arm")], ignore_index=True)
    return t, m
