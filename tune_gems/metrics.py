"""Trading metrics and the names of everything a run reports.

The metric names are a contract (DESIGN.md "Reported metric names"): Tune results,
history.parquet, members.parquet and the HEALTH_DIAG line all use them, and the analysis reads
them back without importing the trainer.

Every metric takes per-step net returns. A 1-D input gives a float; a 2-D [P,T] tensor or array
gives one value per row (per member), never mixing rows.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

GEM_METRICS = ("g6_branch_indep", "g10_temporal", "g12_predictive")
GEM_KEYS = {"g6": "g6_branch_indep", "g10": "g10_temporal", "g12": "g12_predictive"}
GEM_REL_METRICS = tuple(f"{g}_rel" for g in GEM_METRICS)

EPOCH_METRICS = (
    "epoch",
    "env_steps",
    "updates",
    "loss",
    "q_mean",
    "grad_norm",
    "noisy_sigma",
    "val_sharpe_mean",
    "val_sharpe_std",
    "val_sharpe_min",
    "val_sharpe_max",
    "test_sharpe_mean",
    "test_sharpe_std",
    *GEM_METRICS,
    *GEM_REL_METRICS,
    "diverged",
    "sps",
)
"""One row of history.parquet / one Tune result, in this order."""

MEMBER_METRICS = (
    "val_sharpe",
    "test_sharpe",
    "loss",
    "q_mean",
    "grad_norm",
    *GEM_METRICS,
    *GEM_REL_METRICS,
    "diverged",
)
"""Per-member values of one epoch (members.parquet has trial_id, epoch, member, seed + these)."""


def _is_tensor(x: Any) -> bool:
    """A torch tensor, without importing torch (the analysis reads metrics without it)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _as_2d(returns: Any) -> tuple[np.ndarray, bool]:
    if _is_tensor(returns):
        arr = returns.detach().double().cpu().numpy()
    else:
        arr = np.asarray(returns, dtype=np.float64)
    if arr.ndim == 1:
        return arr[None, :], True
    if arr.ndim == 2:
        return arr, False
    raise ValueError(f"returns must be 1-D or 2-D [P,T], got shape {arr.shape}")


def _out(values: np.ndarray, one: bool, like: Any):
    if one:
        return float(values[0])
    if _is_tensor(like):
        import torch

        return torch.as_tensor(values, dtype=torch.float64)
    return values


def sharpe(returns: Any, periods_per_year: float = 252) -> Any:
    """mean(r) / std(r, ddof=1) * sqrt(periods_per_year); 0.0 where std is 0 or T < 2."""
    arr, one = _as_2d(returns)
    out = np.zeros(arr.shape[0])
    if arr.shape[1] >= 2:
        mean = arr.mean(axis=1)
        std = arr.std(axis=1, ddof=1)
        # constant rows: the computed std is rounding noise (~1e-18), not variance
        ok = (std > 0) & (np.ptp(arr, axis=1) > 0)
        out[ok] = mean[ok] / std[ok] * math.sqrt(periods_per_year)
    return _out(out, one, returns)


def sortino(returns: Any, periods_per_year: float = 252) -> Any:
    """mean(r) / downside deviation * sqrt(periods_per_year).

    Downside deviation = sqrt(mean(min(r, 0)^2)) over all periods (target return 0); 0.0 when it
    is 0.
    """
    arr, one = _as_2d(returns)
    out = np.zeros(arr.shape[0])
    if arr.shape[1] >= 1:
        mean = arr.mean(axis=1)
        dd = np.sqrt(np.mean(np.minimum(arr, 0.0) ** 2, axis=1))
        ok = dd > 0
        out[ok] = mean[ok] / dd[ok] * math.sqrt(periods_per_year)
    return _out(out, one, returns)


def max_drawdown(returns: Any) -> Any:
    """Largest peak-to-trough fall of the compounded equity curve, as a positive fraction.

    The curve starts at 1 before the first return, so a first-step loss counts.
    """
    arr, one = _as_2d(returns)
    equity = np.cumprod(1.0 + arr, axis=1)
    equity = np.concatenate([np.ones((arr.shape[0], 1)), equity], axis=1)
    peak = np.maximum.accumulate(equity, axis=1)
    dd = 1.0 - equity / peak
    return _out(dd.max(axis=1), one, returns)


def total_return(returns: Any) -> Any:
    """Compounded return over the period: prod(1 + r) - 1."""
    arr, one = _as_2d(returns)
    return _out(np.prod(1.0 + arr, axis=1) - 1.0, one, returns)


def turnover(positions: Any, initial_position: float = 0.0) -> Any:
    """Mean absolute position change per step, counting the change from `initial_position`."""
    arr, one = _as_2d(positions)
    prev = np.concatenate([np.full((arr.shape[0], 1), initial_position), arr[:, :-1]], axis=1)
    if arr.shape[1] == 0:
        return _out(np.zeros(arr.shape[0]), one, positions)
    return _out(np.abs(arr - prev).mean(axis=1), one, positions)
