"""Penalty magnitudes of the gems per gem and mode over epochs ("measure, then commit": a gem whose
value stays ~0 relative to the C51 loss adds no signal), over trials with outcome `ok`."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from tune_gems.analysis.read.labels import trial_gem_modes
from tune_gems.analysis.read.outcomes import KEY, trial_outcomes
from tune_gems.contracts.gem_manifest import LEGACY_MANIFEST, GemEntry


def _arm_history(cells, gems: Sequence[GemEntry]) -> pd.DataFrame:
    """gem_history's rows from the members of runs with arms, one per (trial, arm, epoch, gem): an arm
    is the unit here, since the trial-level history mixes arms of different modes."""
    t = cells.table[cells.table["outcome"] == "ok"]
    long = cells.long[cells.long["cell"].isin(t["cell"])]
    parts = []
    for entry in gems:
        gem, metric = entry.name, entry.metric
        mode_col = f"gems.{gem}.mode"
        if metric not in long.columns or mode_col not in t.columns:
            continue
        rel_col = f"{metric}_rel"
        d = long[["experiment", "trial_id", "arm", "config_label", "epoch", "cell", metric]
                 + ([rel_col] if rel_col in long.columns else []) + (["loss"] if "loss" in long.columns else [])].copy()
        d["mode"] = d["cell"].map(t.set_index("cell")[mode_col])
        d["value"] = d[metric].astype(float)
        d["rel"] = d[rel_col].astype(float) if rel_col in d.columns else d["value"] / d["loss"].astype(float)
        g = d.groupby(["experiment", "trial_id", "arm", "config_label", "epoch", "mode"], sort=True)[["value", "rel"]].mean().reset_index()
        g["trial_id"] = g["trial_id"].astype(str) + "/" + g["arm"].astype(str)
        g["gem"], g["metric"] = gem, metric
        parts.append(g[(g["mode"] != "off") & np.isfinite(g["value"])])
    cols = ["experiment", "trial_id", "config_label", "epoch", "gem", "metric", "mode", "value", "rel"]
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)


def gem_history(history: pd.DataFrame, trials: pd.DataFrame, members: pd.DataFrame, cells=None,
                gems: Sequence[GemEntry] = LEGACY_MANIFEST) -> pd.DataFrame:
    """One row per (ok trial, epoch, gem) with mode, value and rel (`off` and non-finite omitted);
    `rel` is `<metric>_rel`, or value / loss where missing. With arms (`cells`) a row is per (trial,
    arm); `gems` is the manifest, in its order."""
    if cells is not None and len(cells.table) and (cells.table.groupby(["experiment", "trial_id"])["arm"].nunique() > 1).any():
        return _arm_history(cells, gems)
    outcomes = trial_outcomes(trials, members)
    ok = outcomes.loc[outcomes["outcome"] == "ok", KEY]
    modes = trial_gem_modes(trials, [e.name for e in gems])
    h = history.merge(ok, on=KEY, how="inner").merge(modes, on=KEY, how="left")
    parts = []
    for entry in gems:
        gem, metric = entry.name, entry.metric
        if metric not in h.columns:
            continue
        rel_col = f"{metric}_rel"
        part = pd.DataFrame({"experiment": h["experiment"], "trial_id": h["trial_id"],
                             "config_label": h["config_label"], "epoch": h["epoch"], "gem": gem, "metric": metric,
                             "mode": h[gem], "value": h[metric].astype(float),
                             "rel": h[rel_col].astype(float) if rel_col in h.columns else np.nan})
        if rel_col not in h.columns and "loss" in h.columns:
            part["rel"] = part["value"] / h["loss"].astype(float)
        part = part[(part["mode"] != "off") & np.isfinite(part["value"])]
        parts.append(part)
    cols = ["experiment", "trial_id", "config_label", "epoch", "gem", "metric", "mode", "value", "rel"]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols)


def gem_magnitudes(history: pd.DataFrame, trials: pd.DataFrame, members: pd.DataFrame, cells=None,
                   gems: Sequence[GemEntry] = LEGACY_MANIFEST) -> pd.DataFrame:
    """Per gem and mode: `mean` and `rel_mean` weigh every trial (or arm) equally, `max` and `rel_max`
    are over all rows, `final_rel_mean` reads each trial's last epoch."""
    long = gem_history(history, trials, members, cells, gems)
    outcomes = trial_outcomes(trials, members)
    n_excl = int((outcomes["outcome"] != "ok").sum())
    rows = []
    for (gem, metric, mode), g in long.groupby(["gem", "metric", "mode"], sort=False):
        per_trial = g.groupby(KEY)[["value", "rel"]].mean()
        last = g[g["epoch"] == g.groupby(KEY)["epoch"].transform("max")]
        rows.append({"gem": gem, "metric": metric, "mode": mode, "n_trials": int(len(per_trial)),
                     "n_epochs": int(len(g)), "mean": float(per_trial["value"].mean()), "max": float(g["value"].max()),
                     "rel_mean": float(per_trial["rel"].mean()) if per_trial["rel"].notna().any() else math.nan,
                     "rel_max": float(g["rel"].max()) if g["rel"].notna().any() else math.nan,
                     "final_rel_mean": float(last["rel"].mean()) if last["rel"].notna().any() else math.nan,
                     "n_trials_excluded": n_excl})
    cols = ["gem", "metric", "mode", "n_trials", "n_epochs", "mean", "max", "rel_mean", "rel_max",
            "final_rel_mean", "n_trials_excluded"]
    out = pd.DataFrame(rows, columns=cols)
    out["_order"] = out["gem"].map({g.name: i for i, g in enumerate(gems)})
    return out.sort_values(["_order", "mode"]).drop(columns="_order").reset_index(drop=True)


def gem_trajectories(history: pd.DataFrame, trials: pd.DataFrame, members: pd.DataFrame, cells=None,
                     gems: Sequence[GemEntry] = LEGACY_MANIFEST) -> pd.DataFrame:
    """Per gem, mode and epoch: n_trials, mean and rel_mean across trials (what the plots draw)."""
    long = gem_history(history, trials, members, cells, gems)
    cols = ["gem", "metric", "mode", "epoch", "n_trials", "mean", "rel_mean"]
    if not len(long):
        return pd.DataFrame(columns=cols)
    out = (
        long.groupby(["gem", "metric", "mode", "epoch"], sort=True)
        .agg(n_trials=("trial_id", "size"), mean=("value", "mean"), rel_mean=("rel", "mean"))
        .reset_index()
    )
    return out[cols]
