"""Out of sample: the test segment as the confirmation of each decisive verdict, and the learner's skill in context. The
test segment is untouched by the verdict, so it is the rule's pre-registered second stage
(`rules.decision.confirm_on_held_out`; docs/analysis.md "The held-out confirmation"): one more period, not a
replication, and its text says so. Where every arm's test alpha Sharpe lies below flat's, every verdict line says so."""

from __future__ import annotations

from typing import Any

import numpy as np

from tune_gems.analysis.pairs.pairing import Cells, Paired, by_history_fold, history_count, revalue
from tune_gems.analysis.rules.decision import HeldOutDecision, TestSegment
from tune_gems.analysis.rules.periods import seed_level_effect
from tune_gems.analysis.rules.settings import DECISIVE, KEEP
from tune_gems.stats.baseline_headline import baseline_comparison, skill_flag

HELD_OUT_COLUMNS = ["test_effect", "test_ci_low", "test_ci_high", "test_p_value", "test_level", "held_out"]
"""verdicts.csv's columns of the second stage (docs/results.md)."""
CONFIRMED = "confirmed"
"""What the `held_out` column says where the test segment confirmed the discovery."""
ONE_TEST_PERIOD = ("conditional on one test period: the test segment is common to every fold, one more period, "
                   "not a replication")
"""What the held-out check is: it says so wherever it is shown."""


def held_out_column(outcome: str) -> str:
    """The test-segment twin of a validation metric column (val_alpha_sharpe -> test_alpha_sharpe)."""
    return outcome.replace("val_", "test_", 1)


def held_out_segment(prs: list[Paired], cells: Cells, outcome: str) -> TestSegment | None:
    """Each contrast's test-segment effect from its verdict's pairs (`periods.seed_level_effect`:
    [1, E]), or None without a test-segment metric."""
    column = held_out_column(outcome)
    if column not in cells.long.columns:
        return None
    e = len(prs)
    effect, var, df = np.full((1, e), np.nan), np.full((1, e), np.nan), np.full((1, e), np.nan)
    tests = [revalue(pr, cells, column, 1) if pr.n else None for pr in prs]
    for j, (test, pr) in enumerate(zip(tests, prs)):
        if test is None or not test.n or _unmeasured(test, pr):  # NaN: no test-segment effect to confirm with
            continue
        r = seed_level_effect(test.diffs[None, None, :])
        effect[0, j], var[0, j], df[0, j] = r["theta"][0], r["var"][0], r["df"][0]
    by_history = per_history(tests, cells) if history_count(cells) >= 2 else None
    return TestSegment(effect, var, df, spread_in_seeds=not cells.shared_path, by_history=by_history)


def per_history(tests: list[Paired | None], cells: Cells) -> np.ndarray:
    """[1, E, H, n] each seed's test differences per history: the held-out stage's spread between histories."""
    histories = sorted(int(h) for h in cells.table["history"].unique())
    parts = [by_history_fold(t, cells) if t is not None and t.n else [] for t in tests]
    units = sorted({u for per in parts for _, pr in per for u in pr.units})
    slot = {u: i for i, u in enumerate(units)}
    total = np.zeros((1, len(tests), len(histories), len(units)))
    count = np.zeros(total.shape)
    for j, per in enumerate(parts):
        for (h, _), pr in per:
            at = [slot[u] for u in pr.units]
            total[0, j, histories.index(h), at] += pr.diffs
            count[0, j, histories.index(h), at] += 1
    with np.errstate(invalid="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _unmeasured(test: Paired, pr: Paired) -> bool:
    """Whether a pair's test metric was not measured (a missing value would read as divergence)."""
    return test.units == pr.units and bool((~np.isfinite(test.diffs) & np.isfinite(pr.diffs)).any())


def held_out_columns(held: HeldOutDecision | None, test: TestSegment | None, j: int, discovery: str,
                     outcome: str) -> dict[str, Any]:
    """Contrast j's HELD_OUT_COLUMNS from the second stage's record."""
    if test is None:
        return {"held_out": f"no test segment ({held_out_column(outcome)})"} if discovery in DECISIVE else {}
    out: dict[str, Any] = {"test_effect": float(test.effect[0, j])}
    if held is None or not held.applied[0, j]:
        return out
    out.update(test_ci_low=float(held.low[0, j]), test_ci_high=float(held.high[0, j]), test_p_value=float(held.p[0, j]),
               test_level=float(held.level[0, j]))
    effect, low, high = float(test.effect[0, j]), float(held.low[0, j]), float(held.high[0, j])
    if held.confirmed[0, j]:
        out["held_out"] = CONFIRMED
    elif not np.isfinite(effect):
        out["held_out"] = f"not confirmed: no test-segment measure of every pair ({held_out_column(outcome)})"
    elif not np.isfinite(held.se[0, j]):
        out["held_out"] = "not confirmed: no measure of the test period's spread (market noise unavailable)"
    elif np.sign(effect) == (-1.0 if discovery == KEEP else 1.0) and not (low <= 0 <= high):
        out["held_out"] = "not confirmed: the opposite sign"
    else:
        out["held_out"] = "not confirmed: the test interval includes 0"
    return out


def skill_context(experiment: Any) -> str:
    """The verdicts' `skill` flag (`stats.baseline_headline.skill_flag`), "" otherwise."""
    return skill_flag(baseline_comparison(experiment))
