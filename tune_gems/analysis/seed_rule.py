"""The seed rule's decision: from one family of gems' tests to each gem's verdict.

One pure function, `decide_family`, shared by the verdicts (`verdicts.gem_verdicts`: one family,
the experiment's gems) and the calibration (`calibration.py`: thousands of simulated families at
once), so that the calibration exercises the rule the verdicts ship (docs/analysis.md
"Verdicts"). Per gem with a wiring comparison, Holm over the gems of the family:

- `keep wired`: Holm-adjusted p <= alpha and effect > 0; `harmful`: the same with effect < 0;
- `delete`: otherwise, the wiring effect equivalent to zero (Holm-adjusted TOST p <= alpha)
  **and** the measured magnitude at its null (Holm-adjusted magnitude TOST p <= alpha) or a
  model feature removing it (`redundant`): both halves (issue 21);
- `equivalent`: the wiring TOST alone; `inconclusive`: none of these.

What follows the seed rule (the market-noise check, the periods, the held-out check) and the
verdicts of gems without a wiring comparison stay in `verdicts.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tune_gems.stats.inference import holm_batch

KEEP, HARMFUL, EQUIVALENT, DELETE, INCONCLUSIVE = "keep wired", "harmful", "equivalent", "delete", "inconclusive"
NOT_TESTED = ""
"""The verdict entry of a gem without a wiring test (NaN p): not decided by the seed rule."""


@dataclass(frozen=True)
class FamilyDecision:
    """The seed rule on families of gems (arrays of the inputs' shape, the gems on the last axis)."""

    verdict: np.ndarray
    p_adjusted: np.ndarray
    tost_p_adjusted: np.ndarray
    magnitude_p_adjusted: np.ndarray
    magnitude_at_null: np.ndarray


def holm_family(p) -> np.ndarray:
    """Holm over the last axis of p (any shape; NaN entries are left out of their family)."""
    p = np.asarray(p, float)
    return holm_batch(p.reshape(-1, p.shape[-1]) if p.ndim else p.reshape(1, 1)).reshape(p.shape)


def decide_family(p, estimate, p_tost, *, alpha: float, p_magnitude=None, redundant=None) -> FamilyDecision:
    """The seed rule (module docstring) per gem of each family: `p` the two-sided p of the wiring
    effect (NaN: no wiring test, left out of the family), `estimate` its sign's source, `p_tost`
    its TOST p for +-ROPE, `p_magnitude` the TOST p of the measured magnitude against its null
    (NaN / None: not tested), `redundant` whether the redundancy factorial removes the gem.
    Each p is Holm-adjusted over the gems of its family (`inference.holm_batch`)."""
    p = np.asarray(p, float)
    estimate = np.broadcast_to(np.asarray(estimate, float), p.shape)
    p_adj, pt_adj = holm_family(p), holm_family(np.broadcast_to(np.asarray(p_tost, float), p.shape))
    pe_adj = holm_family(np.broadcast_to(np.nan if p_magnitude is None else np.asarray(p_magnitude, float), p.shape))
    red = np.broadcast_to(False if redundant is None else np.asarray(redundant, bool), p.shape)
    tested = np.isfinite(p_adj)
    significant = tested & (p_adj <= alpha)
    equivalent = tested & np.isfinite(pt_adj) & (pt_adj <= alpha)
    at_null = np.isfinite(pe_adj) & (pe_adj <= alpha)
    verdict = np.select(
        [~tested, significant & (estimate > 0), significant & (estimate < 0), equivalent & (at_null | red), equivalent],
        [NOT_TESTED, KEEP, HARMFUL, DELETE, EQUIVALENT], INCONCLUSIVE)
    return FamilyDecision(verdict, p_adj, pt_adj, pe_adj, at_null)
