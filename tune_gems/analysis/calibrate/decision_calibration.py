"""Calibration of the rule's components for folds and histories: the fold overlap, the held-out
confirmation, several price histories, and a heterogeneous contrast leaving the family's shared spread.

A statistic ships with its calibration: each table here runs the very function a verdict calls
(`rules.decision.decide`, with the fold data `rules.period_family.fold_data` and `rules.overlap`'s
correction, the held-out test segment's effects `rules.held_out_rule.seed_level_effect`, the
histories' data `rules.histories.history_data`; the power statements `rules.power.pooled_mde` /
`history_mde`) on simulated families, vectorised over datasets; what the simulation adds is only
the data.

**What a simulated family faces** (`World`, per-seed differences in units of one seed's sd in a
fold, period spreads in one fold's seed standard errors sd / sqrt(n), as
`walk_forward_calibration` states them):

- seed noise, normal, a share `rho` of it the seed's own part common to every history and fold
  (seed index s starts from the same weights everywhere);
- one market period per fold: its luck u_k, mean zero, spread `tau` (per contrast: `taus`);
- **a part common to the folds of a history** (`common` = c): one draw per history and contrast
  added to every fold's effect, of variance c / (1 - c) x the fold effect's own (period and
  seed noise, the seeds' common share left out), so the fold effects correlate at c: Nadeau and
  Bengio's model of folds that share training rows, at c = 0, NB's value for the layout, 0.35;
- one test segment per history, common to its folds: its own period luck (spread `tau`), fresh
  seed noise but the seeds' common part, and a share `carry` of the folds' common part (0: the
  common part was the validation periods' training luck; 1: the learners carry it to the test);
- several histories: each history's luck on the effect (spread `tau_history`, on its validation
  folds and its test segment alike) and its own common part of the folds;
- planted effects on the first contrast: consistent, flipped on the test segment
  (`test_effect`), or different per history (`history_pattern`: a mean-zero flip across the
  histories, or one history of the opposite sign).

**The real shapes** (the S&P 500 runs'): 8 purged groups x 12 seeds and 6 x 16 (96 members per arm each),
a family of 3 contrasts; 4 and 3 histories x 4 purged groups x 6 seeds. NB's correlation of each
layout is read off its fold table (`rules.overlap.fold_overlap` of `data.segments.fold_bounds`)
on `LAYOUT_ROWS` daily rows, split 70 / 15 / 15 with the trainer's default reach (env.window 32,
n_step 3, episode_length 256) and an embargo of 5: the factors 2.14 (8 groups) and 2.20 (6)
of the real layouts (docs/analysis.md "The overlap of folds"). The period spread is one seed standard error (`tau`
1: the rule's period calibration's middle row; the real runs' tau was 0 for g6 and up to 0.3
Sharpe for NoisyNets, wide bounds), no seed share.

`python analysis/calibrate_decisions.py --n-sim 2000` prints the tables of
docs/analysis.md ("The overlap of folds", "The held-out confirmation", "Several price
histories", "Isolating a heterogeneous contrast"); the tests (`tests/test_decision_calibration.py`)
check each claim at a small n_sim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from types import SimpleNamespace

import numpy as np
import pandas as pd

from tune_gems.analysis import defaults
from tune_gems.analysis.calibrate.calibration import mc_tolerance
from tune_gems.analysis.rules.decision import Evidence, TestSegment, decide
from tune_gems.analysis.rules.held_out_rule import seed_level_effect
from tune_gems.analysis.rules.histories import history_components, history_data
from tune_gems.analysis.rules.overlap import fold_overlap, nb_factor
from tune_gems.analysis.rules.period_family import fold_components, fold_data
from tune_gems.analysis.rules.power import HistoryComponents, history_mde, pooled_mde, t_multiplier
from tune_gems.analysis.rules.thresholds import Thresholds
from tune_gems.analysis.rules.words import HARMFUL_CODE, KEEP_CODE, NOT_CONFIRMED_CODE, verdict_codes
from tune_gems.data.segments import TrainingReach, fold_bounds, fold_table

LAYOUT_ROWS = 6000
"""Daily rows of the series the layouts' fold tables are cut from (about 24 years of closes)."""
LAYOUT_SPLITS = (0.7, 0.15, 0.15)
LAYOUT_REACH = TrainingReach(window=32, n_step=3, episode_length=256)
"""The trainer's defaults (env.window, model n_step, env.episode_length): what the purge reads."""
LAYOUT_EMBARGO = 5


@dataclass(frozen=True)
class World:
    """What one simulated family faces (module docstring); effects in sd, spreads in seed SE."""

    effect: float = 0.0
    test_effect: float | None = None
    tau: float = 1.0
    taus: tuple[float, ...] | None = None
    rho: float = 0.0
    common: float = 0.0
    carry: float = 0.0
    tau_history: float = 0.0
    history_pattern: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Design:
    """A layout: `folds` purged groups per history, `seeds` per arm, `contrasts` in the family,
    `histories`; `nb_rho` NB's correlation of its folds (`layout_rho`)."""

    label: str
    folds: int
    seeds: int
    contrasts: int = 3
    histories: int = 1
    nb_rho: float = 0.0


def layout_rho(folds: int) -> float:
    """NB's correlation n2 / (n1 + n2) of a purged layout of `folds` groups on LAYOUT_ROWS rows,
    from its fold table (`rules.overlap.fold_overlap`): the mean over its folds, whose factor
    `nb_factor` is the table's."""
    prices = pd.Series(np.arange(LAYOUT_ROWS, dtype=float))
    spec = SimpleNamespace(scheme="purged", k=folds, embargo=LAYOUT_EMBARGO, val_length=None)
    table = fold_table(prices.index, fold_bounds(prices, list(LAYOUT_SPLITS), spec, 64, LAYOUT_REACH), "expanding")
    ov = fold_overlap(table)
    lam = (ov.factor - 1.0) / folds  # equal weights: F = 1 + K lambda
    return float(lam / (1.0 + lam))


def real_designs() -> tuple[Design, ...]:
    """The issue's real shapes with NB's correlation of their layouts."""
    return (Design("8 groups x 12 seeds", 8, 12, nb_rho=layout_rho(8)),
            Design("6 groups x 16 seeds", 6, 16, nb_rho=layout_rho(6)))


def history_designs() -> tuple[Design, ...]:
    """The issue's reference design with histories (4 x 4 purged groups x 6 seeds) and 3 histories."""
    rho = layout_rho(4)
    return (Design("4 histories x 4 groups x 6 seeds", 4, 6, histories=4, nb_rho=rho),
            Design("3 histories x 4 groups x 6 seeds", 4, 6, histories=3, nb_rho=rho))


def simulate(rng, n_sim: int, design: Design, world: World) -> tuple[np.ndarray, np.ndarray]:
    """(validation, test) per-seed differences, each [n_sim, m, H, K, n] (module docstring):
    the test segment is one period per history, every fold's members evaluated on it."""
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
    return d, d_test


def _fwer(codes: np.ndarray) -> float:
    return float(np.isin(codes, (KEEP_CODE, HARMFUL_CODE)).any(1).mean())


@dataclass(frozen=True)
class OneHistoryRun:
    """The one-history rule on simulated families: discovery codes [S, m], the MDE it states [S]
    (first contrast, `power.pooled_mde` with the overlap when corrected) and the two-stage codes."""

    codes: np.ndarray
    mde: np.ndarray
    final: np.ndarray


def one_history_run(design: Design, world: World, *, n_sim: int, seed: int, corrected: bool,
                    th: Thresholds) -> OneHistoryRun:
    """The rule (`rules.decision.decide`: the pooled test, with NB's correlation of the layout when
    `corrected`), its stated MDE, and the held-out confirmation (its second stage at alpha / m, the test
    period's spread the pooled tau^2) on `n_sim` families of `design` in `world`."""
    rng = np.random.default_rng(seed)
    d, d_test = simulate(rng, n_sim, design, world)
    fd = fold_data(d[:, :, 0])
    rho = design.nb_rho if corrected else 0.0
    m = design.contrasts
    test = [seed_level_effect(d_test[:, g, 0]) for g in range(m)]
    segment = TestSegment(*(np.stack([t[k] for t in test], 1) for k in ("theta", "var", "df")))
    dec = decide(Evidence(_unit_diffs(d), periods=fd, fold_corr=rho, test=segment), th)
    comp = replace(fold_components(fd, dec.pooled["tau2"]), overlap=rho / (1.0 - rho))
    mde = pooled_mde(comp, dec.pooled["periods"], np.maximum(fd.n_informative.mean(-1), 1), df=dec.pooled["df"],
                     level=th.alpha / m, power=th.power, one_sided=th.one_sided_keep)
    return OneHistoryRun(verdict_codes(dec.discovery_verdict), np.asarray(mde, float)[:, 0], verdict_codes(dec.verdict))


def _unit_diffs(d: np.ndarray) -> list[np.ndarray]:
    """Each contrast's per-seed differences averaged over its histories and folds ([S, n] per
    contrast, from d [S, m, H, K, n]): what the seed rule reads, as the verdicts pair them."""
    with np.errstate(invalid="ignore"):
        unit = np.nan_to_num(d.mean((2, 3)), nan=0.0)
    return [unit[:, g] for g in range(d.shape[1])]


def _median(x: np.ndarray) -> float:
    x = np.asarray(x, float)
    return float(np.nanmedian(x)) if np.isfinite(x).any() else math.nan


# ---- the overlap of folds -------------------------------------------------------------------------


def overlap_table(th: Thresholds, designs=None, taus=(0.0, 1.0)) -> pd.DataFrame:
    """Per design, period spread and common correlation c (0, NB's, 0.35): the family-wise false
    rate of the pooled rule without and with NB's correction, the MDE each states (median, sd),
    the power at the uncorrected MDE without and with, and the corrected rule's power at its own
    MDE."""
    rows = []
    for design in designs or real_designs():
        for tau in taus:
            for c in (0.0, design.nb_rho, 0.35):
                base = World(tau=tau, common=c)

                def run(offset: int, corrected: bool, **over) -> OneHistoryRun:
                    return one_history_run(design, replace(base, **over), n_sim=th.n_sim, seed=th.seed + offset,
                                           corrected=corrected, th=th)

                null_raw, null_nb = run(0, False), run(0, True)
                mde_raw, mde_nb = _median(null_raw.mde), _median(null_nb.mde)
                row = dict(design=design.label, tau=tau, c=c, nb_factor=nb_factor(design.nb_rho, design.folds),
                           fwer=_fwer(null_raw.codes), fwer_nb=_fwer(null_nb.codes), mde=mde_raw, mde_nb=mde_nb,
                           n_sim=th.n_sim)
                row["power@mde"] = float((run(1, False, effect=mde_raw).codes[:, 0] == KEEP_CODE).mean())
                row["power_nb@mde"] = float((run(1, True, effect=mde_raw).codes[:, 0] == KEEP_CODE).mean())
                row["power_nb@mde_nb"] = float((run(2, True, effect=mde_nb).codes[:, 0] == KEEP_CODE).mean())
                rows.append(row)
    return pd.DataFrame(rows)


def _text_table(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(x[i]) for x in [head] + rows) for i in range(len(head))]
    return ["  ".join(c.ljust(w) for c, w in zip(x, widths)).rstrip() for x in [head] + rows]


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
    lines += _text_table(head, rows)
    worst = float(t[t["c"] < 0.35]["fwer_nb"].max())  # c = 0 and NB's
    tol = mc_tolerance(alpha, int(t["n_sim"].iloc[0]))
    lines.append(f"worst FWER with NB up to NB's correlation: {worst:.3f} (promise <= {alpha:g}; Monte-Carlo allowance "
                 f"+{tol:.3f})" + ("" if worst <= alpha + tol else "  ** ABOVE THE PROMISE **"))
    return "\n".join(lines)


# ---- the held-out confirmation ------------------------------------------------------------------


def held_out_table(th: Thresholds, designs=None, taus=(0.0, 1.0)) -> pd.DataFrame:
    """Per design, period spread and world: the one-stage (the pooled rule, no overlap
    correction, as shipped) and two-stage (`confirm_on_held_out`) family-wise false rates under
    the null at c = 0, NB's and 0.35 (the common part not carried to the test segment, and
    carried: outside the promise), the first contrast's keep rate at the one-stage rule's MDE in
    both stages, and with that effect flipped on the test segment."""
    rows = []
    for design in designs or real_designs():
        for tau in taus:
            null0 = one_history_run(design, World(tau=tau), n_sim=th.n_sim, seed=th.seed, corrected=False, th=th)
            mde = _median(null0.mde)
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
                                 keep_one=float((r.codes[:, 0] == KEEP_CODE).mean()),
                                 keep_two=float((r.final[:, 0] == KEEP_CODE).mean()),
                                 not_confirmed=float((r.final == NOT_CONFIRMED_CODE).any(1).mean())))
    return pd.DataFrame(rows)


def format_held_out(t: pd.DataFrame, alpha: float) -> str:
    lines = [f"The held-out confirmation (the pooled rule as shipped, then the test segment one-sided at alpha / 3 with "
             f"the test period's spread; 3 contrasts; tau: period spread in seed SE; {int(t['n_sim'].iloc[0])} families "
             "per row; FWER: any keep / harmful; keep: the first contrast reads keep wired; not confirmed: any)"]
    head = ["design", "tau", "world", "FWER one-stage", "FWER two-stage", "keep one-stage", "keep two-stage",
            "not confirmed"]
    rows = [[r["design"], f"{r['tau']:g}", r["world"], f"{r['fwer_one']:.3f}", f"{r['fwer_two']:.3f}",
             f"{r['keep_one']:.3f}", f"{r['keep_two']:.3f}", f"{r['not_confirmed']:.3f}"] for _, r in t.iterrows()]
    lines += _text_table(head, rows)
    promise = t[~t["planted"] & ~t["carried"]]
    worst = float(promise["fwer_two"].max())
    flips = t[t["world"].str.contains("flipped")]
    tol = mc_tolerance(alpha, int(t["n_sim"].iloc[0]))
    lines.append(f"worst two-stage FWER under the null, the test segment's luck its own: {worst:.3f}; keep of an effect "
                 f"flipped on the test: {float(flips['keep_two'].max()):.3f} (promise <= {alpha:g}; Monte-Carlo "
                 f"allowance +{tol:.3f})" + ("" if worst <= alpha + tol else "  ** ABOVE THE PROMISE **")
                 + f"; a common part carried to the test: {float(t[t['carried']]['fwer_two'].max()):.3f} "
                 "(outside the promise: several histories)")
    return "\n".join(lines)


# ---- several price histories --------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryRun:
    """The nested rule on simulated families: codes [S, m] and the MDE it states [S] (first contrast)."""

    codes: np.ndarray
    mde: np.ndarray


def history_run(design: Design, world: World, *, n_sim: int, seed: int, th: Thresholds, corrected: bool = True) -> HistoryRun:
    """The rule over histories (`rules.decision.decide` with the histories' data: each history's
    folds with NB's correlation of its layout when `corrected`) and `history_mde` on `n_sim`
    families of `design` in `world`."""
    rng = np.random.default_rng(seed)
    d, _ = simulate(rng, n_sim, design, world)
    hd = history_data(d)
    rho = design.nb_rho if corrected else 0.0
    dec = decide(Evidence(_unit_diffs(d), histories=hd, fold_corr=rho), th)
    hp = dec.histories
    comp = history_components(hd, hp, rho)
    seeds = np.maximum(np.mean([fd.n_informative.mean(-1) for fd in hd.folds], 0), 1)
    mde = history_mde(comp, hp.pooled["periods"], design.folds, seeds, df=hp.pooled["df"],
                      level=th.alpha / design.contrasts, power=th.power, one_sided=th.one_sided_keep)
    return HistoryRun(verdict_codes(dec.verdict), np.asarray(mde, float)[:, 0])


def histories_table(th: Thresholds, designs=None, tau: float = 1.0, tau_history: float = 1.0) -> pd.DataFrame:
    """Per history design: the nested rule's family-wise false rate under the null (c 0, NB's,
    0.35 inside each history), its stated MDE and the power there, the power with the folds'
    overlap left out of stage 1, and the first contrast's keep / harmful / inconsistent rates
    where its effect flips across the histories (mean zero) and where one history has the
    opposite sign."""
    rows = []
    for design in designs or history_designs():
        h = design.histories
        null = history_run(design, World(tau=tau, tau_history=tau_history, common=design.nb_rho), n_sim=th.n_sim,
                           seed=th.seed, th=th)
        mde = _median(null.mde)
        worlds = [("null, c 0", World(tau=tau, tau_history=tau_history)),
                  (f"null, c {design.nb_rho:.3f} (NB)", None),
                  ("null, c 0.35", World(tau=tau, tau_history=tau_history, common=0.35)),
                  (f"effect {mde:.3f} (the MDE)", World(tau=tau, tau_history=tau_history, common=design.nb_rho,
                                                        effect=mde)),
                  (f"effect {mde:.3f}, no overlap in stage 1", World(tau=tau, tau_history=tau_history,
                                                                     common=design.nb_rho, effect=mde)),
                  (f"+-{3 * mde:.3f} across histories (mean 0)",
                   World(tau=tau, tau_history=tau_history, common=design.nb_rho, effect=3 * mde,
                         history_pattern=tuple(np.linspace(1.0, -1.0, h)))),
                  (f"{3 * mde:.3f}, one history {-3 * mde:.3f}",
                   World(tau=tau, tau_history=tau_history, common=design.nb_rho, effect=3 * mde,
                         history_pattern=(1.0,) * (h - 1) + (-1.0,)))]
        for i, (label, world) in enumerate(worlds):
            r = null if world is None else history_run(design, world, n_sim=th.n_sim, seed=th.seed + 10 + i, th=th,
                                                       corrected="no overlap" not in label)
            first = r.codes[:, 0]
            rows.append(dict(design=design.label, world=label, planted=world is not None and world.effect != 0,
                             flip="across" in label, n_sim=th.n_sim, fwer=_fwer(r.codes),
                             keep=float((first == KEEP_CODE).mean()), harm=float((first == HARMFUL_CODE).mean()),
                             inconsistent=float((first == 3).mean()), mde=mde))
    return pd.DataFrame(rows)


def format_histories(t: pd.DataFrame, alpha: float) -> str:
    lines = [f"Several price histories (the nested rule: each history's folds pooled with NB's overlap, then random "
             f"effects over the histories, HKSJ, Holm over 3 contrasts; tau 1 and tau_history 1 seed SE; "
             f"{int(t['n_sim'].iloc[0])} families per row; MDE in sd; keep / harm / inconsistent: the first "
             "contrast's)"]
    head = ["design", "world", "FWER", "keep", "harm", "inconsistent"]
    rows = [[r["design"], r["world"], f"{r['fwer']:.3f}", f"{r['keep']:.3f}", f"{r['harm']:.3f}",
             f"{r['inconsistent']:.3f}"] for _, r in t.iterrows()]
    lines += _text_table(head, rows)
    null = t[~t["planted"]]
    worst = float(null["fwer"].max())
    flips = t[t["flip"]]
    worst_flip = float((flips["keep"] + flips["harm"]).max()) if len(flips) else 0.0
    tol = mc_tolerance(alpha, int(t["n_sim"].iloc[0]))
    lines.append(f"worst null FWER {worst:.3f}, worst keep / harmful of a mean-zero flip {worst_flip:.3f} "
                 f"(promise <= {alpha:g}; Monte-Carlo allowance +{tol:.3f})"
                 + ("" if max(worst, worst_flip) <= alpha + tol else "  ** ABOVE THE PROMISE **"))
    return "\n".join(lines)


REFERENCE_MDE = 0.148
"""The real run's pooled g6 MDE at 8 purged groups x 12 seeds (S&P 500, Sharpe units)."""


def reference_components(reference_mde: float = REFERENCE_MDE, alpha: float = defaults.ALPHA,
                         power: float = defaults.POWER) -> HistoryComponents:
    """The Sharpe-unit components behind the history MDE statement: one seed's variance inside
    an 8-group fold read off the real run's MDE (a family of one, df 7, no period spread: g6's
    tau^2 was 0, no seed share), halved for a fold of 4 groups per history (windows twice as
    long: a Sharpe's variance is inverse in its length); no spread between histories or periods
    (the rule's floor is then the seeds'); the overlap of 4 purged groups."""
    within8 = 12 * 8 * (reference_mde / t_multiplier(7, alpha, power)) ** 2
    rho = layout_rho(4)
    return HistoryComponents(history=0.0, period=0.0, within=within8 / 2, seed=0.0, overlap=rho / (1 - rho))


def history_mde_table(alpha: float = defaults.ALPHA, power: float = defaults.POWER) -> pd.DataFrame:
    """`power.history_mde` at the reference components (Sharpe units) for 4 and 3 histories x 4
    groups x 6 seeds and 3 x 4 x 8 (96 members per arm, as 4 x 4 x 6 and the one-history 8 x
    12), two-sided and one-sided, at the first Holm step of a 3-contrast family (df 3 (H - 1),
    the histories' spread shared) and at alpha (the level of the issue's 0.10 / 0.09)."""
    c = reference_components(alpha=alpha, power=power)
    rows = []
    for h, k, n in ((4, 4, 6), (3, 4, 6), (3, 4, 8)):
        for one_sided in (False, True):
            for m in (3, 1):
                rows.append(dict(histories=h, folds=k, seeds=n, members=h * k * n, one_sided=one_sided, level_m=m,
                                 df=3 * (h - 1), mde=history_mde(c, h, k, n, df=3 * (h - 1), level=alpha / m,
                                                                 power=power, one_sided=one_sided),
                                 mde_no_overlap=history_mde(replace(c, overlap=0.0), h, k, n, df=3 * (h - 1),
                                                            level=alpha / m, power=power, one_sided=one_sided)))
    return pd.DataFrame(rows)


def format_history_mde(t: pd.DataFrame) -> str:
    c = reference_components()
    lines = [f"The nested rule's MDE in Sharpe units (power.history_mde; one seed's variance in a 4-group fold "
             f"{c.within:.4f}, from the real 8 x 12 run's MDE {REFERENCE_MDE}; overlap lambda {c.overlap:.3f}; no "
             "spread between histories or periods; df 3 (H - 1): the histories' spread shared by 3 contrasts)"]
    head = ["histories x groups x seeds", "members", "test", "level", "MDE", "MDE without the overlap"]
    rows = [[f"{r['histories']} x {r['folds']} x {r['seeds']}", f"{r['members']}",
             "one-sided" if r["one_sided"] else "two-sided", "alpha / 3" if r["level_m"] == 3 else "alpha",
             f"{r['mde']:.3f}", f"{r['mde_no_overlap']:.3f}"] for _, r in t.iterrows()]
    return "\n".join(lines + _text_table(head, rows))


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
    """Per fold count and per-contrast spreads (ISOLATION_WORLDS): the family-wise false rate under
    the null and the first contrast's power at a planted `effect` (sd), with the flagged contrast
    kept in the family's shared fit (the rule as shipped) and leaving it (`isolate_flagged`, at
    the share test's level and at 0.01)."""
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
    lines += _text_table(head, rows)
    tol = mc_tolerance(alpha, int(t["n_sim"].iloc[0]))
    for n in names:
        worst = float(t[f"fwer {n}"].max())
        lines.append(f"worst FWER, {n}: {worst:.3f} (promise <= {alpha:g}; allowance +{tol:.3f})"
                     + ("" if worst <= alpha + tol else "  ** ABOVE THE PROMISE **"))
    return "\n".join(lines)


# ---- the tables by name (the door: `python analysis/calibrate_decisions.py`, tune_gems.analysis.cli) ----


TABLES = ("overlap", "held-out", "histories", "isolation")


def table_text(name: str, th: Thresholds) -> str:
    """One of `TABLES`, computed through the rule's own functions and formatted."""
    if name == "overlap":
        return format_overlap(overlap_table(th), th.alpha)
    if name == "held-out":
        return format_held_out(held_out_table(th), th.alpha)
    if name == "histories":
        return format_histories(histories_table(th), th.alpha) + "\n\n" + format_history_mde(history_mde_table())
    return format_isolation(isolation_table(th), th.alpha)
