"""The one rule of the verdicts (docs/analysis.md "The rule"): the exact Wilcoxon signed-rank test
on per-seed paired differences with its Hodges-Lehmann estimate and inverted interval, vectorised
so the calibrations run this very code. Walsh averages equal to theta count half (+inf/-inf tie).
scipy.stats is imported where it is used: every trial imports this module and needs none of it
(half a second of each trial process's start)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

EXACT_MAX_N = 400
"""Exact null distribution up to this many seeds; a continuity-corrected normal beyond."""


@lru_cache(maxsize=64)
def signed_rank_cdf(n: int) -> np.ndarray:
    """P(W <= w) for w = 0..n(n+1)/2, W the Wilcoxon signed-rank statistic of n untied values."""
    total = n * (n + 1) // 2
    if n > EXACT_MAX_N:
        w = np.arange(total + 1)
        mu, sd = total / 2.0, math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0)
        from scipy import stats as sps

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
    idx = np.floor(w + 1e-9).astype(int)
    out = np.where(idx < 0, 0.0, cdf[np.clip(idx, 0, cdf.size - 1)])
    return out


def _sf_at(cdf: np.ndarray, w: np.ndarray) -> np.ndarray:
    idx = np.ceil(w - 1e-9).astype(int) - 1
    below = np.where(idx < 0, 0.0, cdf[np.clip(idx, 0, cdf.size - 1)])
    return 1.0 - below


def walsh_averages(d: np.ndarray) -> np.ndarray:
    """[S, n(n+1)/2] Walsh averages of each row of d [S, n]; NaN where +inf meets -inf."""
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
    """(low, high) [S] the test keeps at `tail` per side, from row-sorted Walsh averages (NaN last)."""
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
    """The rule's statistics, arrays [S]: Hodges-Lehmann `estimate`, two-sided `p`, TOST `p_tost`, the
    interval `low`, `high`, and on informative pairs `n_informative` and `tied_share`."""

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
    """The rule on each row of d [S, n] (every row the same n, no NaN)."""
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
    """hi - lo per pair, divergence the worst outcome (-inf, +inf, or a tie when both diverged)."""
    hi, lo = np.asarray(hi, float), np.asarray(lo, float)
    hi_div, lo_div = np.asarray(hi_div, bool), np.asarray(lo_div, bool)
    with np.errstate(invalid="ignore"):
        d = hi - lo
    return np.where(hi_div & lo_div, 0.0, np.where(hi_div, -np.inf, np.where(lo_div, np.inf, d)))


def hodges_lehmann(d: np.ndarray) -> float:
    """The Hodges-Lehmann pseudo-median of per-seed differences (NaN for none)."""
    d = np.asarray(d, float).ravel()
    return float(rank_test(d[None, :]).estimate[0]) if d.size else math.nan


def _holm_steps(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Holm's step-down per row of p [S, m], NaN out: (order, sorted p, multiplier m_row - j)."""
    order = np.argsort(p, axis=1, kind="stable")
    ps = np.take_along_axis(p, order, 1)
    family = (~np.isnan(p)).sum(1, keepdims=True)
    return order, ps, family - np.arange(p.shape[1])[None, :]


def _unsort(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    out = np.empty_like(values)
    np.put_along_axis(out, order, values, 1)
    return out


def holm_batch(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p along the last axis of p [S, m], NaN out of the family (as statsmodels')."""
    p = np.asarray(p, float)
    order, ps, steps = _holm_steps(p)
    adj = np.minimum(np.maximum.accumulate(ps * steps, axis=1), 1.0)  # NaN past the family: sorted last
    return _unsort(adj, order)


def holm(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p along the last axis of p of any shape (`holm_batch`)."""
    p = np.asarray(p, float)
    if not p.size:
        return p.copy()
    return holm_batch(p.reshape(-1, p.shape[-1]) if p.ndim else p.reshape(1, 1)).reshape(p.shape)


def holm_levels(p: np.ndarray, alpha: float) -> np.ndarray:
    """Per-test level whose interval agrees with Holm at family level alpha: alpha / (m - j) at step
    j while the earlier steps rejected, alpha / m after a failed step."""
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


def _rank_power(shift: float, n: int, alpha: float, p_div: float) -> float:
    """Large-sample power of the test at `alpha` for n units of difference `shift` + N(0, 1), each
    side diverging with probability `p_div`: the Walsh count as a U-statistic."""
    from scipy import stats as sps

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
    """Shift the test detects with probability `power` at `alpha` with n seeds of paired sd `sd`:
    the t-test's x sqrt(pi/3), scaled for divergence at `p_div`; +inf when n cannot reach `alpha`."""
    if n < 2 or not np.isfinite(sd):
        return math.nan
    if smallest_p(n) > alpha:  # even a unanimous sign cannot reject: nothing is detectable
        return math.inf
    from scipy import stats as sps

    z = sps.t.ppf(1 - alpha / 2, n - 1) + sps.t.ppf(power, n - 1)
    mde = float(z * sd * ARE_WILCOXON / math.sqrt(n))
    if p_div > 0:
        mde *= _rank_shift(n, alpha, power, p_div) / _rank_shift(n, alpha, power, 0.0)
    return mde


def smallest_p(n: int) -> float:
    """The smallest two-sided p of n seeds (all signs equal): 2 / 2^n."""
    return float(min(1.0, 2.0 ** (1 - n))) if n >= 1 else math.nan
