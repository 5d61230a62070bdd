"""One line saying how a run's configurations compare with the baselines: the end of `train`
and the first lines of the analysis report.

Why: a run that trails buy-and-hold on validation Sharpe looked fine until someone opened the
baselines table. This is a description of the final epoch (means over non-diverged seeds), not
a test: the verdicts are the statistics; the line only says where the run stands.
"""

from __future__ import annotations

import math

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
