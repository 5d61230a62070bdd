"""The gates of one validation period: what a seed verdict must also pass on one price history.

On one history every seed sees the same market, so the seed interval says how a difference
varies over seeds, not how much of it is the history's luck (docs/analysis.md "Market noise").
Two gates follow the seed rule when the market-noise interval of the same difference exists:

- **the market gate** (`market_gate`): a `keep wired` / `harmful` whose market-noise interval
  includes 0 or lies on the other side (`contradicts`) reads `inconclusive`;
- **the one-period gate** (`one_period_gate`): the seed interval and the market-noise interval
  are two variances of one difference, so a `keep wired` / `harmful` / `equivalent` must also
  hold for the combined interval (`combined_bounds`); requiring each interval alone to exclude
  0 is up to ~3x too liberal when the two are of similar size. A `delete` rests on the same
  equivalence, so it is gated like `equivalent`.

Both only make a verdict more cautious. Arrays in (any common shape), verdict words out; the
verdicts (`verdicts.py`, `walk_forward.py`) call them on one experiment's gems, the period
calibration (`walk_forward_calibration.py`) on thousands of simulated families.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tune_gems.analysis.rules.words import DECISIVE, DELETE, EQUIVALENT, INCONCLUSIVE


def contradicts(effect, low, high) -> np.ndarray:
    """The market-noise interval [low, high] does not confirm a seed verdict with this signed
    effect: it includes 0, or lies on the other side of 0."""
    effect, low, high = (np.asarray(x, float) for x in (effect, low, high))
    return ~(((effect > 0) & (low > 0)) | ((effect < 0) & (high < 0)))


def market_gate(verdict, effect, market_low, market_high, applies) -> np.ndarray:
    """The verdict words after the market gate: a decisive verdict whose market-noise interval
    contradicts it (where the gate `applies`: an interval exists and no member diverged, since
    divergence is not market noise) becomes `inconclusive`."""
    verdict = np.asarray(verdict)
    gated = np.isin(verdict, DECISIVE) & np.asarray(applies, bool) & contradicts(effect, market_low, market_high)
    return np.where(gated, INCONCLUSIVE, verdict)


def combined_bounds(effect, seed_low, seed_high, market_low, market_high) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of one difference's interval with both the seeds' and the history's variance:
    each side's distance from the effect is sqrt(seed side^2 + market half-width^2) (two
    intervals at one level, nearly normal; the seed side is the rank interval's own, so a side
    that divergence makes infinite stays infinite)."""
    h_m = (market_high - market_low) / 2
    return effect - np.hypot(effect - seed_low, h_m), effect + np.hypot(seed_high - effect, h_m)


@dataclass(frozen=True)
class OnePeriodDecision:
    """The one-period gate on arrays of verdicts: the words after it, the combined interval, and
    where the gate applied (NaN bounds elsewhere)."""

    verdict: np.ndarray
    low: np.ndarray
    high: np.ndarray
    applied: np.ndarray


def one_period_gate(verdict, effect, seed_low, seed_high, market_low, market_high, *, rope,
                    applies) -> OnePeriodDecision:
    """The one-period gate where it `applies` (a market-noise interval exists) and the effect is
    finite: a decisive verdict whose combined interval (`combined_bounds`) includes 0, or an
    `equivalent` / `delete` whose combined interval is not inside +-rope, becomes `inconclusive`."""
    verdict = np.asarray(verdict)
    effect = np.asarray(effect, float)
    on = np.asarray(applies, bool) & np.isfinite(effect)
    with np.errstate(invalid="ignore"):
        lo, hi = combined_bounds(effect, np.asarray(seed_low, float), np.asarray(seed_high, float),
                                 np.asarray(market_low, float), np.asarray(market_high, float))
        excludes_zero = (lo > 0) | (hi < 0)
        inside_rope = (-rope < lo) & (hi < rope)
    gated = on & ((np.isin(verdict, DECISIVE) & ~excludes_zero) | (np.isin(verdict, (EQUIVALENT, DELETE)) & ~inside_rope))
    return OnePeriodDecision(np.where(gated, INCONCLUSIVE, verdict), np.where(on, lo, np.nan), np.where(on, hi, np.nan), on)
