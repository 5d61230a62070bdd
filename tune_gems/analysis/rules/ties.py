"""Ties carry no weight: the signed-rank rule on each comparison's informative pairs only.

Why. A pair whose two members have exactly the same outcome (both never traded: Sharpe exactly 0
on both sides; both diverged: a tie by the worst-outcome rule) says nothing about the direction
of a wiring's effect. Counted as the signed-rank statistic's "half above, half below" they pull the Hodges-Lehmann
estimate to 0 and shrink the interval to [0, 0], so 14 tied pairs of 18 would read `equivalent`
on 2 informative seeds, and a fold whose interval collapsed from ties would get almost all the
pooled weight. Here a tie is dropped before the test
(Wilcoxon's zero treatment: conditional on the number of ties, the signs of the other pairs are
still exchangeable under "no effect", so the exact test stays exact), in every fold and in the
seed rule, and what remains is counted: `n_informative` and `tied_share` travel with every
verdict, and a comparison whose informative pairs cannot reach the rule's level reads
`insufficient data` (`seed.decide_family`'s `informative`).

Vectorised over rows with different numbers of ties: rows are grouped by their informative
count and each group goes through `inference.rank_test` at once, so the verdicts (one row) and
the calibrations (thousands) run this same function.
"""

from __future__ import annotations

import numpy as np

from tune_gems.stats.inference import RankTest, rank_test, smallest_p

KEYS = ("estimate", "p", "p_greater", "p_less", "p_tost", "low", "high")
"""The statistics of `inference.rank_test`, one per row."""


def is_tie(d) -> np.ndarray:
    """Where a per-unit difference is an exact tie (0: identical outcomes, or both sides diverged)."""
    return np.asarray(d, float) == 0.0


def informative_rank_test(d, *, rope: float = 0.0, tail=0.025) -> RankTest:
    """`inference.rank_test` on each row of d [S, n] after dropping its ties (and NaN: no pair);
    `tail` a float or one per row. Adds `n_informative` [S] and `tied_share` [S] (ties / pairs;
    NaN for a row without pairs). A row without informative pairs gets NaN statistics."""
    d = np.atleast_2d(np.asarray(d, float))
    s, n = d.shape
    tails = np.broadcast_to(np.asarray(tail, float), (s,))
    present = ~np.isnan(d)
    keep = present & ~is_tie(d)
    counts = keep.sum(1)
    out = {k: np.full(s, np.nan) for k in KEYS}
    for c in np.unique(counts):
        if c == 0:
            continue
        rows = np.nonzero(counts == c)[0]
        sub = d[rows][keep[rows]].reshape(len(rows), int(c))  # row-major: each row's kept values in order
        t = tails[rows]
        r = rank_test(sub, rope=rope, tail=t if np.unique(t).size > 1 else float(t[0]))
        for k in KEYS:
            out[k][rows] = getattr(r, k)
    with np.errstate(invalid="ignore", divide="ignore"):
        tied = np.where(present.sum(1) > 0, (present & ~keep).sum(1) / present.sum(1), np.nan)
    return RankTest(**out, n_informative=counts, tied_share=tied)


def cannot_decide(n_informative, level) -> np.ndarray:
    """Where n informative pairs cannot reach a two-sided p <= `level` even with every sign equal
    (`inference.smallest_p`): no effect of any size, and no equivalence, can be shown with them."""
    n = np.asarray(n_informative)
    lv = np.broadcast_to(np.asarray(level, float), n.shape)
    flat = [smallest_p(int(k)) > float(a) if k > 0 else True for k, a in zip(n.ravel(), lv.ravel())]
    return np.asarray(flat, bool).reshape(n.shape)
