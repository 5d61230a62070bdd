"""Gem modes and configuration labels of trials.

`config_label` (docs/results.md) names a configuration: per-gem mode and the model switches,
e.g. `g6=measure g10=wire g12=off sn=on noisy=on`. Two configurations that differ only in one
gem's mode share the same *context* for that gem: the label with that gem's token removed.
Members of such configurations with the same seed started from the same init, noise and replay
stream, so they can be compared pairwise.
"""

from __future__ import annotations

import re
from typing import Iterable

import pandas as pd

from tune_gems.contracts.gem_manifest import LEGACY_MANIFEST

def gem_mode_from_label(label: str, gem: str) -> str | None:
    """The mode of `gem` written in a config label (`g6=measure ...`), or None if absent."""
    m = re.search(rf"(?:^|\s){re.escape(gem)}=(\S+)", str(label))
    return m.group(1) if m else None


def context_label(label: str, gem: str) -> str:
    """The config label without `gem`'s token: equal contexts differ only in that gem's mode."""
    tokens = [t for t in str(label).split() if not t.startswith(f"{gem}=")]
    return " ".join(tokens)


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
    """One row per trial: experiment, trial_id, and one column per gem of `gems` (the gem names
    of the experiment's manifest; default `mode_gems(trials)`) = its mode.

    The mode comes from the `gems.<gem>.mode` column; where that is missing, from the config
    label; where neither says, it is `unknown` (such trials are left out of gem statistics).
    """
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
