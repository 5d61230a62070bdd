"""The confirmation's last gate on one price history: a verdict must survive the search's selection.

Why (issue 30, item 7). A search keeps, per gem, the best of the T trials that wired it. On one
price history (a real file, or synthetic `paths: shared`) the confirmation can only refresh the
seeds: each configuration's luck on that history (the market noise of its validation period,
or of each walk-forward period) is the same in the confirmation as in the discovery, and the
chosen configuration is the one whose luck was best. Simulated through the project's functions
(`analysis/one_history_calibration.one_history_search_rates`), a confirmation on fresh seeds alone reads a
false keep / harmful in 24-98% of null searches, and 6-10% even with the one-period gate at the
verdict's level. So on one history the final verdict is decisive only where the history's part
of the interval is taken at the selection-adjusted level (the verdict's level / T, Bonferroni
over the configurations the search chose among: `search_choice.selection_adjusted_bounds`) and
the interval still excludes 0 on the verdict's side; without that interval (no market-noise
interval at K = 1) neither a decisive verdict nor `equivalent` stands.
"""

from __future__ import annotations

import numpy as np

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
