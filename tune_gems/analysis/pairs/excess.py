"""A gem's magnitude as the verdicts and the redundancy table read it: excess over its null relative to the C51 loss
(docs/analysis.md "Verdicts", rule 2); its own module so neither caller imports the other."""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from tune_gems.contracts.gem_manifest import GemEntry


def add_excess_columns(long: pd.DataFrame, gems: Iterable[GemEntry]) -> dict[str, tuple[str, str]]:
    """Add `<metric>__excess_rel` per member-epoch (the raw `<metric>_rel` against 0 where the gem has
    no null, noted). Returns gem -> (column, note)."""
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
