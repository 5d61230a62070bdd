"""Calibration of the rule over folds and histories: the fold overlap, the held-out confirmation, several price
histories, a calendar they share, and a contrast leaving the family's spread. Each table runs the function a verdict
calls (`rules.decision.decide`, `rules.power.mde`) on simulated families (`World`); the real shapes are the S&P 500
runs' (`LAYOUT_ROWS`). `python analysis/calibrate_decisions.py --n-sim 2000` prints docs/analysis.md's tables;
`tests/test_decision_calibration.py` checks each claim at a small n_sim."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
from scipy import stats as sps

from tune_gems.analysis import defaults
from tune_gems.analysis.calibrate.calibration import mc_tolerance, median_parts
from tune_gems.analysis.rules.histories import (
    HistoryComponents, history_components, history_data, one_calendar, own_calendars,
)
from tune_gems.analysis.rules.decision import Evidence, TestSegment, confirmation_level, decide, held_out_alone
from tune_gems.analysis.rules.periods import fold_components, fold_data, fold_overlap, nb_factor, seed_level_effect
from tune_gems.analysis.rules.settings import (
    HARMFUL_CODE, INCONSISTENT_CODE, INSUFFICIENT_CODE, KEEP_CODE, NOT_CONFIRMED_CODE, Thresholds, verdict_codes,
)
from tune_gems.analysis.rules.power import PowerInputs, history_inputs, mde, pooled_mde, two_stage
from tune_gems.analysis.text import text_table
from tune_gems.data.segments import TrainingReach, fold_bounds, fold_table

LAYOUT_ROWS = 6000
"""Daily rows of the series the layouts' fold tables are cut from (about 24 years of closes)."""
LAYOUT_SPLITS = (0.7, 0.15, 0.15)
LAYOUT_REACH = TrainingReach(window=32, n_step=3, episode_length=256)
"""The trainer's defaults (env.window, model n_step, env.episode_length): what the purge reads."""
LAYOUT_EMBARGO = 5


@dataclass(frozen=True)
class World:
    """One simulated family's world: effects in seed sd, spreads in one fold's seed SE; `common` (c) the part a
    history's folds share (Nadeau and Bengio's), `carry` its share on the test segment."""

    effect: float = 0.0
    test_effect: float | None = None
    tau: float = 1.0
    taus: tuple[float, ...] | None = None
    rho: float = 0.0
    common: float = 0.0
    carry: float = 0.0
    tau_history: float = 0.0
    history_pattern: tuple[float, ...] | None = None
    calendar: float = 0.0
    """One draw per calendar period and contrast, shared by the histories on it (their spread cannot show it)."""


@dataclass(frozen=True)
class Design:
    """A layout: `folds` per history, `seeds` per arm, `contrasts`, `histories`; `nb_rho` NB's
    correlation of its folds."""

    label: str
    folds: int
    seeds: int
    contrasts: int = 3
    histories: int = 1
    nb_rho: float = 0.0
    one_calendar: bool = True
    """The histories' folds and test segments share calendar periods (the columns of one file)."""


def layout_rho(folds: int) -> float:
    """NB's correlation n2 / (n1 + n2) of `folds` purged groups on LAYOUT_ROWS rows, read off its fold table."""
    prices = pd.Series(np.arange(LAYOUT_ROWS, dtype=float))
    spec = SimpleNamespace(scheme="purged", k=folds, embargo=LAYOUT_EMBARGO, val_length=None)
    return _nb_rho(fold_table(prices.index, fold_bounds(prices, list(LAYOUT_SPLITS), spec, 64, LAYOUT_REACH),
                              "expanding"), folds)


def _nb_rho(table: pd.DataFrame, folds: int) -> float:
    lam = (fold_overlap(table).factor - 1.0) / folds  # equal weights: F = 1 + K lambda
    return float(lam / (1.0 + lam))


def real_designs() -> tuple[Design, ...]:
    """The real shapes with NB's correlation of their layouts."""
    return (Design("8 groups x 12 seeds", 8, 12, nb_rho=layout_rho(8)),
            Design("6 groups x 16 seeds", 6, 16, nb_rho=layout_rho(6)))


def history_designs() -> tuple[Design, ...]:
    """Histories on their own calendars, 96 members per arm each but 3 x 4 x 6."""
    rho = layout_rho(4)
    return (Design("4 histories x 4 groups x 6 seeds", 4, 6, histories=4, nb_rho=rho, one_calendar=False),
            Design("3 histories x 4 groups x 6 seeds", 4, 6, histories=3, nb_rho=rho, one_calendar=False),
            Design("8 histories x 1 period x 12 seeds", 1, 12, histories=8, one_calendar=False))


def simulate(rng, n_sim: int, design: Design, world: World) -> tuple[np.ndarray, np.ndarray]:
    """(validation, test) per-seed differences [n_sim, m, H, K, n]: the test segment one period per
    history, every fold's members evaluated on it."""
    s, m, h, k, n = n_sim, design.contrasts, design.histories, design.folds, design.seeds
    se = 1.0 / math.sqrt(n)
    taus = np.full(m, world.tau) if world.taus is None else np.asarray(world.taus, float)
    taus = taus[None, :, None, None, None]
    first = np.zeros(m)
    first[0] = 1.0
    pattern = np.ones(h) if world.history_pattern is None else np.asarray(world.history_pattern, float)
    shape = first[None, :, None, None, None] * pattern[None, None, :, None, None]
    test_effect = world.effect if world.test_effect is None else world.test_effect
    seed_part = math.sqrt(world.rho) * rng.standard_normal((s, m, 1, 1, n))
    own = math.sqrt(1.0 - world.rho)
    history = world.tau_history * se * rng.standard_normal((s, m, h, 1, 1))
    c = world.common
    loading = np.sqrt(c / (1.0 - c) * (taus**2 + 1.0 - world.rho)) * se  # the folds' common part, sd
    z = loading * rng.standard_normal((s, m, h, 1, 1))
    d = (world.effect * shape + history + taus * se * rng.standard_normal((s, m, h, k, 1)) + z
         + seed_part + own * rng.standard_normal((s, m, h, k, n)))
    d_test = (test_effect * shape + history + taus * se * rng.standard_normal((s, m, h, 1, 1)) + world.carry * z
              + seed_part + own * rng.standard_normal((s, m, h, k, n)))
    if world.calendar > 0:  # one draw per calendar period: shared by the histories on one calendar
        width = 1 if design.one_calendar else h
        d = d + world.calendar * se * rng.standard_normal((s, m, width, k, 1))
        d_test = d_test + world.calendar * se * rng.standard_normal((s, m, width, 1, 1))
    return d, d_test


def _fwer(codes: np.ndarray) -> float:
    return float(np.isin(codes, (KEEP_CODE, HARMFUL_CODE)).any(1).mean())


@dataclass(frozen=True)
class OneHistoryRun:
    """The one-history rule's discovery codes [S, m], its MDE for the first contrast at the median
    parts, the two-stage codes and the held-out stage alone."""

    codes: np.ndarray
    mde: float
    final: np.ndarray
    alone: np.ndarray


def one_history_run(design: Design, world: World, *, n_sim: int, seed: int, corrected: bool,
                    th: Thresholds) -> OneHistoryRun:
    """The pooled rule (NB's correlation when `corrected`), its stated MDE and the held-out stage at
    alpha / m on `n_sim` families."""
    rng = np.random.default_rng(seed)
    d, d_test = simulate(rng, n_sim, design, world)
    fd = fold_data(d[:, :, 0])
    rho = design.nb_rho if corrected else 0.0
    m = design.contrasts
    test = [seed_level_effect(d_test[:, g, 0]) for g in range(m)]
    segment = TestSegment(*(np.stack([t[k] for t in test], 1) for k in ("theta", "var", "df")))
    dec = decide(Evidence(_unit_diffs(d), periods=fd, fold_corr=rho, test=segment), th)
    comp = replace(median_parts(fold_components(fd, dec.pooled["tau2"])), overlap=rho / (1.0 - rho))
    mde = pooled_mde(comp, design.folds, float(np.nanmedian(fd.n_informative[:, 0].mean(-1))), contrasts=m,
                     level=th.alpha / m, power=th.power, one_sided=th.one_sided_keep)
    # the stage alone, on the evidence `decide` gives it over folds
    alone = held_out_alone(segment, confirmation_level(th.alpha, m), pooled=dec.pooled,
                           fold_var=fd.var * (1 - fd.seed_share[..., None]), fold_n=fd.n_informative,
                           fold_theta=fd.theta)
    return OneHistoryRun(verdict_codes(dec.discovery_verdict), mde, verdict_codes(dec.verdict), alone)


def _unit_diffs(d: np.ndarray) -> list[np.ndarray]:
    """Each contrast's per-seed differences averaged over histories and folds: what the seed rule reads."""
    with np.errstate(invalid="ignore"):
        unit = np.nan_to_num(d.mean((2, 3)), nan=0.0)
    return [unit[:, g] for g in range(d.shape[1])]


# ---- the overlap of folds -------------------------------------------------------------------------


def overlap_table(th: Thresholds, designs=None, taus=(0.0, 1.0)) -> pd.DataFrame:
    """Per design, period spread and c (0, NB's, 0.35): the false rate without and with NB's
    correction, the MDE each states and the power at each."""
    rows = []
    for design in designs or real_designs():
        for tau in taus:
            for c in (0.0, design.nb_rho, 0.35):
                base = World(tau=tau, common=c)

                def run(offset: int, corrected: bool, **over) -> OneHistoryRun:
                    return one_history_run(design, replace(base, **over), n_sim=th.n_sim, seed=th.seed + offset,
                                           corrected=corrected, th=th)

                null_raw, null_nb = run(0, False), run(0, True)
                mde_raw, mde_nb = null_raw.mde, null_nb.mde
                row = dict(design=design.label, tau=tau, c=c, nb_factor=nb_factor(design.nb_rho, design.folds),
                           fwer=_fwer(null_raw.codes), fwer_nb=_fwer(null_nb.codes), mde=mde_raw, mde_nb=mde_nb,
                           n_sim=th.n_sim)
                row["power@mde"] = float((run(1, False, effect=mde_raw).codes[:, 0] == KEEP_CODE).mean())
                row["power_nb@mde"] = float((run(1, True, effect=mde_raw).codes[:, 0] == KEEP_CODE).mean())
                row["power_nb@mde_nb"] = float((run(2, True, effect=mde_nb).codes[:, 0] == KEEP_CODE).mean())
                rows.append(row)
    return pd.DataFrame(rows)


def format_overlap(t: pd.DataFrame, alpha: float) -> str:
    """The overlap table as text, with the worst family-wise rate up to NB's correlation."""
    lines = [f"The overlap of folds (purged groups; 3 contrasts, Holm; {int(t['n_sim'].iloc[0])} families per cell; "
             "tau: period spread in seed SE; c: correlation of the fold effects from a part common to every fold; "
             "NB: the pooled variance x the layout's Nadeau-Bengio factor; MDE in sd of a per-seed difference)"]
    head = ["design", "NB factor", "tau", "c", "FWER", "FWER NB", "MDE", "MDE NB", "power@MDE", "NB power@MDE",
            "NB power@MDE NB"]
    rows = [[r["design"], f"{r['nb_factor']:.2f}", f"{r['tau']:g}", f"{r['c']:.3f}", f"{r['fwer']:.3f}",
             f"{r['fwer_nb']:.3f}", f"{r['mde']:.3f}", f"{r['mde_nb']:.3f}", f"{r['power@mde']:.2f}",
             f"{r['power_nb@mde']:.2f}", f"{r['power_nb@mde_nb']:.2f}"] for _, r in t.iterrows()]
    lines += text_table(head, rows)
    worst = float(t[t["c"] < 0.35]["fwer_nb"].max())  # c = 0 and NB's
    tol = mc_tolerance(alpha, int(t["n_sim"].iloc[0]))
    lines.append(f"worst FWER with NB up to NB's correlation: {worst:.3f} (promise <= {alpha:g}; Monte-Carlo allowance "
                 f"+{tol:.3f})" + ("" if worst <= alpha + tol else "  ** ABOVE THE PROMISE **"))
    return "\n".join(lines)


# ---- the held-out confirmation ------------------------------------------------------------------


def held_out_table(th: Thresholds, designs=None, taus=(0.0, 1.0, 2.0)) -> pd.DataFrame:
    """Per design, spread and world: the one- and two-stage false rates (a common part carried to the test is outside
    the promise), the stage alone, the power at the one-stage MDE, and an effect flipped on the test."""
    rows = []
    for design in designs or real_designs():
        for tau in taus:
            null0 = one_history_run(design, World(tau=tau), n_sim=th.n_sim, seed=th.seed, corrected=False, th=th)
            mde = null0.mde
            worlds = [("null, c 0", World(tau=tau)),
                      (f"null, c {design.nb_rho:.3f} (NB)", World(tau=tau, common=design.nb_rho)),
                      ("null, c 0.35", World(tau=tau, common=0.35)),
                      ("null, c 0.35, carried to the test", World(tau=tau, common=0.35, carry=1.0)),
                      (f"effect {mde:.3f} (the MDE)", World(tau=tau, effect=mde)),
                      (f"effect {mde:.3f}, flipped on the test", World(tau=tau, effect=mde, test_effect=-mde)),
                      (f"effect {mde:.3f}, c 0.35", World(tau=tau, effect=mde, common=0.35))]
            for i, (label, world) in enumerate(worlds):
                r = null0 if i == 0 else one_history_run(design, world, n_sim=th.n_sim, seed=th.seed + 10 + i,
                                                          corrected=False, th=th)
                rows.append(dict(design=design.label, tau=tau, world=label, planted=world.effect != 0,
                                 carried=world.carry > 0, n_sim=th.n_sim, fwer_one=_fwer(r.codes), fwer_two=_fwer(r.final),
                                 alone=float(r.alone.mean()), keep_one=float((r.codes[:, 0] == KEEP_CODE).mean()),
                                 keep_two=float((r.final[:, 0] == KEEP_CODE).mean()),
                                 not_confirmed=float((r.final == NOT_CONFIRMED_CODE).any(1).mean())))
    return pd.DataFrame(rows)


def format_held_out(t: pd.DataFrame, alpha: float, contrasts: int = 3) -> str:
    lines = [f"The held-out confirmation on one history (the pooled rule, then the test segment one-sided at alpha / "
             f"{contrasts} with the test period's spread, at least {defaults.HELD_OUT_PERIOD_FLOOR} x one fold's seed "
             f"variance; {contrasts} contrasts; tau: period spread in seed SE; {int(t['n_sim'].iloc[0])} families per "
             "row; FWER: any keep / harmful; held-out alone: the test stage on every contrast, per contrast; keep: the "
             "first contrast reads keep wired; not confirmed: any)"]
    head = ["design", "tau", "world", "FWER one-stage", "FWER two-stage", "held-out alone", "keep one-stage",
            "keep two-stage", "not confirmed"]
    rows = [[r["design"], f"{r['tau']:g}", r["world"], f"{r['fwer_one']:.3f}", f"{r['fwer_two']:.3f}",
             f"{r['alone']:.4f}", f"{r['keep_one']:.3f}", f"{r['keep_two']:.3f}", f"{r['not_confirmed']:.3f}"]
            for _, r in t.iterrows()]
    lines += text_table(head, rows)
    promise = t[~t["planted"] & ~t["carried"]]
    flips = t[t["world"].str.contains("flipped")]
    lines.append(_promise(alpha, int(t["n_sim"].iloc[0]), contrasts, float(promise["fwer_two"].max()),
                          float(promise["alone"].max()))
                 + f" (two-stage); keep of an effect flipped on the test {float(flips['keep_two'].max()):.3f}; a common "
                 f"part carried to the test: two-stage {float(t[t['carried']]['fwer_two'].max()):.3f}, alone "
                 f"{float(t[t['carried']]['alone'].max()):.4f} (outside the promise: it is the history's own, "
                 "several histories measure it)")
    return "\n".join(lines)


# ---- several price histories --------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryRun:
    """The nested rule's codes [S, m], its MDE and two-stage MDE for the first contrast at the median parts, the
    two-stage codes and the held-out stage alone on every contrast (promise alpha / m)."""

    codes: np.ndarray
    mde: float
    final: np.ndarray
    alone: np.ndarray
    two_stage: float


def history_run(design: Design, world: World, *, n_sim: int, seed: int, th: Thresholds) -> HistoryRun:
    """The rule over histories on the design's calendars with the test segment, the held-out stage
    alone, and the power statement a verdict row makes."""
    rng = np.random.default_rng(seed)
    d, d_test = simulate(rng, n_sim, design, world)
    h, k, m = design.histories, design.folds, design.contrasts
    hd = history_data(d, one_calendar(h, k) if design.one_calendar else own_calendars(h, k))
    segment = test_segment(d_test)
    dec = decide(Evidence(_unit_diffs(d), histories=hd, test=segment), th)
    hp = dec.histories
    alone = held_out_alone(segment, confirmation_level(th.alpha, m), calendar=hp.calendar)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = median_parts(history_components(hd, hp))
        seeds = float(np.nanmedian(np.mean([fd.n_informative[:, 0].mean(-1) for fd in hd.folds], 0)))
    d_in = history_inputs(seeds, h, k, replace(c, shared=design.one_calendar), m)
    stated = statement_at(d_in, th, m)
    return HistoryRun(verdict_codes(dec.discovery_verdict), stated[0], verdict_codes(dec.verdict), alone, stated[1])


def statement_at(d: PowerInputs, th: Thresholds, contrasts: int) -> tuple[float, float]:
    """(MDE, two-stage MDE) the rule states for `d` at the first Holm step of `contrasts`."""
    level = th.alpha / contrasts
    return (mde(d, level, th.power, one_sided=th.one_sided_keep),
            two_stage(d, level, th.power, test_level=level, one_sided=th.one_sided_keep))


def test_segment(d_test: np.ndarray) -> TestSegment:
    """The test segment as `held_out.held_out_segment` gathers it: each seed over every history and
    fold, and per history (`by_history`)."""
    s, m, h, k, n = d_test.shape
    test = [seed_level_effect(d_test[:, g].reshape(s, h * k, n)) for g in range(m)]
    with np.errstate(invalid="ignore"):
        by_history = np.nanmean(d_test, 3) if h >= 2 else None
    return TestSegment(*(np.stack([t[key] for t in test], 1) for key in ("theta", "var", "df")), by_history=by_history)


def histories_table(th: Thresholds, designs=None, tau: float = 1.0, tau_history: float = 1.0) -> pd.DataFrame:
    """Per history design: the nested rule's null false rates (c 0, NB's, 0.35), the stage alone, its MDE and power
    there, and the first contrast's rates where its effect flips across the histories."""
    rows = []
    for design in designs or history_designs():
        h = design.histories
        base = dict(tau=tau, tau_history=tau_history)
        null = history_run(design, World(**base, common=design.nb_rho), n_sim=th.n_sim, seed=th.seed, th=th)
        mde = null.mde
        worlds = [("null, c 0", World(**base)),
                  (f"null, c {design.nb_rho:.3f} (NB)", None),
                  ("null, c 0.35", World(**base, common=0.35)),
                  (f"effect {mde:.3f} (the MDE)", World(**base, common=design.nb_rho, effect=mde)),
                  (f"+-{3 * mde:.3f} across histories (mean 0)",
                   World(**base, common=design.nb_rho, effect=3 * mde, history_pattern=tuple(np.linspace(1.0, -1.0, h)))),
                  (f"{3 * mde:.3f}, one history {-3 * mde:.3f}",
                   World(**base, common=design.nb_rho, effect=3 * mde, history_pattern=(1.0,) * (h - 1) + (-1.0,)))]
        if design.folds == 1:  # no folds to share a part
            worlds = [w for w in worlds if not w[0].startswith("null, c") or w[0] == "null, c 0"]
        for i, (label, world) in enumerate(worlds):
            r = null if world is None else history_run(design, world, n_sim=th.n_sim, seed=th.seed + 10 + i, th=th)
            first = r.codes[:, 0]
            rows.append(dict(design=design.label, world=label, planted=world is not None and world.effect != 0,
                             flip="across" in label, n_sim=th.n_sim, fwer=_fwer(r.codes), fwer_two=_fwer(r.final),
                             alone=float(r.alone.mean()), keep=float((first == KEEP_CODE).mean()),
                             keep_two=float((r.final[:, 0] == KEEP_CODE).mean()),
                             harm=float((first == HARMFUL_CODE).mean()),
                             inconsistent=float((first == INCONSISTENT_CODE).mean()), mde=mde))
    return pd.DataFrame(rows)


def format_histories(t: pd.DataFrame, alpha: float, contrasts: int = 3) -> str:
    lines = [f"Several price histories on their own calendars (the nested rule: each history's seed-level effect over "
             f"its folds, random effects over the histories, HKSJ, Holm over {contrasts} contrasts; tau 1 and "
             f"tau_history 1 seed SE; c: a part common to a history's folds; {int(t['n_sim'].iloc[0])} families per "
             "row; MDE in sd; held-out alone: the test stage on every contrast, per contrast, promise <= alpha / "
             f"{contrasts}; keep / harm / inconsistent: the first contrast's)"]
    head = ["design", "world", "FWER", "FWER two-stage", "held-out alone", "keep", "keep two-stage", "harm",
            "inconsistent"]
    rows = [[r["design"], r["world"], f"{r['fwer']:.3f}", f"{r['fwer_two']:.3f}", f"{r['alone']:.4f}", f"{r['keep']:.3f}",
             f"{r['keep_two']:.3f}", f"{r['harm']:.3f}", f"{r['inconsistent']:.3f}"] for _, r in t.iterrows()]
    lines += text_table(head, rows)
    null = t[~t["planted"]]
    flips = t[t["flip"]]
    worst_flip = float((flips["keep"] + flips["harm"]).max()) if len(flips) else 0.0
    lines.append(_promise(alpha, int(t["n_sim"].iloc[0]), contrasts, float(null["fwer"].max()),
                          float(null["alone"].max())) + f"; worst keep / harmful of a mean-zero flip {worst_flip:.3f}")
    return "\n".join(lines)


def _num(x: float, fmt: str = ".3f") -> str:
    return f"{x:{fmt}}" if math.isfinite(x) else "-"


def _promise(alpha: float, n_sim: int, contrasts: int, fwer: float, alone: float) -> str:
    """The worst null family-wise rate and held-out stage alone against their promises, with the
    Monte-Carlo allowance."""
    tol, tol_alone = mc_tolerance(alpha, n_sim), mc_tolerance(alpha / contrasts, n_sim * contrasts)
    bad = fwer > alpha + tol or alone > alpha / contrasts + tol_alone
    return (f"worst null FWER {fwer:.3f} (promise <= {alpha:g}, allowance +{tol:.3f}); worst held-out stage alone "
            f"{alone:.4f} (promise <= {alpha / contrasts:.4f}, allowance +{tol_alone:.4f})"
            + ("  ** ABOVE THE PROMISE **" if bad else ""))


# ---- a heterogeneous contrast leaving the family's spread -----------------------------------------


ISOLATION_WORLDS = (
    ("equal spread 3 SE", (3.0, 3.0, 3.0)),
    ("equal spread 1 SE", (1.0, 1.0, 1.0)),
    ("the first 0, one other 3 SE (g6 beside NoisyNets)", (0.0, 0.0, 3.0)),
    ("the first 0, the others 3 SE", (0.0, 3.0, 3.0)),
    ("the first 3 SE, the others 0", (3.0, 0.0, 0.0)),
)


def isolation_table(th: Thresholds, folds=(4, 8), seeds: int = 16, effect: float = 1.0,
                    worlds=ISOLATION_WORLDS) -> pd.DataFrame:
    """Per fold count and spreads: the false rate and the first contrast's power with the flagged
    contrast kept in the shared fit (shipped) and leaving it."""
    variants = (("kept (shipped)", dict(isolate_flagged=False)),
                ("leaves, 0.1", dict(isolate_flagged=True, isolate_level=defaults.TAU_SHARE_LEVEL)),
                ("leaves, 0.01", dict(isolate_flagged=True, isolate_level=0.01)))
    rows = []
    for k in folds:
        design = Design(f"{k} folds x {seeds} seeds", k, seeds)
        for label, taus in worlds:
            row = dict(folds=k, seeds=seeds, world=label, n_sim=th.n_sim)
            for offset, eff in ((0, 0.0), (1, effect)):
                rng = np.random.default_rng(th.seed + offset)
                d, _ = simulate(rng, th.n_sim, design, World(taus=taus, effect=eff))
                ev = Evidence(_unit_diffs(d), periods=fold_data(d[:, :, 0]))
                for name, kw in variants:
                    codes = verdict_codes(decide(ev, th, **kw).verdict)
                    if eff == 0:
                        row[f"fwer {name}"] = _fwer(codes)
                    else:
                        row[f"power {name}"] = float((codes[:, 0] == KEEP_CODE).mean())
            rows.append(row)
    return pd.DataFrame(rows)


def format_isolation(t: pd.DataFrame, alpha: float, effect: float = 1.0) -> str:
    names = [c[len("fwer "):] for c in t.columns if c.startswith("fwer ")]
    lines = [f"A contrast flagged by the share test: kept in the family's shared tau^2 and scale (shipped) or leaving "
             f"them (isolate_flagged, at the share test's 0.1 and at 0.01); 3 contrasts, {int(t['seeds'].iloc[0])} "
             f"seeds, per-contrast period spread in seed SE; {int(t['n_sim'].iloc[0])} families per cell; power: the "
             f"first contrast keeps at {effect:g} sd"]
    head = ["folds", "spreads"] + [f"FWER {n}" for n in names] + [f"power {n}" for n in names]
    rows = [[f"{int(r['folds'])}", r["world"]] + [f"{r[f'fwer {n}']:.3f}" for n in names]
            + [f"{r[f'power {n}']:.2f}" for n in names] for _, r in t.iterrows()]
    lines += text_table(head, rows)
    tol = mc_tolerance(alpha, int(t["n_sim"].iloc[0]))
    for n in names:
        worst = float(t[f"fwer {n}"].max())
        lines.append(f"worst FWER, {n}: {worst:.3f} (promise <= {alpha:g}; allowance +{tol:.3f})"
                     + ("" if worst <= alpha + tol else "  ** ABOVE THE PROMISE **"))
    return "\n".join(lines)


# ---- histories that share a calendar ------------------------------------------------------------


REAL_ROWS = 5012
"""Daily rows of `examples/daily_closes.csv` (three histories on one calendar) the real run cut its 2
expanding folds of REAL_FOLD_ROWS days from."""
REAL_FOLD_ROWS = 1000
CALENDAR_SDS = (0.0, 0.05, 0.10)
"""The calendar part's sd in Sharpe units: none, about one window's period spread shared at r = 0.9
(S&P 500 / NASDAQ daily returns correlate 0.89-0.97), twice that."""
OWN_PERIOD_SD = 0.0167
"""A history's own part of a window's period spread (Sharpe): what r = 0.9 leaves beside 0.05."""
CALENDAR_HISTORIES = (3, 4, 6, 8)


REFERENCE_MDE = 0.148
"""The real run's g6 MDE at 8 purged groups x 12 seeds (Sharpe): the scale of one seed's noise here."""
VALIDATION_ROWS = round(REAL_ROWS * LAYOUT_SPLITS[1])
"""One validation period on the shipped file at the default split (752 rows)."""


def t_multiplier(df, level, power: float, one_sided: bool = False):
    """t_{1-a/2, df} + t_{power, df} (one-sided: t_{1-a}): the closed form the real run's MDE was stated with."""
    df = np.asarray(df, float)
    tail = np.asarray(level, float) if one_sided else np.asarray(level, float) / 2
    with np.errstate(invalid="ignore"):
        out = sps.t.ppf(1 - tail, df) + sps.t.ppf(power, df)
    out = np.where(np.isfinite(df) & (df > 0), out, np.nan)
    return float(out) if out.ndim == 0 else out


def within_sharpe(window_rows: float, reference_mde: float = REFERENCE_MDE, alpha: float = defaults.ALPHA,
                  power: float = defaults.POWER) -> float:
    """One seed's variance of a per-period difference in Sharpe units for a window of `window_rows`,
    read off the real run's MDE (12 x 8 x (MDE / t_multiplier)^2) and scaled by window length."""
    within8 = 12 * 8 * (reference_mde / t_multiplier(7, alpha, power)) ** 2
    window8 = (LAYOUT_ROWS * (LAYOUT_SPLITS[0] + LAYOUT_SPLITS[1]) - LAYOUT_REACH.window) / 8
    return within8 * window8 / window_rows


def seed_sd_sharpe(window_rows: float) -> float:
    """One seed's sd in Sharpe units (`within_sharpe` over the rank test's efficiency pi / 3)."""
    return math.sqrt(within_sharpe(window_rows) / (math.pi / 3))


def walk_forward_rho(folds: int, val_length: int = REAL_FOLD_ROWS, rows: int = REAL_ROWS) -> float:
    """NB's correlation of `folds` expanding windows of `val_length` rows (0.27 for the real run's 2 x 1000)."""
    prices = pd.Series(np.arange(rows, dtype=float))
    spec = SimpleNamespace(scheme="walk_forward", k=folds, gap=0, val_length=val_length, layout="expanding",
                           train_length=None)
    return _nb_rho(fold_table(prices.index, fold_bounds(prices, list(LAYOUT_SPLITS), spec, 64), "expanding"), folds)


def calendar_design(histories: int, folds: int = 2, seeds: int = 16, *, one_calendar: bool = True,
                    window: int = REAL_FOLD_ROWS) -> Design:
    """`histories` x `folds` expanding windows of `window` rows x `seeds`, on one calendar or their own."""
    where = "one calendar" if one_calendar else "own calendars"
    return Design(f"{histories} x {folds} x {seeds}, {where}", folds, seeds, histories=histories,
                  nb_rho=walk_forward_rho(folds, window) if folds >= 2 else 0.0, one_calendar=one_calendar)


def calendar_world(design: Design, calendar_sd: float, effect: float = 0.0, window: int = REAL_FOLD_ROWS) -> World:
    """A world in Sharpe units: a calendar part `calendar_sd`, each history's own OWN_PERIOD_SD, a planted `effect`."""
    sd = seed_sd_sharpe(window)
    se = sd / math.sqrt(design.seeds)
    return World(effect=effect / sd, tau=OWN_PERIOD_SD / se, calendar=calendar_sd / se)


CALENDAR_LAYOUTS = ((2, 16, True, REAL_FOLD_ROWS), (6, 8, True, 600), (1, 12, False, VALIDATION_ROWS))
"""(folds, seeds, one calendar, window rows): the real run's, MIN_SHARED_PERIODS folds on one calendar,
and one period per history on its own."""


def calendar_table(th: Thresholds, histories=CALENDAR_HISTORIES, sds=CALENDAR_SDS, layouts=CALENDAR_LAYOUTS,
                   planted_sd: float = 0.05) -> pd.DataFrame:
    """Per layout, histories and calendar sd: the nested rule's false rates, the stage alone, the
    insufficient share, the MDEs it states, and the power at `planted_sd`."""
    rows = []
    for folds, seeds, one, window in layouts:
        for h in histories:
            design = calendar_design(h, folds, seeds, one_calendar=one, window=window)
            sd = seed_sd_sharpe(window)
            for i, c in enumerate(sds):
                r = history_run(design, calendar_world(design, c, window=window), n_sim=th.n_sim,
                                seed=th.seed + 100 * h + 10 * folds + i, th=th)
                row = dict(design=design.label, histories=h, calendar_sd=c, n_sim=th.n_sim, fwer=_fwer(r.codes),
                           fwer_two=_fwer(r.final), alone=float(r.alone.mean()),
                           insufficient=float((r.codes == INSUFFICIENT_CODE).mean()), mde=r.mde * sd,
                           two_stage=r.two_stage * sd, power=math.nan, power_two=math.nan)
                if c == planted_sd and math.isfinite(row["mde"]):
                    p = history_run(design, calendar_world(design, c, effect=row["mde"], window=window), n_sim=th.n_sim,
                                    seed=th.seed + 100 * h + 10 * folds + 9, th=th)
                    row.update(power=float((p.codes[:, 0] == KEEP_CODE).mean()),
                               power_two=float((p.final[:, 0] == KEEP_CODE).mean()))
                rows.append(row)
    return pd.DataFrame(rows)


def format_calendar(t: pd.DataFrame, alpha: float, contrasts: int = 3) -> str:
    lines = [f"Histories that share a calendar, and histories on their own (the nested rule with the calendar part; "
             f"{contrasts} contrasts, Holm; a calendar part of the given sd (Sharpe) common to the histories in each "
             f"period they share, each history's own period part {OWN_PERIOD_SD}; {int(t['n_sim'].iloc[0])} families "
             "per row; FWER: any keep / harmful; held-out alone: the test stage on every contrast, per contrast; "
             "insufficient: contrasts read insufficient data; MDE and two-stage MDE: what the rule states "
             "(median, Sharpe, one seed's sd from the real run scaled to the window); power: the first contrast "
             "keeps at that MDE, one-stage / two-stage)"]
    head = ["design", "calendar sd", "FWER", "FWER two-stage", "held-out alone", "insufficient", "MDE", "two-stage MDE",
            "power", "power two-stage"]
    rows = [[r["design"], f"{r['calendar_sd']:.2f}", f"{r['fwer']:.3f}", f"{r['fwer_two']:.3f}", f"{r['alone']:.4f}",
             f"{r['insufficient']:.2f}", _num(r["mde"]), _num(r["two_stage"]), _num(r["power"], ".2f"),
             _num(r["power_two"], ".2f")] for _, r in t.iterrows()]
    lines += text_table(head, rows)
    lines.append(_promise(alpha, int(t["n_sim"].iloc[0]), contrasts, float(t["fwer"].max()), float(t["alone"].max())))
    return "\n".join(lines)


MDE_DESIGNS = ((8, 1, 12, False), (12, 1, 8, False), (16, 1, 6, False), (6, 1, 16, False), (6, 2, 8, False),
               (4, 4, 6, False), (3, 2, 16, False), (8, 1, 12, True), (3, 2, 16, True), (3, 6, 5, True),
               (4, 6, 4, True))
"""(histories, periods, seeds, one calendar): layouts of 96 members per arm (768 at 8 arms)."""


def _power_at(design: Design, effect: float, spread: bool, th: Thresholds, window: int, seed: int,
              one_sided: bool) -> tuple[float, float]:
    """(one-stage, two-stage) power of the first contrast at `effect` (Sharpe) through `history_run`."""
    world = calendar_world(design, 0.05 if spread else 0.0, effect=effect, window=window)
    if not spread:
        world = replace(world, tau=0.0)
    r = history_run(design, world, n_sim=th.n_sim, seed=seed, th=replace(th, one_sided_keep=one_sided))
    return float((r.codes[:, 0] == KEEP_CODE).mean()), float((r.final[:, 0] == KEEP_CODE).mean())


def mde_table(th: Thresholds, contrasts: int = 3, designs=MDE_DESIGNS, window: int = VALIDATION_ROWS) -> pd.DataFrame:
    """The nested rule's MDE (Sharpe) at the first Holm step, two- and one-sided, and the two-stage
    MDE, per layout without and with one window's spread, beside the shipped rule's simulated power
    at the one-sided MDE; NaN where the rule cannot decide."""
    rows = []
    for i, (h, k, n, one) in enumerate(designs):
        win = min(window, FOLDS_ROWS // k)  # K walk-forward windows must fit before the test segment
        design = calendar_design(h, k, n, one_calendar=one, window=win)
        for spread in (False, True):
            d = history_inputs(n, h, k, design_parts(win, one, spread), contrasts)
            row = dict(histories=h, periods=k, seeds=n, members=h * k * n, one_calendar=one, spread=spread, window=win)
            decides = not one or k >= defaults.MIN_SHARED_PERIODS
            for sided, key in ((False, "two"), (True, "one")):
                row[f"mde_{key}"], row[f"two_stage_{key}"] = (statement_at(d, replace(th, one_sided_keep=sided), contrasts)
                                                              if decides else (math.nan, math.nan))
            row["power"], row["power_two"] = (_power_at(design, row["mde_one"], spread, th, win, th.seed + 10 * i,
                                                        True) if decides else (math.nan, math.nan))
            rows.append(row)
    return pd.DataFrame(rows)


def design_parts(window: int, one_calendar: bool, spread: bool) -> HistoryComponents:
    """A layout's parts in Sharpe units; with `spread` one window's period spread (shared on one calendar)."""
    cal = 0.05**2 if spread and one_calendar else 0.0
    own = (OWN_PERIOD_SD**2 if one_calendar else OWN_PERIOD_SD**2 + 0.05**2) if spread else 0.0
    return HistoryComponents(history=0.0, period=own, within=within_sharpe(window), seed=0.0, calendar=cal,
                             shared=one_calendar)


def simulated_mde(design: Design, th: Thresholds, *, spread: bool = False, window: int = VALIDATION_ROWS,
                  two_stage: bool = False, steps: int = 7) -> float:
    """The effect at which the shipped rule keeps the first contrast with power `th.power`, by
    bisection over [0, 0.6] Sharpe."""
    lo, hi = 0.0, 0.6
    for j in range(steps):
        mid = 0.5 * (lo + hi)
        p = _power_at(design, mid, spread, th, window, th.seed + 1000 + j, True)[1 if two_stage else 0]
        lo, hi = (mid, hi) if p < th.power else (lo, mid)
    return 0.5 * (lo + hi)


def best_layout(th: Thresholds, contrasts: int = 3, members: int = 96, window: int = VALIDATION_ROWS) -> dict:
    """The own-calendar layout of at most `members` per arm with the smallest one-sided MDE (at least 6 seeds)."""
    best = dict(mde=math.inf)
    one_sided = replace(th, one_sided_keep=True)
    for h in range(3, 49):
        for k in (1, 2, 3, 4, 6, 8):
            n = members // (h * k)
            if n < 6:
                continue
            m = statement_at(history_inputs(n, h, k, design_parts(window, False, False), contrasts), one_sided,
                             contrasts)[0]
            if m < best["mde"]:
                best = dict(histories=h, periods=k, seeds=n, mde=float(m))
    return best


FOLDS_ROWS = 3600
"""Rows before the shipped file's test segment that walk-forward windows may take (of 4260)."""
SIMULATED_MDE_DESIGNS = ((8, 1, 12), (12, 1, 8), (16, 1, 6))
"""Own-calendar layouts of 96 members per arm whose detectable effect `format_mde` simulates."""


def format_mde(t: pd.DataFrame, th: Thresholds, contrasts: int = 3) -> str:
    lines = [f"The nested rule's MDE in Sharpe units at the family's first Holm step (alpha / {contrasts}; power.mde as "
             f"every verdict states it: the rule's own stage 2 on the families it will see, the histories' scale shared "
             f"by the family; one seed's variance {within_sharpe(VALIDATION_ROWS):.4f} for a {VALIDATION_ROWS}-day "
             f"window (x {VALIDATION_ROWS} / window), from the real run's MDE {REFERENCE_MDE}; spread: one window's "
             f"period spread, {OWN_PERIOD_SD} + 0.05 Sharpe, all the history's own on its own calendar, 0.05 of it "
             f"shared on one calendar; two-stage: the keep also passes the held-out stage at alpha / {contrasts}; "
             f"power: the shipped rule's simulated power at the one-sided MDE, one-stage / two-stage, {th.n_sim} "
             "families; '-': the rule does not decide that layout)"]
    head = ["histories x periods x seeds", "window", "calendar", "spread", "MDE two-sided", "MDE one-sided",
            "two-stage two-sided", "two-stage one-sided", "power", "power two-stage"]
    rows = [[f"{r['histories']} x {r['periods']} x {r['seeds']}", f"{r['window']}", "one" if r["one_calendar"] else "own",
             "window's" if r["spread"] else "none", _num(r["mde_two"]), _num(r["mde_one"]), _num(r["two_stage_two"]),
             _num(r["two_stage_one"]), _num(r["power"], ".2f"), _num(r["power_two"], ".2f")] for _, r in t.iterrows()]
    lines += text_table(head, rows)
    b = best_layout(th, contrasts=contrasts)
    lines.append(f"the rule's best of at most 96 members per arm on own calendars (no spread): {b['histories']} x "
                 f"{b['periods']} x {b['seeds']}, one-sided MDE {b['mde']:.3f}")
    for h, k, n in SIMULATED_MDE_DESIGNS:
        design = calendar_design(h, k, n, one_calendar=False, window=VALIDATION_ROWS)
        one, two = simulated_mde(design, th), simulated_mde(design, th, two_stage=True)
        lines.append(f"simulated: {h} x {k} x {n} on own calendars (no spread) keeps at 80% power from {one:.3f} "
                     f"(one-sided), {two:.3f} through both stages")
    return "\n".join(lines)


# ---- the tables by name (the door: `python analysis/calibrate_decisions.py`, tune_gems.analysis.cli) ----


TABLES = ("overlap", "held-out", "histories", "isolation", "calendar", "mde")


def table_text(name: str, th: Thresholds) -> str:
    """One of `TABLES`, computed and formatted."""
    if name == "mde":
        return format_mde(mde_table(th), th)
    table, text = {"overlap": (overlap_table, format_overlap), "held-out": (held_out_table, format_held_out),
                   "histories": (histories_table, format_histories), "calendar": (calendar_table, format_calendar),
                   "isolation": (isolation_table, format_isolation)}[name]
    return text(table(th), th.alpha)
