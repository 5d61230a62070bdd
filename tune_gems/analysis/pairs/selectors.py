"""Which members of a gem's comparison are a real wiring (`WIRE` against `MEASURE`, `wiring_pairs`) and which a placebo
arm (docs/analysis.md "Placebo arms"); shared by the verdicts, null arms, held-out check and periods."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pandas as pd

from tune_gems.analysis.pairs.pairing import Cells, Paired, paired
from tune_gems.contracts.gem_manifest import GemEntry

WIRE, MEASURE = "wire", "measure"

CellFilter = Callable[[pd.DataFrame], pd.Series]


def _weight(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def placebo_selectors(g: GemEntry, placebo_weight: float) -> tuple[CellFilter, CellFilter]:
    """(real, is_placebo): cell filters that leave out the placebo arms / keep only them."""
    mode, weight = f"gems.{g.name}.mode", f"gems.{g.name}.weight"

    def is_placebo(t: pd.DataFrame) -> pd.Series:
        w = t[weight].map(_weight) if weight in t.columns else pd.Series(np.nan, index=t.index)
        return (t[mode] == WIRE) & (w <= placebo_weight) if mode in t.columns else pd.Series(False, index=t.index)

    return (lambda t: ~is_placebo(t)), is_placebo


def wiring_pairs(cells: Cells, gem: str, *, column: str, k: int, select: CellFilter | None = None) -> Paired:
    """The per-seed differences wired minus measured of `gem` (`pairing.paired` on its mode; its
    weight belongs to the wired side, so configs may differ in it), in the cells `select` keeps."""
    return paired(cells, f"gems.{gem}.mode", WIRE, MEASURE, column=column, k=k, ignore=(f"gems.{gem}.weight",),
                  select=select)
