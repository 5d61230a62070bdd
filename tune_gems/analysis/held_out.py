"""Out of sample: the test segment as the held-out check of each decisive verdict, and the
learner's skill in context (issue 20, deliver 4 and 5).

Why. A verdict is reached on the validation period(s); the test segment is untouched by it. Each
`keep wired` / `harmful` is re-estimated ONCE on the test segment with the same member pairs
(the verdict metric's test twin, e.g. `test_alpha_sharpe`, at the pairs' common final epoch,
signed-rank at alpha, no further search) and shown beside the verdict: `agrees` when the test
interval excludes 0 on the verdict's side. Nothing is decided on it: the verdict stands either
way, and a reader sees at once when the validation result did not carry over.

Skill: "wiring helps" is a statement about two arms of one learner, not about the learner beating
the market. When every arm's mean out-of-sample (test) metric is below a baseline's (flat,
buy-and-hold, momentum under the same cost model), the report and every verdict line say so.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from tune_gems.analysis import defaults
from tune_gems.analysis.pairing import Cells, paired
from tune_gems.stats.inference import rank_test
from tune_gems.analysis.report import baseline_comparison, format_number

HELD_OUT_COLUMNS = ["test_effect", "test_ci_low", "test_ci_high", "test_p_value", "held_out"]
AGREES = "agrees"


def held_out_check(verdicts: pd.DataFrame, cells: Cells, gems, *, alpha: float = defaults.ALPHA,
                   last_k: int = defaults.LAST_K, placebo_weight: float = defaults.PLACEBO_WEIGHT) -> pd.DataFrame:
    """The verdict table with HELD_OUT_COLUMNS: for each keep wired / harmful, the same pairs'
    difference on the test segment and whether it agrees (module docstring)."""
    from tune_gems.analysis.selectors import MEASURE, WIRE, placebo_selectors as _selectors
    from tune_gems.analysis.walk_forward import DECISIVE

    v = verdicts.copy()
    for c in HELD_OUT_COLUMNS:
        if c not in v.columns:
            v[c] = np.nan
    v["held_out"] = v["held_out"].astype(object).where(v["held_out"].notna(), "")
    by_gem = {g.name: g for g in gems}
    for i, r in v.iterrows():
        if r["verdict"] not in DECISIVE or r["gem"] not in by_gem:
            continue
        g = by_gem[r["gem"]]
        column = str(r["outcome"]).replace("val_", "test_", 1)
        real, _ = _selectors(g, placebo_weight)
        pr = paired(cells, f"gems.{g.name}.mode", WIRE, MEASURE, column=column, k=1,
                    ignore=(f"gems.{g.name}.weight",), select=real)
        if not pr.n or column not in cells.long.columns:
            v.at[i, "held_out"] = f"no test-segment pairs ({column})"
            continue
        t = rank_test(pr.diffs[None, :], tail=alpha / 2)
        est, lo, hi, p = (float(t[k][0]) for k in ("estimate", "low", "high", "p"))
        v.loc[i, ["test_effect", "test_ci_low", "test_ci_high", "test_p_value"]] = [est, lo, hi, p]
        v.at[i, "held_out"] = agreement(r["verdict"], est, lo, hi)
        v.at[i, "reason"] = (f"{r['reason']}; held-out test segment ({column}, same {pr.n} seeds, once): "
                             f"{format_number(est, '+.3g')} [{format_number(lo)}, {format_number(hi)}], "
                             f"p {format_number(p, '.2g')}: {v.at[i, 'held_out']}")
    return v


def agreement(verdict: str, effect: float, low: float, high: float) -> str:
    """`agrees` when the test interval excludes 0 on the verdict's side; else why it does not."""
    sign = 1.0 if verdict == "keep wired" else -1.0
    if (sign > 0 and low > 0) or (sign < 0 and high < 0):
        return AGREES
    if math.isfinite(effect) and np.sign(effect) == -sign and not (low <= 0 <= high):
        return "does not agree: the opposite sign"
    return "does not agree: the test interval includes 0"


def skill_context(experiment: Any) -> str:
    """A sentence when every arm trails a baseline out of sample (mean test alpha Sharpe, or test
    Sharpe where alpha is missing, at the final epoch over non-diverged members); "" otherwise
    or when the folders have no baselines table."""
    table = baseline_comparison(experiment)
    if table.empty:
        return ""
    is_base = table["configuration"].str.startswith("baseline: ")
    arms, base = table[~is_base], table[is_base]
    for col in ("test_alpha_sharpe", "test_sharpe"):
        a, b = arms[col].astype(float), base[col].astype(float)
        if np.isfinite(a).any() and np.isfinite(b).any():
            best_arm, j = float(a.max()), b.idxmax()
            if best_arm < float(b[j]):
                name = str(base.at[j, "configuration"]).removeprefix("baseline: ")
                return (f"out of sample every arm trails the {name} baseline ({col}: best arm "
                        f"{format_number(best_arm, '+.3g')} < {name} {format_number(float(b[j]), '+.3g')}): "
                        f"a verdict says whether wiring helps this learner, not that the learner has skill")
            return ""
    return ""
