"""Each trial's outcome as the analysis reads it, from this one function everywhere, so a trial is
never ok in one table and failed in another."""

from __future__ import annotations

import numpy as np
import pandas as pd

FINISHED = ("TERMINATED",)  # ERROR is failed; anything else (RUNNING, PENDING, ...) is unfinished
KEY = ["experiment", "trial_id"]
"""The columns that name one trial across the experiments read together."""


def trial_outcomes(trials: pd.DataFrame, members: pd.DataFrame) -> pd.DataFrame:
    """One row per trial: outcome, final epoch and reason. `failed`: not TERMINATED or no member result
    (even if it also diverged); `diverged`: the trial's or any member's flag."""
    cols = KEY + ["config_label", "status"]
    out = trials[cols].copy()
    if len(members):
        final = members.groupby(KEY, sort=False)["epoch"].max().rename("final_epoch")
        n_mem = members.groupby(KEY, sort=False)["member"].nunique().rename("n_members")
        mdiv = members.groupby(KEY, sort=False)["diverged"].any().rename("member_diverged")
        out = out.join(final, on=KEY).join(n_mem, on=KEY).join(mdiv, on=KEY)
    else:
        out["final_epoch"] = np.nan
        out["n_members"] = 0
        out["member_diverged"] = False
    out["n_members"] = out["n_members"].fillna(0).astype(int)
    tdiv = trials["diverged"].to_numpy(bool) if "diverged" in trials else np.zeros(len(out), bool)
    mdiv = out["member_diverged"].astype(object).fillna(False).astype(bool).to_numpy()
    error = trials["error"] if "error" in trials.columns else pd.Series([None] * len(trials))

    outcome, reason = [], []
    for i in range(len(out)):
        status = out["status"].iloc[i]
        if status == "ERROR":
            err = error.iloc[i]
            outcome.append("failed")
            reason.append(f"status ERROR: {err}" if isinstance(err, str) and err else "status ERROR")
        elif status not in FINISHED:
            outcome.append("failed")
            reason.append(f"status {status}: not finished")
        elif out["n_members"].iloc[i] == 0:
            outcome.append("failed")
            reason.append(f"status {status} but no member results")
        elif tdiv[i] or mdiv[i]:
            outcome.append("diverged")
            reason.append(f"diverged at epoch {int(out['final_epoch'].iloc[i])}")
        else:
            outcome.append("ok")
            reason.append("")
    out["outcome"] = outcome
    out["reason"] = reason
    out["final_epoch"] = out["final_epoch"].astype("Int64")
    return out.drop(columns="member_diverged").reset_index(drop=True)


def last_evaluated_epochs(trials: pd.DataFrame, members: pd.DataFrame) -> dict[str, int]:
    """Each finished trial's last evaluated epoch (`<experiment>/trial <id>` over several): what an
    epoch window can hold. The ok trials where any (a diverged member is the worst outcome whatever the
    window), else every trial with results."""
    out = trial_outcomes(trials, members)
    out = out[out["final_epoch"].notna()]
    ok = out[out["outcome"] == "ok"]
    use = ok if len(ok) else out
    several = out["experiment"].nunique() > 1
    return {(f"{e}/trial {t}" if several else f"trial {t}"): int(f)
            for e, t, f in zip(use["experiment"], use["trial_id"], use["final_epoch"])}
