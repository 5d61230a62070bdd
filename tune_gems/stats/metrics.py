"""Trading metrics and the names of every column a run reports (docs/design.md "Reported metric
names"). A metric takes per-step net returns: 1-D gives a float, [P,T] one value per row."""

from __future__ import annotations

from tune_gems.contracts.result_files import MEMBER_ID_COLUMNS

import math
from typing import Any

import numpy as np

from tune_gems.gems import registry

_RUN_HEAD = ("epoch", "env_steps", "updates", "loss", "q_mean", "grad_norm", "noisy_sigma")
_SHARPE = ("val_sharpe_mean", "val_sharpe_std", "val_sharpe_min", "val_sharpe_max", "test_sharpe_mean", "test_sharpe_std")
SEGMENTS = ("val", "test")

EVAL_STATS = ("sharpe", "beta", "alpha_sharpe", "turnover", "max_drawdown", "sharpe_cost0", "sharpe_cost1", "sharpe_cost2",
              "breakeven_cost_bps")
"""Per-member statistics of every evaluation (docs/evaluation.md), as `<segment>_<stat>` columns."""

EVAL_HISTORY = tuple(
    f"{seg}_{stat}_mean" for seg in SEGMENTS for stat in EVAL_STATS if stat != "sharpe"
) + tuple(f"{seg}_alpha_sharpe_std" for seg in SEGMENTS) + tuple(f"{seg}_breakeven_cost_bps_median" for seg in SEGMENTS)
"""History aggregates over non-diverged members: means, the alpha Sharpe's spread, breakeven's median."""

OBJECTIVES = ("val_sharpe_mean_lastk", "val_alpha_sharpe_mean_lastk")
"""Search objectives: means over the last min(k, epochs) epochs, k = `trainer.objective_last_k`."""

TIMING = ("train_s", "eval_s")
"""Seconds of the epoch's training iterations (what sps is computed from) and of its evaluation."""

_MEMBER_HEAD = ("val_sharpe", "test_sharpe", *(f"{seg}_{stat}" for seg in SEGMENTS for stat in EVAL_STATS if stat != "sharpe"),
                "loss", "q_mean", "grad_norm")
MEMBER_IDS = MEMBER_ID_COLUMNS


def gem_metrics(plugins: tuple[str, ...] | list[str] = ()) -> tuple[str, ...]:
    return tuple(g.metric for g in registry.run_gems(plugins))


def gem_columns(plugins: tuple[str, ...] | list[str] = ()) -> tuple[str, ...]:
    """Per gem metric M: M, then every M_rel (M / C51 loss), M_null and M_excess (M - M_null)."""
    gems = gem_metrics(plugins)
    return (*gems, *(f"{g}_rel" for g in gems), *(f"{g}_null" for g in gems), *(f"{g}_excess" for g in gems))


ARM_SEPARATOR = "@"
ARM_METRICS = ("val_sharpe_mean", "val_alpha_sharpe_mean")
"""History columns repeated per arm (`<metric>@<arm>`, with each gem metric) in a run of >= 2 arms."""


def arm_metrics(plugins: tuple[str, ...] | list[str] = (), arms: tuple[str, ...] | list[str] = ()) -> tuple[str, ...]:
    if len(arms) < 2:
        return ()
    names = (*ARM_METRICS, *gem_metrics(plugins))
    return tuple(f"{m}{ARM_SEPARATOR}{a}" for a in arms for m in names)


FOLD_PREFIX = "fold"
FOLD_METRICS = ("val_sharpe_mean", "val_alpha_sharpe_mean", "test_sharpe_mean", "test_alpha_sharpe_mean")
"""History columns repeated per fold (`<metric>@fold<k>`; test NaN until the end) with >= 2 folds."""


def fold_metrics(folds: tuple[int, ...] | list[int] = ()) -> tuple[str, ...]:
    if len(folds) < 2:
        return ()
    return tuple(f"{m}{ARM_SEPARATOR}{FOLD_PREFIX}{k}" for k in folds for m in FOLD_METRICS)


HISTORY_PREFIX = "history"
HISTORY_FOLD_JOIN = "."
"""Per-history columns: `<metric>@history<h>`, with folds `<metric>@history<h>.fold<k>`."""


def history_fold_suffix(history: int, fold: int | None = None) -> str:
    suffix = f"{HISTORY_PREFIX}{history}"
    return suffix if fold is None else f"{suffix}{HISTORY_FOLD_JOIN}{FOLD_PREFIX}{fold}"


def history_metrics(histories: tuple[int, ...] | list[int] = (), folds: tuple[int, ...] | list[int] = ()) -> tuple[str, ...]:
    if len(histories) < 2:
        return ()
    cells = [(h, None) for h in histories] + ([(h, k) for h in histories for k in folds] if len(folds) > 1 else [])
    return tuple(f"{m}{ARM_SEPARATOR}{history_fold_suffix(h, k)}" for h, k in cells for m in FOLD_METRICS)


GAIN_METRICS = ("val_sharpe_gain", "val_alpha_sharpe_gain")
"""Paired gains: mean over seed indices of proposal minus control (NaN where a pair diverged)."""
GAIN_OBJECTIVES = tuple(f"{g}_lastk" for g in GAIN_METRICS)
"""Their means over the last min(k, epochs) epochs (as OBJECTIVES)."""
GEM_GAIN_PREFIX = "gain_"
VERDICT_GAIN = "verdict_gain"
"""The verdict's statistic as a trial's gain (`arm_sets.verdict_gains`), so a search optimises it."""
VERDICT_GAIN_PREFIX = f"{VERDICT_GAIN}_"
SEARCHABLE_GAINS = (*GAIN_METRICS, *GAIN_OBJECTIVES, VERDICT_GAIN)
DIVERGENCE_SCORED = (VERDICT_GAIN,)
"""Objectives that score divergence themselves: reported as they are, COMPLETE in Optuna."""


def has_gain_arms(arms: tuple[str, ...] | list[str]) -> bool:
    """Whether a run with these arms reports gains: `proposal` and `control`, or `control` alone."""
    arms = tuple(arms)
    return ("proposal" in arms and "control" in arms) or arms == ("control",)


def gain_metrics(plugins: tuple[str, ...] | list[str] = (), arms: tuple[str, ...] | list[str] = ()) -> tuple[str, ...]:
    """The gain columns of a run with these arms (none without a design), fixed per run by the registry."""
    if not has_gain_arms(arms):
        return ()
    names = [g.name for g in registry.run_gems(plugins)]
    return (*GAIN_METRICS, *GAIN_OBJECTIVES, *(f"{GEM_GAIN_PREFIX}{g}" for g in names),
            VERDICT_GAIN, *(f"{VERDICT_GAIN_PREFIX}{g}" for g in names))


def epoch_metrics(plugins: tuple[str, ...] | list[str] = (), arms: tuple[str, ...] | list[str] = (),
        folds: tuple[int, ...] | list[int] = (), histories: tuple[int, ...] | list[int] = ()) -> tuple[str, ...]:
    """One row of history / one Tune result, in this order (gem columns: means over members)."""
    return (
        *_RUN_HEAD, *_SHARPE, *EVAL_HISTORY, *OBJECTIVES, *gem_columns(plugins), "diverged", "sps", *TIMING,
        *arm_metrics(plugins, arms), *gain_metrics(plugins, arms), *fold_metrics(folds), *history_metrics(histories, folds),
    )  # fmt: skip


def member_metrics(plugins: tuple[str, ...] | list[str] = ()) -> tuple[str, ...]:
    return (*_MEMBER_HEAD, *gem_columns(plugins), "diverged")


# the columns of a run without plug-ins
EPOCH_METRICS = epoch_metrics()
MEMBER_METRICS = member_metrics()


def _is_tensor(x: Any) -> bool:
    """A torch tensor, without importing torch."""
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
    """mean(r) / sqrt(mean(min(r, 0)^2)) * sqrt(periods_per_year); 0.0 where the downside is 0."""
    arr, one = _as_2d(returns)
    out = np.zeros(arr.shape[0])
    if arr.shape[1] >= 1:
        mean = arr.mean(axis=1)
        dd = np.sqrt(np.mean(np.minimum(arr, 0.0) ** 2, axis=1))
        ok = dd > 0
        out[ok] = mean[ok] / dd[ok] * math.sqrt(periods_per_year)
    return _out(out, one, returns)


def max_drawdown(returns: Any) -> Any:
    """Largest fall of prod(1 + r) from 1 (a first-step loss counts), as a positive fraction."""
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
    arr, one = _as_2d(positions)
    prev = np.concatenate([np.full((arr.shape[0], 1), initial_position), arr[:, :-1]], axis=1)
    if arr.shape[1] == 0:
        return _out(np.zeros(arr.shape[0]), one, positions)
    return _out(np.abs(arr - prev).mean(axis=1), one, positions)


RESERVED_PREFIXES = ("val_", "test_", "train_", "gain_")
"""Prefixes of the evaluation, timing and gain columns: a plug-in metric may not read as one."""


def check_plugin_columns(plugins: tuple[str, ...] | list[str]) -> None:
    """ConfigError when a plug-in gem's metric or derived column is, or reads as, a table's column."""
    from tune_gems.contracts.errors import ConfigError
    from tune_gems.contracts.result_files import ID_COLUMNS, TRIAL_COLUMNS

    builtin = set(epoch_metrics(arms=("proposal", "control"))) | set(member_metrics())
    builtin |= {*ID_COLUMNS, *MEMBER_ID_COLUMNS, *TRIAL_COLUMNS}
    for gem in registry.run_gems(plugins):
        if gem.builtin:
            continue
        for column in (gem.metric, *(gem.metric + s for s in ("_rel", "_null", "_excess"))):
            if column in builtin or column.startswith(RESERVED_PREFIXES):
                raise ConfigError(
                    f"plugins: {gem.origin}: gem {gem.name}: metric name {gem.metric!r} is or reads as a result column ({column}); "
                    f"choose a name that no table has and that does not start with {', '.join(RESERVED_PREFIXES)}"
                )
