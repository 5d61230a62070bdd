"""The words behind a seed-rule verdict: the reason line of one gem's row of verdicts.csv.

Why its own module. `gem_verdicts.py` gathers each gem's evidence and runs the rule
(`rules.seed.decide_family`); what the reason says (the effect and its interval, ties and
members that never traded, divergence, the market-noise interval, the power statement, what a
design lacks) is text about a finished row, written here so the two jobs stay apart.
"""

from __future__ import annotations

import math

import numpy as np

from tune_gems.analysis.text import format_number
from tune_gems.analysis.rules.seed import cannot_reach
from tune_gems.analysis.rules.words import CONFOUNDED, DELETE, EQUIVALENT, HARMFUL, INCONCLUSIVE, INSUFFICIENT, KEEP
from tune_gems.analysis.verdicts.verdict_market_noise import ACROSS_PERIODS, NOT_NEEDED, OK as MARKET_OK


def _fmt(x, f: str = ".3g") -> str:
    return format_number(x, f, missing="nan")


def ties_text(row) -> str:
    """The ties and the members that never traded, when there are any."""
    tied, zero = row.get("tied_share", math.nan), row.get("zero_turnover_share", math.nan)
    parts = []
    if np.isfinite(tied) and tied > 0:
        parts.append(f"{tied:.0%} of the pairs tie exactly (left out: {_fmt(row.get('n_informative'), '.0f')} "
                     "informative)")
    if np.isfinite(zero) and zero > 0:
        parts.append(f"{zero:.0%} of the members never traded in the window (validation turnover 0)")
    return ("; " + ", ".join(parts)) if parts else ""


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
    if status == NOT_NEEDED:
        return "; market noise: in the seed interval (per-seed paths)"
    return f"; market-noise interval {status}: the effect is conditional on this one price history"


def seeds_would_detect(seeds: float, rope: float) -> str:
    """The seeds that would detect the ROPE, in words (the seed rule's power statement)."""
    return f"about {_fmt(seeds, '.0f')} seeds would detect +-{rope:g}"


def _seeds_text(row: dict) -> str:
    """What more seeds would do: the rule's own power note where it states one (one price history:
    the market-noise floor), else the seeds that would detect the ROPE."""
    note = row.get("power_note")
    if isinstance(note, str) and note:
        return note
    return seeds_would_detect(row["seeds_needed"], row["rope"])


def seed_reason(row: dict, verdict: str, at_null: bool, metric_note: str, power: float, m: int,
                seed_power: bool = True) -> tuple[str, str]:
    """(reason, why) of the seed rule's `verdict` (`rules.seed.decide_family`'s) from one gem's
    evidence; `at_null` whether its measured magnitude is at its null (the rule's);
    `seed_power` whether the seed rule's MDE is the power statement (one period: it decides).
    The reason is verdicts.csv's one line with the evidence; `why` the same reason without the
    numbers the row's columns hold (effect, interval, Holm p, seeds, design, ties, market noise,
    MDE), which the console's and report's gem block print once (`report.why_line`)."""
    a = row["alpha"]
    extra = f"; {metric_note}" if metric_note else ""
    mag_text = (f"measured excess over its null ~0: median {_fmt(row['excess_median'])} x loss, CI "
                f"[{_fmt(row['excess_ci_low'])}, {_fmt(row['excess_ci_high'])}] within +-{row['rel_threshold']:g} "
                f"(TOST, Holm p {_fmt(row['excess_tost_p_adjusted'], '.2g')}, {_fmt(row['excess_n'], '.0f')} seeds)")
    delete_red = bool(row["redundancy"])
    tested = bool(row["n_seeds"]) and np.isfinite(row["n_seeds"]) and row["n_seeds"] > 0
    if verdict in (KEEP, HARMFUL, DELETE, EQUIVALENT, INCONCLUSIVE) or (verdict == INSUFFICIENT and tested):
        sided = "one-sided " if row.get("_one_sided") else ""
        ev = (f"{row['outcome']} effect {_fmt(row['effect'], '+.3g')}, {row['ci_level']:.1%} {sided}CI "
              f"[{_fmt(row['ci_low'])}, {_fmt(row['ci_high'])}], Holm p {sided}{_fmt(row['p_adjusted'], '.2g')} "
              f"({row['n_seeds']} seeds; {row['design']})")
        ev += ties_text(row)
        diverged = ""
        if row["wired_diverged"] or row["measured_diverged"]:
            diverged = f"; diverged (counted as worst): wired {int(row['wired_diverged'])}, measured {int(row['measured_diverged'])}"
        ev += diverged + market_text(row)
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
        level = (2 if row.get("_one_sided") else 1) * a / max(m, 1)
        hint = (f"; {int(row['n_informative'])} informative seeds cannot reach p <= {a / max(m, 1):.2g} at all"
                if cannot_reach(int(row["n_informative"]), level) else "")
        div = row.get("divergence_rate", 0.0)
        div_text = f", {div:.0%} of members diverged" if np.isfinite(div) and div > 0 else ""
        held = (f"; not delete: {'the magnitude is at its null' if at_null else row['redundancy']}, but wiring "
                "is not shown equivalent to none (delete needs both)" if at_null or delete_red else "")
        if not seed_power:
            return f"{ev}{held}{extra}", f"not decided by the seeds{diverged}{held}{extra}"
        return (f"{ev}; detectable at {power:.0%} power{div_text}: |effect| >= {_fmt(row['mde'])} "
                f"({_seeds_text(row)}){hint}{held}{extra}",
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
