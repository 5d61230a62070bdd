"""A gem's measured magnitude as the verdicts and the redundancy table read it: its excess over
its null, relative to the C51 loss, per member-epoch (docs/analysis.md "Verdicts", rule 2).

Its own module because both `gem_verdicts.py` (the delete rule) and `redundancy.py` (does a model
feature remove the gem's job) need it, and neither may import the other's callers.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from tune_gems.contracts.gem_manifest import GemEntry


def add_excess_columns(long: pd.DataFrame, gems: Iterable[GemEntry]) -> dict[str, tuple[str, str]]:
    """Add per member-epoch `<metric>__excess_rel` = excess over the gem's null / C51 loss.

    Where the gem has no null (or the results predate `_excess`), the raw `<metric>_rel` is used
    with a null of 0, and the note says so. Returns gem -> (column, note)."""
    out = {}
    loss = long["loss"].astype(float) if "loss" in long.columns else None
    for g in gems:
        col = f"{g.metric}__excess_rel"
        exc = f"{g.metric}_excess"
        if exc in long.columns and loss is not None and np.isfinite(long[exc].astype(float)).any():
            long[col] = long[exc].astype(float) / loss
            out[g.name] = (col, "")
        elif f"{g.metric}_rel" in long.columns:
            long[col] = long[f"{g.metric}_rel"].astype(float)
            out[g.name] = (col, "no null for this gem in the results: raw value / C51 loss, null taken as 0")
        else:
            long[col] = np.nan
            out[g.name] = (col, "no magnitude column")
    return out
