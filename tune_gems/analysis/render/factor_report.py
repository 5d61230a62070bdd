"""`report.md`'s factor section (factors.csv; issue 30 item 4): every factor of the design judged
in one Holm family with the gems, largest effects first, and the factorial's interactions; kept
apart from report.py's verdict sections, which it follows in the report."""

from __future__ import annotations

from typing import Any

import pandas as pd

from tune_gems.analysis.text import markdown_table

FACTOR_REPORT_COLUMNS = ("kind", "factor", "contrast", "verdict", "reading", "n_seeds", "tied_share", "effect", "ci_low",
                         "ci_high", "p_adjusted", "mde", "mde_floor", "pooled_effect", "pooled_ci_low", "pooled_ci_high",
                         "gem_table_verdict")
"""The report's factor table; every column is in factors.csv."""


def render_factor_section(factors: pd.DataFrame | None, settings: dict[str, Any]) -> str:
    """`report.md`'s "Every factor judged" section (appended after the rest): the family of gems
    and factors, largest effects first, then the factorial's interactions (Holm-adjusted)."""
    if factors is None or not len(factors):
        return ""
    judged = factors[factors["kind"] != "interaction"]
    inter = factors[factors["kind"] == "interaction"]
    m = int(judged["family_size"].max()) if judged["family_size"].notna().any() else 0
    lines = ["", "## Every factor judged", "",
             f"Each factor of the design (every gem's wiring, and every other key that differs between members at a "
             f"common seed: `model.*`, `trainer.*`, `gems.<g>.weight`, arms factors and list entries differing in one "
             f"key) gets its main effect by the gems' rule: seed-paired differences within each fold, the seed rule at "
             f"K = 1 (with the market-noise gates on one price history), the period rule at K >= 2, and Holm over the "
             f"{m} gems and factors together (one family, alpha {settings.get('alpha', '')}). A gem's row can be more "
             "cautious here than in the verdicts above (Holm over the gems alone): `gem_table_verdict` is that one. "
             "Largest effects first; nothing is left out (factors.csv has every column).", "",
             markdown_table(judged, list(FACTOR_REPORT_COLUMNS))]
    notes = [f"- {r['factor']} ({r['contrast']}): {r['power_note']}" for _, r in judged.iterrows()
             if isinstance(r.get("power_note"), str) and r["power_note"]]
    if notes:  # the pooled test's power statement (K >= 2): its MDE, the floor no seed count beats, the advice
        lines += ["", "Power of the pooled test (`mde`, `mde_floor`: the MDE with infinitely many seeds):", ""] + notes
    if len(inter):
        lines += ["", "### Interactions of the factorial", "",
                  "Per seed, one contrast's effect at the other's first level minus at its second; signed-rank, the "
                  "interval at the Holm level over the interactions (shown, not a verdict).", "",
                  markdown_table(inter, ["factor", "contrast", "verdict", "reading", "n_seeds", "effect", "ci_low",
                                         "ci_high", "ci_level", "p_adjusted"])]
    return "\n".join(lines) + "\n"
