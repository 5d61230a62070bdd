"""The seed rule: from one family of gems' signed-rank tests to each gem's verdict.

Per gem with a wiring comparison, Holm over the gems of the family (`inference.holm`):

- `keep wired`: Holm-adjusted p <= alpha and effect > 0; `harmful`: the same with effect < 0;
- `delete`: otherwise, the wiring effect equivalent to zero (Holm-adjusted TOST p <= alpha)
  **and** the measured magnitude at its null (Holm-adjusted magnitude TOST p <= alpha) or a
  model feature removing it (`redundant`): both halves, since a magnitude at its null says
  nothing about what wiring does;
- `equivalent`: the wiring TOST alone; `inconclusive`: none of these;
- without a wiring test (given which members exist): `insufficient: confounded` (wired and
  measured members exist but never differ in this gem alone), `insufficient data` (only one
  side), `no data` (neither);
- `insufficient data` too when its informative pairs (ties dropped, `rules.ties`) are too few
  for any of its tests to reach alpha even with every sign equal (`ties.cannot_decide`): never
  `equivalent` or `delete` on ties.

With `one_sided` (the opt-in one-sided keep test) `p` is the one-sided p of effect > 0 and no
`harmful` is claimed.

A null arm (placebo, A/A) is the same rule on a family of one (Holm of one p is that p).
Whether a model feature removes a gem (`redundancy_finding`) is decided here too: it is the
second half of `delete`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tune_gems.analysis.rules.ties import cannot_decide
from tune_gems.analysis.rules.words import (
    CONFOUNDED, DELETE, EQUIVALENT, HARMFUL, INCONCLUSIVE, INSUFFICIENT, KEEP, NO_DATA, NOT_TESTED,
)
from tune_gems.stats.inference import holm, smallest_p

REMOVES, REDUCES, DOES_NOT_REMOVE, NO_DESIGN = "removes", "reduces", "does not remove", "no design"
"""The redundancy table's findings: `removes` is the half of `delete` a model feature gives."""


@dataclass(frozen=True)
class FamilyDecision:
    """The seed rule on families of gems (arrays of the inputs' shape, the gems on the last axis)."""

    verdict: np.ndarray
    p_adjusted: np.ndarray
    tost_p_adjusted: np.ndarray
    magnitude_p_adjusted: np.ndarray
    magnitude_at_null: np.ndarray
    too_few_informative: np.ndarray


def decide_family(p, estimate, p_tost, *, alpha: float, p_magnitude=None, redundant=None, wired=None,
                  measured=None, informative=None, one_sided: bool = False, paired=None) -> FamilyDecision:
    """The seed rule (module docstring) per gem of each family: `p` the two-sided p of the wiring
    effect (NaN: no wiring test, left out of the family), `estimate` its sign's source, `p_tost`
    its TOST p for +-ROPE, `p_magnitude` the TOST p of the measured magnitude against its null
    (NaN / None: not tested), `redundant` whether the redundancy factorial removes the gem.
    Each p is Holm-adjusted over the gems of its family (the last axis). A gem without a wiring
    test reads NOT_TESTED, or, given the counts of its `wired` and `measured` members, what it
    lacks (`design_verdict`). `informative` the informative pairs of each tested gem (None: all
    enough); `one_sided`: `p` is one-sided (effect > 0) and `harmful` is not claimed. `paired` the
    pairs each gem has (None: not given): a gem with pairs but no test (every pair ties: no
    informative pair, so no p) reads `insufficient data`, never what a design lacks."""
    p = np.asarray(p, float)
    estimate = np.broadcast_to(np.asarray(estimate, float), p.shape)
    p_adj, pt_adj = holm(p), holm(np.broadcast_to(np.asarray(p_tost, float), p.shape))
    pe_adj = holm(np.broadcast_to(np.nan if p_magnitude is None else np.asarray(p_magnitude, float), p.shape))
    red = np.broadcast_to(False if redundant is None else np.asarray(redundant, bool), p.shape)
    tested = np.isfinite(p_adj)
    significant = tested & (p_adj <= alpha)
    equivalent = tested & np.isfinite(pt_adj) & (pt_adj <= alpha)
    at_null = np.isfinite(pe_adj) & (pe_adj <= alpha)
    few = (np.zeros(p.shape, bool) if informative is None else
           tested & cannot_decide(np.broadcast_to(np.asarray(informative), p.shape), 2 * alpha))
    verdict = np.select(
        [~tested, few, significant & (estimate > 0), significant & (estimate < 0) & (not one_sided),
         equivalent & (at_null | red), equivalent],
        [NOT_TESTED, INSUFFICIENT, KEEP, HARMFUL, DELETE, EQUIVALENT], INCONCLUSIVE)
    if wired is not None and measured is not None:
        verdict = np.where(tested, verdict, design_verdict(wired, measured))
    if paired is not None:  # pairs, every one a tie: too few informative pairs (none)
        few = few | (~tested & (np.broadcast_to(np.asarray(paired), p.shape) > 0))
        verdict = np.where(~tested & few, INSUFFICIENT, verdict)
    return FamilyDecision(verdict, p_adj, pt_adj, pe_adj, at_null, few)


def design_verdict(wired, measured) -> np.ndarray:
    """The verdict of a gem without a wiring test, from how many members were wired and measured:
    both but never differing in the gem alone: confounded; one side only: insufficient data."""
    wired, measured = np.asarray(wired) > 0, np.asarray(measured) > 0
    return np.select([wired & measured, wired, measured], [CONFOUNDED, INSUFFICIENT, INSUFFICIENT], NO_DATA)


def cannot_reach(n_seeds: int, level: float) -> bool:
    """Whether n seeds cannot reach p <= `level` at all (even with every sign equal): no effect
    of any size can be decided with them."""
    return smallest_p(int(n_seeds)) > level


def redundancy_finding(p_adjusted, change, on_tost_p_adjusted, *, alpha: float) -> np.ndarray:
    """Per (gem, feature): `removes` when switching the feature on lowers the gem's excess
    significantly (Holm p <= alpha, change < 0) and the excess with it on is at its null (its
    Holm-adjusted TOST p <= alpha); `reduces` when it lowers it but not to the null; `does not
    remove` otherwise."""
    p_adjusted, change = np.asarray(p_adjusted, float), np.asarray(change, float)
    on = np.asarray(on_tost_p_adjusted, float)
    lowers = (p_adjusted <= alpha) & (change < 0)
    at_null = np.isfinite(on) & (on <= alpha)
    return np.select([lowers & at_null, lowers], [REMOVES, REDUCES], DOES_NOT_REMOVE)
