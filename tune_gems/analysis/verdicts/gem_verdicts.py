"""The verdict per gem, from designed comparisons only, with its evidence.

Per gem (docs/analysis.md "Verdicts" has the full text):

1. **The wiring effect.** Members that differ only in this gem's mode (wire vs measure; the
   weight belongs to the wired side), paired by member seed (`selectors.wiring_pairs`): per-seed
   differences of the verdict metric (validation alpha Sharpe averaged over the last k epochs;
   validation Sharpe, said so, for older results), a diverged member counted as the worst
   outcome. The signed-rank rule (`inference.rank_test`) gives the Hodges-Lehmann effect, p and
   the TOST p for +-ROPE; Holm over the gems that have a design.
   - `keep wired`: Holm-adjusted p <= alpha and effect > 0;
   - `harmful`: Holm-adjusted p <= alpha and effect < 0;
   - `equivalent`: Holm-adjusted TOST p <= alpha (the effect lies within +-ROPE);
   - `inconclusive`: none of these; the evidence gives the minimum detectable effect at the
     stated power for the seeds used, and the seeds that would detect an effect of one ROPE.
2. **delete** replaces `equivalent` when, besides the wiring effect being equivalent to zero
   (its TOST), the gem's measured magnitude is at its null (TOST of the per-seed excess over
   the null, relative to the C51 loss, within +-`rel_threshold`, Holm over gems) or the
   redundancy factorial shows a model feature removes it (`redundancy.py`). Both halves are
   needed (issue 21): a magnitude at its null says nothing about what wiring does, and a gem
   whose wiring helps must not read `delete`; without a wiring comparison the evidence is
   `insufficient data` (the magnitude finding stated), with an unsettled one `inconclusive`.
3. **Market noise** (one price history: a real series or synthetic `paths: shared`): beside the
   seed interval, the market-noise interval of the same difference (`verdict_market_noise`: a
   stationary block bootstrap of the validation period over the saved per-step returns, at the
   seed interval's level). A `keep wired` / `harmful` by the seeds whose market-noise interval
   includes 0 (or lies on the other side) becomes `inconclusive`: the seeds agree, but on this
   one history the difference may be the market's luck (`seed_verdict` keeps the seed rule's
   word). A comparison with diverged members keeps its seed verdict (divergence is not market
   noise); the interval then covers the surviving pairs. With per-seed paths the seed interval
   already holds the market's variance and no market-noise interval is computed.
4. No design: `insufficient: confounded` (wired and measured members exist but never differ
   in this gem alone; the evidence says what to add), `insufficient data` (only one side), or
   `no data` (never measured nor wired in a trial that finished).

A placebo arm (the gem wired at weight <= `placebo_weight`) is not a wiring: its comparison
with the measured arm is reported separately (`placebo_verdicts`) as the learner's own null;
its verdict must come out `equivalent` or `inconclusive`. An A/A arm (the control with another
`trainer.replay_stream`: independent replay draws, nothing else) is reported there too; a null
arm whose pairs mostly tie is flagged uninformative (it tests nothing).

This module gathers the evidence and writes the reasons; every decision above is a function of
the rule module (`tune_gems.analysis.rules`: `seed.decide_family`, `gates.market_gate`, then
`walk_forward.py`'s period and one-period rules), the same functions the calibrations run.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tune_gems.analysis import defaults
from tune_gems.analysis.pairs.pairing import Cells, Paired, build_cells, paired
from tune_gems.analysis.pairs.excess import add_excess_columns
from tune_gems.stats.inference import rank_test
from tune_gems.analysis.text import format_number
from tune_gems.analysis.rules.decision import Evidence, decide
from tune_gems.analysis.rules.power import PowerInputs, market_se_of, statement
from tune_gems.analysis.verdicts.held_out import HELD_OUT_COLUMNS, held_out_columns, held_out_effect
from tune_gems.analysis.verdicts.verdict_reasons import compose_reason, selection_rule
from tune_gems.analysis.verdicts.history_verdicts import add_history_columns, history_family
from tune_gems.analysis.verdicts.walk_forward import add_period_columns, fold_count, gem_folds
from tune_gems.analysis.verdicts.verdict_market_noise import (
    MARKET_COLUMNS,
    OK as MARKET_OK,
    UNAVAILABLE,
    EvalReturnsLookup,
    MarketEvidence,
    market_evidence,
    market_window,
)
from tune_gems.analysis.verdicts.redundancy import redundancy_table
from tune_gems.analysis.rules.seed import REMOVES, decide_family
from tune_gems.analysis.rules.thresholds import Thresholds
from tune_gems.analysis.rules.ties import is_tie
from tune_gems.analysis.rules.words import DECISIVE
from tune_gems.analysis.pairs.selectors import MEASURE, placebo_selectors, wiring_pairs
from tune_gems.contracts.gem_manifest import LEGACY_MANIFEST, GemEntry

VERDICT_COLUMNS = [
    "gem", "metric", "verdict", "reason", "why", "design", "outcome", "n_seeds", "n_pairs",
    "estimand", "effect", "mean_effect", "ci_low", "ci_high", "ci_level", "p_value", "p_adjusted", "tost_p", "tost_p_adjusted",
    "rope", "alpha", "sd_diff", "divergence_rate", "mde", "seeds_needed", "mde_floor", "power_note",
    "n_informative", "tied_share", "zero_turnover_share", "window", "wired_diverged", "measured_diverged",
    "wired_members", "measured_members", "test_effect", "fix",
    "excess_n", "excess_median", "excess_ci_low", "excess_ci_high", "excess_tost_p_adjusted",
    "rel_threshold", "redundancy", "market_path", "seed_verdict", *MARKET_COLUMNS,
]
PLACEBO_COLUMNS = ["gem", "verdict", "n_seeds", "effect", "ci_low", "ci_high", "p_value", "tost_p",
                   "sd_diff", "iqr_diff", "min_diff", "max_diff", "outcome", "kind", "tied_share", "informative"]
AA_FACTOR = "trainer.replay_stream"
"""The key an A/A arm differs in: the replay nuisance stream (0: the member seed's own draws)."""
AA_BASE = "0.0"  # the canonical text (pairing._norm) of stream 0
UNINFORMATIVE_TIES = 0.5
"""A null arm whose pairs tie (identical outcomes) more often than this tests nothing: flagged."""
TURNOVER = "val_turnover"
"""The members' validation turnover (docs/evaluation.md): 0 over the verdict window means the
member never traded there, so its Sharpe is exactly 0 and its pair likely ties."""


def verdict_metric(members: pd.DataFrame, metric: str = defaults.METRIC,
                   fallback: str = defaults.FALLBACK_METRIC) -> tuple[str, str]:
    """(column, note): `metric` when the members have finite values of it, else `fallback`."""
    if metric in members.columns and np.isfinite(members[metric].astype(float)).any():
        return metric, ""
    return fallback, f"{metric} absent (older results): {fallback} used instead"


def _fmt(x, f: str = ".3g") -> str:
    return format_number(x, f, missing="nan")


ESTIMAND = "pseudo-median (Hodges-Lehmann) of the per-seed differences"
"""What `effect` estimates: the median of the Walsh averages of the per-unit differences (a
diverged member the worst outcome; pairs that tie exactly left out), the statistic the
signed-rank test and its interval belong to, each member's verdict metric averaged over the
analysis's epoch window (`Thresholds.window_text`). `mean_effect` beside it is the plain mean
over the units where nobody diverged."""


def _informative(d: np.ndarray) -> np.ndarray:
    """The per-unit differences that are not ties (`rules.ties`): the ones every test reads."""
    return d[~is_tie(d)]


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


def _finite_mean(d: np.ndarray) -> float:
    """The mean of the finite per-unit differences (units with a diverged member left out)."""
    fin = d[np.isfinite(d)]
    return float(fin.mean()) if fin.size else math.nan


def divergence_rate(pr: Paired) -> float:
    """The share of one side of a pair diverging (wired and measured pooled): what the MDE and
    the seeds needed account for."""
    return float((pr.hi_diverged + pr.lo_diverged) / (2 * pr.n_pairs)) if pr.n_pairs else 0.0


def _spread(d: np.ndarray) -> float:
    fin = d[np.isfinite(d)]
    return float(np.std(fin, ddof=1)) if fin.size > 1 else math.nan


def gem_verdicts(trials: pd.DataFrame, history: pd.DataFrame | None, members: pd.DataFrame, **kwargs) -> pd.DataFrame:
    """One row per gem: verdict, one-line reason and the evidence columns (VERDICT_COLUMNS):
    the verdict table of `gem_verdict_tables` (its arguments)."""
    return gem_verdict_tables(trials, history, members, **kwargs)[0]


def gem_verdict_tables(
    trials: pd.DataFrame,
    history: pd.DataFrame | None,
    members: pd.DataFrame,
    *,
    arms: pd.DataFrame | None = None,
    gems: list[GemEntry] | None = None,
    thresholds: Thresholds | None = None,
    metric: str = defaults.METRIC,
    redundancy: pd.DataFrame | None = None,
    cells: Cells | None = None,
    eval_returns: EvalReturnsLookup | None = None,
    selection: dict[str, int] | None = None,
    **settings,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per gem: verdict, one-line reason and the evidence columns (VERDICT_COLUMNS);
    with walk-forward folds the per-fold rows the period rule read,
    `walk_forward.FOLD_ROW_COLUMNS`, else none).

    `thresholds` the analysis's settings (`Thresholds`; `settings` replace fields of it by name,
    e.g. `alpha=0.01`). `history` is not needed (kept for the old call signature). `redundancy`
    is the table of `redundancy.redundancy_table` (computed here when None). `eval_returns` finds
    each trial's saved validation returns (the market-noise interval, its bootstrap of
    `n_boot` resamples from `seed`; none: said unavailable). `selection` (a confirmation on one
    price history, `tune-gems confirm`): per gem the configurations its search chose among; the
    table then has FINAL_COLUMNS, the verdict after the selection-adjusted gate (`rules.selection`)."""
    th = Thresholds.build(thresholds, **settings)
    alpha, rope, power = th.alpha, th.rope, th.power
    window = th.window_length
    gems = list(gems or LEGACY_MANIFEST)
    cells = cells or build_cells(trials, members, arms)
    column, metric_note = verdict_metric(members, metric)
    excess = add_excess_columns(cells.long, gems)
    if redundancy is None:
        redundancy = redundancy_table(cells, gems, thresholds=th, excess=excess)
    rows, prs, held = [], [], []
    for g in gems:
        real, _ = placebo_selectors(g, th.placebo_weight)
        row = {c: math.nan for c in VERDICT_COLUMNS}
        row.update(_one_sided=th.one_sided_keep)
        row.update(gem=g.name, metric=g.metric, outcome=column, rope=rope, alpha=alpha,
                   rel_threshold=th.rel_threshold, fix="", redundancy="", design="none", reason="", why="", power_note="",
                   window=th.window_text(),
                   market_path="conditional on one shared path" if cells.shared_path else "per-seed paths")
        pr = wiring_pairs(cells, g.name, column=column, k=window, select=real)
        row.update(wired_members=pr.hi_cells, measured_members=pr.lo_cells, n_seeds=pr.n, n_pairs=pr.n_pairs,
                   design=pr.design(), fix=pr.fix, wired_diverged=pr.hi_diverged, measured_diverged=pr.lo_diverged)
        held.append(held_out_effect(pr, cells, column, th))  # the test segment, once, from the same pairs
        if held[-1] is not None:
            row["test_effect"] = held[-1].estimate
        # magnitude: per-seed excess over the null in measured members
        ecol, enote = excess[g.name]
        mag = _unit_magnitudes(cells, g, ecol, window)
        if mag.size:
            r = rank_test(mag[None, :], rope=th.rel_threshold, tail=alpha)
            row.update(excess_n=int(mag.size), excess_median=float(r["estimate"][0]),
                       excess_ci_low=float(r["low"][0]), excess_ci_high=float(r["high"][0]),
                       _excess_tost=float(r["p_tost"][0]), _excess_note=enote)
        red = (redundancy[(redundancy["gem"] == g.name) & (redundancy["finding"] == REMOVES)]
               if len(redundancy) else redundancy)
        if len(red):
            row["redundancy"] = "; ".join(f"{f} removes it" for f in red["feature"])
        rows.append(row)
        prs.append(pr)

    k_folds = fold_count(cells)  # with several periods the pooled test decides, and states its own power
    hf = history_family(prs, cells)  # several price histories: the nested rule decides (None: one history)
    fam = gem_folds(prs, cells) if k_folds > 1 and hf is None else None
    market_columns: list[dict] = [{} for _ in prs]

    def market(tail: np.ndarray):
        """Each compared gem's market-noise interval at its seed interval's per-side tail."""
        lo, hi, ok = np.full(tail.shape, np.nan), np.full(tail.shape, np.nan), np.zeros(tail.shape, bool)
        for j, pr in enumerate(prs):
            if not pr.n:
                continue
            k_market = market_window(pr, th)
            evidence = (market_evidence(pr, cells, eval_returns, column=column, k=k_market,
                                        confidence=1 - 2 * float(tail[0, j]), n_boot=th.n_boot, seed=th.seed)
                        if k_market is not None else
                        MarketEvidence(f"{UNAVAILABLE}: the pairs' verdict windows differ in length ({th.window_text()})"))
            market_columns[j] = evidence.columns()
            if evidence.ok:
                lo[0, j], hi[0, j], ok[0, j] = evidence.interval.low, evidence.interval.high, True
        return lo, hi, ok

    # the rule, composed once (`rules.decision.decide`): the seed rule with Holm over the gems that
    # have a design, the gates of one period on one history or the pooled test over periods
    dec = decide(Evidence(diffs=[pr.diffs[None, :] for pr in prs], wired=[r["wired_members"] for r in rows],
                          measured=[r["measured_members"] for r in rows],
                          magnitude_p=np.array([[r.get("_excess_tost", np.nan) for r in rows]]),
                          redundant=[bool(r["redundancy"]) for r in rows],
                          diverged=np.array([[bool(pr.hi_diverged or pr.lo_diverged) for pr in prs]]),
                          market=market, periods=None if fam is None else fam.data,
                          histories=None if hf is None else hf.data,
                          selection=None if selection is None else [max(int(selection.get(g.name, 1)), 1) for g in gems]),
               th)
    m = int(np.isfinite(dec.p[0]).sum())
    two_sided = alpha * (2 if th.one_sided_keep else 1)  # the two-sided level of the same test (MDE)
    sides = 1 if th.one_sided_keep else 2
    for j, (row, pr) in enumerate(zip(rows, prs)):
        row["excess_tost_p_adjusted"] = dec.magnitude_p_adjusted[0, j]
        row.update(p_value=dec.p[0, j], p_adjusted=dec.p_adjusted[0, j], tost_p=dec.p_tost[0, j],
                   tost_p_adjusted=dec.tost_p_adjusted[0, j])
        if pr.n:
            informative = _informative(pr.diffs)
            sd = _spread(informative)
            p_div = divergence_rate(pr)
            tied = float(dec.tied_share[0, j])
            n_inf = int(dec.n_informative[0, j])
            row.update(estimand=ESTIMAND, effect=float(dec.estimate[0, j]), mean_effect=_finite_mean(pr.diffs),
                       ci_low=float(dec.low[0, j]), ci_high=float(dec.high[0, j]), ci_level=1 - float(dec.level[0, j]),
                       sd_diff=sd, divergence_rate=p_div, n_informative=n_inf,
                       tied_share=tied, zero_turnover_share=zero_turnover_share(pr, cells, window))
            row.update(market_columns[j])
            # the power of the rule that decides at one period: the seeds', and on one price history
            # the market gate's too (`rules.power`; over periods `walk_forward.pooled_power` replaces it)
            market_se = (market_se_of(row["market_ci_low"], row["market_ci_high"], 2 * float(dec.level[0, j]) / sides)
                         if row.get("market_noise") == MARKET_OK else 0.0)
            ps = statement(PowerInputs(n_inf, sd, p_div, market_se=max(market_se, 0.0)), rope, two_sided / max(m, 1),
                           power, tied=tied)
            row.update(mde=ps.mde, seeds_needed=ps.seeds_needed)
            if market_se > 0:
                row.update(mde_floor=ps.floor, power_note=ps.note)
        row["seed_verdict"] = str(dec.seed_verdict[0, j])
        row["verdict"] = str(dec.discovery_verdict[0, j])
        row["_at_null"] = bool(dec.magnitude_at_null[0, j])
    table = pd.DataFrame(rows, columns=VERDICT_COLUMNS)
    fold_rows = add_period_columns(table, k_folds, fam, dec, th)
    if hf is not None:
        fold_rows = add_history_columns(table, hf, dec, th)
    for c in HELD_OUT_COLUMNS:
        if c not in table.columns:
            table[c] = np.nan
    table["held_out"] = ""
    for j, i in enumerate(table.index):
        for c, x in held_out_columns(table.at[i, "verdict"], held[j], str(table.at[i, "outcome"])).items():
            table.at[i, c] = x
        table.at[i, "reason"], table.at[i, "why"] = compose_reason(
            rows[j], table.loc[i], seed_verdict=str(dec.seed_verdict[0, j]), market_verdict=str(dec.market_verdict[0, j]),
            gate_applied=bool(dec.gate_applied[0, j]), folds=k_folds if hf is None else hf.periods,
            pooled=(fam is not None and bool(fam.folds[j])) or (hf is not None and bool(hf.parts[j])),
            at_null=rows[j]["_at_null"], metric_note=metric_note, power=power, m=m, rope=rope,
            held=held[j] if table.at[i, "verdict"] in DECISIVE else None)
    if selection is not None:
        table = table.assign(final_verdict="", final_ci_low=np.nan, final_ci_high=np.nan, final_rule="")
        for j, i in enumerate(table.index):
            t = max(int(selection.get(table.at[i, "gem"], 1)), 1)
            table.at[i, "final_verdict"] = str(dec.verdict[0, j])
            table.at[i, "final_ci_low"], table.at[i, "final_ci_high"] = dec.final_low[0, j], dec.final_high[0, j]
            table.at[i, "final_rule"] = selection_rule(table.loc[i], t)
    return table, fold_rows


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
    """The null arms, by the same rule without Holm (the stricter check: each arm its own family
    of one in `rules.seed.decide_family`): per gem with a
    placebo arm, placebo minus measured (`kind` placebo), and per A/A arm (issue 21: the control
    with another `trainer.replay_stream`, an independent nuisance stream and nothing else),
    A/A minus its stream-0 twin (`kind` a/a, gem `-`). Their verdict must be `equivalent` or
    `inconclusive`; `keep wired` or `harmful` means the learner's outcome moves with nuisance
    more than the rule allows for. `tied_share` is the share of units whose difference is
    exactly 0 (identical outcomes); above UNINFORMATIVE_TIES the arm is `informative` False:
    it tests nothing (a weight-1e-9 placebo is often bit-identical to its control).
    `thresholds` / `settings` as in `gem_verdicts`."""
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
    """One null arm's row of `placebo_verdicts`: the rule without Holm, its spread and ties."""
    r = rank_test(pr.diffs[None, :], rope=th.rope, tail=th.alpha / 2)
    p, pt, est = float(r["p"][0]), float(r["p_tost"][0]), float(r["estimate"][0])
    verdict = str(decide_family([p], [est], [pt], alpha=th.alpha).verdict[0])  # a family of one: no Holm
    fin = pr.diffs[np.isfinite(pr.diffs)]
    q = np.percentile(fin, [25, 75]) if fin.size else [math.nan, math.nan]
    tied = float(np.mean(pr.diffs == 0.0))
    return dict(gem=gem, verdict=verdict, n_seeds=pr.n, effect=est, ci_low=float(r["low"][0]),
                ci_high=float(r["high"][0]), p_value=p, tost_p=pt, sd_diff=_spread(pr.diffs),
                iqr_diff=float(q[1] - q[0]), min_diff=float(fin.min()) if fin.size else math.nan,
                max_diff=float(fin.max()) if fin.size else math.nan, outcome=column, kind=kind,
                tied_share=tied, informative=tied <= UNINFORMATIVE_TIES)
