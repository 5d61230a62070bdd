"""Search, then confirm: which configuration a search chose per gem, the confirmation's power, and the side-by-side
table. The chosen trial's gain is inflated by selection; the confirmation re-trains it on fresh seeds and its verdict is
final (`calibration.search_confirm_rates` checks the rule). Tables only, no trainer."""


from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import pandas as pd

from tune_gems.analysis.rules.power import (
    PowerInputs, fewest_seeds, finite_interval, floor, informative_of, market_se_of, mde, seeds_to_run,
)
from tune_gems.analysis.rules.settings import NO_DATA
from tune_gems.analysis.text import counted, format_number, text_table
from tune_gems.analysis.verdicts.verdict_market_noise import OK as MARKET_OK
from tune_gems.stats.inference import smallest_p
from tune_gems.stats.metrics import GEM_GAIN_PREFIX, VERDICT_GAIN_PREFIX

OK_STATUS = "TERMINATED"
CONFIRMATION_COLUMNS = [
    "gem", "chosen_trial", "chosen_config", "chosen_settings", "score_column", "discovery_gain", "confirmation_gain",
    "shrinkage", "discovery_verdict", "discovery_decided_by", "discovery_effect", "discovery_ci_low", "discovery_ci_high",
    "discovery_n_seeds", "confirmation_verdict", "confirmation_decided_by", "confirmation_effect", "confirmation_ci_low",
    "confirmation_ci_high", "confirmation_mean_effect", "confirmation_n_seeds", "confirmation_p_adjusted",
    "discovery_mde", "confirmation_mde", "confirmation_seeds", "candidates", "final_verdict", "final_ci_low",
    "final_ci_high", "final_rule", "note",
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

    @property
    def settings(self) -> str:
        """The searched values the label does not show; '' without any."""
        p = self.params
        shown = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in p.items()
                 if not k.endswith(".mode") and not (k.startswith("gems.") and k.endswith(".weight")
                                                     and p.get(f"{k.removesuffix('weight')}mode") != "wire")]
        return ", ".join(shown)


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
    """The eligible trial with the largest score along `axis` (first on ties; NaN never wins, -inf
    only when nothing else scores): (index, whether one was chosen)."""
    score = np.asarray(score, float)
    ok = np.asarray(eligible, bool) & ~np.isnan(score)
    key = np.where(ok, score, -np.inf)
    top = np.expand_dims(key.max(axis=axis), axis)
    return np.argmax(ok & (key == top), axis=axis), ok.any(axis=axis)


def eligible_trials(trials: pd.DataFrame, gem: str) -> tuple[str | None, np.ndarray, np.ndarray]:
    """(score column, score per trial, eligible per trial) of one gem's choice: the finished trials
    wiring it, scored by `verdict_gain_<gem>` (`gain_<gem>` for older results)."""
    finished = (trials["status"].astype(str).str.upper() == OK_STATUS).to_numpy() if "status" in trials.columns \
        else np.ones(len(trials), bool)
    mode = f"gems.{gem}.mode"
    col = _score_column(trials, gem)
    eligible = finished & (trials[mode].astype(str) == "wire").to_numpy() if mode in trials.columns \
        else np.zeros(len(trials), bool)
    score = pd.to_numeric(trials[col], errors="coerce").to_numpy(float) if col else np.full(len(trials), np.nan)
    return col, score, eligible


def candidate_count(trials: pd.DataFrame, gem: str) -> int:
    """How many configurations the search chose among for `gem` (eligible trials with a score):
    the T of the selection adjustment on one price history (`selection_adjusted_bounds`)."""
    _, score, eligible = eligible_trials(trials, gem)
    return int((eligible & ~np.isnan(score)).sum())


def choose_per_gem(trials: pd.DataFrame, gems: Iterable[str], searched_keys: Iterable[str]) -> tuple[list[Choice], list[str]]:
    """Per gem: the finished trial wiring it with the best discovery score and its `searched_keys`; (choices, notes)."""
    keys = list(searched_keys)
    choices, notes = [], []
    for g in gems:
        col, score, eligible = eligible_trials(trials, g)
        if col is None or not eligible.any():
            notes.append(f"{g}: no finished trial of the search wired it; nothing to confirm")
            continue
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
                 confirmation_gains: dict[str, float], notes: dict[str, str] | None = None,
                 power: list[PowerPlan] | None = None, final: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per gem: the chosen trial, discovery and confirmation with the intervals that decided
    them, the shrinkage, the power plan and the final verdict."""
    chosen = {c.gem: c for c in choices}
    notes = notes or {}
    plan = {p.gem: p for p in power or []}
    last = final.set_index("gem").to_dict("index") if final is not None and len(final) else {}
    rows = []
    for gem in discovery["gem"]:
        d, c, ch = _row(discovery, gem), _row(confirmation, gem), chosen.get(gem)
        pp, fin = plan.get(gem), last.get(gem, {})
        disc_gain = ch.score if ch else math.nan
        conf_gain = float(confirmation_gains.get(gem, math.nan))
        rows.append(dict(
            gem=gem, chosen_trial=ch.trial_id if ch else "", chosen_config=ch.config_label if ch else "",
            chosen_settings=ch.settings if ch else "", score_column=ch.score_column if ch else "", discovery_gain=disc_gain, confirmation_gain=conf_gain,
            shrinkage=disc_gain - conf_gain if np.isfinite(disc_gain) and np.isfinite(conf_gain) else math.nan,
            discovery_verdict=d.get("verdict", ""), discovery_decided_by=d.get("decided_by", ""),
            discovery_effect=d.get("decided_effect", math.nan), discovery_ci_low=d.get("decided_ci_low", math.nan),
            discovery_ci_high=d.get("decided_ci_high", math.nan), discovery_n_seeds=d.get("n_seeds", math.nan),
            confirmation_verdict=c.get("verdict", NO_DATA), confirmation_decided_by=c.get("decided_by", ""),
            confirmation_effect=c.get("decided_effect", math.nan), confirmation_ci_low=c.get("decided_ci_low", math.nan),
            confirmation_ci_high=c.get("decided_ci_high", math.nan),
            confirmation_mean_effect=c.get("mean_effect", math.nan), confirmation_n_seeds=c.get("n_seeds", math.nan),
            confirmation_p_adjusted=c.get("decided_p_adjusted", math.nan),
            discovery_mde=pp.discovery_mde if pp else math.nan, confirmation_mde=pp.confirmation_mde if pp else math.nan,
            confirmation_seeds=pp.seeds if pp else math.nan, candidates=pp.candidates if pp else math.nan,
            final_verdict=fin.get("final_verdict", c.get("verdict", NO_DATA)),
            final_ci_low=fin.get("final_ci_low", c.get("decided_ci_low", math.nan)),
            final_ci_high=fin.get("final_ci_high", c.get("decided_ci_high", math.nan)),
            final_rule=fin.get("final_rule", ONE_RUN_FINAL if c else ""),
            note="; ".join(x for x in (notes.get(gem, ""), pp.note if pp else "") if x),
        ))
    return pd.DataFrame(rows, columns=CONFIRMATION_COLUMNS)


def format_confirmation(table: pd.DataFrame) -> str:
    """The side-by-side table as text for a terminal (what `tune-gems confirm` prints)."""
    def f(x, spec="+.3g"):
        return format_number(x, spec, missing="-")

    def decided(effect, lo, hi):  # a word's estimate with the interval that decided it
        if np.isnan(lo) and np.isnan(hi):
            return "-" if np.isnan(effect) else f"{f(effect)} (no interval)"
        return f"{f(effect)} [{f(lo, '.3g')}, {f(hi, '.3g')}]"

    head = ["gem", "chosen trial", "discovery gain", "confirmation gain", "shrinkage", "discovery verdict",
            "its effect [CI]", "seeds", "MDE (discovery)", "final verdict", "its effect [CI]"]
    def chosen(r) -> str:  # the trial and the searched values it tested (its weight)
        tested = r.get("chosen_settings")
        return f"{r['chosen_trial']} ({tested})" if isinstance(tested, str) and tested else r["chosen_trial"] or "-"

    rows = [[r["gem"], chosen(r), f(r["discovery_gain"]), f(r["confirmation_gain"]), f(r["shrinkage"]),
             r["discovery_verdict"] or "-", decided(r["discovery_effect"], r["discovery_ci_low"], r["discovery_ci_high"]),
             f(r["confirmation_n_seeds"], ".0f"), f"{f(r['confirmation_mde'], '.3g')} ({f(r['discovery_mde'], '.3g')})",
             r["final_verdict"], decided(r["confirmation_effect"], r["final_ci_low"], r["final_ci_high"])]
            for _, r in table.iterrows()]
    lines = text_table(head, rows)
    lines += [f"{r['gem']}: {r['note']}" for _, r in table.iterrows() if isinstance(r["note"], str) and r["note"]]
    lines += [f"{r['gem']}: final verdict on the search's price data: {r['final_rule']}" for _, r in table.iterrows()
              if isinstance(r.get("final_rule"), str) and r["final_rule"] and r["final_rule"] != ONE_RUN_FINAL]
    return "\n".join(lines)


# -- a confirmation with power ---------------------------------------------------------------------


@dataclass(frozen=True)
class PowerPlan:
    """How many seeds one gem's confirmation trains: its MDE against the discovery's."""

    gem: str
    seeds: int
    discovery_mde: float
    confirmation_mde: float
    level: float
    history_level: float
    candidates: int
    one_history: bool
    folds: int
    note: str


MAX_CONFIRM_SEEDS = 4096
"""Most seeds per arm a confirmation may choose (the schema's bound of `trainer.population`)."""
MAX_TIED_SHARE = 0.9
"""The largest discovery tied share a confirmation plans around (beyond it the discovery says next to nothing)."""


def discovery_power_inputs(row: dict[str, Any]) -> PowerInputs:
    """The comparison's power inputs as the discovery's verdict row measured it (the spreads per seed,
    the periods and their spread, the market-noise standard error on one history)."""
    def num(key: str, default: float = math.nan) -> float:
        return _number(row, key, default)

    def count(key: str, default: int) -> int:
        return _count(row, key, default)

    n, sd, p_div, folds = count("n_seeds", 0), num("sd_diff"), num("divergence_rate", 0.0), count("folds", 1)
    if math.isfinite(num("n_informative")) and folds < 2:
        n = int(num("n_informative"))  # the seed rule's MDE is on the informative pairs (verdicts.csv's)
    p_div = p_div if math.isfinite(p_div) else 0.0
    histories = count("histories", 1)
    # the contrasts whose pooled scale it shared (the family, where the row says tau was shared)
    sharing = count("family_size", 1) if str(row.get("tau_shared", "")).strip().lower() == "true" else 1
    if histories >= 2 and math.isfinite(num("pooled_effect")):  # the nested rule's (`history_verdicts.history_power`)
        per_fold = num("n_informative") / (histories * folds) if math.isfinite(num("n_informative")) else n
        return PowerInputs(per_fold, sd, p_div, folds=folds, tau2=num("var_period", 0.0), within=num("var_within"),
                           seed=num("var_seed", 0.0), contrasts=sharing, histories=histories,
                           history_tau2=num("var_history", 0.0), calendar=num("var_calendar", 0.0),
                           calendars=max(int(np.nan_to_num(num("calendar_periods", folds))) // max(folds, 1), 1))
    if folds >= 2 and math.isfinite(num("pooled_effect")):
        # the pooled components the verdict row states (`walk_forward.pooled_power`): its MDE is the
        # row's `mde`, with n the informative pairs per period (a mean: not always whole)
        tau2, k = num("var_period", num("tau2", 0.0)), int(num("periods_informative", folds) or folds)
        per_fold = num("n_informative") / k if math.isfinite(num("n_informative")) and k else n
        f = num("fold_overlap", 1.0)  # the folds' overlap the verdict's pooled variance carried (lambda = (F - 1) / K)
        return PowerInputs(per_fold if math.isfinite(per_fold) else n, sd, p_div, folds=k,
                      fold_sd=num("fold_sd_diff"), tau2=tau2 if math.isfinite(tau2) else 0.0, within=num("var_within"),
                      seed=num("var_seed", 0.0), contrasts=sharing,
                      overlap=(f - 1.0) / k if math.isfinite(f) and f > 1.0 and k else 0.0)
    market_se = 0.0
    if row.get("market_noise") == MARKET_OK and math.isfinite(num("market_ci_level")):
        market_se = market_se_of(num("market_ci_low"), num("market_ci_high"), 1 - num("market_ci_level"))
    return PowerInputs(n, sd, p_div, market_se=market_se if math.isfinite(market_se) else 0.0)


def _number(row: dict[str, Any], key: str, default: float = math.nan) -> float:
    """A number of the discovery's row, `default` where it has none or not a number."""
    try:
        return float(row.get(key, default))
    except (TypeError, ValueError):
        return default


def _count(row: dict[str, Any], key: str, default: int = 1) -> int:
    """A whole count of the discovery's row (`histories`, `folds`, `n_seeds`), at least `default`."""
    v = _number(row, key, default)
    return int(v) if math.isfinite(v) and v >= default else default


def _tied_share(row: dict[str, Any]) -> float:
    """The discovery's share of tied seed pairs (0 where the row does not state one)."""
    tie = _number(row, "tied_share", 0.0)
    return min(max(tie, 0.0), MAX_TIED_SHARE) if math.isfinite(tie) else 0.0


def confirmation_power(discovery: pd.DataFrame, trials: pd.DataFrame, gems: list[str], *, one_history: bool,
                       alpha: float, power: float, seeds: int | None, default_seeds: int) -> list[PowerPlan]:
    """Per gem the seeds that make its confirmation's MDE at most the discovery's, or ConfigError in
    one line before anything is trained."""
    from tune_gems.contracts.errors import ConfigError

    tested = pd.to_numeric(discovery.get("p_value", pd.Series(dtype=float)), errors="coerce")
    family = pd.to_numeric(discovery.get("family_size", pd.Series(dtype=float)), errors="coerce")
    # the discovery's first Holm step: over its design's family (gems and factors), as its verdicts state their MDE
    m_d = int(family.max()) if family.notna().any() else int(np.isfinite(tested).sum())
    m_d, m_c = max(m_d, 1), max(len(gems), 1)
    level_d, level_c = alpha / m_d, alpha / m_c
    plans = []
    for gem in gems:
        rows = discovery[discovery["gem"] == gem]
        row = rows.iloc[0].to_dict() if len(rows) else {}
        inputs = discovery_power_inputs(row)
        t_g = max(candidate_count(trials, gem), 1) if one_history else 1
        h_level = level_c / t_g
        target = mde(inputs, level_d, power) if inputs.n >= 2 else math.nan
        stated = _number(row, "mde")  # the discovery's MDE as its verdict row (analyze) states it
        shown = stated if not math.isnan(stated) else target
        tie = _tied_share(row)

        def confirmation_mde(seeds: int) -> float:  # the confirmation's MDE with `seeds` per arm
            return mde(inputs.with_seeds(informative_of(seeds, tie)), level_c, power, history_level=h_level)

        smallest = int(seeds_to_run(next(n for n in range(2, 64) if finite_interval(n, level_c)), tie))
        histories, folds = _count(row, "histories"), _count(row, "folds")  # the design's, whatever its MDE
        data = (f"{'the same price histories' if histories >= 2 else 'one price history'}, the history's part "
                f"at level / {t_g} for the {t_g} configurations the search chose among" if one_history else "fresh paths")
        periods = f"{histories} histories x {folds} fold(s)" if histories >= 2 else f"{folds} period(s)"
        what = f"the confirmation ({periods}, {data}) "
        where = f"{gem}: {what}"
        if seeds is not None and not finite_interval(informative_of(seeds, tie), level_c):
            k = informative_of(seeds, tie)
            raise ConfigError(f"--seeds {seeds}: {gem}'s confirmation cannot give a finite interval at its level "
                              f"{level_c:.3g} ({seeds} seeds, about {k} of them informative at the discovery's tied share "
                              f"{tie:.2f}: the smallest exact p of {k} is {smallest_p(max(k, 1)):.3g}); at least {smallest} "
                              "seeds per arm")
        if not (target > 0) or not math.isfinite(target):
            n = seeds if seeds is not None else max(default_seeds, smallest)
            got = confirmation_mde(n) if inputs.n >= 2 else math.nan
            why = ("it could not decide at any size" if not (0 < shown < math.inf) else
                   f"on {counted(inputs.n, 'informative pair')}: too few to plan the seeds from")
            note = (f"{what}trains {n} seeds per arm (MDE {_f(got)}); the discovery's MDE is {_f(shown)} ({why}), so "
                    "no smaller MDE is asked")
            plans.append(PowerPlan(gem, n, shown, got, level_c, h_level, t_g, one_history, inputs.folds, note))
            continue
        need = seeds_to_run(fewest_seeds(inputs, target, level_c, power, history_level=h_level,
                                         n_min=informative_of(smallest, tie), n_max=MAX_CONFIRM_SEEDS), tie)
        if not math.isfinite(need):
            fix = ("more periods, not more seeds" if inputs.pooled_over else
                   "the market noise of one history: run walk-forward folds, data.folds")
            raise ConfigError(f"{where}cannot reach the discovery's MDE {_f(target)} with any number of seeds up to "
                              f"{MAX_CONFIRM_SEEDS}: its floor is {_f(floor(inputs, h_level, power))} ({fix}); nothing "
                              "was trained and the search's one confirmation is not spent")
        need = int(need)
        if seeds is not None and seeds < need:
            raise ConfigError(f"--seeds {seeds}: {gem}'s confirmation MDE {_f(confirmation_mde(seeds))} "
                              f"exceeds the discovery's {_f(target)} (same rule, same units); at least {need} seeds per "
                              "arm reach it; nothing was trained and the search's one confirmation is not spent")
        n = seeds if seeds is not None else need
        ties = f" ({n - informative_of(n, tie)} expected to tie, the discovery's tied share {tie:.2f})" if tie > 0 else ""
        note = (f"{what}trains {n} seeds per arm{ties}: MDE {_f(confirmation_mde(n))} <= the discovery's {_f(target)} "
                "(same rule, same units)")
        plans.append(PowerPlan(gem, n, target, confirmation_mde(n), level_c, h_level, t_g, one_history, inputs.folds,
                               note))
    return plans


def _f(x: float) -> str:
    return format_number(x, ".3g", missing="-")


# -- on one price history: the selection-adjusted final verdict -------------------------------------


ONE_RUN_FINAL = "the confirmation's verdict (fresh seeds and paths)"
"""The final rule where the confirmation's data are fresh: its verdict is the final one."""
FINAL_COLUMNS = ["gem", "final_verdict", "final_ci_low", "final_ci_high", "final_rule"]


def one_history_final(verdicts: pd.DataFrame, candidates: dict[str, int]) -> pd.DataFrame:
    """FINAL_COLUMNS of a confirmation on one price history (`rules.decision.final_on_one_history`)."""
    rows = verdicts[verdicts["gem"].isin(list(candidates))]
    if "final_verdict" not in rows.columns:
        return pd.DataFrame(columns=FINAL_COLUMNS)
    return rows[FINAL_COLUMNS].reset_index(drop=True)
