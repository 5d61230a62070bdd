"""The family of a design: every main effect it varies, its pairs, and one decision. The contrasts are every gem's
wiring and every other config key that differs between members at a common member seed. Judged in two families, one
contrast could read `keep wired` in one table and `inconclusive` in the other; so the family is built, paired and
decided once (`rules.decision.decide`): verdicts.csv's rows are its gem contrasts, factors.csv's all of them. Null arms
are the learner's null (placebo.csv), interactions their own family."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from tune_gems.analysis.pairs.pairing import Cells, Paired, paired
from tune_gems.analysis.pairs.selectors import MEASURE, WIRE, placebo_selectors
from tune_gems.analysis.rules.decision import MIN_POOLED_DF, Decision, Evidence, TestSegment, cannot_reach, decide
from tune_gems.analysis.rules.settings import DECISIVE, DELETE, EQUIVALENT, INSUFFICIENT, NOT_CONFIRMED, Thresholds
from tune_gems.analysis.rules.periods import FoldOverlap, informative_rank_test, is_tie
from tune_gems.analysis.rules.power import PowerInputs, PowerStatement, market_se_of, statement
from tune_gems.analysis.text import format_number
from tune_gems.analysis.verdicts.held_out import held_out_segment
from tune_gems.analysis.verdicts.readings import (
    INSUFFICIENT_BY, SEEDS, ContrastView, Decided, PooledReading, SeedReading,
)
from tune_gems.analysis.verdicts.history_verdicts import (
    ADD_HISTORIES, CALENDAR_COLUMNS, HISTORY, CalendarOf, HistoryFamily, history_family, history_period_text, history_power,
)
from tune_gems.analysis.verdicts.verdict_market_noise import (
    OK as MARKET_OK, UNAVAILABLE, EvalReturnsLookup, MarketEvidence, market_evidence, market_window,
)
from tune_gems.analysis.read.labels import HISTORY_NAME
from tune_gems.analysis.verdicts.walk_forward import (
    ADD_FOLDS, FOLD, FamilyFolds, fold_count, fold_text, gem_folds, median_fold_spread, overlap_for, pooled_power,
)
from tune_gems.contracts.gem_manifest import GemEntry

GEM, FACTOR = "gem", "factor"
"""The kinds of a contrast of the family (factors.csv's `kind`)."""
AA_FACTOR = "trainer.replay_stream"
"""The key an A/A arm differs in: the replay nuisance stream (0: the member seed's own draws). A
null arm (placebo.csv), not a main effect of the design."""
AA_BASE = "0.0"  # the canonical text (pairing._norm) of stream 0


# -- which contrasts a design has ---------------------------------------------------------------------


@dataclass(frozen=True)
class Contrast:
    """One row of the family: members with `key` == `hi` against `key` == `lo`, configs identical
    apart from `key` and `ignore`."""

    kind: str
    key: str
    hi: str
    lo: str
    ignore: tuple[str, ...] = ()
    wired_gem: str | None = None
    levels: int = 2

    @property
    def label(self) -> str:
        return f"{self.hi} vs {self.lo}"


def _level_order(v: str) -> tuple:
    """Booleans false < true, numbers by value, other text alphabetically (canonical texts)."""
    if v in ("false", "true"):
        return (0, float(v == "true"), v)
    try:
        return (0, float(v), v)
    except ValueError:
        return (1, 0.0, v)


def _not_placebo(gems: list[GemEntry], placebo_weight: float) -> Callable[[pd.DataFrame], pd.Series]:
    """A cell filter leaving out every gem's placebo arms (null arms are no factor's level)."""
    tests = [placebo_selectors(g, placebo_weight)[1] for g in gems]

    def keep(t: pd.DataFrame) -> pd.Series:
        out = pd.Series(True, index=t.index)
        for is_placebo in tests:
            out &= ~is_placebo(t)
        return out

    return keep


def design_contrasts(cells: Cells, gems: list[GemEntry], placebo_weight: float) -> list[Contrast]:
    """The family's contrasts: every gem's wiring, then every other key that differs at a common
    member seed, null arms left out."""
    out = [Contrast(GEM, f"gems.{g.name}.mode", WIRE, MEASURE, ignore=(f"gems.{g.name}.weight",)) for g in gems]
    t = cells.table
    if not len(t):
        return out
    t = t[_not_placebo(gems, placebo_weight)(t)]
    modes = {f"gems.{g.name}.mode" for g in gems}
    for key in cells.keys:
        if key in modes or key not in t.columns or key == AA_FACTOR:
            continue
        gem = next((g.name for g in gems if key == f"gems.{g.name}.weight"), None)
        sub = t[t[f"gems.{gem}.mode"] == WIRE] if gem and f"gems.{gem}.mode" in t.columns else t
        if not len(sub) or not (sub.groupby(["experiment", FOLD, "seed"])[key].nunique() > 1).any():
            continue
        levels = sorted(sub[key].unique(), key=_level_order)
        if len(levels) == 2:
            pairs = [(levels[1], levels[0])]
        else:
            counts = Counter(sub[key])
            ref = max(levels, key=lambda v: (counts[v], -levels.index(v)))
            pairs = [(v, ref) for v in levels if v != ref]
        out += [Contrast(FACTOR, key, hi, lo, wired_gem=gem, levels=len(levels)) for hi, lo in pairs]
    return out


def contrast_pairs(cells: Cells, c: Contrast, gems: list[GemEntry], th: Thresholds, *, column: str,
                   extra: Callable[[pd.DataFrame], pd.Series] | None = None) -> Paired:
    """The seed-paired differences of one contrast (`pairing.paired`), in the cells `extra` keeps.
    A gem's row pairs as its verdict does (only that gem's placebo arms left out)."""
    if c.kind == GEM:
        gem = c.key.split(".")[1]
        base = placebo_selectors(next(g for g in gems if g.name == gem), th.placebo_weight)[0]
    else:
        base = _not_placebo(gems, th.placebo_weight)

    def select(t: pd.DataFrame) -> pd.Series:
        keep = base(t)
        if c.wired_gem is not None:
            keep &= t[f"gems.{c.wired_gem}.mode"] == WIRE
        return keep & extra(t) if extra is not None else keep

    return paired(cells, c.key, c.hi, c.lo, column=column, k=th.window_length, ignore=c.ignore, select=select)


# -- the family, decided once ------------------------------------------------------------------------


@dataclass
class DesignFamily:
    """A design's family (module docstring) and its decision ([1, E]); `view(j)` reads one contrast."""

    contrasts: list[Contrast]
    pairs: list[Paired]
    decision: Decision
    k_folds: int
    folds: FamilyFolds | None
    power: dict | None
    market: list[dict]
    column: str
    seed_power: list[PowerStatement | None]
    """Per contrast with pairs, the power statement of the rule at one period (`rules.power.statement`:
    the seeds', with the market-noise part on one price history); over periods `power` states it."""
    cells: Cells
    thresholds: Thresholds
    test: TestSegment | None = None
    """The held-out test segment's effects, the rule's second stage (`held_out.held_out_segment`;
    None: the results have no test-segment metric)."""
    histories: HistoryFamily | None = None
    """The family's (history, fold) parts over H >= 2 price histories (None: one history)."""

    @property
    def periods(self) -> int:
        """The periods the pooled test spans: K folds, or H x K over several price histories."""
        return self.histories.periods if self.histories is not None else self.k_folds

    def pooled_at(self, j: int) -> bool:
        """Whether a pooled test decides contrast j (its pairs fall in folds or histories to pool)."""
        if self.histories is not None:
            return bool(self.histories.parts[j])
        return self.folds is not None and bool(self.folds.folds[j])

    @property
    def size(self) -> int:
        """How many contrasts the family's Holm runs over (those with a test)."""
        return int(np.isfinite(self.decision.p[0]).sum())

    def gem_index(self, gem: str) -> int | None:
        """The column of a gem's wiring contrast."""
        key = f"gems.{gem}.mode"
        return next((j for j, c in enumerate(self.contrasts) if c.kind == GEM and c.key == key), None)

    def fold_rows(self, j: int, name: str) -> list[dict]:
        """Contrast j's per-period rows under `name`, each fold's effect with its signed-rank
        interval at the level the sign-change test read it; none where no pooled test decides."""
        if not self.pooled_at(j):
            return []
        hf, level, rows = self.histories, self.decision.period.fold_level[0, j], []
        parts = hf.parts[j] if hf is not None else [((None, f), pr) for f, pr in self.folds.folds[j]]
        for (h, f), pr in parts:
            fd, slot = ((hf.data.folds[hf.histories.index(h)], hf.folds.index(f)) if hf is not None else
                        (self.folds, self.folds.fold_ids.index(f)))
            lvl = level[hf.histories.index(h) if hf is not None else slot]
            tail = lvl / 2 if np.isfinite(lvl) else self.thresholds.alpha / 2
            ri, ties = informative_rank_test(pr.diffs[None, :], tail=tail), int(is_tie(pr.diffs).sum())
            rows.append({"gem": name, **({HISTORY: h, HISTORY_NAME: hf.names[h]} if hf is not None else {}), "fold": int(f),
                         "effect": float(fd.theta[0, j, slot]), "ci_low": float(ri.low[0]), "ci_high": float(ri.high[0]),
                         "ci_level": 1 - 2 * tail, "seeds": int(fd.n_informative[0, j, slot]), "pairs": int(pr.n),
                         "ties": ties, "tied_share": ties / pr.n if pr.n else math.nan})
        return rows

    def pair_columns(self, j: int) -> dict:
        """What contrast j's pairs are, named as verdicts.csv and factors.csv name it: seeds, pairs,
        design, fix, divergence and the mean and spread of the finite differences."""
        pr = self.pairs[j]
        out = dict(n_seeds=pr.n, n_pairs=pr.n_pairs, design=pr.design(), fix=pr.fix, wired_diverged=pr.hi_diverged,
                   measured_diverged=pr.lo_diverged, wired_members=pr.hi_cells, measured_members=pr.lo_cells)
        if pr.n:
            fin = pr.diffs[np.isfinite(pr.diffs)]
            out.update(mean_effect=float(fin.mean()) if fin.size else math.nan,
                       sd_diff=informative_spread(pr.diffs[~is_tie(pr.diffs)]), divergence_rate=divergence_rate(pr))
        return out

    def view(self, j: int) -> ContrastView:
        """Contrast j's reading of the decision (`ContrastView`)."""
        dec, pr, ps = self.decision, self.pairs[j], self.seed_power[j]
        at = (0, j)
        paired = bool(pr.n)
        seeds = SeedReading(
            effect=float(dec.estimate[at]), ci_low=float(dec.low[at]), ci_high=float(dec.high[at]),
            ci_level=1 - float(dec.level[at]) if paired else math.nan, p_value=float(dec.p[at]),
            p_adjusted=float(dec.p_adjusted[at]), tost_p=float(dec.p_tost[at]), tost_p_adjusted=float(dec.tost_p_adjusted[at]),
            n_informative=int(dec.n_informative[at]) if paired else math.nan,
            tied_share=float(dec.tied_share[at]) if paired else math.nan,
            mde=ps.mde if ps else math.nan, mde_two_stage=ps.two_stage if ps else math.nan,
            seeds_needed=ps.seeds_needed if ps else math.nan,
            mde_floor=ps.floor if ps and ps.note else math.nan, power_note=ps.note if ps else "")
        pooled = self._pooled_reading(j)
        decided = self._decided(j, seeds, pooled)
        final_low, final_high = decided.decided_ci_low, decided.decided_ci_high
        if dec.final_low is not None and dec.verdict[at] in DECISIVE:  # the selection-adjusted gate decided
            final_low, final_high = dec.final_low[at], dec.final_high[at]
        return ContrastView(
            verdict=str(dec.verdict[at]), final_verdict=str(dec.final_verdict[at]),
            discovery_verdict=str(dec.discovery_verdict[at]), seed_verdict=str(dec.seed_verdict[at]),
            market_verdict=str(dec.market_verdict[at]), seeds=seeds, pooled=pooled, decided=decided,
            market_ci_low=float(dec.market_low[at]), market_ci_high=float(dec.market_high[at]),
            combined_ci_low=float(dec.combined_low[at]), combined_ci_high=float(dec.combined_high[at]),
            gate_applied=bool(dec.gate_applied[at]), final_ci_low=float(final_low), final_ci_high=float(final_high),
            magnitude_at_null=bool(dec.magnitude_at_null[at]),
            excess_tost_p_adjusted=float(dec.magnitude_p_adjusted[at]))

    def _decided(self, j: int, seeds: SeedReading, pooled: PooledReading | None) -> Decided:
        """Contrast j's `Decided`: the test that gave its word (its docstring says which)."""
        dec, at, word = self.decision, (0, j), str(self.decision.verdict[0, j])
        if not self.pairs[j].n:
            return Decided("no design", math.nan)
        if word == NOT_CONFIRMED:  # the second stage withheld the discovery: its one-sided test at alpha / m
            held = dec.held_out
            return Decided("held-out test segment", float(self.test.effect[at]), float(held.low[at]), float(held.high[at]),
                           1 - 2 * float(held.level[at]), float(np.fmin(1.0, held.p[at] * max(self.size, 1))))
        effect = pooled.pooled_effect if pooled is not None else seeds.effect
        if word == INSUFFICIENT:
            return Decided(INSUFFICIENT_BY + self._insufficient(j, seeds, pooled), effect)
        equivalence = word in (EQUIVALENT, DELETE)
        if bool(dec.gate_applied[at]):  # one history: the seed and market-noise intervals combined
            return Decided("seeds and market noise", effect, float(dec.combined_low[at]), float(dec.combined_high[at]),
                           seeds.ci_level, seeds.tost_p_adjusted if equivalence else seeds.p_adjusted)
        by = self.pooled_by(pooled) if pooled is not None else SEEDS
        if equivalence:  # the TOST's interval at its Holm level, inside +-rope
            return Decided(by, effect, float(dec.equivalence_low[at]), float(dec.equivalence_high[at]),
                           1 - 2 * float(dec.equivalence_level[at]),
                           pooled.pooled_tost_p_adjusted if pooled is not None else seeds.tost_p_adjusted)
        if pooled is not None:
            return Decided(by, effect, pooled.pooled_ci_low, pooled.pooled_ci_high, pooled.pooled_ci_level,
                           pooled.pooled_p_adjusted)
        return Decided(by, effect, seeds.ci_low, seeds.ci_high, seeds.ci_level, seeds.p_adjusted)

    def _insufficient(self, j: int, seeds: SeedReading, pooled: PooledReading | None) -> str:
        """Why a word is `insufficient data`, in a few words (`decided_by`)."""
        if pooled is not None and pooled.too_few:
            few_histories = self.histories is not None and bool(self.decision.histories.too_few_histories[0, j])
            return f"too few {'histories' if few_histories else 'periods'}"
        if pooled is not None and pooled.unestimable:
            return f"pooled df {format_number(pooled.pooled_df, '.3g')} < {MIN_POOLED_DF:g}"
        if cannot_reach(int(np.nan_to_num(seeds.n_informative)), 2 * self.thresholds.alpha):
            return "too few informative pairs"
        return "mostly tied"

    def pooled_by(self, pooled: PooledReading) -> str:
        """Which pooled test decided, in words (`decided_by`)."""
        if self.histories is not None:
            return f"pooled over {self.histories.shape_text()}"
        return f"pooled over {int(pooled.periods_informative)} periods"

    def _pooled_reading(self, j: int) -> PooledReading | None:
        """The pooled test's reading of contrast j (None where none decides it)."""
        if not self.pooled_at(j) or self.decision.pooled is None:
            return None
        pooled, rule, power, hf, th = self.decision.pooled, self.decision.period, self.power, self.histories, self.thresholds
        at = (0, j)
        level = float(rule.level[at])
        k_inf, shared, too_few = int(pooled["periods"][at]), bool(pooled["shared"][at]), bool(rule.too_few_periods[at])
        unestimable = str(rule.verdict[at]) == INSUFFICIENT and not too_few  # below MIN_POOLED_DF
        mde = {key: power[key][j] for key in ("mde", "two_stage", "seeds_needed", "floor", "note")}
        if unestimable:
            mde = dict(mde=math.nan, two_stage=math.nan, seeds_needed=math.nan, floor=math.nan,
                       note=f"no MDE: the pooled variance has {format_number(pooled['df'][at], '.3g')} df")
        parts = hf.parts[j] if hf is not None else self.folds.folds[j]
        effects = "; ".join(fold_text(r) for r in self.fold_rows(j, ""))
        if hf is not None:
            tied, n_inf = hf.tied_share[j], int(sum(fd.n_informative[0, j].sum() for fd in hf.data.folds))
            spread, period = math.nan, history_period_text(hf, self.decision.histories, j, th.min_periods)
        else:
            fam = self.folds
            tied, n_inf = fam.tied_share[j], int(fam.n_informative[0, j].sum())
            spread = median_fold_spread(fam.folds[j])
            period = (f"pooled over {k_inf} validation periods (random effects, HKSJ"
                      f"{', tau shared across the family' if shared else ''})" if not too_few else
                      f"too few periods (K={k_inf}, need >= {th.min_periods}; {ADD_FOLDS})")
        return PooledReading(
            pooled_effect=pooled["mu"][at], pooled_ci_low=rule.low[at], pooled_ci_high=rule.high[at],
            pooled_ci_level=1 - level if np.isfinite(level) else math.nan, pooled_p=pooled["p"][at],
            pooled_p_adjusted=rule.p_adjusted[at], pooled_tost_p_adjusted=rule.tost_p_adjusted[at],
            pooled_df=pooled["df"][at], tau_shared=shared, tau2=pooled["tau2"][at], i2=pooled["i2"][at],
            q_p=pooled["q_p"][at], q_p_adjusted=rule.q_p_adjusted[at], periods_informative=float(k_inf),
            fold_sd_diff=spread, var_seed=power["seed"][j], var_within=power["within"][j], var_period=power["period"][j],
            fold_overlap=power["overlap"][j], mde=mde["mde"], mde_two_stage=mde["two_stage"],
            seeds_needed=mde["seeds_needed"], mde_floor=mde["floor"],
            power_note=mde["note"], tied_share=tied, n_informative=n_inf, period_pairs=sum(pr.n for _, pr in parts),
            fold_effects=effects,
            period=f"the pooled variance has {format_number(pooled['df'][at], '.3g')} df (< {MIN_POOLED_DF:g}): its interval cannot be "
                   f"estimated ({ADD_HISTORIES if hf is not None else ADD_FOLDS})" if unestimable else period,
            too_few=too_few, unestimable=unestimable, calendar=self._calendar(j) if hf is not None else {})

    def _calendar(self, j: int) -> dict:
        """Over several histories, contrast j's spread between them and the calendar part they share
        (`history_verdicts.CALENDAR_COLUMNS`; NaN calendar columns: the histories share no period)."""
        cal, power = self.decision.histories.calendar, self.power
        shared = bool(cal.shared[0, j])
        return dict(zip(CALENDAR_COLUMNS, (power["history"][j], power["calendar"][j] if shared else math.nan,
                                           cal.df[0, j] if shared else math.nan, float(cal.periods[0, j]))))


@dataclass(frozen=True)
class Sources:
    """What an experiment brings to its family beyond the cells (saved returns, a search's
    selection, the folds' overlap, the histories' calendars and names)."""

    eval_returns: EvalReturnsLookup | None = None
    selection: dict[str, int] | None = None
    overlap: FoldOverlap | None = None
    calendar_of: CalendarOf | None = None
    history_names: dict[int, str] | None = None


def design_family(cells: Cells, gems: list[GemEntry], th: Thresholds, *, column: str, sources: Sources = Sources(),
                  magnitude_p: dict[str, float] | None = None, redundant: dict[str, bool] | None = None) -> DesignFamily:
    """The design's family decided once; `magnitude_p` and `redundant` per gem the halves of `delete`."""
    eval_returns, selection, overlap = sources.eval_returns, sources.selection, sources.overlap
    contrasts = design_contrasts(cells, gems, th.placebo_weight)
    prs = [contrast_pairs(cells, c, gems, th, column=column) for c in contrasts]
    # a key of more than two levels that never pairs (a searched weight: a level per trial) gets one
    # `insufficient: confounded` row, not one per level
    paired_keys, seen, keep = {c.key for c, pr in zip(contrasts, prs) if pr.n}, set(), []
    for j, c in enumerate(contrasts):
        unpaired = c.kind == FACTOR and c.levels > 2 and c.key not in paired_keys
        keep += [j] if not (unpaired and c.key in seen) else []
        seen |= {c.key} if unpaired else set()
    contrasts, prs = [contrasts[j] for j in keep], [prs[j] for j in keep]
    k_folds = fold_count(cells)
    hf = history_family(prs, cells, sources.calendar_of, sources.history_names)  # several price histories: the nested rule decides (None: one history)
    fam = gem_folds(prs, cells) if k_folds > 1 and hf is None else None  # the same pairs inside each fold

    def market(tail: np.ndarray):
        """Each compared contrast's market-noise interval at its seed interval's per-side tail, and
        the evidence's columns per contrast (the verdicts' market-noise columns)."""
        lo, hi, ok = np.full(tail.shape, np.nan), np.full(tail.shape, np.nan), np.zeros(tail.shape, bool)
        table: list[dict] = [{} for _ in prs]
        for j, pr in enumerate(prs):
            if not pr.n:
                continue
            k_market = market_window(pr, th)
            evidence = (market_evidence(pr, cells, eval_returns, column=column, k=k_market,
                                        confidence=1 - 2 * float(tail[0, j]), n_boot=th.n_boot, seed=th.seed)
                        if k_market is not None else
                        MarketEvidence(f"{UNAVAILABLE}: the pairs' verdict windows differ in length ({th.window_text()})"))
            table[j] = evidence.columns()
            if evidence.ok:
                lo[0, j], hi[0, j], ok[0, j] = evidence.interval.low, evidence.interval.high, True
        return lo, hi, ok, table

    def gem_of(c: Contrast) -> str | None:
        return c.key.split(".")[1] if c.kind == GEM else None

    test = held_out_segment(prs, cells, column)  # the second stage's evidence, once, from the same pairs
    mags = magnitude_p or {}
    reds = redundant or {}
    chosen = selection or {}
    ev = Evidence(diffs=[pr.diffs[None, :] for pr in prs], wired=[pr.hi_cells for pr in prs],
                  measured=[pr.lo_cells for pr in prs],
                  magnitude_p=np.array([[mags.get(gem_of(c), math.nan) for c in contrasts]]),
                  redundant=[bool(reds.get(gem_of(c), False)) for c in contrasts],
                  diverged=np.array([[bool(pr.hi_diverged or pr.lo_diverged) for pr in prs]]),
                  market=market, periods=None if fam is None else fam.data,
                  histories=None if hf is None else hf.data,
                  fold_corr=overlap_for(overlap, fam.fold_ids) if fam is not None else 0.0, test=test,
                  selection=None if selection is None else [max(int(chosen.get(gem_of(c), 1)), 1) for c in contrasts])
    dec = decide(ev, th)
    market_columns = list(dec.market_table or [{} for _ in prs])
    power = (pooled_power(fam, dec.pooled, th) if fam is not None else
             history_power(hf, dec, th) if hf is not None else None)
    m = int(np.isfinite(dec.p[0]).sum())
    two_sided = th.alpha * (2 if th.one_sided_keep else 1) / max(m, 1)  # the seed rule's level, as a two-sided test
    sides = 1 if th.one_sided_keep else 2
    seed_power: list[PowerStatement | None] = []
    for j, pr in enumerate(prs):
        if not pr.n:
            seed_power.append(None)
            continue
        informative = pr.diffs[~is_tie(pr.diffs)]
        mk = market_columns[j]
        market_se = (market_se_of(mk["market_ci_low"], mk["market_ci_high"], 2 * float(dec.level[0, j]) / sides)
                     if mk.get("market_noise") == MARKET_OK else 0.0)
        seed_power.append(statement(PowerInputs(int(dec.n_informative[0, j]), informative_spread(informative),
                                                divergence_rate(pr), market_se=max(market_se, 0.0)),
                                    th.rope, two_sided, th.power, tied=float(dec.tied_share[0, j]),
                                    test_level=th.alpha / max(m, 1)))
    return DesignFamily(contrasts, prs, dec, k_folds, fam, power, market_columns, column, seed_power, cells, th, test, hf)


def informative_spread(d: np.ndarray) -> float:
    """The sd of the finite differences among `d` (NaN with fewer than two)."""
    fin = d[np.isfinite(d)]
    return float(np.std(fin, ddof=1)) if fin.size > 1 else math.nan


def divergence_rate(pr: Paired) -> float:
    """The share of one side of a pair diverging (both sides pooled): what the MDE and the seeds needed account for."""
    return float((pr.hi_diverged + pr.lo_diverged) / (2 * pr.n_pairs)) if pr.n_pairs else 0.0
