"""Every factor of a design judged (issue 30, item 4): gems and non-gem factors in one family.

Why. The largest effects of a factorial are often not gems: on real S&P 500 closes NoisyNets
(`model.noisy`) and spectral norm moved the validation alpha Sharpe more than any gem, and the
verdict table said nothing about them. So each factor of a design gets its main effect with the
gems' machinery and words:

- **which factors**: every gem's mode (wire vs measure, its weight belonging to the wired side:
  the gem's own comparison, `selectors.wiring_pairs`), and every other config key that differs
  between members at a common member seed (`model.*`, `trainer.*` such as `lr` and
  `replay_stream`, `gems.<g>.weight` among the members wiring g, any `arms.factors` key or an
  `arms.list` entry that differs from another in one key). A key with two levels is one contrast
  (true vs false, the larger vs the smaller value); with more, each level against the most
  common one. Placebo arms are null arms (placebo.csv), never a factor's level;
- **the main effect**: `pairing.paired` on the key, configs identical except it, paired by member
  seed within a fold (a factorial's simple effects averaged per seed over the other factors'
  levels);
- **the rule**: one family of gems and factors together, Holm over all of them
  (`rules.seed.decide_family` on the informative pairs), then at K = 1 on one price history the
  market gate and the one-period gate (`rules.gates`, with each contrast's market-noise interval,
  `verdict_market_noise.market_evidence`), at K >= 2 the period rule on the family's fold data
  (`walk_forward.folds_family`, `rules.period_family.decide_fold_data`: the gem verdicts' pooled
  test, tau shared across the family): `rules.decision.decide`, the one function the table,
  the gem verdicts and every calibration run; the MDE, floor and advice of that test
  (`walk_forward.pooled_power`);
- **interactions**: for every two two-level contrasts of a full factorial, the per-seed
  difference of one's effect between the other's levels, Holm over the interactions (shown,
  not a verdict);
- **nothing left out**: every row is written and printed, ordered by the size of its effect; a
  key that differs but never pairs reads `insufficient: confounded` with the fix.

A gem's row here is judged in the larger family (gems and factors), so it can be more cautious
than its row of verdicts.csv (Holm over the gems alone): `gem_table_verdict` shows that one
beside it, and `delete` (the gem's measured magnitude) is verdicts.csv's alone.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from itertools import combinations
from typing import Callable

import numpy as np
import pandas as pd

from tune_gems.analysis.rules.decision import Decision, Evidence, decide
from tune_gems.analysis.pairs.pairing import Cells, Paired, paired
from tune_gems.analysis.text import format_number
from tune_gems.analysis.rules.power import PowerInputs, market_se_of, mde
from tune_gems.analysis.rules.seed import decide_family
from tune_gems.analysis.rules.thresholds import Thresholds
from tune_gems.analysis.rules.words import (
    DECISIVE, EQUIVALENT, HARMFUL, HETEROGENEOUS, INCONCLUSIVE, INCONSISTENT, INSUFFICIENT, KEEP,
)
from tune_gems.analysis.pairs.selectors import MEASURE, WIRE, placebo_selectors
from tune_gems.analysis.verdicts.verdict_market_noise import EvalReturnsLookup, market_evidence, market_window
from tune_gems.analysis.verdicts.history_verdicts import HistoryFamily, history_family, history_power
from tune_gems.analysis.verdicts.walk_forward import FOLD, FamilyFolds, fold_count, gem_folds, pooled_power
from tune_gems.contracts.gem_manifest import GemEntry
from tune_gems.stats.inference import holm_levels, rank_test

GEM, FACTOR, INTERACTION = "gem", "factor", "interaction"
"""The kinds of a factors.csv row."""
SHOWN, NOT_SHOWN = "interaction shown", "no interaction shown"
"""An interaction's finding (Holm over the interactions): a statement, not a verdict."""

FACTOR_COLUMNS = [
    "kind", "factor", "contrast", "verdict", "reading", "seed_verdict", "gem_table_verdict", "n_seeds", "n_pairs",
    "effect", "mean_effect", "ci_low", "ci_high", "ci_level", "p_value", "p_adjusted", "tost_p_adjusted",
    "family_size", "mde", "sd_diff", "divergence_rate", "folds", "fold_effects", "pooled_effect", "pooled_ci_low",
    "pooled_ci_high", "pooled_p_adjusted", "tau2", "i2", "q_p_adjusted", "periods_informative", "mde_floor",
    "power_note", "tied_share", "market_noise", "market_ci_low", "market_ci_high", "combined_ci_low",
    "combined_ci_high", "design", "fix",
]
"""The columns of factors.csv (docs/results.md)."""


# -- which contrasts a design has ---------------------------------------------------------------------


@dataclass(frozen=True)
class Contrast:
    """One row of the family: members with `key` == `hi` against `key` == `lo`, configs
    identical apart from `key` and `ignore`; `wired_gem` (a gem's weight): among members wiring
    that gem only; `levels` how many levels the key has."""

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


def _weight_gem(key: str, gems: list[GemEntry]) -> str | None:
    for g in gems:
        if key == f"gems.{g.name}.weight":
            return g.name
    return None


def design_contrasts(cells: Cells, gems: list[GemEntry], placebo_weight: float) -> list[Contrast]:
    """The family's contrasts: every gem's wiring (as verdicts.csv pairs it), then every other
    key that differs between members at a common member seed (module docstring)."""
    out = [Contrast(GEM, f"gems.{g.name}.mode", WIRE, MEASURE, ignore=(f"gems.{g.name}.weight",)) for g in gems]
    t = cells.table
    if not len(t):
        return out
    t = t[_not_placebo(gems, placebo_weight)(t)]
    modes = {f"gems.{g.name}.mode" for g in gems}
    for key in cells.keys:
        if key in modes or key not in t.columns:
            continue
        gem = _weight_gem(key, gems)
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


# -- the table --------------------------------------------------------------------------------------


def _spread(d: np.ndarray) -> float:
    fin = d[np.isfinite(d)]
    return float(np.std(fin, ddof=1)) if fin.size > 1 else math.nan


def _fmt(x, f: str = "+.3g") -> str:
    return format_number(x, f, missing="nan")


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
    return "not judged: no members differ in this key alone at a common seed"


def factor_table(cells: Cells, gems: list[GemEntry], *, thresholds: Thresholds | None = None, column: str,
                 eval_returns: EvalReturnsLookup | None = None, verdicts: pd.DataFrame | None = None) -> pd.DataFrame:
    """factors.csv: one row per gem and factor contrast of the design (the family, `rules.decision.decide`),
    then one per interaction of a full factorial (module docstring). `column` the verdict metric;
    `verdicts` the gem verdict table (its verdict is shown beside each gem's row)."""
    th = thresholds if thresholds is not None else Thresholds()
    contrasts = design_contrasts(cells, gems, th.placebo_weight)
    prs = [contrast_pairs(cells, c, gems, th, column=column) for c in contrasts]
    contrasts, prs = _one_row_per_unpaired_key(contrasts, prs)
    k_folds = fold_count(cells)
    # the family's fold data, as the gem verdicts build theirs: the same pairs inside each fold
    hf = history_family(prs, cells)  # several price histories: the nested rule decides (None: one history)
    fam = gem_folds(prs, cells) if k_folds > 1 and hf is None else None
    market_rows: list[dict] = [{} for _ in contrasts]

    def market(tail: np.ndarray):  # each contrast's market-noise interval at its seed interval's tail, as the gems'
        lo, hi, ok = np.full(tail.shape, np.nan), np.full(tail.shape, np.nan), np.zeros(tail.shape, bool)
        for j, pr in enumerate(prs):
            k_market = market_window(pr, th)
            if not pr.n or not cells.shared_path or k_market is None:
                continue
            ev = market_evidence(pr, cells, eval_returns, column=column, k=k_market,
                                 confidence=1 - 2 * float(tail[0, j]), n_boot=th.n_boot, seed=th.seed)
            market_rows[j] = ev.columns()
            if ev.ok:
                lo[0, j], hi[0, j], ok[0, j] = ev.interval.low, ev.interval.high, True
        return lo, hi, ok

    decision = decide(Evidence(diffs=[pr.diffs[None, :] for pr in prs], wired=[pr.hi_cells for pr in prs],
                               measured=[pr.lo_cells for pr in prs], market=market if k_folds == 1 else None,
                               periods=None if fam is None else fam.data,
                               histories=None if hf is None else hf.data), th)
    power = (pooled_power(fam, decision.pooled, th) if fam is not None else
             history_power(hf, decision, th) if hf is not None else None)
    m = int(np.isfinite(decision.p).sum())
    gem_verdict = (verdicts.set_index("gem")["verdict"].to_dict() if verdicts is not None and len(verdicts) else {})
    rows = []
    for j, (c, pr) in enumerate(zip(contrasts, prs)):
        rows.append(_row(c, pr, j, decision, m, th, k_folds, fam if hf is None else hf, power, market_rows[j],
                         gem_verdict))
    table = pd.DataFrame(rows, columns=FACTOR_COLUMNS)
    table = _largest_first(table)
    inter = interaction_rows(cells, contrasts, prs, gems, th, column)
    return pd.concat([table, inter], ignore_index=True) if len(inter) else table


def _one_row_per_unpaired_key(contrasts: list[Contrast], prs: list[Paired]) -> tuple[list[Contrast], list[Paired]]:
    """The contrasts, with one row for each key of more than two levels that never pairs in any of
    them (a searched weight that differs between trials on common seeds has a level per trial:
    one `insufficient: confounded` row says so, not one per level); a key that pairs somewhere
    keeps every row, each unpaired one with its fix. Unpaired contrasts are out of the Holm family
    either way."""
    paired_keys = {c.key for c, pr in zip(contrasts, prs) if pr.n}
    out, seen = [], set()
    for c, pr in zip(contrasts, prs):
        if c.kind == FACTOR and c.levels > 2 and c.key not in paired_keys:
            if c.key in seen:
                continue
            seen.add(c.key)
        out.append((c, pr))
    return [c for c, _ in out], [pr for _, pr in out]


def _row(c: Contrast, pr: Paired, j: int, dec: Decision, m: int, th: Thresholds, k_folds: int,
         fam: FamilyFolds | None, power: dict | None, market: dict, gem_verdict: dict) -> dict:
    """One contrast's row of factors.csv; its MDE that of the rule that decides (at K >= 2 the
    pooled test's, `walk_forward.pooled_power`, as the gem verdicts state it; at K = 1
    `rules.power.mde` of the seed rule with the market-noise part)."""
    verdict = str(dec.verdict[0, j])
    row = {col: math.nan for col in FACTOR_COLUMNS}
    row.update(kind=c.kind, factor=c.key, contrast=c.label, verdict=verdict, seed_verdict=str(dec.seed_verdict[0, j]),
               gem_table_verdict=gem_verdict.get(c.key.split(".")[1], "") if c.kind == GEM else "",
               n_seeds=pr.n, n_pairs=pr.n_pairs, family_size=m, folds=k_folds, design=pr.design(), fix=pr.fix,
               fold_effects="", market_noise=market.get("market_noise", ""))
    if not pr.n:
        row["reading"] = _reading(c, verdict, row["mde"], th.rope)
        return row
    p_div = (pr.hi_diverged + pr.lo_diverged) / (2 * pr.n_pairs) if pr.n_pairs else 0.0
    fin = pr.diffs[np.isfinite(pr.diffs)]
    row.update(effect=dec.estimate[0, j], mean_effect=float(fin.mean()) if fin.size else math.nan,
               ci_low=dec.low[0, j], ci_high=dec.high[0, j], ci_level=1 - dec.level[0, j], p_value=dec.p[0, j],
               p_adjusted=dec.p_adjusted[0, j], tost_p_adjusted=dec.tost_p_adjusted[0, j],
               sd_diff=_spread(pr.diffs), divergence_rate=p_div, tied_share=float(np.mean(pr.diffs == 0)),
               market_ci_low=dec.market_low[0, j], market_ci_high=dec.market_high[0, j],
               combined_ci_low=dec.combined_low[0, j], combined_ci_high=dec.combined_high[0, j])
    if fam is not None and dec.pooled is not None:
        pooled, rule = dec.pooled, dec.period
        if isinstance(fam, HistoryFamily):  # over histories: the (history, fold) effects the nested rule pooled
            row["fold_effects"] = fam.effects_text(j)
        row.update(pooled_effect=pooled["mu"][0, j], pooled_ci_low=rule.low[0, j],
                   pooled_ci_high=rule.high[0, j], pooled_p_adjusted=rule.p_adjusted[0, j],
                   tau2=pooled["tau2"][0, j], i2=pooled["i2"][0, j], q_p_adjusted=rule.q_p_adjusted[0, j],
                   periods_informative=int(pooled["periods"][0, j]), tied_share=fam.tied_share[j],
                   mde=power["mde"][j], mde_floor=power["floor"][j], power_note=power["note"][j])
        if not isinstance(fam, HistoryFamily):
            row["fold_effects"] = "; ".join(f"fold {f}: {_fmt(fam.theta[0, j, fam.fold_ids.index(f)])} "
                                          f"({p.n} seeds)" for f, p in fam.folds[j])
    else:  # as verdicts.csv states the seed rule's MDE: on the informative pairs (ties carry no weight)
        informative = pr.diffs[~np.isnan(pr.diffs) & (pr.diffs != 0)]
        market_se = market_se_of(row["market_ci_low"], row["market_ci_high"], dec.level[0, j])
        inputs = PowerInputs(informative.size, _spread(informative), p_div, market_se=market_se)
        row["mde"] = mde(inputs, th.alpha * (2 if th.one_sided_keep else 1) / max(m, 1), th.power)
    row["reading"] = _reading(c, verdict, row["mde"], th.rope)
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
    """Per two two-level contrasts A, B that a full factorial crosses: per unit, A's effect at B's
    hi level minus A's effect at B's lo level (units finite in both), the signed-rank effect and
    its interval at the Holm level over the interactions (`rules.seed.decide_family`: `interaction
    shown` where it reads keep wired or harmful). At K >= 2 the per-unit differences are averaged
    over folds (the seed test only)."""
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
    p = np.array([[rank_test(d[None, :], tail=th.alpha / 2)["p"][0] for _, _, d, _ in found]])
    est = np.array([[rank_test(d[None, :], tail=th.alpha / 2)["estimate"][0] for _, _, d, _ in found]])
    rule = decide_family(p, est, np.nan, alpha=th.alpha)
    level = holm_levels(p, th.alpha)
    rows = []
    for j, (a, b, d, sides) in enumerate(found):
        r = rank_test(d[None, :], tail=level[0, j] / 2)
        shown = rule.verdict[0, j] in DECISIVE
        row = {col: math.nan for col in FACTOR_COLUMNS}
        row.update(kind=INTERACTION, factor=f"{a.key} x {b.key}",
                   contrast=f"{a.label} at {b.key}={b.hi} minus at {b.lo}",
                   verdict=SHOWN if shown else NOT_SHOWN, seed_verdict="", gem_table_verdict="",
                   reading=(f"the effect of {a.key} ({a.label}) is {'larger' if est[0, j] > 0 else 'smaller'} at "
                            f"{b.key}={b.hi} than at {b.lo}" if shown else "no interaction shown"),
                   n_seeds=int(d.size), n_pairs=int(sum(s.n_pairs for s in sides)), effect=est[0, j],
                   mean_effect=float(d.mean()), ci_low=float(r["low"][0]), ci_high=float(r["high"][0]),
                   ci_level=1 - level[0, j], p_value=p[0, j], p_adjusted=rule.p_adjusted[0, j],
                   family_size=len(found), sd_diff=_spread(d), folds=fold_count(cells), fold_effects="",
                   market_noise="", design=f"{a.key} within each level of {b.key}, paired by member seed", fix="")
        rows.append(row)
    return _largest_first(pd.DataFrame(rows, columns=FACTOR_COLUMNS))


# -- text -------------------------------------------------------------------------------------------------


def format_factor_table(table: pd.DataFrame) -> str:
    """The compact factor table for a terminal (`tune-gems analyze`): every row, largest effects first."""
    if table is None or not len(table):
        return ""

    def num(x, f="+.3g"):
        return format_number(x, f)

    judged = table[table["kind"] != INTERACTION]
    tested = judged[judged["n_seeds"].fillna(0).astype(float) > 0]
    untested = judged[judged["n_seeds"].fillna(0).astype(float) == 0]
    inter = table[table["kind"] == INTERACTION]
    head = ["factor", "contrast", "verdict", "seeds", "effect", "CI", "Holm p", "MDE", "over periods"]
    rows = [head]
    for _, r in pd.concat([tested, inter]).iterrows():
        periods = (f"{num(r['pooled_effect'])} [{num(r['pooled_ci_low'], '.3g')}, {num(r['pooled_ci_high'], '.3g')}]"
                   if np.isfinite(float(r["pooled_effect"])) else "-")
        rows.append([str(r["factor"]), str(r["contrast"]), str(r["verdict"]), num(r["n_seeds"], ".0f"), num(r["effect"]),
                     f"[{num(r['ci_low'], '.3g')}, {num(r['ci_high'], '.3g')}]", num(r["p_adjusted"], ".2g"),
                     num(r["mde"], ".3g"), periods])
    widths = [max(len(x[i]) for x in rows) for i in range(len(head))]
    lines = [f"factors (gems and factors one family, Holm over {int(judged['family_size'].max() or 0)}; "
             "interactions Holm over themselves; largest effects first):"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(x, widths)).rstrip() for x in rows]
    lines.insert(2, "  ".join("-" * w for w in widths))
    if len(untested):
        lines.append("not judged (no design): " + ", ".join(
            f"{r['factor']} ({r['contrast']}: {r['verdict']})" for _, r in untested.iterrows()))
    return "\n".join(lines)
