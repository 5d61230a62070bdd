"""Configuration labels, gem modes and history names of the results' rows (docs/results.md
`config_label`): `apply_arm_labels` relabels results written before a member carried its arm's
label; `with_history_names` names a `history` id from the history table."""

from __future__ import annotations

import re
from typing import Iterable

import pandas as pd

from tune_gems.analysis.read.outcomes import KEY
from tune_gems.contracts.config_label import arm_label, trial_label
from tune_gems.contracts.gem_manifest import LEGACY_MANIFEST


def gem_mode_from_label(label: str, gem: str) -> str | None:
    """The mode of `gem` written in a config label (`g6=measure ...`), or None if absent."""
    m = re.search(rf"(?:^|\s){re.escape(gem)}=(\S+)", str(label))
    return m.group(1) if m else None


def mode_gems(trials: pd.DataFrame) -> list[str]:
    """The gems whose mode the trials record: every `gems.<name>.mode` column, after the three
    built-ins (results older than gems.json record some of them only in the config label)."""
    names = [e.name for e in LEGACY_MANIFEST]
    for col in trials.columns:
        parts = str(col).split(".")
        if len(parts) == 3 and parts[0] == "gems" and parts[2] == "mode" and parts[1] not in names:
            names.append(parts[1])
    return names


def trial_gem_modes(trials: pd.DataFrame, gems: Iterable[str] | None = None) -> pd.DataFrame:
    """One row per trial: experiment, trial_id and each gem's mode (`gems`: the manifest's names,
    default `mode_gems`), from `gems.<gem>.mode`, else the config label, else `unknown` (left out)."""
    out = trials[["experiment", "trial_id", "config_label"]].copy()
    for gem in (mode_gems(trials) if gems is None else gems):
        col = f"gems.{gem}.mode"
        from_label = out["config_label"].map(lambda s, g=gem: gem_mode_from_label(s, g))
        if col in trials.columns:
            mode = trials[col].astype(object).where(trials[col].notna(), from_label)
        else:
            mode = from_label
        out[gem] = mode.map(lambda m: str(m).strip().lower() if m is not None and m == m else "unknown")
    return out.drop(columns="config_label")


def _arm_rows(trials: pd.DataFrame, arms: pd.DataFrame) -> pd.DataFrame:
    """The arms table with `experiment` and `trial_id` on every row (a train run's arms.csv has no
    trial_id: it is the folder's one trial)."""
    a = arms.copy()
    if "trial_id" not in a.columns:
        a["trial_id"] = None
    missing = a["trial_id"].isna()
    if missing.any():
        a.loc[missing, "trial_id"] = a.loc[missing, "experiment"].map(trials.groupby("experiment")["trial_id"].first())
    a["trial_id"] = a["trial_id"].astype(str)
    a["arm"] = a["arm"].astype(str)
    return a


def apply_arm_labels(trials: pd.DataFrame, history: pd.DataFrame, members: pd.DataFrame,
                     arms: pd.DataFrame | None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(trials, history, members) labelled as the members they name: each member row its arm's
    label, each trial and history row the trial's over its arms; idempotent."""
    if arms is None or not len(arms) or not len(members) or "arm" not in members.columns or "arm" not in arms.columns:
        return trials, history, members
    a = _arm_rows(trials, arms)
    label_keys = [c for c in a.columns if (c.startswith("gems.") and c.endswith(".mode")) or c.startswith("model.")]
    settings = {(e, t, n): row for (e, t, n), row in zip(zip(a["experiment"], a["trial_id"], a["arm"]),
                                                          a[label_keys].to_dict("records"))}
    members = members.copy()
    arm_of = members["arm"].astype(str)
    rows = pd.MultiIndex.from_arrays([members["experiment"], members["trial_id"], arm_of,
                                      members["config_label"].astype(str)])
    relabel = {k: arm_label(k[3], settings[k[:3]]) if k[:3] in settings else k[3] for k in rows.unique()}
    members["config_label"] = rows.map(relabel).to_numpy()  # once per (trial, arm, label), not per row
    # the arms in the design's order: the members are arm-major (tune_gems.design.arms.MemberLayout)
    first = pd.to_numeric(members["member"], errors="coerce") if "member" in members.columns else pd.Series(0, index=members.index)
    per_arm = (members.assign(arm=arm_of, _order=first).sort_values(["_order"], kind="stable")
               .drop_duplicates(KEY + ["arm"]))
    labels = {key: trial_label(list(zip(g["arm"], g["config_label"]))) for key, g in per_arm.groupby(KEY, sort=False)}
    trials, history = trials.copy(), history.copy()
    for df in (trials, history):
        if len(df):
            new = [labels.get(k) for k in zip(df["experiment"], df["trial_id"])]
            df["config_label"] = [n if n is not None else old for n, old in zip(new, df["config_label"])]
    return trials, history, members


HISTORY_NAME = "history_name"
"""The column beside a table's `history` id that names it (the history table's `name`)."""


def history_names(histories: pd.DataFrame | None) -> dict[int, str]:
    """Each history id's name (`Experiment.histories`; names that differ between experiments joined
    by ' / '); empty without a history table."""
    if histories is None or not len(histories) or "name" not in histories.columns:
        return {}
    return {int(h): " / ".join(dict.fromkeys(g["name"].astype(str))) for h, g in histories.groupby("history", sort=True)}


def with_history_names(table: pd.DataFrame, names: dict[int, str]) -> pd.DataFrame:
    """`table` with `history_name` after its `history` column (`history <id>` for an unnamed id)."""
    if "history" not in table.columns or HISTORY_NAME in table.columns:
        return table
    ids = pd.to_numeric(table["history"]).fillna(0).astype(int)
    out = table.copy()
    out.insert(out.columns.get_loc("history") + 1, HISTORY_NAME, [names.get(h, f"history {h}") for h in ids])
    return out
