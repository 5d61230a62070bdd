"""The words of a verdict: the reason of one row of verdicts.csv, apart from the evidence `gem_verdicts.py` gathers."""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np

from tune_gems.analysis.text import counted, format_number, percent
from tune_gems.analysis.rules.power import seeds_would_detect
from tune_gems.analysis.defaults import MAX_TIED_SHARE
from tune_gems.analysis.rules.decision import cannot_reach
from tune_gems.analysis.rules.settings import (
    CONFOUNDED, DECISIVE, DELETE, EQUIVALENT, HARMFUL, HETEROGENEOUS, INCONCLUSIVE, INCONSISTENT, INSUFFICIENT, KEEP,
    Thresholds,
)
from tune_gems.analysis.verdicts.readings import ContrastView
from tune_gems.analysis.verdicts.held_out import ONE_TEST_PERIOD
from tune_gems.analysis.verdicts.verdict_market_noise import ACROSS_HISTORIES, ACROSS_PERIODS, NOT_NEEDED, OK as MARKET_OK
from tune_gems.analysis.verdicts.walk_forward import ONE_PERIOD


def _fmt(x, f: str = ".3g") -> str:
    return format_number(x, f, missing="-")


def market_text(row: dict) -> str:
    """The market-noise part of a verdict's evidence."""
    status = row.get("market_noise")
    if not isinstance(status, str) or not status:
        return ""
    if status == MARKET_OK:
        dropped = row.get("market_dropped")
        left = f", {int(dropped)} pair(s) with a diverged member left out" if dropped and np.isfinite(dropped) and dropped > 0 else ""
        return (f"; market-noise interval (stationary block bootstrap of the validation period, same level) "
                f"[{_fmt(row['market_ci_low'])}, {_fmt(row['market_ci_high'])}] around {_fmt(row['market_effect'], '+.3g')}, "
                f"mean block {_fmt(row['market_mean_block'], '.3g')} of {_fmt(row['market_n_steps'], '.0f')} steps, "
                f"{_fmt(row['market_n_series'], '.0f')} paired series{left}")
    if status == ACROSS_PERIODS:
        return "; market noise: in the spread over validation periods (walk-forward folds)"
    if status == ACROSS_HISTORIES:
        return "; market noise: in the spread over price histories (each its own market)"
    if status == NOT_NEEDED:
        return "; market noise: in the seed interval (per-seed paths)"
    return f"; market-noise interval {status}: the effect is conditional on this one price history"


def seed_reason(row: dict, verdict: str, at_null: bool, metric_note: str, th: Thresholds, m: int,
                seed_power: bool = True, ties: str = "") -> tuple[str, str]:
    """(reason, why) of the seed rule's `verdict`: the reason verdicts.csv's line with the evidence,
    `why` without the numbers the row's columns hold (`report.short_why` prints them once)."""
    a = row["alpha"]
    extra = f"; {metric_note}" if metric_note else ""
    mag_text = (f"measured excess over its null ~0: median {_fmt(row['excess_median'])} x loss, CI "
                f"[{_fmt(row['excess_ci_low'])}, {_fmt(row['excess_ci_high'])}] within +-{row['rel_threshold']:g} "
                f"(TOST, Holm p {_fmt(row['excess_tost_p_adjusted'], '.2g')}, {_fmt(row['excess_n'], '.0f')} seeds)")
    delete_red = bool(row["redundancy"])
    tested = bool(row["n_seeds"]) and np.isfinite(row["n_seeds"]) and row["n_seeds"] > 0
    if verdict in (KEEP, HARMFUL, DELETE, EQUIVALENT, INCONCLUSIVE) or (verdict == INSUFFICIENT and tested):
        sided = "one-sided " if th.one_sided_keep else ""
        ev = (f"{row['outcome']} effect {_fmt(row['effect'], '+.3g')}, {row['ci_level']:.1%} {sided}CI "
              f"[{_fmt(row['ci_low'])}, {_fmt(row['ci_high'])}], Holm p {sided}{_fmt(row['p_adjusted'], '.2g')} "
              f"({row['n_seeds']} seeds; {row['design']})")
        ev += ties
        diverged = ""
        if row["wired_diverged"] or row["measured_diverged"]:
            diverged = f"; diverged (counted as worst): wired {int(row['wired_diverged'])}, measured {int(row['measured_diverged'])}"
        ev += diverged + market_text(row)
        tied = row.get("tied_share", math.nan)
        few = cannot_reach(int(row["n_informative"]), 2 * a)  # the rule's "too few" (`periods.cannot_decide`) says it first
        if verdict == INSUFFICIENT and isinstance(tied, float) and tied > MAX_TIED_SHARE and not few:
            lead = (f"mostly tied: {tied:.0%} of the pairs tie (identical outcomes; {int(row['n_informative'])} of "
                    f"{int(row['n_seeds'])} differ): no equivalence or delete on pairs that did not differ")
            return f"{lead}; {ev}{extra}", f"{lead}{diverged}{extra}"
        if verdict == INSUFFICIENT:
            lead = (f"too few informative pairs for the rule: {int(row['n_informative'])} of {int(row['n_seeds'])} "
                    f"differ, and no test reaches p <= {a:g} with {int(row['n_informative'])} (ties carry no weight)")
            return f"{lead}; {ev}{extra}", f"{lead}{diverged}{extra}"
        if verdict in (KEEP, HARMFUL):
            lead = "wiring helps" if verdict == KEEP else "wiring hurts"
            return f"{lead}: {ev}{extra}", f"{lead}{diverged}{extra}"
        tost = (f"effect within +-{row['rope']:g} (TOST Holm p {_fmt(row['tost_p_adjusted'], '.2g')})")
        if verdict == DELETE:  # both halves of the evidence: nothing measured, nothing gained
            why = mag_text if at_null else f"{row['redundancy']} (redundancy factorial)"
            lead = f"{why}; and wiring is equivalent to none: {tost}"
            return f"{lead}; {ev}{extra}", f"{lead}{diverged}{extra}"
        if verdict == EQUIVALENT:
            lead = f"no practical difference: {tost}"
            return f"{lead}; {ev}{extra}", f"{lead}{diverged}{extra}"
        level = (2 if th.one_sided_keep else 1) * a / max(m, 1)
        hint = (f"; {int(row['n_informative'])} informative seeds cannot reach p <= {a / max(m, 1):.2g} at all"
                if cannot_reach(int(row["n_informative"]), level) else "")
        div = row.get("divergence_rate", 0.0)
        div_text = f", {div:.0%} of members diverged" if np.isfinite(div) and div > 0 else ""
        held = (f"; not delete: {'the magnitude is at its null' if at_null else row['redundancy']}, but wiring "
                "is not shown equivalent to none (delete needs both)" if at_null or delete_red else "")
        if not seed_power:
            return f"{ev}{held}{extra}", f"not decided by the seeds{diverged}{held}{extra}"
        return (f"{ev}; detectable at {th.power:.0%} power{div_text}: |effect| >= {_fmt(row['mde'])} "
                f"({note if isinstance(note := row.get('power_note'), str) and note else seeds_would_detect(row['seeds_needed'], row['rope'])})"
                f"{hint}{held}{extra}",
                f"not decided: neither a difference from 0 nor equivalence within +-{row['rope']:g} is shown{div_text}{diverged}{hint}{held}{extra}")
    no_wiring = "; not delete: wiring was never compared with measuring (delete needs both: add an arm with it wired)"
    if verdict == CONFOUNDED:
        text = ("wired and measured members never differ in this gem alone at a common seed"
                + (f": {row['fix']}" if row["fix"] else ""))
        return text, text
    if verdict == INSUFFICIENT and row["wired_members"]:
        text = "wired only: add an arm with this gem measured (same seeds)"
        return text, text
    if verdict == INSUFFICIENT:
        mag = "" if not np.isfinite(row["excess_median"]) else (
            f"; measured excess median {_fmt(row['excess_median'])} x loss, CI "
            f"[{_fmt(row['excess_ci_low'])}, {_fmt(row['excess_ci_high'])}]")
        held = (f"; {mag_text}" + no_wiring) if at_null else (f"; {row['redundancy']} (redundancy factorial)" + no_wiring
                                                                if delete_red else "")
        text = f"measured only: add an arm with this gem wired (same seeds){mag}{held}"
        return text, text
    text = "never measured nor wired in a finished trial"
    return text, text


# -- the layers after the seed rule, each a function of the decision record ------------------------


def pooled_text(r) -> str:
    """The pooled estimate over periods, its interval and heterogeneity, and the fold effects."""
    shared = ", tau shared across the family" if bool(r["tau_shared"]) else ""
    histories = r.get("histories", 1)  # several price histories: the nested rule (`history_verdicts`)
    nested = histories == histories and histories >= 2
    over = f"over {int(histories)} histories x {int(r['folds'])} folds" if nested else "over periods"
    f = r.get("fold_overlap", math.nan)  # over histories: the first stage's, on each history's folds
    whose = "each history's " if nested else ""
    overlap = (f", {whose}variance x{f:.2f} for folds that share training rows (Nadeau-Bengio)"
               if isinstance(f, (int, float)) and np.isfinite(f) and f > 1 else "")
    return (f"pooled {over} {_fmt(r['pooled_effect'], '+.3g')}, {r['pooled_ci_level']:.1%} CI "
            f"[{_fmt(r['pooled_ci_low'], '.3g')}, {_fmt(r['pooled_ci_high'], '.3g')}] (HKSJ, t with "
            f"{_fmt(r['pooled_df'], '.3g')} df{shared}{overlap}, Holm p {_fmt(r['pooled_p_adjusted'], '.2g')}), "
            f"tau^2 {_fmt(r['tau2'], '.3g')}, I^2 {percent(r['i2'])} (Q Holm p "
            f"{_fmt(r['q_p_adjusted'], '.2g')}); per {'history and fold' if nested else 'fold'}: {r['fold_effects']}")


def period_reason(r, seed_verdict: str, verdict: str, rope: float, seeds: str, seed_why: str) -> tuple[str, str]:
    """(reason, why) of one gem's verdict across K >= 2 periods; `seeds`, `seed_why` the seed rule's."""
    seed_why = seed_why if seed_why else seeds
    alone = f"seeds alone: {seed_why}"
    if verdict == INSUFFICIENT and not r["period"].startswith("pooled over"):  # too few periods, or no interval
        return f"{r['period']}; per fold: {r['fold_effects']}; seeds alone: {seed_verdict}; {seeds}", f"{r['period']}; {alone}"
    pooled = pooled_text(r) if np.isfinite(r["pooled_effect"]) else (
        f"no pooled effect (a fold's pairs mostly diverged one way); per fold: {r['fold_effects']}")
    no_pool = "" if np.isfinite(r["pooled_effect"]) else "; no pooled effect (a fold's pairs mostly diverged one way)"
    power = ""
    if np.isfinite(r.get("mde", math.nan)) and isinstance(r.get("power_note"), str) and r["power_note"]:
        histories = r.get("histories", 1)  # the nested rule: its periods are the histories with an effect
        what = "history" if histories == histories and histories >= 2 else "period"
        power = (f"; the pooled test detects |effect| >= {_fmt(r['mde'], '.3g')} at 80% power with "
                 f"{counted(r['periods_informative'], what)} (floor with infinitely many seeds "
                 f"{_fmt(r['mde_floor'], '.3g')}): {r['power_note']}")
    if verdict == INCONSISTENT:
        lead = ("the effect changes sign between periods: fold intervals on both sides of 0 at their Holm "
                "levels")
        return (f"{lead}, heterogeneity Holm p {_fmt(r['q_p_adjusted'], '.2g')}: {pooled}; seeds: {seeds}",
                f"{lead}{no_pool}; {alone}")
    if verdict == HETEROGENEOUS:
        lead = "the periods differ"
        tail = "but no sign change is shown and the pooled effect decides nothing"
        return (f"{lead} (heterogeneity Holm p {_fmt(r['q_p_adjusted'], '.2g')}, I^2 "
                f"{percent(r['i2'])}, tau {_fmt(math.sqrt(r['tau2']) if r['tau2'] >= 0 else math.nan, '.3g')}) "
                f"{tail}: {pooled}{power}; seeds: {seeds}", f"{lead} {tail}{no_pool}; {alone}")
    if verdict in DECISIVE:
        lead = f"wiring {'helps' if verdict == KEEP else 'hurts'} across periods"
        return f"{lead}: {pooled}{power}; seeds alone: {seed_verdict}; {seeds}", f"{lead}; {alone}"
    if verdict in (EQUIVALENT, DELETE):
        lead = (f"equivalent to none across periods (pooled TOST Holm p {_fmt(r['pooled_tost_p_adjusted'], '.2g')} "
                f"within +-{rope:g})")
        return f"{lead}: {pooled}; seeds alone: {seed_verdict}; {seeds}", f"{lead}; {alone}"
    lead = "not decided across periods"
    return f"{lead}: {pooled}{power}; seeds alone: {seed_verdict}; {seeds}", f"{lead}{no_pool}; {alone}"


def held_out_reason(row, discovery: str, final: str, reason: str, why: str) -> tuple[str, str]:
    """The reason with the held-out stage of a `discovery` keep / harmful: not confirmed, it leads
    with the `final` word and keeps both intervals."""
    if discovery not in DECISIVE or not isinstance(row.get("held_out"), str) or not row["held_out"]:
        return reason, why
    level = row.get("test_level", math.nan)
    test = (f"held-out test segment ({ONE_TEST_PERIOD}): {format_number(row.get('test_effect', math.nan), '+.3g')} "
            f"[{format_number(row.get('test_ci_low', math.nan))}, {format_number(row.get('test_ci_high', math.nan))}] "
            f"(one-sided at alpha/m {format_number(level, '.2g')}, the test period's spread in its SE), "
            f"p {format_number(row.get('test_p_value', math.nan), '.2g')}: {row['held_out']}")
    if final == discovery:
        return f"{reason}; {test}", why
    return (f"{final} (the discovery read {discovery}): {test}; the discovery: {reason}",
            f"{final}: {row['held_out'].removeprefix('not confirmed: ')}; the discovery read {discovery}: {why}")


def compose_reason(view: ContrastView, row: dict, *, th: Thresholds, metric_note: str, m: int,
                   folds: int) -> tuple[str, str]:
    """(reason, why) of one gem's `row`: the seed rule's evidence, then what each later stage did to the word."""
    seed_row = {**row, **asdict(view.seeds)}
    # the comparison's ties, once: over every fold pair where the pooled test decides, else over the seeds
    tied, informative, pairs = (row["tied_share"], row["n_informative"], view.pooled.period_pairs) \
        if view.pooled is not None else (view.seeds.tied_share, view.seeds.n_informative, row["n_seeds"])
    zero = row.get("zero_turnover_share", math.nan)
    ties = [f"{tied:.0%} of the pairs tie exactly ({_fmt(informative, '.0f')} of {_fmt(pairs, '.0f')} informative, "
            "the rest left out)"] if np.isfinite(tied) and tied > 0 else []
    ties += [f"{zero:.0%} of the members never traded in the window (validation turnover 0)"] \
        if np.isfinite(zero) and zero > 0 else []
    reason, why = seed_reason(seed_row, view.seed_verdict, view.magnitude_at_null, metric_note, th, m,
                              seed_power=folds == 1, ties="; " + ", ".join(ties) if ties else "")
    if view.market_verdict != view.seed_verdict:  # the market gate (`rules.decision.market_gate`) changed the word
        word = "helps" if view.seed_verdict == KEEP else "hurts"
        where = 'includes 0' if row['market_ci_low'] <= 0 <= row['market_ci_high'] else 'lies on the other side of 0'
        why = (f"not confirmed against market noise: the seeds say wiring {word}, but the market-noise interval"
               f"{{}} {where}: on this one price history the difference may be the market's luck")
        reason = why.format(f" [{_fmt(row['market_ci_low'])}, {_fmt(row['market_ci_high'])}] at the same level") + f"; {reason}"
        why = why.format("")
    if folds == 1:  # the one-period gate (`rules.decision.one_period_gate`), and what a verdict on one period rests on
        before, verdict = view.market_verdict, view.discovery_verdict
        both = (f"seed and market-noise intervals combined: [{_fmt(row['combined_ci_low'])}, "
                f"{_fmt(row['combined_ci_high'])}] at {row['ci_level']:.1%}")
        if view.gate_applied and verdict != before and before in DECISIVE:
            reason, why = (f"not confirmed by the {both}, which includes 0; {text}" for text in (reason, why))
        elif view.gate_applied and verdict != before:
            reason, why = (f"equivalence not confirmed against market noise: the {both} "
                           f"is not inside +-{row['rope']:g}; {text}" for text in (reason, why))
        reason, why = f"{reason}; {ONE_PERIOD}", f"{why}; {ONE_PERIOD}"
    elif view.pooled is not None:
        reason, why = period_reason(row, view.market_verdict, view.discovery_verdict, th.rope, reason, why)
    return held_out_reason(row, view.discovery_verdict, view.verdict, reason, why)


def selection_rule(row, candidates: int) -> str:
    """Which interval made a confirmation's final verdict on one price history."""
    folds = int(row.get("folds", 1)) if np.isfinite(float(row.get("folds", 1))) else 1
    histories = float(row.get("histories", 1))
    if histories >= 2:  # several price histories: the nested rule's interval (`history_verdicts`)
        return (f"pooled interval over {int(histories)} histories x {folds} folds at the selection-adjusted level "
                f"(/{candidates})")
    if folds >= 2:  # the periods it pooled (those with informative pairs), as the confirmation's power says
        k = float(row.get("periods_informative", folds))
        return (f"pooled interval over {int(k) if np.isfinite(k) else folds} periods at the selection-adjusted level "
                f"(/{candidates})")
    if row.get("market_noise") == MARKET_OK:
        return f"seed and market-noise intervals combined, the market part at the selection-adjusted level (/{candidates})"
    return (f"no market-noise interval ({row.get('market_noise')}): the history's luck is not measured, so nothing is "
            "final on this one history")
