"""The one statistical rule of the verdicts: Wilcoxon signed-rank on per-seed paired differences.

Why this rule. A verdict compares two arms seed by seed: d_s = outcome(wired, s) - outcome(measured,
s). Under "the gem has no effect" the two arms at one seed are exchangeable, so d_s is symmetric
about 0 and every sign flip of the d_s is equally likely: the signed-rank test is then *exact*
for any n (no bootstrap, no normality). It uses ranks, so a diverged member can enter as the
worst outcome (d = -inf when only the wired side diverged, +inf when only the measured side did,
a tie when both did) instead of being dropped. Its estimate is the Hodges-Lehmann median of the
Walsh averages (d_i + d_j) / 2, i <= j, and its interval is the set of shifts theta the same test
does not reject: interval and test are one rule, so "0 lies outside the interval" and "p <= alpha"
are the same statement (exactly, unless a Walsh average equals the tested value).

Everything here is vectorised over a leading axis of datasets, so the calibration
(`calibration.py`) runs the very code the verdicts use on thousands of simulated datasets.

Ties: the statistic is W(theta) = #{Walsh averages > theta} + 0.5 #{== theta}; a Walsh average of
+inf and -inf (two seeds where opposite sides diverged) is a tie at every theta. With ties the
exact null distribution is an approximation (slightly conservative for ties at 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats as sps

EXACT_MAX_N = 400
"""Exact null distribution up to this many seeds (O(n^3) once per n); a normal approximation
with continuity correction beyond."""


@lru_cache(maxsize=64)
def signed_rank_cdf(n: int) -> np.ndarray:
    """P(W <= w) for w = 0..n(n+1)/2, W the Wilcoxon signed-rank statistic of n untied values."""
    total = n * (n + 1) // 2
    if n > EXACT_MAX_N:
        w = np.arange(total + 1)
        mu, sd = total / 2.0, math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0)
        return sps.norm.cdf((w + 0.5 - mu) / sd)
    counts = np.zeros(total + 1)
    counts[0] = 1.0
    top = 0
    for k in range(1, n + 1):  # subsets of {1..k}: add k to every subset of {1..k-1}
        counts[k : top + k + 1] += counts[: top + 1].copy()
        top += k
    cdf = np.cumsum(counts) / 2.0**n
    return np.minimum(cdf, 1.0)


def _cdf_at(cdf: np.ndarray, w: np.ndarray) -> np.ndarray:
    """P(W <= w) for possibly half-integer w (P(W <= floor(w)))."""
    idx = np.floor(w + 1e-9).astype(int)
    out = np.where(idx < 0, 0.0, cdf[np.clip(idx, 0, cdf.size - 1)])
    return out


def _sf_at(cdf: np.ndarray, w: np.ndarray) -> np.ndarray:
    """P(W >= w) for possibly half-integer w (1 - P(W <= ceil(w) - 1))."""
    idx = np.ceil(w - 1e-9).astype(int) - 1
    below = np.where(idx < 0, 0.0, cdf[np.clip(idx, 0, cdf.size - 1)])
    return 1.0 - below


def walsh_averages(d: np.ndarray) -> np.ndarray:
    """[S, n(n+1)/2] Walsh averages (d_i + d_j) / 2, i <= j, of each row of d [S, n].

    NaN where +inf meets -inf (a tie at every threshold)."""
    n = d.shape[1]
    i, j = np.triu_indices(n)
    with np.errstate(invalid="ignore"):
        return (d[:, i] + d[:, j]) / 2.0


def _count_above(w: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """W(theta) per row: #{w > theta} + 0.5 #{w == theta} + 0.5 #{NaN}."""
    th = theta[:, None]
    return (w > th).sum(1) + 0.5 * ((w == th).sum(1) + np.isnan(w).sum(1))


def critical_count(n: int, tail: float) -> int:
    """Largest c with P(W <= c) <= tail (-1 when even W = 0 is more likely than `tail`)."""
    cdf = signed_rank_cdf(n)
    ok = np.nonzero(cdf <= tail + 1e-12)[0]
    return int(ok[-1]) if ok.size else -1


def walsh_interval(sorted_w: np.ndarray, n: int, tail: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """Interval of shifts not rejected by the two-sided test with `tail` in each tail.

    `sorted_w` [S, N]: Walsh averages sorted per row (NaN last). Returns (low, high) [S]; -inf /
    +inf where no Walsh average can be excluded (too few seeds for that level)."""
    s, total = sorted_w.shape
    tails = np.broadcast_to(np.asarray(tail, float), (s,))
    if np.ndim(tail) == 0:
        c = np.full(s, critical_count(n, float(tail)))
    else:
        c = np.array([critical_count(n, t) for t in tails]) if s else np.zeros(0, int)
    k_nan = np.isnan(sorted_w).sum(1)
    n_fin = total - k_nan
    lo_i = np.floor(c - 0.5 * k_nan).astype(int) + 1  # 1-based order statistic
    hi_i = n_fin + 1 - lo_i
    rows = np.arange(s)
    valid = (lo_i >= 1) & (lo_i <= hi_i) & (hi_i <= n_fin)
    lo = np.where(valid, sorted_w[rows, np.clip(lo_i - 1, 0, max(total - 1, 0))], -np.inf)
    hi = np.where(valid, sorted_w[rows, np.clip(hi_i - 1, 0, max(total - 1, 0))], np.inf)
    return lo, hi


@dataclass(frozen=True)
class RankTest:
    """The signed-rank rule's statistics, one per row of the differences (arrays [S]):
    - `estimate`: Hodges-Lehmann shift (median of the Walsh averages);
    - `p`: two-sided exact p of H0 "shift = 0";
    - `p_greater` / `p_less`: one-sided p of H0 "shift <= -rope" / "shift >= +rope" (the two
      one-sided tests of TOST); `p_tost` = their max (equivalence within +-rope when small);
    - `low`, `high`: the interval at `tail` per side (inversion of the same test);
    - on the informative pairs (`rules.ties.informative_rank_test`): `n_informative` and
      `tied_share` (ties / pairs)."""

    estimate: np.ndarray
    p: np.ndarray
    p_greater: np.ndarray
    p_less: np.ndarray
    p_tost: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n_informative: np.ndarray | None = None
    tied_share: np.ndarray | None = None


def rank_test(d: np.ndarray, *, rope: float = 0.0, tail: np.ndarray | float = 0.025) -> RankTest:
    """The signed-rank rule on each row of d [S, n] (n >= 1; every row the same n, no NaN): the
    `RankTest` of each row, its interval at `tail` per side."""
    d = np.atleast_2d(np.asarray(d, float))
    s, n = d.shape
    if n == 0:
        nan = np.full(s, np.nan)
        return RankTest(estimate=nan, p=nan, p_greater=nan, p_less=nan, p_tost=nan, low=nan, high=nan)
    cdf = signed_rank_cdf(n)
    w = walsh_averages(d)
    sw = np.sort(w, axis=1)
    with np.errstate(invalid="ignore"):
        est = np.nanmedian(np.where(np.isnan(sw), np.nan, sw), axis=1) if sw.size else np.full(s, np.nan)
    zero = np.zeros(s)
    w0 = _count_above(w, zero)
    p = np.minimum(1.0, 2.0 * np.minimum(_cdf_at(cdf, w0), _sf_at(cdf, w0)))
    p_greater = _sf_at(cdf, _count_above(w, zero - rope))  # large count above -rope: shift > -rope
    p_less = _cdf_at(cdf, _count_above(w, zero + rope))  # small count above +rope: shift < +rope
    lo, hi = walsh_interval(sw, n, tail)
    return RankTest(estimate=est, p=p, p_greater=p_greater, p_less=p_less, p_tost=np.maximum(p_greater, p_less),
                    low=lo, high=hi)


def worst_outcome_difference(hi: np.ndarray, lo: np.ndarray, hi_div: np.ndarray, lo_div: np.ndarray) -> np.ndarray:
    """hi - lo per pair with divergence as the worst outcome: -inf when only the hi side
    diverged, +inf when only the lo side did, a tie (0) when both did (the rule of the module
    docstring; the search objective `verdict_gain` and the verdicts use this one function)."""
    hi, lo = np.asarray(hi, float), np.asarray(lo, float)
    hi_div, lo_div = np.asarray(hi_div, bool), np.asarray(lo_div, bool)
    with np.errstate(invalid="ignore"):
        d = hi - lo
    return np.where(hi_div & lo_div, 0.0, np.where(hi_div, -np.inf, np.where(lo_div, np.inf, d)))


def hodges_lehmann(d: np.ndarray) -> float:
    """The estimand of the verdicts: the Hodges-Lehmann pseudo-median of per-seed differences
    (median of the Walsh averages; +-inf allowed, a +inf/-inf average a tie); NaN for none."""
    d = np.asarray(d, float).ravel()
    return float(rank_test(d[None, :]).estimate[0]) if d.size else math.nan


def _holm_steps(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The one Holm step-down, per row of p [S, m] (NaN entries left out of their row's family):
    (order, sorted p, the step's multiplier m_row - j for sorted position j). NaN sorts last, so
    each row's family is its first m_row sorted entries; the multiplier is <= 0 past them."""
    order = np.argsort(p, axis=1, kind="stable")
    ps = np.take_along_axis(p, order, 1)
    family = (~np.isnan(p)).sum(1, keepdims=True)
    return order, ps, family - np.arange(p.shape[1])[None, :]


def _unsort(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    out = np.empty_like(values)
    np.put_along_axis(out, order, values, 1)
    return out


def holm_batch(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p along the last axis of p [S, m], vectorised over the rows (the calibration's
    thousands of simulated families; a statsmodels call per row would dominate its run time).
    tests/test_libraries.py checks it against statsmodels' `multipletests(method="holm")`. NaN
    entries are left out of their row's family (and stay NaN)."""
    p = np.asarray(p, float)
    order, ps, steps = _holm_steps(p)
    adj = np.minimum(np.maximum.accumulate(ps * steps, axis=1), 1.0)  # NaN past the family: sorted last
    return _unsort(adj, order)


def holm(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values along the last axis of p of any shape (a 1-D p is one family): `holm_batch`."""
    p = np.asarray(p, float)
    if not p.size:
        return p.copy()
    return holm_batch(p.reshape(-1, p.shape[-1]) if p.ndim else p.reshape(1, 1)).reshape(p.shape)


def holm_levels(p: np.ndarray, alpha: float) -> np.ndarray:
    """Per-test two-sided level whose interval agrees with Holm's decision at family level alpha,
    along the last axis of p (any shape), from the step-down of `holm_batch`.

    Sorted by p, step j (0-based) of m tests uses alpha / (m - j) while every earlier step
    rejected (the first step that fails too: its p exceeds its level); after a failed step the
    rest use alpha / m (their p exceed it, so their intervals, like their Holm decisions,
    cannot exclude 0). NaN entries stay NaN."""
    p = np.asarray(p, float)
    if not p.size:
        return p.copy()
    flat = p.reshape(-1, p.shape[-1]) if p.ndim else p.reshape(1, 1)
    order, ps, steps = _holm_steps(flat)
    with np.errstate(divide="ignore", invalid="ignore"):  # a row of NaN only: no family
        step_level, first_level = alpha / steps, alpha / steps[:, :1]
    failed = np.cumsum(ps > step_level, axis=1)  # NaN entries sort last: they never count
    failed_before = np.concatenate([np.zeros((flat.shape[0], 1), int), failed[:, :-1]], 1) > 0
    levels = np.where(failed_before, first_level, step_level)
    levels = np.where(np.isnan(ps), np.nan, levels)
    return _unsort(levels, order).reshape(p.shape)


ARE_WILCOXON = math.sqrt(math.pi / 3.0)
"""sd inflation of the signed-rank test against the t-test under normal data (ARE = 3/pi)."""


_HERMITE = np.polynomial.hermite_e.hermegauss(40)
"""Gauss-Hermite nodes and weights (probabilists') for expectations over a standard normal."""


def _rank_power(shift: float, n: int, alpha: float, p_div: float) -> float:
    """Large-sample power of the two-sided signed-rank test at level `alpha` for n units whose
    difference is `shift` + N(0, 1) when neither side diverged, and, each side diverging with
    probability `p_div` independently, -inf (the wired side), +inf (the measured side) or a tie
    (both). The Walsh-average count is a U-statistic: its mean and variance under that mixture
    (Hoeffding: the pair kernel's variance and its conditional variance given one unit) against
    the null's mean and spread."""
    r, a, c = (1 - p_div) ** 2, p_div * (1 - p_div), p_div**2  # normal; -inf (= +inf rate); tie
    x, w = _HERMITE
    w = w / w.sum()

    def q(v: np.ndarray) -> np.ndarray:  # P(v + d_j > 0) for a finite v, a tie half
        return r * sps.norm.cdf(v + shift) + a + c * np.where(v > 0, 1.0, np.where(v == 0, 0.5, 0.0))

    q_normal = q(shift + x)  # the unit is normal
    q_plus, q_minus, q_tie = r + a + c + 0.5 * a, 0.5 * a, float(q(np.zeros(1))[0])
    p1 = r * sps.norm.cdf(shift) + a + 0.5 * c  # P(d_i > 0)
    p2 = r * float(w @ q_normal) + a * q_plus + a * q_minus + c * q_tie  # P(d_i + d_j > 0)
    p3 = r * float(w @ q_normal**2) + a * q_plus**2 + a * q_minus**2 + c * q_tie**2
    pairs = n * (n - 1) / 2
    mean = n * p1 + pairs * p2
    var = pairs * (2 * (n - 2) * max(p3 - p2 * p2, 0.0) + p2 * (1 - p2)) + n * p1 * (1 - p1)
    null_mean, null_sd = n * (n + 1) / 4, math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    z = sps.norm.ppf(1 - alpha / 2)
    return float(sps.norm.cdf((mean - null_mean - z * null_sd) / math.sqrt(max(var, 1e-300))))


def _rank_shift(n: int, alpha: float, power: float, p_div: float) -> float:
    """The shift (in sd units) at which `_rank_power` reaches `power` (bisection; +inf if never)."""
    lo, hi = 0.0, 1.0
    while _rank_power(hi, n, alpha, p_div) < power:
        hi *= 2
        if hi > 1e6:
            return math.inf
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _rank_power(mid, n, alpha, p_div) < power else (lo, mid)
    return hi


def min_detectable_effect(sd: float, n: int, alpha: float, power: float, p_div: float = 0.0) -> float:
    """Shift the signed-rank test detects with probability `power` at two-sided level `alpha`
    with n seeds whose paired differences have standard deviation `sd` (of the pairs where
    neither side diverged): the t-test's (t quantiles with n - 1 degrees of freedom) times
    sqrt(pi/3) for the rank test's efficiency under normal data; +inf when n seeds cannot reach
    `alpha` at all. Divergence (each side of a pair diverging with probability `p_div`, scored as
    the worst outcome) costs power: the shift is scaled by the ratio of the large-sample rank-test
    shifts with and without it (`_rank_power`). Checked against simulation by
    tests/test_calibration.py and tests/test_confirm.py."""
    if n < 2 or not np.isfinite(sd):
        return math.nan
    if smallest_p(n) > alpha:  # even a unanimous sign cannot reject: nothing is detectable
        return math.inf
    z = sps.t.ppf(1 - alpha / 2, n - 1) + sps.t.ppf(power, n - 1)
    mde = float(z * sd * ARE_WILCOXON / math.sqrt(n))
    if p_div > 0:
        mde *= _rank_shift(n, alpha, power, p_div) / _rank_shift(n, alpha, power, 0.0)
    return mde


def smallest_p(n: int) -> float:
    """The smallest two-sided p the exact test can give with n seeds (all signs equal):
    2 P(W = 0) = 2 / 2^n, in closed form (no table of n(n+1)/2 entries)."""
    return float(min(1.0, 2.0 ** (1 - n))) if n >= 1 else math.nan
