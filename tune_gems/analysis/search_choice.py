"""Search, then confirm (issue 21): which configuration a search chose per gem, and the side-by-side
table of its discovery and its confirmation.

Why. The search keeps the trial whose paired gain was largest. With several trials that maximum
is biased upward (selection: the winner is partly the luckiest), and its seed pairs were used to
pick it, so testing it on the same seeds tests the selection, not the gem. The confirmation
(`tune-gems confirm`, tune_gems.commands.confirm) trains each gem's chosen configuration once more
against its control on fresh member seeds and fresh synthetic paths; its verdict is the final
one. The shrinkage (discovery gain minus confirmation gain, the same statistic) shows how much of
the discovered gain was selection. `calibration.search_confirm_rates` checks the rule: under
the null the family-wise false rate after confirmation stays <= alpha, and a true effect at the
confirmation's MDE survives with the stated power.

This module only reads tables (no trainer): the choice per gem and the table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import pandas as pd

from tune_gems.analysis.rules.words import NO_DATA
from tune_gems.stats.metrics import GEM_GAIN_PREFIX, VERDICT_GAIN_PREFIX

OK_STATUS = "TERMINATED"
CONFIRMATION_COLUMNS = [
    "gem", "chosen_trial", "chosen_config", "score_column", "discovery_gain", "confirmation_gain",
    "shrinkage", "discovery_verdict", "discovery_effect", "discovery_ci_low", "discovery_ci_high",
    "discovery_n_seeds", "confirmation_verdict", "confirmation_effect", "confirmation_ci_low",
    "confirmation_ci_high", "confirmation_mean_effect", "confirmation_n_seeds", "confirmation_p_adjusted",
    "final_verdict", "note",
]


@dataclass(frozen=True)
class Choice:
    """The configuration the search chose for one gem: the finished trial that wires it with the
    largest discovery score (`score_column` of trials.parquet), and the searched keys' values."""

    gem: str
    trial_id: str
    config_label: str
    score_column: str
    score: float
    params: dict[str, Any] = field(default_factory=dict)


def _score_column(trials: pd.DataFrame, gem: str) -> str | None:
    """`verdict_gain_<gem>` (the verdict's statistic), else `gain_<gem>` for older results."""
    for prefix in (VERDICT_GAIN_PREFIX, GEM_GAIN_PREFIX):
        col = f"{prefix}{gem}"
        if col in trials.columns:
            return col
    return None


def _plain(v: Any) -> Any:
    """A parquet cell as a plain Python value (numpy scalars unwrapped)."""
    return v.item() if isinstance(v, np.generic) else v


def best_trial(score, eligible, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """The choice rule of `choose_per_gem`, vectorised along `axis` (the trials): the eligible
    trial with the largest score, the first on ties; NaN never wins, -inf (a diverged
    configuration) only when no eligible trial scores more. Returns (index of the chosen trial,
    whether one was chosen: some eligible trial has a non-NaN score), `axis` removed."""
    score = np.asarray(score, float)
    ok = np.asarray(eligible, bool) & ~np.isnan(score)
    key = np.where(ok, score, -np.inf)
    top = np.expand_dims(key.max(axis=axis), axis)
    return np.argmax(ok & (key == top), axis=axis), ok.any(axis=axis)


def choose_per_gem(trials: pd.DataFrame, gems: Iterable[str], searched_keys: Iterable[str]) -> tuple[list[Choice], list[str]]:
    """Per gem: the finished trial wiring it with the best discovery score (NaN never wins;
    -inf, a diverged configuration, only when nothing else exists), with the values of
    `searched_keys` in that trial. Returns (choices, notes for gems that cannot be confirmed)."""
    keys = list(searched_keys)
    finished = (trials["status"].astype(str).str.upper() == OK_STATUS).to_numpy() if "status" in trials.columns \
        else np.ones(len(trials), bool)
    choices, notes = [], []
    for g in gems:
        mode = f"gems.{g}.mode"
        col = _score_column(trials, g)
        eligible = finished & (trials[mode].astype(str) == "wire").to_numpy() if mode in trials.columns \
            else np.zeros(len(trials), bool)
        if col is None or not eligible.any():
            notes.append(f"{g}: no finished trial of the search wired it; nothing to confirm")
            continue
        score = pd.to_numeric(trials[col], errors="coerce").to_numpy(float)
        i, chosen = best_trial(score, eligible)
        if not chosen:
            notes.append(f"{g}: no trial wiring it has a {col}; nothing to confirm")
            continue
        best = trials.iloc[int(i)]
        params = {k: _plain(best[k]) for k in keys if k in best.index and not _missing(best[k])}
        choices.append(Choice(g, str(best["trial_id"]), str(best.get("config_label", "")), col,
                              float(score[int(i)]), params))
    return choices, notes


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _row(v: pd.DataFrame, gem: str) -> dict[str, Any]:
    r = v[v["gem"] == gem]
    return r.iloc[0].to_dict() if len(r) else {}


def side_by_side(choices: list[Choice], discovery: pd.DataFrame, confirmation: pd.DataFrame,
                 confirmation_gains: dict[str, float], notes: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per gem of the discovery verdicts: the chosen trial and its (selected) discovery
    gain, the same statistic on the confirmation run (`confirmation_gains[gem]`), the shrinkage
    (discovery - confirmation), both verdicts with their effects and intervals, and the final
    verdict, which is the confirmation's."""
    chosen = {c.gem: c for c in choices}
    notes = notes or {}
    rows = []
    for gem in discovery["gem"]:
        d, c, ch = _row(discovery, gem), _row(confirmation, gem), chosen.get(gem)
        disc_gain = ch.score if ch else math.nan
        conf_gain = float(confirmation_gains.get(gem, math.nan))
        rows.append(dict(
            gem=gem, chosen_trial=ch.trial_id if ch else "", chosen_config=ch.config_label if ch else "",
            score_column=ch.score_column if ch else "", discovery_gain=disc_gain, confirmation_gain=conf_gain,
            shrinkage=disc_gain - conf_gain if np.isfinite(disc_gain) and np.isfinite(conf_gain) else math.nan,
            discovery_verdict=d.get("verdict", ""), discovery_effect=d.get("effect", math.nan),
            discovery_ci_low=d.get("ci_low", math.nan), discovery_ci_high=d.get("ci_high", math.nan),
            discovery_n_seeds=d.get("n_seeds", math.nan),
            confirmation_verdict=c.get("verdict", NO_DATA), confirmation_effect=c.get("effect", math.nan),
            confirmation_ci_low=c.get("ci_low", math.nan), confirmation_ci_high=c.get("ci_high", math.nan),
            confirmation_mean_effect=c.get("mean_effect", math.nan), confirmation_n_seeds=c.get("n_seeds", math.nan),
            confirmation_p_adjusted=c.get("p_adjusted", math.nan),
            final_verdict=c.get("verdict", NO_DATA), note=notes.get(gem, ""),
        ))
    return pd.DataFrame(rows, columns=CONFIRMATION_COLUMNS)


def format_confirmation(table: pd.DataFrame) -> str:
    """The side-by-side table as text for a terminal (what `tune-gems confirm` prints)."""
    from tune_gems.analysis.report import format_number

    def f(x, spec="+.3g"):
        return format_number(x, spec, missing="-")

    def ci(lo, hi):
        return "-" if np.isnan(lo) and np.isnan(hi) else f"[{f(lo, '.3g')}, {f(hi, '.3g')}]"

    head = ["gem", "chosen trial", "discovery gain", "confirmation gain", "shrinkage", "discovery verdict",
            "discovery effect [CI]", "confirmation effect [CI]", "seeds", "final verdict"]
    rows = [head]
    for _, r in table.iterrows():
        rows.append([r["gem"], r["chosen_trial"] or "-", f(r["discovery_gain"]), f(r["confirmation_gain"]),
                     f(r["shrinkage"]), r["discovery_verdict"] or "-",
                     f"{f(r['discovery_effect'])} {ci(r['discovery_ci_low'], r['discovery_ci_high'])}",
                     f"{f(r['confirmation_effect'])} {ci(r['confirmation_ci_low'], r['confirmation_ci_high'])}",
                     f(r["confirmation_n_seeds"], ".0f"), r["final_verdict"]])
    widths = [max(len(str(x[i])) for x in rows) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(x, widths)).rstrip() for x in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += [f"{r['gem']}: {r['note']}" for _, r in table.iterrows() if r["note"]]
    return "\n".join(lines)
