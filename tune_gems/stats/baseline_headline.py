"""One line saying how a run's configurations compare with the baselines: the end of `train`
and the first lines of the analysis report.

Why: a run that trails buy-and-hold on validation Sharpe looked fine until someone opened the
baselines table. This is a description of the final epoch (means over non-diverged seeds), not
a test: the verdicts are the statistics; the line only says where the run stands.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

HEADLINE_METRIC = "val_sharpe"
BASELINE_PREFIX = "baseline: "
"""How tune_gems.analysis.report.baseline_comparison names its baseline rows."""


def baseline_headline(table: pd.DataFrame, metric: str = HEADLINE_METRIC) -> str:
    """From a baseline_comparison table: `against the baselines (...): best <config> <v>;
    buy_and_hold <v>, momentum <v>, flat <v>; <who trails whom>`, or '' without both sides."""
    if table is None or table.empty or metric not in table.columns:
        return ""
    is_base = table["configuration"].astype(str).str.startswith(BASELINE_PREFIX)
    configs = table[~is_base].dropna(subset=[metric])
    base = table[is_base].dropna(subset=[metric])
    if configs.empty or base.empty:
        return ""
    top = base.loc[base[metric].idxmax()]
    top_name = str(top["configuration"]).removeprefix(BASELINE_PREFIX)
    best = configs.loc[configs[metric].idxmax()]
    beats = int((configs[metric] > top[metric]).sum())
    n = len(configs)
    if beats == 0:
        standing = f"every configuration trails {top_name}" if n > 1 else f"it trails {top_name}"
    elif beats == n:
        standing = "every configuration beats every baseline" if n > 1 else "it beats every baseline"
    else:
        standing = f"{beats} of {n} configurations beat {top_name}, the best baseline"
    shown = ", ".join(
        f"{str(r['configuration']).removeprefix(BASELINE_PREFIX)} {_num(r[metric])}" for _, r in base.sort_values(metric, ascending=False).iterrows()
    )
    return (
        f"against the baselines ({metric}, final epoch, mean over seeds; a description, not a test): "
        f"best {best['configuration']} {_num(best[metric])}; {shown}; {standing}"
    )


def _num(x: float) -> str:
    return "nan" if not math.isfinite(float(x)) else f"{float(x):.2f}"


def baseline_comparison(exp: Any) -> pd.DataFrame:
    """Each configuration (experiment, trial's config label, arm) at its final epoch beside the
    baselines of the same segments: mean validation and test Sharpe and alpha Sharpe over its
    non-diverged members, then the baseline rows (flat, buy-and-hold, momentum; one row per path
    averaged when paths differ). Skill shows as alpha Sharpe above the baselines', not as raw
    Sharpe that market exposure can buy (docs/evaluation.md)."""
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
            rows.append(row)
    b = getattr(exp, "baselines", None)
    if b is not None and len(b):
        agg = b.groupby(["segment", "baseline"], sort=False)[["sharpe", "alpha_sharpe"]].mean().reset_index()
        for name in agg["baseline"].unique():
            r = agg[agg["baseline"] == name].set_index("segment")
            row = {"configuration": f"baseline: {name}", "members": 0}
            for seg in ("val", "test"):
                row[f"{seg}_sharpe"] = float(r.loc[seg, "sharpe"]) if seg in r.index else float("nan")
                row[f"{seg}_alpha_sharpe"] = float(r.loc[seg, "alpha_sharpe"]) if seg in r.index else float("nan")
            rows.append(row)
    return pd.DataFrame(rows, columns=["configuration", "members", *cols])
