"""The plan step: from a finished pilot, the designs (periods x seeds x epochs) that reach a
target MDE with the rule that decides, and what they cost (`tune-gems plan EXP`).

Why. With several validation periods the pooled test decides, and its MDE has a part no seed
count removes (the periods' spread). Which lever pays (more periods, more seeds, a longer
run whose averaging window holds more epochs) depends on the learner's own variance parts, so
they are read off a pilot instead of guessed:

- per gem, from the per-seed per-fold differences the verdicts use (`walk_forward.family_folds`,
  the same window and ties rule): the period spread tau^2 (the rule's, shared across the family
  where the rule shares it), the within-fold variance of one seed's difference and the seeds'
  share common to every fold (`rules.power.components`), the tie share (ties cost seeds), and
  the rule's degrees of freedom per period;
- the epochs: the within-fold variance over the last w = 1, E / 2 and E epochs of the pilot,
  fitted as a + b / w (a persistent part and evaluation noise that averages out), so a design
  whose window (`--window`) holds another number of epochs than the pilot's gets its within-fold
  variance from the fit (the pilot's own window keeps its measured value; the period part and
  the seed share are taken as fixed; a longer run may also learn something else, which no
  pilot of another length can say);
- the window: the pilot's pooled effect, period spread, within-fold variance and MDE with the
  verdict metric averaged over the last k epochs, the last half, and every epoch
  (`window_comparison`: the calibration behind the default window);
- the cost: the pilot's own time per member-iteration (history's `train_s` over
  trainer.iterations_per_epoch x the trial's members) and per member-epoch of evaluation
  (`eval_s`), on the pilot's device. A GPU's cost per member falls with the population, so for
  designs larger than the pilot this is an upper estimate.

Each design's MDE is `rules.power.pooled_mde` (the function the verdicts state theirs with) at
the first Holm step over the pilot's gems, the family's worst gem deciding whether it reaches
the target.

A pilot over several price histories (members with a `history` id) is decided by the
nested rule, so its designs are histories x periods x seeds x epochs priced with
`rules.power.history_mde` (the function the verdicts state theirs with over histories), from the
parts the nested rule pools (`history_verdicts.pilot_history_parts`: the spread between histories,
the periods' inside one, one seed's variance and its part common to every history and fold); the
window comparison pools one history's folds and is not made there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from tune_gems.analysis import defaults
from tune_gems.analysis.read.load import Experiment, load_experiment
from tune_gems.analysis.read.outcomes import last_evaluated_epochs
from tune_gems.analysis.pairs.pairing import build_cells, history_count
from tune_gems.analysis.rules.periods import fold_components
from tune_gems.analysis.rules.settings import Thresholds
from tune_gems.analysis.rules.power import PooledComponents, history_mde, mde_floor, pooled_mde
from tune_gems.analysis.verdicts.gem_verdicts import gem_verdicts, verdict_metric
from tune_gems.analysis.verdicts.history_verdicts import HistoryParts, pilot_history_parts
from tune_gems.analysis.verdicts.walk_forward import family_folds, fold_count, pool_family_of
from tune_gems.contracts.errors import ConfigError, DataError
from tune_gems.contracts.result_files import SPEC_FILE

PERIODS = (4, 6, 8, 10, 12, 16)
"""Period counts the plan tries (besides the pilot's)."""
HISTORIES = (3, 4, 6)
"""Price-history counts the plan tries (besides the pilot's) when the pilot has several."""
SEEDS = (8, 12, 16, 24, 32, 48, 64, 96, 128)
"""Seeds per arm (and fold) the plan tries (besides the pilot's)."""
EPOCH_FACTORS = (1, 2)
"""Run lengths the plan tries, as multiples of the pilot's epochs."""
SHOWN = 12
"""Designs printed (the cheapest that reach the target; else the best MDEs)."""
DESIGN_KEYS = ("data.folds.k", "trainer.population", "trainer.epochs")
"""The config keys that run a design: its periods (folds), seeds per arm and fold, and epochs."""


def design_overrides(periods: int, seeds: int, epochs: int, prefix: str = "") -> str:
    """The `key=value` overrides that run a design, as a user pastes them after `tune-gems
    train` (`prefix` "config." for a sweep's spec, whose config keys live under `config:`)."""
    return " ".join(f"{prefix}{k}={int(v)}" for k, v in zip(DESIGN_KEYS, (periods, seeds, epochs)))


def _override_prefix(paths: list[Path]) -> str:
    """"config." when the pilot is a sweep (its spec holds the config under `config:`), else ""."""
    return "config." if any((Path(p) / SPEC_FILE).is_file() for p in paths) else ""


@dataclass(frozen=True)
class GemParts:
    """One gem's variance parts from the pilot (per-seed-difference units^2)."""

    gem: str
    period: float
    seed: float
    within: float
    within_fit: tuple[float, float]  # a + b / w
    tied_share: float
    df_per_period: float
    within_at: dict = field(default_factory=dict)
    """The within-fold variance measured at the pilot's windows (epochs averaged -> variance)."""

    def components(self, window: int) -> PooledComponents:
        """The parts at a window of `window` epochs: the pilot's measured within-fold variance
        where it has that window, else the fit a + b / w (the seed share kept)."""
        a, b = self.within_fit
        measured = self.within_at.get(int(window))
        within = measured if measured is not None and np.isfinite(measured) else (
            a + b / window if np.isfinite(a) and np.isfinite(b) else self.within)
        share = self.seed / self.within if self.within > 0 else 0.0
        return PooledComponents(self.period, within, share * within)


@dataclass(frozen=True)
class PilotCost:
    """The pilot's recorded cost: seconds per member-iteration of training and per member-epoch
    of evaluation, iterations per epoch, and where it ran."""

    per_member_iteration: float
    per_member_eval: float
    iterations_per_epoch: float
    members: int
    device: str

    def seconds(self, members: int, epochs: int) -> float:
        return epochs * members * (self.iterations_per_epoch * self.per_member_iteration + self.per_member_eval)


@dataclass
class Plan:
    """The pilot's parts, its cost, and the designs tried (one row each)."""

    pilot: str
    periods: int
    seeds: int
    arms: int
    epochs: int
    window: str
    target: float
    level: float
    power: float
    parts: list[GemParts]
    cost: PilotCost | None
    designs: pd.DataFrame
    windows: pd.DataFrame = field(default_factory=pd.DataFrame)
    notes: list[str] = field(default_factory=list)
    histories: int = 1
    """The pilot's price histories (>= 2: `parts` are `HistoryParts`, the designs have a `histories` column)."""


def _fit_within(windows: list[int], values: list[float]) -> tuple[float, float]:
    """Least squares a + b / w >= 0 through the within-fold variances at windows w."""
    w, y = np.asarray(windows, float), np.asarray(values, float)
    ok = np.isfinite(y)
    if ok.sum() < 2:
        return (float(y[ok][0]) if ok.any() else math.nan, 0.0)
    x = np.stack([np.ones(ok.sum()), 1 / w[ok]], 1)
    a, b = np.linalg.lstsq(x, y[ok], rcond=None)[0]
    if a < 0:
        a, b = 0.0, float(np.sum(y[ok] / w[ok]) / np.sum(1 / w[ok] ** 2))
    if b < 0:
        a, b = float(np.mean(y[ok])), 0.0
    return float(a), float(b)


def _cost(exp: Experiment) -> PilotCost | None:
    """The pilot's median cost per member-iteration and per member-epoch of evaluation, from the
    epochs whose time and iteration count are recorded (finite, a time >= 0, at least one
    iteration: the loader refuses others, `read/table_schema.py`, so only an `Experiment` built
    by hand reaches here with them); None when no epoch has both."""
    h, t, m = exp.history, exp.trials, exp.members
    ipe_col = "trainer.iterations_per_epoch"
    if h is None or "train_s" not in h.columns or ipe_col not in t.columns:
        return None
    sizes = m.groupby(["experiment", "trial_id"])["member"].nunique().rename("members")
    rows = h.merge(sizes.reset_index(), on=["experiment", "trial_id"]).merge(
        t[["experiment", "trial_id", ipe_col]], on=["experiment", "trial_id"])
    ipe = pd.to_numeric(rows[ipe_col], errors="coerce")
    train_s = pd.to_numeric(rows["train_s"], errors="coerce")
    eval_s = pd.to_numeric(rows["eval_s"], errors="coerce") if "eval_s" in rows else pd.Series(0.0, index=rows.index)
    recorded = np.isfinite(ipe) & (ipe >= 1) & np.isfinite(train_s) & (train_s >= 0)
    if not recorded.any():
        return None
    rows, ipe = rows[recorded], ipe[recorded]
    train = train_s[recorded] / (ipe * rows["members"])
    ev = eval_s[recorded].where(np.isfinite(eval_s[recorded]) & (eval_s[recorded] >= 0)) / rows["members"]
    gpus = t["gpu_ids"].astype(str) if "gpu_ids" in t.columns else pd.Series("", index=t.index)
    device = "GPU" if gpus.str.strip().replace({"nan": "", "None": ""}).astype(bool).any() else "CPU"
    return PilotCost(float(np.median(train)), float(np.nanmedian(ev.fillna(0.0))), float(np.median(ipe)),
                     int(sizes.median()), device)


WINDOW_CHOICES = (("last-k", {}), ("last-half", {}), ("from-epoch", {"first_epoch": 1}))
"""The verdict metric's windows the plan compares on the pilot (the default's decision)."""


def window_comparison(exp: Experiment, th: Thresholds, cells=None, verdicts=None) -> pd.DataFrame:
    """Per window of `WINDOW_CHOICES` and gem: the pilot's pooled effect, its period spread,
    within-fold variance and the MDE the pooled test states with the pilot's design: the
    calibration behind the default window (an effect that the longer average dilutes, or a
    within-fold variance it does not lower, says the window does not pay)."""
    cells = cells if cells is not None else build_cells(exp.trials, exp.members, exp.arms)
    rows = []
    for window, extra in WINDOW_CHOICES:
        thw = th.with_window(window, **extra)
        v = verdicts if verdicts is not None else _verdicts(exp, thw)[1]
        fam = family_folds(v, cells, list(exp.gems), thw)
        if not fam.rows:
            continue
        pooled = pool_family_of(fam, thw)
        comp = fold_components(fam.data, pooled["tau2"])
        epochs = int(cells.table["final_epoch"].min())
        for j, i in enumerate(fam.rows):
            inf = fam.n_informative[0, j]
            n = float(inf[inf > 0].mean()) if (inf > 0).any() else math.nan
            c = PooledComponents(float(comp.period[0, j]), float(comp.within[0, j]), float(comp.seed[0, j]))
            periods = int(pooled["periods"][0, j])
            mde = pooled_mde(c, periods, n, df=float(pooled["df"][0, j]), level=th.alpha / len(fam.rows),
                             power=th.power, one_sided=th.one_sided_keep) if periods >= 2 and n > 0 else math.nan
            rows.append(dict(window=window, epochs=int(thw.window_length(epochs)), gem=str(v.at[i, "gem"]),
                             effect=float(pooled["mu"][0, j]), period=c.period, within=c.within, mde=float(mde)))
    return pd.DataFrame(rows)


def _verdicts(exp: Experiment, th: Thresholds):
    """(cells, the verdict table) of the pilot: which gems have a comparison, in which column."""
    cells = build_cells(exp.trials, exp.members, exp.arms)
    if fold_count(cells) < 2 and history_count(cells) < 2:
        raise DataError(f"{', '.join(str(p) for p in exp.paths)}: one validation period: the period spread cannot be "
                        "estimated (a pilot needs data.folds.k >= 2, or several price histories)")
    v = gem_verdicts(exp.trials, exp.history, exp.members, arms=exp.arms, gems=list(exp.gems), thresholds=th,
                     cells=cells)
    return cells, v.assign(removable=False)


def _parts(exp: Experiment, th: Thresholds, cells, v) -> tuple[list[GemParts], int, int, int, int]:
    """Each gem's parts, and the pilot's periods, seeds per fold, arms and epochs."""
    k = fold_count(cells)
    label = ", ".join(str(p) for p in exp.paths)
    base = family_folds(v, cells, list(exp.gems), th)
    if not base.rows:
        raise DataError(f"{label}: no gem has a wiring comparison in any fold: nothing to plan for")
    if not ((base.n_informative[0] > 0).sum(axis=1) >= 2).any():
        raise DataError(f"{label}: no gem has informative seed pairs (pairs that do not tie) in two or more folds: "
                        "the period spread cannot be estimated, so no design can be planned from this pilot")
    pooled = pool_family_of(base, th)
    comp = fold_components(base.data, pooled["tau2"])
    epochs = int(cells.table["final_epoch"].min())
    windows = sorted({1, max(1, epochs // 2), epochs})
    within_at = {}
    for w in windows:
        fam = family_folds(v, cells, list(exp.gems), th.with_window("last-k", last_k=int(w)))
        within_at[w] = fold_components(fam.data, pooled["tau2"]).within[0]
    own = int(th.window_length(epochs))  # the analysis's own window: as the verdicts measure it
    parts = []
    for j, i in enumerate(base.rows):
        kk = int(pooled["periods"][0, j])
        df = float(pooled["df"][0, j])
        parts.append(GemParts(str(v.at[i, "gem"]), float(comp.period[0, j]), float(comp.seed[0, j]),
                              float(comp.within[0, j]), _fit_within(windows, [within_at[w][j] for w in windows]),
                              float(np.nan_to_num(base.tied_share[j])), df / (kk - 1) if kk >= 2 else math.nan,
                              {own: float(comp.within[0, j])}))
    seeds = int(np.median([np.median([pr.n for _, pr in folds]) for folds in base.folds]))
    arms = int(cells.table.groupby(["experiment", "trial_id"])["arm"].nunique().max())
    return parts, k, seeds, arms, epochs


def plan(experiment: Experiment | str | Path | Iterable[str | Path], *, target_mde: float | None = None,
         thresholds: Thresholds | None = None, periods=PERIODS, seeds=SEEDS, epoch_factors=EPOCH_FACTORS,
         **settings) -> Plan:
    """The plan of a finished pilot (module docstring). `target_mde` in the verdict metric's
    units (default: the ROPE); `thresholds` / `settings` the analysis settings."""
    th = Thresholds.build(thresholds, **settings)
    target = th.rope if target_mde is None else target_mde
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not (0 < target < math.inf):
        raise ConfigError(f"--target-mde: must be a positive number, got {target_mde!r}")
    exp = experiment if isinstance(experiment, Experiment) else load_experiment(experiment)
    label = ", ".join(map(str, exp.paths)) or "the pilot"
    th.check_window(last_evaluated_epochs(exp.trials, exp.members), label)
    column, metric_note = verdict_metric(exp.members)
    if column not in exp.members.columns or not np.isfinite(exp.members[column].astype(float)).any():
        raise DataError(f"{label}: no member has a finite {defaults.METRIC} or {defaults.FALLBACK_METRIC} (every member "
                        "diverged or was never evaluated): nothing to plan from")
    cells, v = _verdicts(exp, th)
    if history_count(cells) >= 2:
        return _history_plan(exp, th, cells, v, target, periods, seeds, epoch_factors, metric_note)
    parts, k0, n0, arms, e0 = _parts(exp, th, cells, v)
    cost = _cost(exp)
    level = th.alpha / len(parts)
    prefix = _override_prefix(exp.paths)

    def mde_of(g: GemParts, _histories: int, k: int, informative: float, w: int) -> float:
        return pooled_mde(g.components(w), k, informative, df=g.df_per_period * (k - 1), level=level, power=th.power,
                          one_sided=th.one_sided_keep)

    designs = _designs(parts, mde_of, [1], sorted({k0, *periods}), sorted({n0, *seeds}),
                       [int(e0 * f) for f in epoch_factors], arms, th, cost, target, prefix)
    notes = _cost_notes(metric_note, cost)
    if th.window == "last-k":
        notes.append(f"the window is the last {th.last_k} epochs (--window): a longer run averages no more epochs, "
                     "so epochs only cost time here (--window last-half lets them lower the within-fold noise)")
    return Plan(", ".join(str(p) for p in exp.paths), k0, n0, arms, e0, th.window_text(), target, level, th.power, parts,
                cost, designs, window_comparison(exp, th, cells, v), notes)


def _history_plan(exp: Experiment, th: Thresholds, cells, v, target: float, periods, seeds, epoch_factors,
                  metric_note: str) -> Plan:
    """The plan of a pilot over several price histories (module docstring): the nested rule's
    parts, and designs of histories x periods x seeds x epochs priced with `history_mde`."""
    label = ", ".join(map(str, exp.paths))
    parts, n0 = pilot_history_parts(v, cells, list(exp.gems), th)
    usable = [g for g in parts if np.isfinite([g.components.history, g.components.period, g.components.within]).all()]
    if not usable or not n0:
        raise DataError(f"{label}: no gem has informative seed pairs (pairs that do not tie) in two or more price "
                        "histories: the spread between histories cannot be estimated, so no design can be planned "
                        "from this pilot")
    h0, k0 = history_count(cells), fold_count(cells)
    arms = int(cells.table.groupby(["experiment", "trial_id"])["arm"].nunique().max())
    e0 = int(cells.table["final_epoch"].min())
    cost = _cost(exp)
    level = th.alpha / len(parts)
    prefix = _override_prefix(exp.paths)

    def mde_of(g: HistoryParts, hh: int, k: int, informative: float, _w: int) -> float:
        return history_mde(g.components, hh, k, informative, df=g.df_per_history * (hh - 1), level=level,
                           power=th.power, one_sided=th.one_sided_keep)

    designs = _designs(parts, mde_of, sorted({h0, *HISTORIES}), sorted({k0, *periods}), sorted({n0, *seeds}),
                       [int(e0 * f) for f in epoch_factors], arms, th, cost, target, prefix)
    notes = _cost_notes(metric_note, cost)
    notes.append(f"{h0} price histories: the nested rule decides (each history's folds, then the histories); more "
                 "histories are more price columns (data.price_columns), the window comparison is not made over "
                 "histories")
    return Plan(label, k0, n0, arms, e0, th.window_text(), target, level, th.power, parts, cost, designs,
                pd.DataFrame(), notes, histories=h0)


def _designs(parts: list, mde_of, histories: list[int], periods: list[int], seeds: list[int], epochs: list[int],
             arms: int, th: Thresholds, cost: PilotCost | None, target: float, prefix: str) -> pd.DataFrame:
    """One row per design tried (histories x periods x seeds x epochs; one history: no `histories`
    column): its members, per gem `mde_of(part, histories, periods, informative seeds, window)`, the
    family's worst, whether it reaches `target`, and its cost."""
    rows = []
    for hh in histories:
        for k in periods:
            for n in seeds:
                for e in epochs:
                    w = th.window_length(e)
                    row = {**({"histories": hh} if len(histories) > 1 or hh > 1 else {}),
                           **dict(periods=k, seeds=n, epochs=e, window=w, members=hh * k * arms * n,
                                  overrides=design_overrides(k, n, e, prefix))}
                    mdes = []
                    for g in parts:
                        informative = n * (1 - g.tied_share)
                        mde = mde_of(g, hh, k, informative, w) if informative > 0 else math.inf
                        row[f"mde {g.gem}"] = mde
                        mdes.append(mde)
                    row["mde"] = float(np.max(mdes)) if np.isfinite(mdes).all() else math.nan
                    row["reaches"] = bool(row["mde"] <= target)
                    row["seconds"] = cost.seconds(row["members"], e) if cost else math.nan
                    rows.append(row)
    return pd.DataFrame(rows)


def _cost_notes(metric_note: str, cost: PilotCost | None) -> list[str]:
    """The plan's first notes: the metric's, and that designs are not costed without a recorded time."""
    notes = [metric_note] if metric_note else []
    if cost is None:
        notes.append("no recorded time (history.parquet without train_s, or trials without "
                     "trainer.iterations_per_epoch): designs are not costed")
    return notes


def _fmt(x: float, f: str = ".3g") -> str:
    if not np.isfinite(x):
        return "inf" if x == math.inf else "-"
    return format(x, f)


def _duration(seconds: float) -> str:
    if not np.isfinite(seconds):
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def format_plan(p: Plan, shown: int = SHOWN) -> str:
    """The plan as text (what `tune-gems plan` prints)."""
    over = f"{p.histories} price histories x " if p.histories >= 2 else ""
    lines = [f"Plan from the pilot {p.pilot}: {over}{p.periods} periods x {p.seeds} seeds x {p.arms} arms per fold, "
             f"{p.epochs} epochs (the verdict metric: {p.window}); target MDE {p.target:g} at the pooled test's "
             f"{p.power:.0%} power, Holm level {p.level:.3g} over {len(p.parts)} gem(s)",
             "variance parts per gem (units^2 of the per-seed difference; from the pilot's per-fold differences):"]
    for g in p.parts:
        if isinstance(g, HistoryParts):
            c = g.components
            lines.append(f"  {g.gem}: between histories tau_H^2 {_fmt(c.history)}, period tau^2 {_fmt(c.period)}, "
                         f"within-fold {_fmt(c.within)}, seeds' part common to every history and fold {_fmt(c.seed)}, "
                         f"ties {g.tied_share:.0%}, df per history {_fmt(g.df_per_history)}")
            continue
        a, b = g.within_fit
        lines.append(f"  {g.gem}: period tau^2 {_fmt(g.period)}, within-fold {_fmt(g.within)} "
                     f"(fit over the averaged epochs w: {_fmt(a)} + {_fmt(b)} / w), seeds' share common to every fold "
                     f"{_fmt(g.seed)}, ties {g.tied_share:.0%}, df per period {_fmt(g.df_per_period)}")
    if p.cost:
        c = p.cost
        per_it = (f"{c.per_member_iteration * 1e6:.3g} us" if c.per_member_iteration < 1e-3 else
                  f"{c.per_member_iteration * 1e3:.3g} ms")
        lines.append(f"cost: {per_it} per member-iteration and {c.per_member_eval * 1e3:.3g} "
                     f"ms of evaluation per member-epoch on the pilot's {c.device} ({c.members} members, "
                     f"{c.iterations_per_epoch:.0f} iterations per epoch; the per-member cost falls with the population "
                     "on a GPU, so larger designs are upper estimates)")
    d = p.designs
    hit = d[d["reaches"]].sort_values(["seconds", "members", "mde"])
    gem_cols = [c for c in d.columns if c.startswith("mde ")]
    if len(hit):
        lines.append(f"designs that reach MDE <= {p.target:g} (cheapest first, {len(hit)} of {len(d)} tried):")
        table = hit.head(shown)
    else:
        lines.append(f"no design tried reaches MDE <= {p.target:g}; the closest ({len(d)} tried):")
        table = d.sort_values(["mde", "seconds"]).head(shown)
    design = ["histories"] * ("histories" in d.columns) + ["periods", "seeds", "epochs", "window", "members"]
    head = design + [c.replace("mde ", "MDE ") for c in gem_cols] + ["time", "overrides that run it"]
    rows = [head] + [[str(int(r[c])) for c in design] + [_fmt(r[c]) for c in gem_cols] + [_duration(r["seconds"]),
                                                                                        r["overrides"]]
                     for _, r in table.iterrows()]
    widths = [max(len(x[i]) for x in rows) for i in range(len(head))]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(x, widths)).rstrip() for x in rows]
    floors = []
    if p.histories >= 2:  # the nested rule's floor: the histories' and periods' spreads, which no seed count removes
        for hh in sorted(d["histories"].unique()):
            worst = max(history_mde(g.components, int(hh), p.periods, 1e12, df=g.df_per_history * (int(hh) - 1),
                                    level=p.level, power=p.power) for g in p.parts)
            floors.append(f"H={int(hh)} {_fmt(worst)}")
        lines.append(f"floor with infinitely many seeds (the worst gem, {p.periods} periods per history): " + ", ".join(floors))
        lines += [f"note: {n}" for n in p.notes]
        return "\n".join(lines)
    for k in sorted(d["periods"].unique()):
        worst = max(mde_floor(g.components(1), int(k), df=g.df_per_period * (int(k) - 1), level=p.level, power=p.power)
                    for g in p.parts)
        floors.append(f"K={int(k)} {_fmt(worst)}")
    lines.append("floor with infinitely many seeds (the worst gem): " + ", ".join(floors))
    pilot_k = d[d["periods"] == p.periods]
    if len(pilot_k) and not pilot_k["reaches"].any() and len(hit):
        lines.append(f"at the pilot's {p.periods} periods no seed count reaches {p.target:g}: more periods, not more seeds")
    if len(p.windows):
        lines.append("the verdict metric's window on this pilot (--window; pooled effect, period spread, within-fold "
                     "variance and the pooled MDE at the pilot's design):")
        w = p.windows
        rows = [["window", "epochs", "gem", "effect", "tau^2", "within", "MDE"]] + [
            [r["window"], str(int(r["epochs"])), r["gem"], _fmt(r["effect"], "+.3g"), _fmt(r["period"]), _fmt(r["within"]),
             _fmt(r["mde"])] for _, r in w.iterrows()]
        widths = [max(len(x[i]) for x in rows) for i in range(len(rows[0]))]
        lines += ["  " + "  ".join(c.ljust(wd) for c, wd in zip(x, widths)).rstrip() for x in rows]
    lines += [f"note: {n}" for n in p.notes]
    return "\n".join(lines)

