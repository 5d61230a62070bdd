"""An epoch's rows (history: means over members; one per member) in `stats.metrics`' column order: a
pure function of what the epoch measured and the rows before it, the one place that builds a row."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from tune_gems.config.schema import Config
from tune_gems.design.arm_sets import has_gains, paired_gains, verdict_gains
from tune_gems.gems.registry import Gem
from tune_gems.stats.metrics import (ARM_SEPARATOR, EVAL_STATS, FOLD_METRICS, FOLD_PREFIX, GAIN_METRICS,
                                     GAIN_OBJECTIVES, GEM_GAIN_PREFIX, SEGMENTS, epoch_metrics, history_fold_suffix)
from tune_gems.trainer.member_ids import MemberIds


@dataclass
class EpochResult:
    metrics: dict[str, Any]
    members: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class EpochMeasures:
    """What one epoch measured: per-member means (`rows`), `evals` {segment: {stat: [P]}} (NaN where not
    evaluated or diverged), counters, noise, speed and seconds."""

    epoch: int
    env_steps: int
    updates: int
    diverged: bool
    rows: dict[str, np.ndarray]
    evals: dict[str, dict[str, np.ndarray]]
    member_diverged: np.ndarray
    noisy_sigma: float
    sps: float
    train_s: float
    eval_s: float


def _finite_or_nan(v: np.ndarray, reduce: Callable[[np.ndarray], Any]) -> float:
    ok = v[np.isfinite(v)]
    return float(reduce(ok)) if ok.size else math.nan


def _mean(v: np.ndarray) -> float:
    return _finite_or_nan(v, np.mean)


def _std(v: np.ndarray) -> float:
    """Sample std over finite values; 0.0 for one value, NaN for none."""
    ok = v[np.isfinite(v)]
    return float(ok.std(ddof=1)) if ok.size > 1 else 0.0 if ok.size else math.nan


def _last_k(history: list[dict[str, Any]], column: str, value: float, k: int) -> float:
    recent = [h[column] for h in history[-(k - 1):]] if k > 1 else []
    return float(np.mean([*recent, value]))


def epoch_result(
    cfg: Config, ids: MemberIds, gems: Sequence[Gem], e: EpochMeasures,
    history: list[dict[str, Any]], member_history: list[dict[str, Any]],
) -> EpochResult:  # fmt: skip
    """The epoch's history and member rows, after `history` and `member_history`."""
    rows, evals, member_diverged = e.rows, e.evals, e.member_diverged
    loss = rows["loss"]
    gem_values = {g.metric: rows[g.name] for g in gems}
    with np.errstate(divide="ignore", invalid="ignore"):
        gem_values.update({f"{g.metric}_rel": rows[g.name] / loss for g in gems})
    gem_values.update({f"{g.metric}_null": rows[f"{g.name}_null"] for g in gems})
    gem_values.update({f"{g.metric}_excess": rows[g.name] - rows[f"{g.name}_null"] for g in gems})
    val, test = evals["val"]["sharpe"], evals["test"]["sharpe"]
    m: dict[str, Any] = {"epoch": e.epoch, "env_steps": e.env_steps, "updates": e.updates, "loss": float(np.mean(loss)),
                         "q_mean": float(np.mean(rows["q_mean"])), "grad_norm": float(np.mean(rows["grad_norm"])),
                         "noisy_sigma": e.noisy_sigma, "val_sharpe_mean": _mean(val), "val_sharpe_std": _std(val),
                         "val_sharpe_min": _finite_or_nan(val, np.min), "val_sharpe_max": _finite_or_nan(val, np.max),
                         "test_sharpe_mean": _mean(test), "test_sharpe_std": _std(test)}
    for seg in SEGMENTS:
        m.update({f"{seg}_{k}_mean": _mean(evals[seg][k]) for k in EVAL_STATS if k != "sharpe"})
    m.update({f"{seg}_alpha_sharpe_std": _std(evals[seg]["alpha_sharpe"]) for seg in SEGMENTS})
    m.update({f"{seg}_breakeven_cost_bps_median": _finite_or_nan(evals[seg]["breakeven_cost_bps"], np.median) for seg in SEGMENTS})
    k = cfg.trainer.objective_last_k
    for objective, column in (("val_sharpe_mean_lastk", "val_sharpe_mean"), ("val_alpha_sharpe_mean_lastk", "val_alpha_sharpe_mean")):
        m[objective] = _last_k(history, column, m[column], k)
    m.update({name: float(np.mean(v)) for name, v in gem_values.items()})
    m["diverged"] = e.diverged
    m["sps"] = e.sps
    m.update(train_s=float(e.train_s), eval_s=float(e.eval_s))
    arm_of = np.array(ids.arm)
    for arm in ids.arms if len(ids.arms) > 1 else ():
        mine = (arm_of == arm) & ~member_diverged
        m[f"val_sharpe_mean@{arm}"] = _mean(val[mine])
        m[f"val_alpha_sharpe_mean@{arm}"] = _mean(evals["val"]["alpha_sharpe"][mine])
        m.update({f"{g.metric}@{arm}": _mean(rows[g.name][mine]) for g in gems})
    if has_gains(ids.arms):
        m.update(_gains(cfg, ids, e, history, member_history))
    fold_of, history_of = np.array(ids.fold), np.array(ids.history)
    history_ids = tuple(range(len(ids.histories)))
    cells = [(f"{FOLD_PREFIX}{fold}", fold_of == fold) for fold in (ids.folds if len(ids.folds) > 1 else ())]
    if len(history_ids) > 1:  # each history's members, then each history's fold k
        cells += [(history_fold_suffix(h), history_of == h) for h in history_ids]
        cells += [(history_fold_suffix(h, fold), (history_of == h) & (fold_of == fold))
                  for h in history_ids for fold in (ids.folds if len(ids.folds) > 1 else ())]
    for suffix, cell in cells:
        mine = cell & ~member_diverged
        for column in FOLD_METRICS:
            seg, stat = column.split("_", 1)
            m[f"{column}{ARM_SEPARATOR}{suffix}"] = _mean(evals[seg][stat.removesuffix("_mean")][mine])
    assert tuple(m) == epoch_metrics(cfg.plugins, ids.arms, ids.folds, history_ids)
    members = []
    for p in range(ids.members):
        row = {"epoch": e.epoch, "member": p, "seed": ids.seed[p], "arm": ids.arm[p],
               "seed_index": ids.seed_index[p], "fold": ids.fold[p], "history": ids.history[p]}  # fmt: skip
        row.update(val_sharpe=float(val[p]), test_sharpe=float(test[p]))
        for seg in SEGMENTS:
            row.update({f"{seg}_{k}": float(evals[seg][k][p]) for k in EVAL_STATS if k != "sharpe"})
        row.update(loss=float(loss[p]), q_mean=float(rows["q_mean"][p]), grad_norm=float(rows["grad_norm"][p]))
        row.update({name: float(v[p]) for name, v in gem_values.items()})
        row["diverged"] = bool(member_diverged[p])
        members.append(row)
    return EpochResult(metrics=m, members=members)


def _gains(
    cfg: Config, ids: MemberIds, e: EpochMeasures, history: list[dict[str, Any]], member_history: list[dict[str, Any]],
) -> dict[str, float]:  # fmt: skip
    """A designed run's paired gains, their last-k means and the verdict's statistic (`arm_sets`)."""
    gems, aliases, val = cfg.gem_names(), ids.aliases, e.evals["val"]
    arm_of, pair_key = list(ids.arm), list(ids.pair)
    g = paired_gains(gems, arm_of, pair_key, val["sharpe"], val["alpha_sharpe"], aliases=aliases)
    k = cfg.trainer.objective_last_k
    out = {name: g[name] for name in GAIN_METRICS}
    for objective, column in zip(GAIN_OBJECTIVES, GAIN_METRICS):
        out[objective] = _last_k(history, column, g[column], k)
    out.update({f"{GEM_GAIN_PREFIX}{name}": g[f"gain_{name}"] for name in gems})
    P = ids.members
    earlier = [r for r in member_history if r["epoch"] > e.epoch - k]
    window = np.array([[r["val_alpha_sharpe"] for r in earlier] + list(val["alpha_sharpe"])], dtype=np.float64)
    flags = np.array([[bool(r["diverged"]) for r in earlier] + list(e.member_diverged)], dtype=bool)
    out.update(verdict_gains(gems, arm_of, pair_key, window.reshape(-1, P), flags.reshape(-1, P), aliases=aliases))
    return out
