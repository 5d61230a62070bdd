"""Verdicts over periods (docs/analysis.md "Verdicts over periods"). On one price history every seed sees the same
validation period, so the seed interval cannot see whether the effect holds in another. With walk-forward folds the
periods are replicated and the pooled test decides (`rules.periods.decide_periods`); with one fold a verdict must hold
for the seed and market-noise intervals combined (each alone is up to ~3x too liberal), and says it is conditional on
one period. This layer gathers the evidence and writes the reasons; the decisions are the rule module's."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from tune_gems.analysis.pairs.pairing import Cells, Paired, by_fold
from tune_gems.analysis.rules.periods import (
    FoldData, FoldOverlap, PooledComponents, fold_components, fold_estimates, fold_overlap, informative_variance,
    is_tie, nb_factor, seed_anova, shared_seed_variance,
)
from tune_gems.analysis.rules.settings import Thresholds
from tune_gems.analysis.text import format_number
from tune_gems.analysis.rules.power import PowerInputs, statement

FOLD = "fold"

PERIOD_COLUMNS = ["folds", "period", "fold_effects", "pooled_effect", "pooled_ci_low", "pooled_ci_high",
                  "pooled_ci_level", "pooled_p", "pooled_p_adjusted", "pooled_tost_p_adjusted", "pooled_df",
                  "tau_shared", "tau2", "i2", "q_p", "q_p_adjusted", "periods_informative", "fold_sd_diff",
                  "var_seed", "var_within", "var_period", "fold_overlap", "combined_ci_low", "combined_ci_high"]
"""Columns this layer adds to verdicts.csv (docs/analysis.md "Verdicts over periods")."""

ONE_PERIOD = "conditional on one validation period (data.folds: 1)"
"""What every verdict on one validation period says."""
ADD_FOLDS = "add folds: data.folds.k or the purged scheme"
"""What a verdict with too few periods says to do."""


def experiment_overlap(folds: pd.DataFrame | None) -> FoldOverlap | None:
    """The overlap of the experiment's folds (`rules.periods.fold_overlap` on `Experiment.folds.table`), each layout
    read on its own and per pair of folds the largest correlation any gives (the cautious one); None without a layout
    (`FoldLayouts.uncorrected` says why)."""
    if folds is None or not len(folds):
        return None
    by = [c for c in ("experiment", "trial_id", "history") if c in folds.columns]
    found = [fold_overlap(g.drop(columns=["history"], errors="ignore")) for _, g in folds.groupby(by, sort=False, dropna=False)]
    ids = tuple(sorted({f for ov in found for f in ov.folds}))
    corr = np.zeros((len(ids), len(ids)))
    for ov in found:
        at = [ids.index(f) for f in ov.folds]
        corr[np.ix_(at, at)] = np.maximum(corr[np.ix_(at, at)], ov.corr)
    return FoldOverlap(ids, corr, nb_factor(corr) if len(ids) else 1.0)


NOT_CORRECTED = "fold overlap not corrected"
"""What a verdict over several folds says when the experiment's fold layout could not be read."""


def state_uncorrected(table: pd.DataFrame, why: Sequence[str]) -> pd.DataFrame:
    """`table` with every row over several folds saying its overlap was not corrected (NOT_CORRECTED, `fold_overlap`
    NaN, never 1.0); rows over several histories are left alone: their spread measures what a history's folds share."""
    if not why or "folds" not in table.columns or not len(table):
        return table
    several = pd.to_numeric(table["folds"], errors="coerce") >= 2
    if "histories" in table.columns:
        several &= ~(pd.to_numeric(table["histories"], errors="coerce") >= 2)
    rows = table.index[several]
    text = f"; {NOT_CORRECTED} ({'; '.join(why)})"
    table.loc[rows, "fold_overlap"] = np.nan
    for col in ("reason", "why"):
        if col in table.columns:
            table.loc[rows, col] = table.loc[rows, col].fillna("").astype(str) + text
    return table


def overlap_for(overlap: FoldOverlap | None, fold_ids: Sequence[int]) -> np.ndarray | float:
    """The overlap's correlation matrix on the family's folds, in its fold order (`Evidence.fold_corr`);
    a fold the table lacks shares nothing; 0.0 without an overlap."""
    if overlap is None:
        return 0.0
    at = [overlap.folds.index(f) if f in overlap.folds else None for f in fold_ids]
    out = np.zeros((len(fold_ids), len(fold_ids)))
    for a, i in enumerate(at):
        for b, j in enumerate(at):
            if i is not None and j is not None:
                out[a, b] = overlap.corr[i, j]
    return out


def fold_count(cells: Cells) -> int:
    """How many walk-forward folds the compared members span (1 without a `fold` column)."""
    t = cells.table
    return int(t[FOLD].nunique()) if FOLD in t.columns and len(t) else 1


def _fmt(x, f: str = "+.3g") -> str:
    return format_number(x, f, missing="-")


def _aligned(folds: list[tuple[int, Paired]]) -> np.ndarray:
    """[1, K, n] differences of the units (member seeds) that every fold pairs (n may be 0)."""
    common = sorted(set.intersection(*(set(pr.units) for _, pr in folds)))
    rows = [[dict(zip(pr.units, pr.diffs))[u] for u in common] for _, pr in folds]
    return np.asarray(rows, float).reshape(1, len(folds), len(common))


@dataclass
class FamilyFolds:
    """The family's fold data as the period rule reads it: one column per gem with folds (NaN: no informative pair)."""

    rows: list  # verdict-table index of each gem column
    folds: list[list[tuple[int, Paired]]]
    fold_ids: list[int]
    theta: np.ndarray  # [1, m, K]
    var: np.ndarray
    p: np.ndarray
    n_informative: np.ndarray
    tied_share: np.ndarray  # [m]: ties over every fold pair of the gem
    seed_var: np.ndarray  # [1, m]: sigma_c^2 / n (`shared_seed_variance`)
    seed_share: np.ndarray  # [1, m]: the seeds' common share of a fold's variance (`seed_anova`)
    seed_df: np.ndarray  # [1, m]: the seed share's degrees of freedom (the ANOVA's)
    sample_var: np.ndarray  # [1, m, K]: the sample variance of a fold's informative differences

    @property
    def data(self) -> FoldData:
        """The arrays the period rule reads (`rules.periods`)."""
        return FoldData(self.theta, self.var, self.p, self.n_informative, self.seed_var, self.seed_share, self.seed_df,
                        self.sample_var)


def folds_family(rows: list, per_contrast: list[list[tuple[int, Paired]]], fold_ids: list[int]) -> FamilyFolds:
    """The family's fold data from each contrast's (fold, seed-paired differences) list: the
    design family's (`gem_folds`) and the factor table's (`factors.py`) go through this one function."""
    per_gem = per_contrast
    slot = {f: j for j, f in enumerate(fold_ids)}
    m, k = len(rows), len(fold_ids)
    theta, var, p, n_inf, sample = (np.full((1, m, k), np.nan) for _ in range(5))
    n_inf[:] = 0
    tied, seed_var, share, seed_df = np.full(m, np.nan), np.zeros((1, m)), np.zeros((1, m)), np.full((1, m), np.inf)
    for j, folds in enumerate(per_gem):
        ties, pairs = 0, 0
        for f, pr in folds:
            est = fold_estimates(pr.diffs[None, :])
            theta[0, j, slot[f]], var[0, j, slot[f]], p[0, j, slot[f]] = est["theta"][0], est["var"][0], est["p"][0]
            n_inf[0, j, slot[f]] = est["n_informative"][0]
            sample[0, j, slot[f]] = informative_variance(pr.diffs)
            ties, pairs = ties + int(is_tie(pr.diffs).sum()), pairs + pr.n
        tied[j] = ties / pairs if pairs else math.nan
        aligned = _aligned(folds) if len(folds) >= 2 else np.zeros((1, len(folds), 0))
        if aligned.shape[2]:
            seed_var[0, j] = shared_seed_variance(aligned)[0]
            anova = seed_anova(aligned)
            share[0, j], seed_df[0, j] = anova["share"][0], anova["df"][0]
    return FamilyFolds(rows, per_gem, fold_ids, theta, var, p, n_inf, tied, seed_var, share, seed_df, sample)


FOLD_ROW_COLUMNS = ["gem", "fold", "effect", "ci_low", "ci_high", "ci_level", "seeds", "pairs", "ties", "tied_share"]
"""The per-fold rows of the period rule (`family.DesignFamily.fold_rows`): per gem and fold the
effect the rule pooled, its signed-rank interval at the fold's Holm level (the one the sign
change test reads), the informative pairs (`seeds`), every pair, the ties and their share."""


def fold_text(r) -> str:
    """One fold row (of a history) in words (verdicts.csv's `fold_effects` joins them)."""
    where = f"{r['history_name']} fold {int(r['fold'])}" if "history_name" in r else f"fold {int(r['fold'])}"
    if not np.isfinite(r["effect"]):
        return f"{where}: every pair tied ({int(r['pairs'])} seeds)"
    ties = f", {int(r['ties'])} tie" if r["ties"] else ""
    return f"{where}: {_fmt(r['effect'])} [{_fmt(r['ci_low'], '.3g')}, {_fmt(r['ci_high'], '.3g')}] ({int(r['pairs'])} seeds{ties})"


def gem_folds(prs: list[Paired], cells: Cells) -> FamilyFolds:
    """The fold data of a family of contrasts: each comparison's pairs inside each fold (`pairing.by_fold`)."""
    return folds_family(list(range(len(prs))), [by_fold(pr, cells) for pr in prs],
                        sorted(int(f) for f in cells.table[FOLD].unique()))


def pooled_power(fam: FamilyFolds, pooled: dict, th: Thresholds) -> dict[str, np.ndarray]:
    """Per gem column: the pooled rule's power statement (`rules.power.statement` at the first Holm
    step, the folds' overlap carried), its components (verdicts.csv's var_* columns, `tune-gems
    confirm`'s target) and `inputs` (what `tune-gems plan` prices designs with)."""
    comp = fold_components(fam.data, pooled["tau2"])
    m = len(fam.rows)
    tested = int(np.isfinite(pooled["p"][0]).sum())
    level = th.alpha / max(tested, 1)
    out = {key: np.full(m, np.nan) for key in ("mde", "two_stage", "seeds_needed", "floor", "seed", "within", "period")}
    out["note"] = np.full(m, "", dtype=object)
    out["inputs"] = [None] * m
    out["overlap"] = pooled.get("overlap", np.ones_like(pooled["mu"]))[0]  # F, verdicts.csv's fold_overlap
    shared = np.asarray(pooled["shared"][0], bool)
    for j in range(m):
        k, df = int(pooled["periods"][0, j]), float(pooled["df"][0, j])
        f = float(out["overlap"][j])  # the folds' overlap as the pooled variance carries it: F = 1 + K lambda
        lam = (f - 1.0) / k if math.isfinite(f) and f > 1.0 and k > 0 else 0.0
        c = PooledComponents(float(comp.period[0, j]), float(comp.within[0, j]), float(comp.seed[0, j]))
        out["seed"][j], out["within"][j], out["period"][j] = c.seed, c.within, c.period
        inf = fam.n_informative[0, j]
        n = float(inf[inf > 0].mean()) if (inf > 0).any() else math.nan
        if not (np.isfinite(c.period) and np.isfinite(c.within) and k >= 2 and np.isfinite(df) and n > 0):
            continue
        out["inputs"][j] = PowerInputs(n, folds=k, tau2=c.period, within=c.within, seed=c.seed, overlap=lam,
                                       contrasts=int(shared.sum()) if shared[j] else 1)
        ps = statement(out["inputs"][j], th.rope, level, th.power, tied=fam.tied_share[j], one_sided=th.one_sided_keep)
        out["mde"][j], out["floor"][j], out["seeds_needed"][j], out["note"][j] = ps.mde, ps.floor, ps.seeds_needed, ps.note
        out["two_stage"][j] = ps.two_stage
    return out


def median_fold_spread(folds: list[tuple[int, Paired]]) -> float:
    """The median over folds of the sd of a fold's finite informative per-seed differences (the
    shape of one fold's comparison, for the period calibration)."""
    sds = []
    for _, pr in folds:
        d = pr.diffs[np.isfinite(pr.diffs) & ~is_tie(pr.diffs)]
        if d.size > 1:
            sds.append(float(np.std(d, ddof=1)))
    return float(np.median(sds)) if sds else math.nan
