"""Market-noise intervals for arm differences on one real price history (stationary bootstrap; numpy and scipy only). On
one history every seed sees the same market, so the seed interval says nothing about its luck. Here the seeds stay fixed
and the validation period's per-step returns are redrawn in blocks (Politis & Romano 1994), one index sequence for every
series so the pairing survives; the percentile interval of the resampled Sharpe difference is the market-noise interval
(Ledoit & Wolf 2008). Mean block: Politis & White (2004) with Patton, Politis & White's (2009) correction. Calibration
(`calibrate`, `simulate_arms`; docs/evaluation.md, tests/test_market_noise.py): 5-7% false positives at 95% under a
volatility-clustered null."""


from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from scipy.signal import lfilter

from tune_gems.analysis import defaults
from tune_gems.stats.metrics import sharpe as _metrics_sharpe

Metric = Literal["sharpe", "alpha_sharpe"]
Pooling = Literal["per_pair", "pooled"]

RESIDUAL_RTOL_EPS = 1000.0
"""Same rule as tune_gems.market.evaluation.RESIDUAL_RTOL_EPS (kept here so the analysis does not
import torch): a beta residual whose std is below this many float64 epsilons of the net
return's std is rounding noise, and its alpha Sharpe is 0.0."""

PW_C = 2.0
"""Politis (2003) significance multiplier: an autocorrelation is significant above
PW_C * sqrt(log10(T) / T)."""

PW_MIN_KN = 5
"""K_N: the number of consecutive insignificant autocorrelations that ends the search for the
last significant lag (max(5, sqrt(log10 T)), Politis & White 2004)."""

BOOT_ELEMENTS_PER_CHUNK = 1_000_000
"""Resamples are drawn in chunks of at most this many index values (bounds memory; the chunk
size depends only on T, so the same inputs and seed give the same interval)."""


# --- statistics of [..., T] arrays (numpy twins of tune_gems.market.evaluation) ---------------------------


def sharpe_rows(returns: np.ndarray, periods_per_year: float = 252.0) -> np.ndarray:
    """Sharpe of each row of an [..., T] array, with tune_gems.stats.metrics.sharpe's convention."""
    r = np.asarray(returns, dtype=np.float64)
    flat = r.reshape(-1, r.shape[-1])
    return np.asarray(_metrics_sharpe(flat, periods_per_year)).reshape(r.shape[:-1])


def alpha_sharpe_rows(returns: np.ndarray, asset: np.ndarray, periods_per_year: float = 252.0) -> np.ndarray:
    """Sharpe of r - beta * asset per row, beta the in-sample OLS slope
    (tune_gems.market.evaluation's `alpha_sharpe`)."""
    r = np.asarray(returns, dtype=np.float64)
    a = np.broadcast_to(np.asarray(asset, dtype=np.float64), r.shape)
    T = r.shape[-1]
    if T < 2:
        return np.zeros(r.shape[:-1])
    a_c = a - a.mean(axis=-1, keepdims=True)
    r_c = r - r.mean(axis=-1, keepdims=True)
    var = np.sum(a_c * a_c, axis=-1)
    ok = (var > 0) & (np.ptp(a, axis=-1) > 0)
    beta = np.where(ok, np.sum(r_c * a_c, axis=-1) / np.where(ok, var, 1.0), 0.0)
    resid = r - beta[..., None] * a
    out = sharpe_rows(resid, periods_per_year)
    real = resid.std(axis=-1, ddof=1) > RESIDUAL_RTOL_EPS * np.finfo(np.float64).eps * r.std(axis=-1, ddof=1)
    return np.where(real, out, 0.0)


# --- block length -------------------------------------------------------------------------------


def optimal_mean_block(x: np.ndarray) -> float:
    """Politis-White (2004) optimal mean block length of the stationary bootstrap for a 1-D
    series, with the Patton-Politis-White (2009) correction D_SB = 2 g(0)^2.

    1. m_hat: the smallest lag m such that the K_N autocorrelations at lags m+1..m+K_N are all
       below c * sqrt(log10 T / T) (c = PW_C); if no such run exists, the largest significant lag.
    2. M = min(2 m_hat, m_max), m_max = ceil(sqrt(T)) + K_N; flat-top window lambda(k / M).
    3. G = sum lambda(k/M) |k| R(k), g = sum lambda(k/M) R(k) over |k| <= M (R: autocovariance).
    4. b = (2 G^2 / D_SB)^(1/3) T^(1/3) = (G / g)^(2/3) T^(1/3), clipped to [1, b_max],
       b_max = ceil(min(3 sqrt(T), T / 3)).
    A constant series or one with no significant autocorrelation gives 1 (the iid bootstrap).
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    T = x.size
    if T < 4:
        return 1.0
    e = x - x.mean()
    r0 = float(np.sum(e * e)) / T
    if not r0 > 0:
        return 1.0
    kn = max(PW_MIN_KN, int(math.ceil(math.sqrt(math.log10(T)))))
    m_max = min(int(math.ceil(math.sqrt(T))) + kn, T - 1)
    acov = np.array([float(np.sum(e[: T - k] * e[k:])) / T for k in range(m_max + 1)])
    rho = np.abs(acov[1:] / r0)  # rho[k-1] = |autocorrelation at lag k|
    crit = PW_C * math.sqrt(math.log10(T) / T)
    insignificant = rho < crit
    m_hat = None
    for m in range(0, m_max - kn + 1):
        if insignificant[m : m + kn].all():  # lags m+1..m+kn
            m_hat = m
            break
    if m_hat is None:
        significant = np.flatnonzero(~insignificant)
        m_hat = int(significant[-1]) + 1 if significant.size else 0
    M = min(2 * m_hat, m_max)
    if M == 0:
        return 1.0
    k = np.arange(-M, M + 1)
    ax = np.abs(k / M)  # Politis & Romano (1995) trapezoidal flat-top lag window
    lam = np.where(ax <= 0.5, 1.0, np.where(ax <= 1.0, 2.0 * (1.0 - ax), 0.0))
    R = acov[np.abs(k)]
    g = float(np.sum(lam * R))
    G = float(np.sum(lam * np.abs(k) * R))
    b_max = math.ceil(min(3.0 * math.sqrt(T), T / 3.0))
    if g <= 0:
        return float(b_max)  # an estimated long-run variance <= 0: strong negative dependence
    b = (2.0 * G * G / (2.0 * g * g)) ** (1.0 / 3.0) * T ** (1.0 / 3.0)
    return float(min(max(b, 1.0), b_max))


# --- the stationary bootstrap ---------------------------------------------------------------------


def stationary_bootstrap_indices(n_steps: int, mean_block: float, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """[n_boot, n_steps] indices of stationary-bootstrap resamples: geometric block lengths of mean
    `mean_block`, circular."""
    if not mean_block >= 1.0:
        raise ValueError(f"mean_block must be >= 1, got {mean_block}")
    if n_steps < 1 or n_boot < 1:
        raise ValueError(f"need n_steps >= 1 and n_boot >= 1, got {n_steps}, {n_boot}")
    starts = rng.integers(0, n_steps, size=(n_boot, n_steps))
    new_block = rng.random((n_boot, n_steps)) < 1.0 / mean_block
    new_block[:, 0] = True
    t = np.arange(n_steps)
    block_start = np.maximum.accumulate(np.where(new_block, t, 0), axis=1)  # step where the block began
    origin = np.take_along_axis(starts, block_start, axis=1)
    return (origin + (t - block_start)) % n_steps


# --- the interval ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class MarketNoiseInterval:
    """A market-noise interval of metric(A) - metric(B) at `confidence`, its bootstrap p, mean block, T and pairs."""

    metric: str
    pooling: str
    estimate: float
    low: float
    high: float
    p_value: float
    mean_block: float
    n_steps: int
    n_pairs: int
    n_boot: int
    confidence: float


def _as_pairs(x, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 0:
        raise ValueError(f"{name} must have a time axis (last axis), got a scalar")
    return arr.reshape(-1, arr.shape[-1])


def _resample_counts(idx: np.ndarray) -> np.ndarray:
    """[c, T] how often each time step appears in each resample (float64)."""
    c, T = idx.shape
    flat = (np.arange(c)[:, None] * T + idx).ravel()
    return np.bincount(flat, minlength=c * T).reshape(c, T).astype(np.float64)


class _Moments:
    """Moments of resampled series by one product (counts @ series, centred first to keep float64
    cancellation harmless)."""

    def __init__(self, r: np.ndarray, asset: np.ndarray | None):
        self.n_series, self.T = r.shape
        self.mean_r = r.mean(axis=1)
        rc = r - self.mean_r[:, None]
        cols = [rc.T, (rc * rc).T]
        if asset is not None:
            self.mean_a = float(asset.mean())
            ac = asset - self.mean_a
            cols += [(rc * ac).T, ac[:, None], (ac * ac)[:, None]]
        self.columns = np.concatenate(cols, axis=1)  # [T, k]

    def sums(self, counts: np.ndarray) -> dict[str, np.ndarray]:
        # einsum's own loop, not BLAS: deterministic bits whatever the BLAS threading, and no
        # thread spin-up (which dominates these small products on a busy machine)
        s = np.einsum("ct,tk->ck", counts, self.columns)  # [c, k]
        n = self.n_series
        out = {"r": s[:, :n], "rr": s[:, n : 2 * n]}
        if s.shape[1] > 2 * n:
            out.update(ra=s[:, 2 * n : 3 * n], a=s[:, 3 * n : 3 * n + 1], aa=s[:, 3 * n + 1 : 3 * n + 2])
        return out


_TINY = (RESIDUAL_RTOL_EPS * np.finfo(np.float64).eps) ** 2


def _sharpe_from(mean: np.ndarray, var: np.ndarray, scale2: np.ndarray, ppy: float) -> np.ndarray:
    """mean / sqrt(var) * sqrt(ppy); 0.0 where var <= _TINY * scale2 (a constant series)."""
    ok = var > _TINY * scale2
    return np.where(ok, mean / np.sqrt(np.where(ok, var, 1.0)), 0.0) * math.sqrt(ppy)


def _boot_metric(m: _Moments, counts: np.ndarray, metric: Metric, ppy: float) -> np.ndarray:
    """[c, n_series] metric of each series in each resample."""
    T = m.T
    s = m.sums(counts)
    mean_r = m.mean_r[None, :] + s["r"] / T
    var_r = np.maximum(s["rr"] - s["r"] ** 2 / T, 0.0) / (T - 1)
    if metric == "sharpe":
        return _sharpe_from(mean_r, var_r, var_r + mean_r**2, ppy)
    mean_a = m.mean_a + s["a"] / T
    var_a = np.maximum(s["aa"] - s["a"] ** 2 / T, 0.0) / (T - 1)
    cov = (s["ra"] - s["r"] * s["a"] / T) / (T - 1)
    ok_a = var_a > _TINY * (var_a + mean_a**2)
    beta = np.where(ok_a, cov / np.where(ok_a, var_a, 1.0), 0.0)
    mean_e = mean_r - beta * mean_a
    var_e = np.maximum(var_r - 2.0 * beta * cov + beta * beta * var_a, 0.0)
    return _sharpe_from(mean_e, var_e, var_r, ppy)


@dataclass(frozen=True)
class Bootstrap:
    """The resampling of a market-noise interval: `n_boot` resamples, the interval's `confidence`,
    the generator's `seed`, the `mean_block` length (None: `optimal_mean_block`)."""

    n_boot: int = defaults.N_BOOT
    confidence: float = defaults.CONFIDENCE
    seed: int = defaults.SEED
    mean_block: float | None = None


def market_noise_interval(returns_a, returns_b, *, asset_returns=None, metric: Metric = "sharpe",
                          pooling: Pooling = "per_pair", periods_per_year: float = 252.0,
                          boot: Bootstrap = Bootstrap()) -> MarketNoiseInterval:
    """Market-noise interval of metric(arm A) - metric(arm B) over one history's segment.

    returns_a, returns_b: per-step net returns [..., T], paired elementwise; asset_returns [T] (alpha
    Sharpe re-estimates beta in every resample); pooling "per_pair" or "pooled". Deterministic.
    """
    n_boot, confidence, mean_block = boot.n_boot, boot.confidence, boot.mean_block
    a = _as_pairs(returns_a, "returns_a")
    b = _as_pairs(returns_b, "returns_b")
    if a.shape != b.shape:
        raise ValueError(f"returns_a {a.shape} and returns_b {b.shape} must have the same shape")
    if metric not in ("sharpe", "alpha_sharpe"):
        raise ValueError(f"metric must be 'sharpe' or 'alpha_sharpe', got {metric!r}")
    if pooling not in ("per_pair", "pooled"):
        raise ValueError(f"pooling must be 'per_pair' or 'pooled', got {pooling!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    n_pairs, T = a.shape
    asset = None
    if metric == "alpha_sharpe":
        if asset_returns is None:
            raise ValueError("metric='alpha_sharpe' needs asset_returns")
        asset = np.asarray(asset_returns, dtype=np.float64).ravel()
        if asset.size != T:
            raise ValueError(f"asset_returns has {asset.size} steps, the returns have {T}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and (asset is None or np.all(np.isfinite(asset)))):
        raise ValueError("returns must be finite (drop diverged members before pairing)")
    drivers = [a.mean(axis=0), b.mean(axis=0), (a - b).mean(axis=0)] + ([] if asset is None else [asset])
    if pooling == "pooled":
        a, b = a.mean(axis=0, keepdims=True), b.mean(axis=0, keepdims=True)
    rows = [sharpe_rows(x, periods_per_year) if metric == "sharpe" else alpha_sharpe_rows(x, asset, periods_per_year)
            for x in (a, b)]
    estimate = float(np.mean(rows[0] - rows[1]))  # the statistic on the original series (exact row functions)
    if T < 2:
        return MarketNoiseInterval(metric, pooling, estimate, math.nan, math.nan, math.nan, math.nan, T, n_pairs, 0, confidence)
    if mean_block is None:
        mean_block = max(optimal_mean_block(s) for s in drivers)
    moments_a, moments_b = _Moments(a, asset), _Moments(b, asset)
    rng = np.random.default_rng(boot.seed)
    resampled = np.empty(n_boot)
    chunk = max(1, BOOT_ELEMENTS_PER_CHUNK // T)
    for start in range(0, n_boot, chunk):
        c = min(chunk, n_boot - start)
        counts = _resample_counts(stationary_bootstrap_indices(T, mean_block, c, rng))
        diff = _boot_metric(moments_a, counts, metric, periods_per_year) - _boot_metric(moments_b, counts, metric, periods_per_year)
        resampled[start : start + c] = diff.mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(resampled, [alpha, 1.0 - alpha])
    p = (1.0 + np.sum(np.abs(resampled - estimate) >= abs(estimate))) / (1.0 + n_boot)
    return MarketNoiseInterval(
        metric, pooling, estimate, float(low), float(high), float(p), float(mean_block), T, n_pairs, n_boot, confidence
    )


# --- calibration ------------------------------------------------------------------------------------


def _ar1(rng: np.random.Generator, shape, phi: float) -> np.ndarray:
    """Unit-variance stationary AR(1)(phi) along the last axis."""
    e = rng.standard_normal(shape) * math.sqrt(1.0 - phi * phi)
    e[..., 0] /= math.sqrt(1.0 - phi * phi)  # start in the stationary distribution
    return lfilter([1.0], [1.0, -phi], e, axis=-1)


@dataclass(frozen=True)
class ArmsModel:
    """Two arms at `n_pairs` seeds on one market path: a shared seed part (`rho`), AR(1) noises, a
    true per-step Sharpe `gain`, and with vol_sd > 0 volatility clustering at an unchanged scale."""

    n_pairs: int = 2
    n_steps: int = 250
    gain: float = 0.0
    phi: float = 0.0
    rho: float = 0.6
    beta_a: float = 0.0
    beta_b: float = 0.0
    scale: float = 0.01
    drift: float = 0.03
    asset_drift: float = 0.0004
    vol_phi: float = 0.0
    vol_sd: float = 0.0


def simulate_arms(rng: np.random.Generator, model: ArmsModel = ArmsModel()) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-step net returns of the two arms of `model` [n_pairs, n_steps], and the asset's [n_steps]."""
    n_pairs, n_steps, gain, phi, rho, scale, drift = (model.n_pairs, model.n_steps, model.gain, model.phi, model.rho,
                                                      model.scale, model.drift)
    vol_phi, vol_sd, asset_drift, beta_a, beta_b = model.vol_phi, model.vol_sd, model.asset_drift, model.beta_a, model.beta_b
    vol = np.exp(vol_sd * _ar1(rng, (n_steps,), vol_phi) / 2.0 - vol_sd * vol_sd / 4.0) if vol_sd > 0 else 1.0
    asset = asset_drift + scale * vol * _ar1(rng, (n_steps,), phi)
    common = vol * _ar1(rng, (n_pairs, n_steps), phi)
    own_a, own_b = vol * _ar1(rng, (n_pairs, n_steps), phi), vol * _ar1(rng, (n_pairs, n_steps), phi)
    base = lambda own: drift + math.sqrt(rho) * common + math.sqrt(1.0 - rho) * own  # noqa: E731
    a = scale * (base(own_a) + gain) + beta_a * asset
    b = scale * base(own_b) + beta_b * asset
    return a, b, asset


def calibrate(n_histories: int, model: ArmsModel = ArmsModel(), *, metric: Metric = "sharpe",
              pooling: Pooling = "per_pair", boot: Bootstrap = Bootstrap(n_boot=400)) -> dict[str, float]:
    """Rejection rates of `market_noise_interval` over `n_histories` histories of `simulate_arms`:
    `interval_rate`, `p_rate` and the mean `mean_block`."""
    rng = np.random.default_rng(boot.seed)
    confidence = boot.confidence
    hits = p_hits = 0
    blocks = []
    for i in range(n_histories):
        a, b, asset = simulate_arms(rng, model)
        iv = market_noise_interval(a, b, asset_returns=asset, metric=metric, pooling=pooling,
                                   boot=replace(boot, seed=boot.seed + i))
        hits += (iv.low > 0) or (iv.high < 0)
        p_hits += iv.p_value < 1.0 - confidence
        blocks.append(iv.mean_block)
    return {"interval_rate": hits / n_histories, "p_rate": p_hits / n_histories, "mean_block": float(np.mean(blocks))}
