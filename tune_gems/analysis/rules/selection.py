"""The confirmation's last gate on one price history: a verdict must survive the search's selection.

Why. A search keeps, per gem, the best of the T trials that wired it. On one
price history (a real file, or synthetic `paths: shared`) the confirmation can only refresh the
seeds: each configuration's luck on that history (the market noise of its validation period,
or of each walk-forward period) is the same in the confirmation as in the discovery, and the
chosen configuration is the one whose luck was best. Simulated through the project's functions
(`analysis/one_history_calibration.one_history_search_rates`), a confirmation on fresh seeds alone reads a
false keep / harmful in 24-98% of null searches, and 6-10% even with the one-period gate at the
verdict's level. So on one history the final verdict is decisive only where the history's part
of the interval is taken at the selection-adjusted level (the verdict's level / T, Bonferroni
over the configurations the search chose among: `selection_adjusted_bounds`, and over periods
`pooled_adjusted_bounds`) and
the interval still excludes 0 on the verdict's side; without that interval (no market-noise
interval at K = 1) neither a decisive verdict nor `equivalent` stands.
"""

from __future__ import annotations

import numpy as np
from scipy import stats as sps

from tune_gems.analysis.rules.gates import combined_bounds
from tune_gems.analysis.rules.pooling import pooled_bounds
from tune_gems.analysis.rules.words import DECISIVE, EQUIVALENT, HARMFUL, INCONCLUSIVE, KEEP


def final_on_one_history(verdict, low, high, available) -> np.ndarray:
    """The final verdict words of a confirmation on one price history: `verdict` the confirmation's
    own (after the gates of its verdicts); `low`, `high` its selection-adjusted interval;
    `available` where that interval exists. A `keep wired` needs low > 0, a `harmful` high < 0,
    either and an `equivalent` the interval to exist; everything else becomes `inconclusive`."""
    verdict = np.asarray(verdict, dtype=object)
    low, high = np.asarray(low, float), np.asarray(high, float)
    available = np.asarray(available, bool)
    with np.errstate(invalid="ignore"):
        holds = np.where(verdict == KEEP, low > 0, np.where(verdict == HARMFUL, high < 0, True))
    decisive = np.isin(verdict, DECISIVE)
    fails = (decisive & ~(available & holds)) | ((verdict == EQUIVALENT) & ~available)
    return np.where(fails, INCONCLUSIVE, verdict)


def selection_adjusted_bounds(effect, seed_low, seed_high, market_low, market_high, market_level, candidates):
    """(low, high) of a K = 1 confirmation on one history with the market-noise part taken at the
    selection-adjusted level (market_level / candidates, a normal reading of the interval's
    half-width), combined with the seed interval as the one-period gate combines them
    (`gates.combined_bounds`)."""
    market_level = np.asarray(market_level, float)
    t = np.maximum(np.asarray(candidates, float), 1.0)
    with np.errstate(invalid="ignore"):
        scale = sps.norm.ppf(1 - market_level / (2 * t)) / sps.norm.ppf(1 - market_level / 2)
        h = (np.asarray(market_high, float) - np.asarray(market_low, float)) / 2 * scale
    return combined_bounds(np.asarray(effect, float), np.asarray(seed_low, float), np.asarray(seed_high, float), -h, h)


def pooled_adjusted_bounds(mu, low, high, level, df, candidates):
    """(low, high) of the pooled interval over periods at the selection-adjusted level (level /
    candidates): the interval's standard error read off its half-width at `level` with `df`
    degrees of freedom, widened as `pooling.pooled_bounds` widens it (t with `df`)."""
    level = np.asarray(level, float)
    t = np.maximum(np.asarray(candidates, float), 1.0)
    with np.errstate(invalid="ignore"):
        se = (np.asarray(high, float) - np.asarray(low, float)) / (2 * sps.t.ppf(1 - level / 2, df))
    return pooled_bounds(np.asarray(mu, float), se, np.zeros_like(se), df, level / (2 * t))
