"""Where a run stands out of sample in one statement: each configuration's final test alpha Sharpe
per seed against flat, the signed-rank 95% interval (Bonferroni over configurations), conditional
on the one test period (docs/evaluation.md "Baselines")."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from tune_gems.stats.inference import rank_test

SKILL_METRICS = ("test_alpha_sharpe", "test_sharpe")
"""The statement's metric, and its fallback for results without alpha Sharpe."""
SKILL_CONFIDENCE = 0.95
BASELINE_PREFIX = "baseline: "
SKILL_COLUMNS = ("skill_metric", "skill_seeds", "skill_estimate", "skill_ci_low", "skill_ci_high", "skill_ci_low_adjusted")
"""Columns added per configuration: metric, seeds, estimate, interval, Bonferroni lower bound."""


def _standing(table: pd.DataFrame) -> tuple[str, pd.DataFrame, str] | None:
    """(metric, the configurations with an estimate, their standing against flat), or None."""
    if table is None or table.empty or "skill_estimate" not in table.columns:
        return None
    configs = table[~table["configuration"].astype(str).str.startswith(BASELINE_PREFIX)].dropna(subset=["skill_estimate"])
    if configs.empty:
        return None
    metric = str(configs["skill_metric"].iloc[0])
    below = configs["skill_ci_high"] < 0
    above = configs["skill_ci_low_adjusted"] > 0
    n = len(configs)
    if below.all():
        standing = "every arm lies below flat" if n > 1 else "it lies below flat"
    elif above.all():
        standing = "every arm lies above flat" if n > 1 else "it lies above flat"
    elif above.any():
        standing = f"{int(above.sum())} of {n} arms lie above flat"
    else:
        standing = "no arm is shown to differ from flat" if n > 1 else "it is not shown to differ from flat"
    return metric, configs, standing


def best_arm(configs: pd.DataFrame, metric: str) -> pd.Series | None:
    """The configuration validation picks: the largest finite mean of the metric's validation column, or None."""
    val = metric.replace("test_", "val_", 1)
    scores = configs[val].astype(float) if val in configs.columns else pd.Series(dtype=float)
    scores = scores[np.isfinite(scores)]
    return None if scores.empty else configs.loc[scores.idxmax()]


def _best(configs: pd.DataFrame, metric: str) -> str:
    b, val = best_arm(configs, metric), metric.replace("test_", "val_", 1)
    if b is None:
        return f"no best arm named (no {val} to choose on)"
    return (f"best on validation {b['configuration']} ({val} {_num(b[val], '+.2f')}): test "
            f"{_num(b['skill_estimate'], '+.2f')} [{_num(b['skill_ci_low'])}, {_num(b['skill_ci_high'])}] over "
            f"{int(b['skill_seeds'])} seed(s)")


def _what(metric: str) -> str:
    fallback = "" if metric == SKILL_METRICS[0] else f"; {SKILL_METRICS[0]} absent (older results)"
    return (f"{metric} at the final epoch against flat (0), {SKILL_CONFIDENCE:.0%} signed-rank interval over seeds, "
            f"conditional on one test period{fallback}")


def baseline_headline(table: pd.DataFrame) -> str:
    """From a `baseline_comparison` table: the statement in one line, or '' without a configuration."""
    found = _standing(table)
    if found is None:
        return ""
    metric, configs, standing = found
    return f"against the baselines ({_what(metric)}): {standing}; {_best(configs, metric)}"


def skill_flag(table: pd.DataFrame) -> str:
    """The statement, said only when every arm lies below flat; '' otherwise."""
    found = _standing(table)
    if found is None:
        return ""
    metric, configs, _ = found
    if not (configs["skill_ci_high"] < 0).all():
        return ""
    return (f"out of sample every arm lies below flat ({_what(metric)}; {_best(configs, metric)}): a verdict says whether "
            "wiring helps this learner, not that the learner has skill")


def _num(x: float, fmt: str = ".2f") -> str:
    x = float(x)
    if math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    return "nan" if not math.isfinite(x) else format(x, fmt)


def _skill_columns(g: pd.DataFrame, metric: str | None) -> dict[str, Any]:
    """One configuration's per-seed values of the metric and their interval."""
    out: dict[str, Any] = {c: math.nan for c in SKILL_COLUMNS}
    if metric is None or metric not in g.columns:
        return out
    unit = next((c for c in ("seed", "member") if c in g.columns), None)  # a member seed: one unit over folds
    x = (g.groupby(unit)[metric].mean() if unit else g[metric]).astype(float)
    x = x[np.isfinite(x)].to_numpy()
    out.update(skill_metric=metric, skill_seeds=int(x.size))
    if x.size:
        r = rank_test(x[None, :], tail=(1 - SKILL_CONFIDENCE) / 2)
        out.update(skill_estimate=float(r.estimate[0]), skill_ci_low=float(r.low[0]), skill_ci_high=float(r.high[0]),
                   _values=x)
    return out


def baseline_comparison(exp: Any) -> pd.DataFrame:
    """Each configuration (experiment, trial's label, arm) at its final epoch beside the baselines
    of the same segments: mean Sharpe and alpha Sharpe over non-diverged members, and SKILL_COLUMNS."""
    cols = ("val_sharpe", "val_alpha_sharpe", "test_sharpe", "test_alpha_sharpe")
    rows: list[dict[str, Any]] = []
    m = exp.members
    if len(m) and "epoch" in m.columns:
        m = m.copy()
        if "arm" not in m.columns:
            m["arm"] = "default"
        keys = [k for k in ("experiment", "trial_id") if k in m.columns]
        last = m.groupby(keys)["epoch"].transform("max") if keys else m["epoch"].max()
        m = m[m["epoch"] == last]
        if "diverged" in m.columns:
            m = m[~m["diverged"].astype(bool)]
        metric = next((c for c in SKILL_METRICS if c in m.columns and np.isfinite(m[c].astype(float)).any()), None)
        label = exp.trials.set_index(["experiment", "trial_id"])["config_label"] if {"experiment", "trial_id", "config_label"} <= set(exp.trials.columns) else None
        for key, g in m.groupby([k for k in ("experiment", "trial_id", "arm") if k in m.columns], sort=True):
            key = key if isinstance(key, tuple) else (key,)
            name = " ".join(str(k) for k in key)
            if "config_label" in g.columns and len(key) >= 2:  # the arm's own label (its members')
                name = f"{key[0]} {key[1]} {g['config_label'].iloc[0]} arm={key[-1]}"
            elif label is not None and len(key) >= 2 and (key[0], key[1]) in label.index:
                name = f"{key[0]} {key[1]} {label.loc[(key[0], key[1])]} arm={key[-1]}"
            row = {"configuration": name, "members": len(g)}
            row.update({c: float(g[c].mean()) if c in g.columns else float("nan") for c in cols})
            row.update(_skill_columns(g, metric))
            rows.append(row)
        n_configs = sum("_values" in r for r in rows)
        for r in rows:  # "above flat" is a claim about the best of n_configs: Bonferroni over them
            x = r.pop("_values", None)
            if x is not None:
                tail = (1 - SKILL_CONFIDENCE) / (2 * n_configs)
                r["skill_ci_low_adjusted"] = float(rank_test(x[None, :], tail=tail).low[0])
    b = getattr(exp, "baselines", None)
    if b is not None and len(b):
        agg = b.groupby(["segment", "baseline"], sort=False)[["sharpe", "alpha_sharpe"]].mean().reset_index()
        for name in agg["baseline"].unique():
            r = agg[agg["baseline"] == name].set_index("segment")
            row = {"configuration": f"{BASELINE_PREFIX}{name}", "members": 0}
            for seg in ("val", "test"):
                row[f"{seg}_sharpe"] = float(r.loc[seg, "sharpe"]) if seg in r.index else float("nan")
                row[f"{seg}_alpha_sharpe"] = float(r.loc[seg, "alpha_sharpe"]) if seg in r.index else float("nan")
            rows.append(row)
    return pd.DataFrame(rows, columns=["configuration", "members", *cols, *SKILL_COLUMNS])
