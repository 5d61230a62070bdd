"""One contrast's reading of its family's decision (`family.DesignFamily.view`), named as the tables
name it: every word printed beside the numbers of the test that gave it."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

SEEDS = "seeds"
"""`decided_by` of a word the seed rule gave (one period, or a contrast no pooled test decides)."""
INSUFFICIENT_BY = "insufficient: "
"""How `decided_by` starts where the word is `insufficient data` (no interval; the rest says why)."""


@dataclass(frozen=True)
class SeedReading:
    """The seed rule's numbers of one contrast as verdicts.csv names them (NaN without pairs)."""

    effect: float
    ci_low: float
    ci_high: float
    ci_level: float
    p_value: float
    p_adjusted: float
    tost_p: float
    tost_p_adjusted: float
    n_informative: float
    tied_share: float
    mde: float
    mde_two_stage: float
    seeds_needed: float
    mde_floor: float
    power_note: str


@dataclass(frozen=True)
class PooledReading:
    """The pooled test's numbers of one contrast, its power statement and the per-period evidence."""

    pooled_effect: float
    pooled_ci_low: float
    pooled_ci_high: float
    pooled_ci_level: float
    pooled_p: float
    pooled_p_adjusted: float
    pooled_tost_p_adjusted: float
    pooled_df: float
    tau_shared: bool
    tau2: float
    i2: float
    q_p: float
    q_p_adjusted: float
    periods_informative: float
    fold_sd_diff: float
    var_seed: float
    var_within: float
    var_period: float
    fold_overlap: float
    mde: float
    mde_two_stage: float
    seeds_needed: float
    mde_floor: float
    power_note: str
    tied_share: float
    n_informative: int
    period_pairs: int
    fold_effects: str
    period: str
    too_few: bool
    unestimable: bool
    calendar: dict = field(default_factory=dict)
    """Over several histories: the spread between them and their calendar part
    (`history_verdicts.CALENDAR_COLUMNS`)."""


@dataclass(frozen=True)
class Decided:
    """The estimate, interval and Holm p of the test that gave a word (`decided_by`); no interval
    where the word is `insufficient data` or there is no design."""

    decided_by: str
    decided_effect: float
    decided_ci_low: float = math.nan
    decided_ci_high: float = math.nan
    decided_ci_level: float = math.nan
    decided_p_adjusted: float = math.nan


DECIDED_COLUMNS = [f.name for f in fields(Decided)]
"""verdicts.csv's and factors.csv's columns of the test that decided each word (after `verdict`)."""


@dataclass(frozen=True)
class ContrastView:
    """One contrast's reading of the family's decision; `columns()` names it as verdicts.csv and factors.csv do."""

    verdict: str
    final_verdict: str
    discovery_verdict: str
    seed_verdict: str
    market_verdict: str
    seeds: SeedReading
    pooled: PooledReading | None
    decided: Decided
    market_ci_low: float
    market_ci_high: float
    combined_ci_low: float
    combined_ci_high: float
    gate_applied: bool
    final_ci_low: float
    final_ci_high: float
    magnitude_at_null: bool
    excess_tost_p_adjusted: float

    def columns(self) -> dict:
        """The table columns this view states: the seed rule's numbers, then the pooled test's
        where it decides (its MDE, ties and informative pairs in place of the seeds')."""
        out = dict(verdict=self.verdict, **asdict(self.decided), discovery_verdict=self.discovery_verdict,
                   seed_verdict=self.seed_verdict, **asdict(self.seeds), market_ci_low=self.market_ci_low,
                   market_ci_high=self.market_ci_high, combined_ci_low=self.combined_ci_low,
                   combined_ci_high=self.combined_ci_high, excess_tost_p_adjusted=self.excess_tost_p_adjusted)
        if self.pooled is not None:
            out.update({k: v for k, v in asdict(self.pooled).items() if k != "calendar"})
        return out
