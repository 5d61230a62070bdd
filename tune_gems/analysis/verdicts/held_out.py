"""Out of sample: the test segment as the held-out check of each decisive verdict, and the
learner's skill in context (issue 20, deliver 4 and 5).

Why. A verdict is reached on the validation period(s); the test segment is untouched by it. Each
`keep wired` / `harmful` is re-estimated ONCE on the test segment with the same member pairs
(the verdict metric's test twin, e.g. `test_alpha_sharpe`, at the pairs' common final epoch,
signed-rank at alpha, no further search) and shown beside the verdict: `agrees` when the test
interval excludes 0 on the verdict's side. Nothing is decided on it: the verdict stands either
way, and a reader sees at once when the validation result did not carry over.

The check is conditional on one test period: the test segment is one stretch of one history,
common to every fold, so it is one more period, not a replication; its text says so.

Skill: "wiring helps" is a statement about two arms of one learner, not about the learner beating
the market. When every arm's test alpha Sharpe lies below flat's (0) with its interval (one
metric, one reference: `stats.baseline_headline`, the statement the report opens with), every
verdict line says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tune_gems.analysis.pairs.pairing import Cells, Paired, revalue
from tune_gems.stats.baseline_headline import baseline_comparison, skill_flag
from tune_gems.analysis.rules.thresholds import Thresholds
from tune_gems.analysis.rules.words import DECISIVE, KEEP
from tune_gems.stats.inference import rank_test

HELD_OUT_COLUMNS = ["test_effect", "test_ci_low", "test_ci_high", "test_p_value", "held_out"]
AGREES = "agrees"
ONE_TEST_PERIOD = ("conditional on one test period: the test segment is common to every fold, one more period, "
                   "not a replication")
"""What the held-out check is (issue 30, item 8): it says so wherever it is shown."""


@dataclass(frozen=True)
class HeldOutEffect:
    """A gem's wiring effect on the test segment: the same pairs as its verdict, the verdict
    metric's test twin at the pairs' common final epoch, signed-rank at `alpha`."""

    column: str
    n: int
    estimate: float
    low: float
    high: float
    p: float


def held_out_column(outcome: str) -> str:
    """The test-segment twin of a validation metric column (val_alpha_sharpe -> test_alpha_sharpe)."""
    return outcome.replace("val_", "test_", 1)


def held_out_effect(pr: Paired, cells: Cells, outcome: str, thresholds: Thresholds) -> HeldOutEffect | None:
    """The one computation of a gem's test-segment effect from its verdict's pairs `pr` (the
    verdicts' `test_effect` column and the held-out check both read it; nothing is paired again:
    `pairing.revalue`), or None when no pair has the test column."""
    column = held_out_column(outcome)
    if column not in cells.long.columns or not pr.n:
        return None
    test = revalue(pr, cells, column, 1)
    if not test.n:
        return None
    t = rank_test(test.diffs[None, :], tail=thresholds.alpha / 2)
    return HeldOutEffect(column, test.n, *(float(t[k][0]) for k in ("estimate", "low", "high", "p")))


def held_out_columns(verdict: str, eff: HeldOutEffect | None, outcome: str) -> dict[str, Any]:
    """The verdict row's held-out columns (HELD_OUT_COLUMNS but `test_effect`) for a keep wired /
    harmful: the test-segment interval and whether it agrees (module docstring); empty otherwise."""
    if verdict not in DECISIVE:
        return {}
    if eff is None:
        return {"held_out": f"no test-segment pairs ({held_out_column(outcome)})"}
    return {"test_effect": eff.estimate, "test_ci_low": eff.low, "test_ci_high": eff.high, "test_p_value": eff.p,
            "held_out": agreement(verdict, eff.estimate, eff.low, eff.high)}


def agreement(verdict: str, effect: float, low: float, high: float) -> str:
    """`agrees` when the test interval excludes 0 on the verdict's side; else why it does not."""
    sign = 1.0 if verdict == KEEP else -1.0
    if (sign > 0 and low > 0) or (sign < 0 and high < 0):
        return AGREES
    if math.isfinite(effect) and np.sign(effect) == -sign and not (low <= 0 <= high):
        return "does not agree: the opposite sign"
    return "does not agree: the test interval includes 0"


def skill_context(experiment: Any) -> str:
    """The verdicts' `skill` flag (`stats.baseline_headline.skill_flag`: the report's first line
    said only when every arm lies below flat, test alpha Sharpe with its interval, conditional on
    one test period); "" otherwise or without test metrics."""
    return skill_flag(baseline_comparison(experiment))
