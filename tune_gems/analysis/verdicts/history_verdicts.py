"""Verdicts over several price histories: the nested rule's evidence and columns. `rules.histories.decide_histories`
decides through `rules.decision.decide`; this module gathers its evidence from the verdicts' own pairs
(`pairing.by_history_fold`) and writes the decision and its power into the verdict table. Which windows share a calendar
period is the analysis's `CalendarOf`; without it fold k of every history is one period."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from tune_gems.analysis import defaults
from tune_gems.analysis.pairs.pairing import Cells, Paired, by_history_fold, history_count
from tune_gems.analysis.read.labels import HISTORY_NAME
from tune_gems.analysis.rules.histories import HistoryComponents, HistoryData, history_components, history_data
from tune_gems.analysis.rules.settings import Thresholds
from tune_gems.analysis.rules.periods import is_tie
from tune_gems.analysis.rules.power import history_inputs, statement
from tune_gems.analysis.text import counted, format_number

HISTORY = "history"
CalendarOf = Callable[[Sequence[int], Sequence[int]], np.ndarray]
"""(history ids, fold ids) -> calendar [H, K]: the period each (history, fold) validates on."""
HISTORY_ROW_COLUMNS = ["gem", HISTORY, HISTORY_NAME, "fold", "effect", "ci_low", "ci_high", "ci_level", "seeds", "pairs", "ties",
                       "tied_share"]
"""The per-(history, fold) rows of the nested rule: the fold rows of one history
(`walk_forward.FOLD_ROW_COLUMNS`) with the history they belong to and its name; the interval is at the history's
Holm level (the one the sign-change test between histories reads)."""
ADD_HISTORIES = "add price histories: data.price_columns or data.histories"
"""What a verdict with too few histories says to do."""
ADD_PERIODS = "add folds (data.folds.k) or histories on other calendars"
"""What a verdict with too few calendar periods says to do."""
CALENDAR_COLUMNS = ["var_history", "var_calendar", "calendar_df", "calendar_periods"]
"""verdicts.csv's columns of the nested rule's spread between histories and its calendar part
(`rules.histories`: the variance of the part the histories share in each calendar period, its df and
the calendar periods with an effect)."""
HISTORY_COLUMNS = ["histories", *CALENDAR_COLUMNS]
"""The verdict table's columns over several histories (after the period columns): how many, and
the spread between them and their calendar part (what confirm plans with)."""


@dataclass
class HistoryFamily:
    """A family's evidence over H >= 2 histories: per contrast its (history, fold) parts, the ids,
    the rule's `data` and the histories' `names`."""

    parts: list[list[tuple[tuple[int, int], Paired]]]
    histories: list[int]
    folds: list[int]
    data: HistoryData
    tied_share: np.ndarray  # [m]: ties over every (history, fold) pair of the contrast
    names: dict[int, str]

    @property
    def periods(self) -> int:
        """The (history, fold) periods the family spans (H x K)."""
        return len(self.histories) * len(self.folds)

    def shape_text(self) -> str:
        """`2 histories x 2 folds`: the design the nested rule pools."""
        return f"{len(self.histories)} histories x {len(self.folds)} fold{'s' if len(self.folds) != 1 else ''}"


def history_family(prs: list[Paired], cells: Cells, calendar_of: CalendarOf | None = None,
                   names: dict[int, str] | None = None) -> HistoryFamily | None:
    """The nested rule's evidence of a family of comparisons, or None on one price history."""
    if history_count(cells) < 2:
        return None
    histories = sorted(int(h) for h in cells.table[HISTORY].unique())
    folds = sorted(int(f) for f in cells.table["fold"].unique())
    parts = [by_history_fold(pr, cells) for pr in prs]
    units = sorted({u for per in parts for _, pr in per for u in pr.units})
    slot = {u: i for i, u in enumerate(units)}
    d = np.full((1, len(prs), len(histories), len(folds), len(units)), np.nan)
    tied = np.full(len(prs), np.nan)
    for j, per in enumerate(parts):
        ties = pairs = 0
        for (h, f), pr in per:
            d[0, j, histories.index(h), folds.index(f), [slot[u] for u in pr.units]] = pr.diffs
            ties, pairs = ties + int(is_tie(pr.diffs).sum()), pairs + pr.n
        tied[j] = ties / pairs if pairs else math.nan
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        data = history_data(d, calendar_of(histories, folds) if calendar_of is not None else None)
    return HistoryFamily(parts, histories, folds, data, tied, {h: (names or {}).get(h, f"history {h}") for h in histories})


def history_power(hf: HistoryFamily, dec, th: Thresholds) -> dict[str, np.ndarray]:
    """Per contrast: the nested rule's power statement (`power.history_mde` at the first Holm step,
    the two-stage MDE), its components and `inputs`; no overlap factor: the spread between histories
    measures what a history's folds share."""
    pooled = dec.pooled
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a contrast without pairs: a mean of nothing, NaN
        comp = history_components(hf.data, dec.histories)
    m = len(hf.parts)
    level = th.alpha / max(int(np.isfinite(pooled["p"][0]).sum()), 1)
    keys = ("mde", "two_stage", "seeds_needed", "floor", "history", "seed", "within", "period", "calendar")
    out = {key: np.full(m, np.nan) for key in keys}
    out["note"] = np.full(m, "", dtype=object)
    out["overlap"] = np.ones(m)
    out["inputs"] = [None] * m
    shared = np.asarray(pooled["shared"][0], bool)
    ids = np.asarray(hf.data.calendar)
    calendars = max(len(np.unique(ids[ids >= 0])) // max(len(hf.folds), 1), 1)  # the calendars the histories share
    for j in range(m):
        c = HistoryComponents(*(float(getattr(comp, key)[0, j]) for key in ("history", "period", "within", "seed",
                                                                             "calendar")), bool(comp.shared[0, j]))
        for key in ("history", "period", "within", "seed", "calendar"):
            out[key][j] = getattr(c, key)
        inf = np.concatenate([fd.n_informative[0, j].ravel() for fd in hf.data.folds])
        n = float(inf[inf > 0].mean()) if (inf > 0).any() else math.nan
        df = float(pooled["df"][0, j])
        if not (all(np.isfinite([c.history, c.period, c.within, c.calendar])) and np.isfinite(df) and n > 0):
            continue
        out["inputs"][j] = history_inputs(n, len(hf.histories), len(hf.folds), c, int(shared.sum()) if shared[j] else 1,
                                           calendars)
        ps = statement(out["inputs"][j], th.rope, level, th.power, tied=float(hf.tied_share[j]),
                       one_sided=th.one_sided_keep)
        out["mde"][j], out["floor"][j], out["seeds_needed"][j], out["note"][j] = ps.mde, ps.floor, ps.seeds_needed, ps.note
        out["two_stage"][j] = ps.two_stage
    return out


def calendar_text(hf: HistoryFamily, hp, j: int) -> str:
    """What the nested rule did with the calendar the histories share, in words."""
    cal = hp.calendar
    k = int(cal.periods[0, j])
    if not bool(cal.shared[0, j]):
        return "the histories on their own calendars (no period shared: pooled as independent)"
    if k < 2 or not np.isfinite(cal.var[0, j]):
        return (f"the {len(hf.histories)} histories share {k} calendar period{'s' if k != 1 else ''}: the calendar "
                "part common to them cannot be separated from the effect")
    var, df = float(cal.var[0, j]), float(cal.df[0, j])
    size = (f"variance {format_number(var, '.3g')} on {format_number(df, '.3g')} df" if var > 0 else
            f"estimated at 0 from its {k - 1} df")
    return f"the calendar part the histories share over {k} periods: {size}"


def history_period_text(hf: HistoryFamily, hp, j: int, min_periods: int) -> str:
    """What the verdict table's `period` column says of the nested rule (the reason line leads with
    it where there are too few histories or too few calendar periods, `--min-periods`)."""
    pooled = hp.pooled
    informative, shared = int(pooled["periods"][0, j]), bool(pooled["shared"][0, j])
    calendar = calendar_text(hf, hp, j)
    if hp.too_few_histories[0, j]:
        return (f"too few periods over {hf.shape_text()} ({counted(informative, 'history')} with an effect, need >= "
                f"{defaults.MIN_HISTORIES}; {ADD_HISTORIES})")
    if hp.too_few_periods[0, j]:
        shared = bool(hp.calendar.shared[0, j])
        need = max(min_periods, defaults.MIN_SHARED_PERIODS) if shared else min_periods
        periods = int(hp.calendar.periods[0, j])
        if shared and periods >= need:  # enough periods, but no two of them held by every history sharing them
            return (f"too few periods over {hf.shape_text()} ({calendar}; the calendar part cannot be estimated: no "
                    f"two periods in which every history that shares them has an effect; {ADD_PERIODS})")
        why = (f" on a shared calendar, where below {defaults.MIN_SHARED_PERIODS} the calendar part is not bounded: "
               f"an exact sign-flip test over 4 periods cannot go below p = 0.125" if shared else "")
        return (f"too few periods over {hf.shape_text()} ({calendar}; {periods} calendar "
                f"periods with an effect, need >= {need}{why}; {ADD_PERIODS})")
    return (f"pooled over {hf.shape_text()} (each history's effect over its folds, then random effects over "
            f"{counted(informative, 'history')}, HKSJ{', tau shared across the family' if shared else ''}; {calendar})")
