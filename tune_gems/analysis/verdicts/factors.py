"""Every factor of a design judged: gems and non-gem factors in one family. A factorial's largest effects are often not
gems (on S&P 500 closes NoisyNets and spectral norm moved the alpha Sharpe more than any gem). Each main effect of
`family.design_family` is judged with the gems' words; a full factorial's two-level pairs get their interaction (their
own family, shown, not a verdict)."""


from __future__ import annotations

import math
from dataclasses import replace
from itertools import combinations

import numpy as np
import pandas as pd

from tune_gems.analysis.pairs.pairing import Cells, Paired
from tune_gems.analysis.rules.decision import Evidence, decide
from tune_gems.analysis.rules.settings import (
    DECISIVE, EQUIVALENT, HARMFUL, HETEROGENEOUS, INCONCLUSIVE, INCONSISTENT, INSUFFICIENT, KEEP, NOT_CONFIRMED,
    Thresholds,
)
from tune_gems.analysis.text import format_interval, format_number, text_table
from tune_gems.analysis.verdicts.family import (
    FACTOR, GEM, Contrast, DesignFamily, Sources, contrast_pairs, design_family, informative_spread,
)
from tune_gems.analysis.verdicts.readings import DECIDED_COLUMNS, SEEDS
from tune_gems.analysis.verdicts.held_out import held_out_columns
from tune_gems.analysis.verdicts.verdict_market_noise import EvalReturnsLookup
from tune_gems.analysis.verdicts.walk_forward import fold_count
from tune_gems.contracts.gem_manifest import GemEntry

__all__ = ["FACTOR", "GEM", "INTERACTION", "SHOWN", "NOT_SHOWN", "FACTOR_COLUMNS", "factor_table", "interaction_rows",
           "format_factor_table"]

INTERACTION = "interaction"
"""The third kind of a factors.csv row (besides the family's `GEM` and `FACTOR`)."""
SHOWN, NOT_SHOWN = "interaction shown", "no interaction shown"
"""An interaction's finding (Holm over the interactions): a statement, not a verdict."""

FACTOR_COLUMNS = [
    "kind", "factor", "contrast", "verdict", *DECIDED_COLUMNS, "reading", "seed_verdict", "n_seeds", "n_pairs",
    "effect", "mean_effect", "ci_low", "ci_high", "ci_level", "p_value", "p_adjusted", "tost_p_adjusted",
    "family_size", "mde", "mde_two_stage", "sd_diff", "divergence_rate", "folds", "fold_effects", "pooled_effect", "pooled_ci_low",
    "pooled_ci_high", "pooled_p_adjusted", "tau2", "i2", "q_p_adjusted", "periods_informative", "fold_overlap",
    "mde_floor", "power_note", "tied_share", "market_noise", "market_ci_low", "market_ci_high", "combined_ci_low",
    "combined_ci_high", "discovery_verdict", "test_effect", "test_ci_low", "test_ci_high", "held_out", "design", "fix",
]
"""The columns of factors.csv (docs/results.md)."""


# -- the table --------------------------------------------------------------------------------------


def _fmt(x, f: str = "+.3g") -> str:
    return format_number(x, f, missing="-")


def _reading(c: Contrast, verdict: str, mde: float, rope: float) -> str:
    """What the verdict says about this contrast, in words (the words themselves are the rule's)."""
    if c.kind == GEM:
        better, worse = "wiring helps", "wiring hurts"
    else:
        better, worse = f"{c.key}={c.hi} is better than {c.lo}", f"{c.key}={c.hi} is worse than {c.lo}"
    if verdict == KEEP:
        return better
    if verdict == HARMFUL:
        return worse
    if verdict == EQUIVALENT:
        return f"no practical difference (within +-{rope:g})"
    if verdict == INCONSISTENT:
        return "the effect changes sign between periods"
    if verdict == HETEROGENEOUS:
        return "the periods differ, no sign change shown"
    if verdict == INSUFFICIENT:
        return "not judged: too few periods, informative pairs or sides for the rule"
    if verdict == INCONCLUSIVE:
        return f"not decided: detectable at |effect| >= {_fmt(mde, '.3g')}"
    if verdict == NOT_CONFIRMED:
        return "found on validation, not confirmed on the held-out test segment"
    return "not judged: no members differ in this key alone at a common seed"


def factor_table(cells: Cells, gems: list[GemEntry], *, thresholds: Thresholds | None = None, column: str,
                 eval_returns: EvalReturnsLookup | None = None, family: DesignFamily | None = None) -> pd.DataFrame:
    """factors.csv: one row per contrast of the design's family, then one per interaction of a full factorial."""
    th = thresholds if thresholds is not None else Thresholds()
    if family is None:
        family = design_family(cells, gems, th, column=column, sources=Sources(eval_returns))
    rows = [_row(family, j, th) for j in range(len(family.contrasts))]
    table = _largest_first(pd.DataFrame(rows, columns=FACTOR_COLUMNS))
    inter = interaction_rows(cells, family.contrasts, family.pairs, gems, th, column)
    return pd.concat([table, inter], ignore_index=True) if len(inter) else table


def _row(family: DesignFamily, j: int, th: Thresholds) -> dict:
    """One contrast's row of factors.csv: its reading of the family's decision (`DesignFamily.view`:
    the numbers verdicts.csv shows for a gem, the pooled test's where it decides) and its pairs."""
    c, view = family.contrasts[j], family.view(j)
    row = {col: math.nan for col in FACTOR_COLUMNS}
    row.update(held_out_columns(family.decision.held_out, family.test, j, view.discovery_verdict, family.column))
    row.update(kind=c.kind, factor=c.key, contrast=c.label, family_size=family.size, folds=family.k_folds,
               fold_effects="", market_noise=family.market[j].get("market_noise", ""))
    row.update({k: v for k, v in {**family.pair_columns(j), **view.columns()}.items() if k in row})
    row["reading"] = _reading(c, view.verdict, row["mde"], th.rope)
    return row


def _largest_first(table: pd.DataFrame) -> pd.DataFrame:
    """The rows ordered by the size of their effect (untested rows last, as found): the largest
    effects lead every table and print, none is ever left out."""
    size = table["effect"].abs().where(np.isfinite(table["effect"].astype(float)), -1.0)
    return table.assign(_size=size).sort_values("_size", ascending=False, kind="stable").drop(columns="_size") \
        .reset_index(drop=True)


# -- interactions of a factorial ---------------------------------------------------------------------


def interaction_rows(cells: Cells, contrasts: list[Contrast], prs: list[Paired], gems, th: Thresholds,
                     column: str) -> pd.DataFrame:
    """Per two two-level contrasts a full factorial crosses: per unit A's effect at B's hi level minus at its lo level,
    tested as their own family (`interaction shown` where it reads keep wired or harmful)."""
    two = [(c, pr) for c, pr in zip(contrasts, prs) if pr.n and c.levels == 2 and c.wired_gem is None]
    found = []
    for (a, _), (b, _) in combinations(two, 2):
        if a.key == b.key:
            continue
        sides = [contrast_pairs(cells, a, gems, th, column=column, extra=lambda t, lv=lv: t[b.key] == lv)
                 for lv in (b.hi, b.lo)]
        if not all(s.n for s in sides):
            continue
        at = [dict(zip(s.units, s.diffs)) for s in sides]
        units = [u for u in at[0] if u in at[1] and np.isfinite(at[0][u]) and np.isfinite(at[1][u])]
        if len(units) < 2:
            continue
        found.append((a, b, np.array([at[0][u] - at[1][u] for u in units]), sides))
    if not found:
        return pd.DataFrame(columns=FACTOR_COLUMNS)
    # their own family, by the rule's one composition (two-sided: an interaction has no preferred sign)
    dec = decide(Evidence([d[None, :] for _, _, d, _ in found]), replace(th, one_sided_keep=False))
    rows = []
    for j, (a, b, d, sides) in enumerate(found):
        shown = dec.verdict[0, j] in DECISIVE
        est = float(dec.estimate[0, j])
        row = {col: math.nan for col in FACTOR_COLUMNS}
        row.update(kind=INTERACTION, factor=f"{a.key} x {b.key}",
                   contrast=f"{a.label} at {b.key}={b.hi} minus at {b.lo}",
                   verdict=SHOWN if shown else NOT_SHOWN, seed_verdict="",
                   reading=(f"the effect of {a.key} ({a.label}) is {'larger' if est > 0 else 'smaller'} at "
                            f"{b.key}={b.hi} than at {b.lo}" if shown else "no interaction shown"),
                   n_seeds=int(d.size), n_pairs=int(sum(s.n_pairs for s in sides)), effect=est,
                   mean_effect=float(d.mean()), ci_low=float(dec.low[0, j]), ci_high=float(dec.high[0, j]),
                   ci_level=1 - dec.level[0, j], p_value=dec.p[0, j], p_adjusted=dec.p_adjusted[0, j],
                   decided_by=SEEDS, decided_effect=est, decided_ci_low=float(dec.low[0, j]),
                   decided_ci_high=float(dec.high[0, j]), decided_ci_level=1 - dec.level[0, j],
                   decided_p_adjusted=dec.p_adjusted[0, j],
                   family_size=int(np.isfinite(dec.p[0]).sum()), sd_diff=informative_spread(d), tied_share=float(dec.tied_share[0, j]),
                   folds=fold_count(cells), fold_effects="", market_noise="",
                   design=f"{a.key} within each level of {b.key}, paired by member seed", fix="")
        rows.append(row)
    return _largest_first(pd.DataFrame(rows, columns=FACTOR_COLUMNS))


# -- text -------------------------------------------------------------------------------------------------


def format_factor_table(table: pd.DataFrame) -> str:
    """The compact factor table for a terminal: each word beside the numbers of the test that decided it."""
    if table is None or not len(table):
        return ""
    judged = table[table["kind"] != INTERACTION]
    tested = judged[judged["n_seeds"].fillna(0).astype(float) > 0]
    untested = judged[judged["n_seeds"].fillna(0).astype(float) == 0]
    head = ["factor", "contrast", "verdict", "effect", "CI", "Holm p", "decided by", "MDE", "seeds", "effect", "CI",
            "Holm p"]
    rows = [[str(r["factor"]), str(r["contrast"]), str(r["verdict"]), _fmt(r["decided_effect"]),
             format_interval(r["decided_ci_low"], r["decided_ci_high"]), _fmt(r["decided_p_adjusted"], ".2g"),
             str(r["decided_by"]), _fmt(r["mde"], ".3g"), _fmt(r["n_seeds"], ".0f"), _fmt(r["effect"]),
             format_interval(r["ci_low"], r["ci_high"]), _fmt(r["p_adjusted"], ".2g")]
            for _, r in pd.concat([tested, table[table["kind"] == INTERACTION]]).iterrows()]
    lines = [f"factors (gems and factors one family, Holm over {int(judged['family_size'].max() or 0)}; "
             "interactions Holm over themselves; largest effects first):"]
    lines += text_table(head, rows, {3: "the test that decided the word:", 8: "seeds alone:"})
    if len(untested):
        lines.append("not judged (no design): " + ", ".join(
            f"{r['factor']} ({r['contrast']}: {r['verdict']})" for _, r in untested.iterrows()))
    return "\n".join(lines)
