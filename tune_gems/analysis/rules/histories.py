"""Several price histories: the pooled rule with periods nested in histories.

Why. On one history the part its folds share (the training rows they overlap on, a slow regime)
cannot be estimated: the pooled verdict is conditional on that history, and the fold overlap
has to be put in by an assumed correlation (`rules.overlap`). With H histories (each its own
market, normalisation, folds and test segment) the history becomes the replication unit, and
the spread between histories, which carries each history's common part, is measured rather than
assumed. So the rule is two random-effects stages:

1. **each history's effect over its folds**: the family's fold data of history h pooled as the
   one-history rule pools it (`period_family.pool_fold_data`: random effects, HKSJ, tau^2
   shared across the family, the seeds' share common to the history's folds added whole), with
   the overlap of its folds (`fold_corr`, `rules.overlap`) in its variance;
2. **the histories' effects over the histories**: `pooling.pool_family` again, the H history
   effects as its "periods": DerSimonian-Laird tau_H^2 between histories, the HKSJ scale with
   the histories' degrees of freedom (H - 1, or m (H - 1) shared across the family when the
   contrasts agree, cut by their residual correlation), never narrower than DerSimonian-Laird,
   Holm over the family (`periods.decide_periods`, with the histories as its periods: a sign
   change between histories shown by their own intervals reads `inconsistent`, fewer than
   `min_histories` with an effect `insufficient data`);
3. **seed-paired across histories**: seed index s starts from the same weights in every history
   and fold, so the seeds' part common to every history and fold (the seeds x (history, fold)
   ANOVA, `pooling.seed_anova` over all H K cells) does not average out over histories: stage 2
   splits it off each history's variance (tau_H^2 and the scale read the rest) and adds it whole,
   as `pool_family` does for folds. The part a seed shares only inside one history stays in that
   history's variance (it varies between histories).

A history's degrees of freedom enter stage 2 as its variance's: `pool_family` reads a variance's
df as `FOLD_VAR_DF` (n - 1) of n pairs, so a history's stage-1 df are passed as n = df /
`FOLD_VAR_DF` + 1.

The power statement is `power.history_mde` (its components: `history_components`). Arrays in,
words out: the calibration (`decision_calibration`) runs these on thousands of simulated families.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tune_gems.analysis import defaults
from tune_gems.analysis.rules.period_family import FoldData, fold_components, fold_data, pool_fold_data
from tune_gems.analysis.rules.periods import PeriodDecision, decide_periods
from tune_gems.analysis.rules.pooling import FOLD_VAR_DF, pool_family, seed_anova
from tune_gems.analysis.rules.power import HistoryComponents


@dataclass(frozen=True)
class HistoryData:
    """A family's data over H histories: `folds` one `FoldData` per history ([S, m, K_h]); per
    contrast [S, m] the seeds' part common to every history and fold `seed_var` (sigma_c^2 / n),
    its degrees of freedom `seed_df` and its share of one seed's variance `seed_share`."""

    folds: tuple[FoldData, ...]
    seed_var: np.ndarray
    seed_df: np.ndarray
    seed_share: np.ndarray


@dataclass(frozen=True)
class HistoryPooled:
    """The two stages: `by_history` each history's pooled family (`pool_fold_data`'s dict, [S,
    m]), `pooled` the family over the histories (`pool_family`'s dict, [S, m])."""

    by_history: tuple[dict, ...]
    pooled: dict


def history_data(d) -> HistoryData:
    """The data of per-seed differences d [S, m, H, K, n] whose seeds are aligned across every
    history and fold (NaN: no pair; a history with fewer folds pads with NaN)."""
    d = np.asarray(d, float)
    s, m, h, k, n = d.shape
    folds = tuple(fold_data(d[:, :, j]) for j in range(h))
    anova = [seed_anova(d[:, g].reshape(s, h * k, n)) for g in range(m)]
    with np.errstate(invalid="ignore", divide="ignore"):
        seed_var = np.stack([np.where(a["seeds"] >= 2, np.nan_to_num(a["sigma_c2"]) / np.maximum(a["seeds"], 1), 0.0)
                             for a in anova], 1)
    return HistoryData(folds, seed_var, np.stack([a["df"] for a in anova], 1), np.stack([a["share"] for a in anova], 1))


def _per_history(fold_corr, h: int) -> list:
    """`fold_corr` per history: one value (number or matrix) for all, or a sequence of H."""
    if isinstance(fold_corr, (list, tuple)):
        if len(fold_corr) != h:
            raise ValueError(f"fold_corr: {len(fold_corr)} entries for {h} histories")
        return list(fold_corr)
    return [fold_corr] * h


def pool_histories(hd: HistoryData, *, rope: float, fold_corr=0.0, share: bool = defaults.SHARE_TAU,
                   one_sided: bool = False, isolate_flagged: bool = defaults.ISOLATE_FLAGGED) -> HistoryPooled:
    """The two stages (module docstring) on a family's history data; `fold_corr` the overlap of
    each history's folds (a number or matrix for all, or one per history; `rules.overlap`)."""
    h = len(hd.folds)
    stage1 = tuple(pool_fold_data(fd, rope=rope, share=share, one_sided=one_sided, fold_corr=rho,
                                  isolate_flagged=isolate_flagged)
                   for fd, rho in zip(hd.folds, _per_history(fold_corr, h)))
    theta = np.stack([r["mu"] for r in stage1], -1)  # [S, m, H]: NaN where a history has no pooled effect
    var = np.stack([r["se"] ** 2 for r in stage1], -1)
    df = np.stack([r["df"] for r in stage1], -1)
    with np.errstate(invalid="ignore", divide="ignore"):
        share_common = np.clip(np.nan_to_num(hd.seed_var[..., None] / var), 0.0, 1.0)
        # the seeds' part common to every history: one share per contrast, its mean over the histories
        c_share = np.where(np.isfinite(theta), share_common, 0.0).sum(-1) / np.maximum(np.isfinite(theta).sum(-1), 1)
        fold_n = np.where(np.isfinite(theta), df / FOLD_VAR_DF + 1.0, np.nan)
    pooled = pool_family(theta, var, seed_share=c_share, seed_var=hd.seed_var, rope=rope, share=share,
                         one_sided=one_sided, fold_n=fold_n, seed_df=hd.seed_df, isolate_flagged=isolate_flagged)
    pooled["history_effect"], pooled["history_p"] = theta, np.stack([r["p_two_sided"] for r in stage1], -1)
    return HistoryPooled(stage1, pooled)


def decide_histories(hd: HistoryData, *, alpha: float, rope: float, fold_corr=0.0, tested=None, seed_verdict=None,
                     removable=None, share: bool = defaults.SHARE_TAU, one_sided: bool = False,
                     min_histories: int = defaults.MIN_HISTORIES,
                     isolate_flagged: bool = defaults.ISOLATE_FLAGGED) -> tuple[HistoryPooled, PeriodDecision]:
    """(the two stages, `pool_histories`; the period rule with the histories as its periods,
    `periods.decide_periods`: Holm over the family) on one family's history data."""
    hp = pool_histories(hd, rope=rope, fold_corr=fold_corr, share=share, one_sided=one_sided,
                        isolate_flagged=isolate_flagged)
    r = hp.pooled
    shape = r["mu"].shape
    tested = np.ones(shape, bool) if tested is None else np.broadcast_to(np.asarray(tested, bool), shape)
    rule = decide_periods(tested, r["p"], r["p_tost"], r["mu"], r["se"], r["se_fixed"], r["df"], r["q_p"], r["periods"],
                          r["history_effect"], r["history_p"], alpha=alpha, seed_verdict=seed_verdict,
                          removable=removable, min_periods=min_histories, one_sided=one_sided,
                          df_fixed=r["df_fixed"])
    return hp, rule


def history_components(hd: HistoryData, hp: HistoryPooled, fold_corr=0.0) -> HistoryComponents:
    """The variance parts of the nested rule's pooled effect ([S, m] each; `power.HistoryComponents`):
    `history` the stage-2 tau_H^2, `period` and `within` the mean over histories of each history's
    fold components (`period_family.fold_components` at its stage-1 tau^2), `seed` the share
    common to every history and fold x within, `overlap` the mean of the folds' n2 / n1 that
    `fold_corr` stands for (a number rho: rho / (1 - rho); a matrix: the mean of its diagonal's)."""
    comps = [fold_components(fd, r["tau2"]) for fd, r in zip(hd.folds, hp.by_history)]
    with np.errstate(invalid="ignore"):
        period = np.nanmean(np.stack([np.asarray(c.period, float) for c in comps]), 0)
        within = np.nanmean(np.stack([np.asarray(c.within, float) for c in comps]), 0)
    lam = []
    for rho in _per_history(fold_corr, len(hd.folds)):
        r = np.asarray(rho, float)
        diag = r if r.ndim == 0 else np.diagonal(r, axis1=-2, axis2=-1)
        lam.append(float(np.mean(diag / (1.0 - diag))))
    return HistoryComponents(history=hp.pooled["tau2"], period=period, within=within,
                             seed=np.nan_to_num(hd.seed_share) * within, overlap=float(np.mean(lam)))
