"""Evaluation statistics of a greedy policy over a segment and the baselines they are judged
against, as graph-capturable tensor code (docs/evaluation.md): beside the Sharpe, what it is made of
(beta, alpha Sharpe, turnover, cost sensitivity), since exposure earns a Sharpe as much as skill."""

from __future__ import annotations

import math
from typing import Any, Mapping, Protocol, Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from tune_gems.stats.metrics import EVAL_STATS  # noqa: E402 - the column names have one home

__all__ = ["EVAL_STATS"]  # re-exported: names of the per-member statistics, in column order

COST_MULTIPLES = {"sharpe_cost0": 0.0, "sharpe_cost1": 1.0, "sharpe_cost2": 2.0}
"""The cost-sensitivity columns: Sharpe at these multiples of the configured cost."""

BPS_PER_UNIT = 1e4

RESIDUAL_RTOL_EPS = 1000.0
"""A beta residual under this many epsilons of the net return's std is rounding noise: alpha Sharpe 0."""

BASELINES = ("flat", "buy_and_hold", "momentum")
"""The baseline strategies, in row order of `baseline_stats`."""

DEFAULT_MOMENTUM_SPAN = 20.0
"""EWMA span (steps) of the momentum baseline, pandas' convention; about a month of daily data."""


class _Range(Protocol):
    lo: int
    hi: int


def _broadcast_asset(asset_returns: Tensor, P: int, T: int, dtype: torch.dtype) -> Tensor:
    a = asset_returns.to(dtype)
    if a.ndim == 1:
        if a.shape[0] != T:
            raise ValueError(f"asset_returns has {a.shape[0]} steps, positions have {T}")
        return a.unsqueeze(0).expand(P, T)
    if a.ndim == 2 and a.shape == (P, T):
        return a
    raise ValueError(f"asset_returns must be [T] or [P,T] = [{P},{T}], got {tuple(a.shape)}")


def position_changes(positions: Tensor, initial_position: float = 0.0) -> Tensor:
    first = torch.full_like(positions[:, :1], initial_position)
    prev = torch.cat([first, positions[:, :-1]], dim=1)
    return (positions - prev).abs()


def net_returns(positions: Tensor, asset_returns: Tensor, cost: float, initial_position: float = 0.0,
        dtype: torch.dtype = torch.float64) -> Tensor:
    """Per-step net returns [P,T] at cost `cost`: the env's reward before reward_scale."""
    pos = _check_positions(positions).to(dtype)
    P, T = pos.shape
    a = _broadcast_asset(asset_returns, P, T, dtype)
    return pos * a - cost * position_changes(pos, initial_position)


def _check_positions(positions: Tensor) -> Tensor:
    if positions.ndim != 2 or positions.shape[1] < 1:
        raise ValueError(f"positions must be 2-D [P,T] with T >= 1, got shape {tuple(positions.shape)}")
    return positions


def _range(x: Tensor) -> Tensor:
    return x.amax(dim=1) - x.amin(dim=1)


def _sharpe_rows(x: Tensor, periods_per_year: float, nonconstant: Tensor | None = None) -> Tensor:
    """Row Sharpe ratios as `metrics.sharpe` (0.0 for constant rows or T < 2), `nonconstant` [P] and-ed in."""
    P, T = x.shape
    if T < 2:  # shape, not data: a fixed decision at trace time
        return torch.zeros(P, dtype=x.dtype, device=x.device)
    mean = x.mean(dim=1)
    std = x.std(dim=1, correction=1)
    ok = (std > 0) & (_range(x) > 0)
    if nonconstant is not None:
        ok = ok & nonconstant
    safe = torch.where(ok, std, torch.ones_like(std))
    return torch.where(ok, mean / safe, torch.zeros_like(mean)) * math.sqrt(periods_per_year)


def _beta(net: Tensor, a: Tensor) -> Tensor:
    """OLS slope (with intercept) of each row of `net` on `a`'s; 0.0 where the asset return is constant."""
    a_c = a - a.mean(dim=1, keepdim=True)
    n_c = net - net.mean(dim=1, keepdim=True)
    var = (a_c * a_c).sum(dim=1)
    cov = (n_c * a_c).sum(dim=1)
    ok = (var > 0) & (_range(a) > 0)
    safe = torch.where(ok, var, torch.ones_like(var))
    return torch.where(ok, cov / safe, torch.zeros_like(cov))


def _max_drawdown(net: Tensor) -> Tensor:
    """Largest fall of prod(1 + r) from 1, as a positive fraction (`metrics.max_drawdown`)."""
    equity = torch.cumprod(1.0 + net, dim=1)
    equity = torch.cat([torch.ones_like(equity[:, :1]), equity], dim=1)
    peak = torch.cummax(equity, dim=1).values
    return (1.0 - equity / peak).amax(dim=1)


def evaluation_stats(positions: Tensor, asset_returns: Tensor, cost: float, periods_per_year: float, *,
        initial_position: float = 0.0, dtype: torch.dtype = torch.float64) -> dict[str, Tensor]:
    """{name: Tensor[P]} for EVAL_STATS from positions [P,T] and asset_returns [T] or [P,T];
    breakeven_cost_bps is signed, +inf without turnover for a positive gross mean, else NaN."""
    pos = _check_positions(positions).to(dtype)
    P, T = pos.shape
    a = _broadcast_asset(asset_returns, P, T, dtype)
    dpos = position_changes(pos, initial_position)
    gross = pos * a
    out: dict[str, Tensor] = {}
    for name, mult in COST_MULTIPLES.items():
        out[name] = _sharpe_rows(gross - (mult * cost) * dpos, periods_per_year)
    net = gross - cost * dpos
    beta = _beta(net, a)
    resid = net - beta.unsqueeze(1) * a
    if T >= 2:
        eps = torch.finfo(dtype).eps
        real = resid.std(dim=1, correction=1) > RESIDUAL_RTOL_EPS * eps * net.std(dim=1, correction=1)
    else:
        real = None
    turnover = dpos.mean(dim=1)
    gross_mean = gross.mean(dim=1)
    moved = turnover > 0
    safe_turnover = torch.where(moved, turnover, torch.ones_like(turnover))
    idle = torch.where(gross_mean > 0, torch.full_like(gross_mean, math.inf), torch.full_like(gross_mean, math.nan))
    out.update(sharpe=out["sharpe_cost1"], beta=beta, alpha_sharpe=_sharpe_rows(resid, periods_per_year, real),
        turnover=turnover, max_drawdown=_max_drawdown(net),
        breakeven_cost_bps=torch.where(moved, BPS_PER_UNIT * gross_mean / safe_turnover, idle))
    return {k: out[k] for k in EVAL_STATS}


def read_back(stats: Mapping[str, Tensor]) -> dict[str, np.ndarray]:
    names = list(stats)
    stacked = torch.stack([stats[k].to(torch.float64) for k in names]).cpu().numpy()
    return {k: stacked[i] for i, k in enumerate(names)}


def segment_asset_returns(market: Any, segment: str, path_of_member: Any = None, fold_of_member: Any = None) -> Tensor:
    """The asset's returns at a segment's decisions: [T] (a view) for one path and fold, else [P, T]."""
    r = market.ranges[segment]
    if getattr(market, "n_folds", 1) > 1 and (path_of_member is not None or fold_of_member is not None):
        population = len(path_of_member if path_of_member is not None else fold_of_member)
        rows = market.member_rows(population, path_of_member, fold_of_member)
        lo, T = market.member_windows(segment, population, fold_of_member)
        steps = torch.arange(T, dtype=torch.int64, device=lo.device)
        return market.returns_next[rows.unsqueeze(1), lo.unsqueeze(1) + steps]
    if path_of_member is None or getattr(market, "n_rows", 1) == 1:
        return market.ret_next[..., r.lo : r.hi]
    index = torch.as_tensor(path_of_member, device=market.returns_next.device)
    return market.returns_next[:, r.lo : r.hi][index]


def _as_numpy(x: Any) -> np.ndarray:
    if isinstance(x, Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def momentum_signal(ret_next: Any, span: float = DEFAULT_MOMENTUM_SPAN) -> np.ndarray:
    """EWMA (pandas `ewm(span, adjust=False)`) of the returns known at each decision (0.0 at t = 0).

    The recursion of `scipy.signal.lfilter([alpha], [1, -(1 - alpha)], known, zi=(1 - alpha) * known[0])`,
    written out with its operations in its order (the same bits): importing scipy.signal costs a
    trial process about a second of its start."""
    if not span >= 1.0:
        raise ValueError(f"momentum span must be >= 1 step, got {span}")
    x = _as_numpy(ret_next)
    alpha = 2.0 / (span + 1.0)
    out = np.zeros_like(x)
    if x.shape[-1] < 2:
        return out
    known = x[..., :-1]  # known[..., t-1] = the return realised at t
    feedback = -(1.0 - alpha)
    state = (1.0 - alpha) * known[..., 0]
    for t in range(known.shape[-1]):
        out[..., t + 1] = state + alpha * known[..., t]
        state = known[..., t] * 0.0 - out[..., t + 1] * feedback
    return out


def baseline_positions(ret_next: Any, segment: _Range | tuple[int, int], momentum_span: float = DEFAULT_MOMENTUM_SPAN) -> dict[str, np.ndarray]:
    """Positions [..., T] over [lo, hi): flat 0, buy_and_hold +1, momentum `momentum_signal`'s sign."""
    lo, hi = (segment.lo, segment.hi) if hasattr(segment, "lo") else segment
    x = _as_numpy(ret_next)
    if not 0 <= lo < hi <= x.shape[-1]:
        raise ValueError(f"segment [{lo}, {hi}) is not inside a series of {x.shape[-1]} steps")
    shape = x[..., lo:hi].shape
    return {"flat": np.zeros(shape), "buy_and_hold": np.ones(shape),
        "momentum": np.sign(momentum_signal(x, momentum_span)[..., lo:hi])}


def baseline_stats(ret_next: Any, segments: Mapping[str, _Range | tuple[int, int]], cost: float,
        periods_per_year: float, *, momentum_span: float = DEFAULT_MOMENTUM_SPAN,
        device: torch.device | str | None = None) -> pd.DataFrame:
    """EVAL_STATS of every baseline on every segment: a row per segment, baseline and path."""
    if device is None:
        device = ret_next.device if isinstance(ret_next, Tensor) else "cpu"
    x = _as_numpy(ret_next)
    if x.ndim not in (1, 2):
        raise ValueError(f"ret_next must be [N] or [S,N], got shape {x.shape}")
    paths = x.reshape(-1, x.shape[-1])
    rows: list[dict[str, Any]] = []
    for seg, rng in segments.items():
        lo, hi = (rng.lo, rng.hi) if hasattr(rng, "lo") else rng
        pos = baseline_positions(paths, (lo, hi), momentum_span)
        asset = torch.as_tensor(paths[:, lo:hi], device=device)
        for name in BASELINES:
            stats = read_back(evaluation_stats(torch.as_tensor(pos[name], device=device), asset, cost, periods_per_year))
            for s in range(paths.shape[0]):
                row = {"segment": seg, "baseline": name, "path": s, "momentum_span": float(momentum_span)}
                row.update({k: float(v[s]) for k, v in stats.items()})
                rows.append(row)
    return pd.DataFrame(rows, columns=["segment", "baseline", "path", "momentum_span", *EVAL_STATS])


def member_rows(stats: Mapping[str, np.ndarray], segment: str, members: Sequence[int] | None = None) -> list[dict[str, float]]:
    P = len(next(iter(stats.values())))
    idx = range(P) if members is None else members
    return [{f"{segment}_{k}": float(v[p]) for k, v in stats.items()} for p in idx]
