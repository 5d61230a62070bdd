"""The verdict words, defined once: every module that writes, tests or prints a verdict uses these.

A verdict is one of `VERDICTS` (docs/analysis.md "Verdicts" says what each means and when it is
given). `DECISIVE` are the two that claim an effect; `NOT_TESTED` is the seed rule's entry for a
gem without a wiring comparison (decided later, from what it lacks). The calibrations report
decisions as integer codes (`verdict_codes`): +1 keep wired, -1 harmful, 2 equivalent, 3
inconsistent across periods, 4 insufficient data, 5 heterogeneous across periods, 6 not confirmed on
held-out data, 0 anything else.
"""

from __future__ import annotations

import numpy as np

KEEP = "keep wired"
HARMFUL = "harmful"
EQUIVALENT = "equivalent"
DELETE = "delete"
INCONCLUSIVE = "inconclusive"
INCONSISTENT = "inconclusive: inconsistent across periods"
"""The effect changes sign between periods, shown: fold intervals on both sides of 0 (Holm)."""
HETEROGENEOUS = "inconclusive: heterogeneous across periods"
"""The periods differ significantly (Cochran's Q, Holm) but no sign change is shown and the pooled
effect decides nothing: more seeds will not settle it, more periods may."""
NOT_CONFIRMED = "not confirmed on held-out data"
"""A discovery `keep wired` / `harmful` whose test-segment effect, with the test period's spread in
its standard error, does not agree at the family's level (`rules.held_out_rule`)."""
CONFOUNDED = "insufficient: confounded"
INSUFFICIENT = "insufficient data"
NO_DATA = "no data"
NOT_TESTED = ""
"""The seed rule's entry for a gem without a wiring test (NaN p): not decided by the seed rule."""

VERDICTS = (KEEP, HARMFUL, EQUIVALENT, INCONCLUSIVE, INCONSISTENT, HETEROGENEOUS, DELETE, CONFOUNDED, INSUFFICIENT,
            NO_DATA, NOT_CONFIRMED)
"""Every verdict a gem can get, in the order docs/analysis.md lists them."""

DECISIVE = (KEEP, HARMFUL)
"""The verdicts that claim an effect: the ones the market-noise, period and held-out checks test."""

NULL_ARM_OK = (EQUIVALENT, INCONCLUSIVE, INSUFFICIENT)
"""The verdicts a null arm (placebo, A/A) may get; any other says the rule is not calibrated (a
null arm too tied to test anything reads `insufficient data`, and its row says it is uninformative)."""

KEEP_CODE, HARMFUL_CODE, EQUIVALENT_CODE, INCONSISTENT_CODE, INSUFFICIENT_CODE, HETEROGENEOUS_CODE = 1, -1, 2, 3, 4, 5
NOT_CONFIRMED_CODE = 6
CODES = {KEEP: KEEP_CODE, HARMFUL: HARMFUL_CODE, EQUIVALENT: EQUIVALENT_CODE, INCONSISTENT: INCONSISTENT_CODE,
         INSUFFICIENT: INSUFFICIENT_CODE, HETEROGENEOUS: HETEROGENEOUS_CODE, NOT_CONFIRMED: NOT_CONFIRMED_CODE}
"""The calibrations' integer code of a verdict (0: any other)."""


def verdict_codes(verdict) -> np.ndarray:
    """The integer codes (`CODES`, 0 for any other word) of an array of verdict words."""
    verdict = np.asarray(verdict)
    out = np.zeros(verdict.shape, int)
    for word, code in CODES.items():
        out[verdict == word] = code
    return out
