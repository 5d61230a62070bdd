"""The verdict per gem, from designed comparisons only, with its evidence (docs/analysis.md "Verdicts"). This module
gathers the evidence and writes the reasons; every decision is `rules.decision.decide`'s, the function the calibrations
run. Null arms (placebo weight, A/A replay stream) are judged apart and must read `equivalent` or `inconclusive`."""


from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from tune_gems.analysis import defaults
from tune_gems.analysis.pairs.pairing import Cells, Paired, build_cells, paired
from tune_gems.analysis.pairs.excess import add_excess_columns
from tune_gems.stats.inference import rank_test
from tune_gems.analysis.rules.decision import REMOVES, Evidence, decide
from tune_gems.analysis.rules.settings import INSUFFICIENT, Thresholds
from tune_gems.analysis.verdicts.held_out import HELD_OUT_COLUMNS, held_out_columns
from tune_gems.analysis.verdicts.verdict_reasons import compose_reason, selection_rule
from tune_gems.analysis.verdicts.family import (
    AA_BASE, AA_FACTOR, DesignFamily, Sources, design_family, informative_spread,
)
from tune_gems.analysis.verdicts.readings import DECIDED_COLUMNS
from tune_gems.analysis.verdicts.walk_forward import FOLD_ROW_COLUMNS, PERIOD_COLUMNS
from tune_gems.analysis.verdicts.history_verdicts import HISTORY_COLUMNS, HISTORY_ROW_COLUMNS
from tune_gems.analysis.verdicts.search_choice import FINAL_COLUMNS
from tune_gems.analysis.verdicts.verdict_market_noise import MARKET_COLUMNS
from tune_gems.analysis.verdicts.redundancy import redundancy_table
from tune_gems.analysis.pairs.selectors import MEASURE, placebo_selectors, wiring_pairs
from tune_gems.contracts.gem_manifest import LEGACY_MANIFEST, GemEntry

VERDICT_COLUMNS = [
    "gem", "metric", "verdict", *DECIDED_COLUMNS, "reason", "why", "discovery_verdict", "design", "outcome", "n_seeds", "n_pairs",
    "estimand", "effect", "mean_effect", "ci_low", "ci_high", "ci_level", "p_value", "p_adjusted", "tost_p", "tost_p_adjusted",
    "rope", "alpha", "family_size", "sd_diff", "divergence_rate", "mde", "mde_two_stage", "seeds_needed", "mde_floor",
    "power_note",
    "n_informative", "tied_share", "zero_turnover_share", "window", "wired_diverged", "measured_diverged",
    "wired_members", "measured_members", "test_effect", "fix",
    "excess_n", "excess_median", "excess_ci_low", "excess_ci_high", "excess_tost_p_adjusted",
    "rel_threshold", "redundancy", "market_path", "seed_verdict", *MARKET_COLUMNS,
]
PLACEBO_COLUMNS = ["gem", "verdict", "n_seeds", "effect", "ci_low", "ci_high", "p_value", "tost_p",
                   "sd_diff", "iqr_diff", "min_diff", "max_diff", "outcome", "kind", "tied_share", "informative"]
UNINFORMATIVE_TIES = 0.5
"""A null arm whose pairs tie (identical outcomes) more often than this tests nothing: flagged."""
TURNOVER = "val_turnover"
"""Validation turnover: 0 over the verdict window means the member never traded (its pair likely ties)."""


def verdict_metric(members: pd.DataFrame, metric: str = defaults.METRIC,
                   fallback: str = defaults.FALLBACK_METRIC) -> tuple[str, str]:
    """(column, note): `metric` when the members have finite values of it, else `fallback`."""
    if metric in members.columns and np.isfinite(members[metric].astype(float)).any():
        return metric, ""
    return fallback, f"{metric} absent (older results): {fallback} used instead"


ESTIMAND = "pseudo-median (Hodges-Lehmann) of the per-seed differences"
"""What `effect` estimates (a diverged member the worst outcome, exact ties left out: the signed-rank
test's statistic); `mean_effect` beside it is the plain mean where nobody diverged."""


def zero_turnover_share(pr: Paired, cells: Cells, window) -> float:
    """The share of the paired members (both sides) whose validation turnover is 0 over the
    verdict window: they never traded there (NaN without a turnover column)."""
    if pr.pairs is None or not len(pr.pairs) or TURNOVER not in cells.long.columns:
        return math.nan
    from tune_gems.analysis.pairs.pairing import window_values

    p = pr.pairs
    end = pd.concat([pd.Series(p["end_epoch"].to_numpy(), index=p["cell_hi"].to_numpy()),
                     pd.Series(p["end_epoch"].to_numpy(), index=p["cell_lo"].to_numpy())])
    end = end[~end.index.duplicated()]
    vals = window_values(cells.long[cells.long["cell"].isin(end.index)], TURNOVER, end, window)["value"]
    vals = vals[np.isfinite(vals)]
    return float((vals == 0).mean()) if len(vals) else math.nan


def gem_verdicts(trials: pd.DataFrame, history: pd.DataFrame | None, members: pd.DataFrame, *,
                 arms: pd.DataFrame | None = None, gems: list[GemEntry] | None = None,
                 thresholds: Thresholds | None = None, metric: str = defaults.METRIC, cells: Cells | None = None,
                 **settings) -> pd.DataFrame:
    """One row per gem (VERDICT_COLUMNS), `gem_verdict_tables`'s first table; `settings` replace
    fields of `thresholds` by name."""
    cells = cells or build_cells(trials, members, arms)
    th = Thresholds.build(thresholds, **settings)
    return gem_verdict_tables(cells, list(gems or LEGACY_MANIFEST), th, members, metric=metric)[0]


def gem_verdict_tables(cells: Cells, gems: list[GemEntry], th: Thresholds, members: pd.DataFrame, *,
                       metric: str = defaults.METRIC, redundancy: pd.DataFrame | None = None,
                       sources: Sources = Sources()) -> tuple[pd.DataFrame, pd.DataFrame, DesignFamily]:
    """(the verdict table, the per-period rows the pooled test read, the design's family decided
    once); `redundancy` computed when None."""
    selection = sources.selection
    column, metric_note = verdict_metric(members, metric)
    excess = add_excess_columns(cells.long, gems)
    if redundancy is None:
        redundancy = redundancy_table(cells, gems, thresholds=th, excess=excess)
    # a gem's own evidence: its measured magnitude and the redundancy finding (delete's halves)
    magnitude = {g.name: _magnitude_columns(cells, g, excess[g.name][0], th) for g in gems}
    removes = {g.name: _removes(redundancy, g.name) for g in gems}
    # the design's family (every main effect it varies, gems and factors), paired once and decided
    # once by the rule's one composition (`rules.decision.decide`): these rows are its gem contrasts
    family = design_family(cells, gems, th, column=column, sources=sources,
                           magnitude_p={g: mag.pop("tost_p", np.nan) for g, mag in magnitude.items()},
                           redundant={g: bool(text) for g, text in removes.items()})
    hf = family.histories
    columns = list(dict.fromkeys(VERDICT_COLUMNS + PERIOD_COLUMNS + (HISTORY_COLUMNS if hf is not None else [])
                                 + HELD_OUT_COLUMNS))
    rows, fold_rows = [], []
    for g in gems:
        j = family.gem_index(g.name)
        view, pr = family.view(j), family.pairs[j]
        row = {c: math.nan for c in columns}
        row.update(gem=g.name, metric=g.metric, outcome=column, rope=th.rope, alpha=th.alpha,
                   rel_threshold=th.rel_threshold, redundancy=removes[g.name], window=th.window_text(),
                   market_path="conditional on one shared path" if cells.shared_path else "per-seed paths",
                   family_size=family.size, period="conditional on one validation period" if family.k_folds == 1 else "",
                   fold_effects="", tau_shared=False, folds=family.k_folds, held_out="", **magnitude[g.name])
        if hf is not None:
            row.update(folds=len(hf.folds), histories=len(hf.histories))
        row.update(family.pair_columns(j))
        row.update(view.columns())
        if pr.n:
            row.update(estimand=ESTIMAND, zero_turnover_share=zero_turnover_share(pr, cells, th.window_length),
                       **family.market[j])
        if view.pooled is not None:  # over histories: their spread and calendar part (what confirm plans with)
            row.update(view.pooled.calendar)
        row.update(held_out_columns(family.decision.held_out, family.test, j, view.discovery_verdict, column))
        row["reason"], row["why"] = compose_reason(view, row, th=th, metric_note=metric_note, m=family.size,
                                                   folds=family.periods)
        if selection is not None:
            row.update(final_verdict=view.final_verdict, final_ci_low=view.final_ci_low,
                       final_ci_high=view.final_ci_high,
                       final_rule=selection_rule(row, max(int(selection.get(g.name, 1)), 1)))
        rows.append(row)
        fold_rows += family.fold_rows(j, g.name)
    final = FINAL_COLUMNS[1:] if selection is not None else []
    return (pd.DataFrame(rows, columns=columns + final),
            pd.DataFrame(fold_rows, columns=HISTORY_ROW_COLUMNS if hf is not None else FOLD_ROW_COLUMNS), family)


def _magnitude_columns(cells: Cells, g: GemEntry, column: str, th: Thresholds) -> dict:
    """A gem's measured magnitude at its null: the signed-rank median and (1 - 2 alpha) interval of
    its per-seed excess, and the TOST p within +-`rel_threshold` (`tost_p`: delete's first half)."""
    mag = _unit_magnitudes(cells, g, column, th.window_length)
    if not mag.size:
        return {}
    r = rank_test(mag[None, :], rope=th.rel_threshold, tail=th.alpha)
    return dict(excess_n=int(mag.size), excess_median=float(r.estimate[0]), excess_ci_low=float(r.low[0]),
                excess_ci_high=float(r.high[0]), tost_p=float(r.p_tost[0]))


def _removes(redundancy: pd.DataFrame, gem: str) -> str:
    """The redundancy finding that makes a gem's verdict `delete` (a model feature removes its
    excess), in words; "" where none does."""
    red = redundancy[(redundancy["gem"] == gem) & (redundancy["finding"] == REMOVES)] if len(redundancy) else redundancy
    return "; ".join(f"{f} removes it" for f in red["feature"]) if len(red) else ""


def _unit_magnitudes(cells: Cells, g: GemEntry, column: str, k: int) -> np.ndarray:
    """Per unit: the mean over measured, non-diverged members of the last-k-epoch `column`."""
    t = cells.table
    mode = f"gems.{g.name}.mode"
    if mode not in t.columns or column not in cells.long.columns:
        return np.zeros(0)
    t = t[t[mode] == MEASURE]
    if not len(t):
        return np.zeros(0)
    from tune_gems.analysis.pairs.pairing import window_values

    vals = window_values(cells.long[cells.long["cell"].isin(t["cell"])], column,
                         pd.Series(t["final_epoch"].to_numpy(), index=t["cell"].to_numpy()), k)
    t = t.join(vals, on="cell")
    t = t[~t["diverged"]]
    return t.groupby("unit")["value"].mean().to_numpy(float)


def placebo_verdicts(
    cells: Cells,
    gems: list[GemEntry],
    members: pd.DataFrame,
    *,
    thresholds: Thresholds | None = None,
    metric: str = defaults.METRIC,
    **settings,
) -> pd.DataFrame:
    """The null arms by the same rule, each its own family of one (no Holm: the stricter check);
    above UNINFORMATIVE_TIES tied pairs an arm is not `informative`."""
    th = Thresholds.build(thresholds, **settings)
    column, _ = verdict_metric(members, metric)
    rows = []
    t = cells.table
    if AA_FACTOR in t.columns:
        for level in sorted(set(t[AA_FACTOR]) - {AA_BASE}):
            pr = paired(cells, AA_FACTOR, level, AA_BASE, column=column, k=th.window_length)
            if pr.n:
                rows.append(_null_row(pr, "-", column, th, f"a/a (replay stream {level.split('.')[0]})"))
    for g in gems:
        _, is_placebo = placebo_selectors(g, th.placebo_weight)
        mode = f"gems.{g.name}.mode"
        if mode not in cells.table.columns:
            continue
        pr = wiring_pairs(cells, g.name, column=column, k=th.window_length,
                          select=lambda t, f=is_placebo, md=mode: f(t) | (t[md] == MEASURE))
        if not pr.n:
            continue
        rows.append(_null_row(pr, g.name, column, th, "placebo"))
    return pd.DataFrame(rows, columns=PLACEBO_COLUMNS)


def _null_row(pr: Paired, gem: str, column: str, th: Thresholds, kind: str) -> dict:
    """One null arm's row of `placebo_verdicts`: the rule (`rules.decision.decide`) on a family of
    one, two-sided (no Holm: the stricter check), ties carrying no weight; its spread and ties."""
    dec = decide(Evidence([pr.diffs[None, :]]), replace(th, one_sided_keep=False))
    fin = pr.diffs[np.isfinite(pr.diffs)]
    q = np.percentile(fin, [25, 75]) if fin.size else [math.nan, math.nan]
    tied = float(np.mean(pr.diffs == 0.0))
    return dict(gem=gem, verdict=str(dec.verdict[0, 0]), n_seeds=pr.n, effect=float(dec.estimate[0, 0]),
                ci_low=float(dec.low[0, 0]), ci_high=float(dec.high[0, 0]), p_value=float(dec.p[0, 0]),
                tost_p=float(dec.p_tost[0, 0]), sd_diff=informative_spread(pr.diffs), iqr_diff=float(q[1] - q[0]),
                min_diff=float(fin.min()) if fin.size else math.nan, max_diff=float(fin.max()) if fin.size else math.nan,
                outcome=column, kind=kind, tied_share=tied,
                informative=tied <= UNINFORMATIVE_TIES and str(dec.verdict[0, 0]) != INSUFFICIENT)
