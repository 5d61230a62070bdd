"""The plan step (`tune-gems plan EXP`): from a finished pilot, the layouts that reach a target MDE with the rule that
decides, and what they cost. The pilot is decided by the verdict's own family (`gem_verdicts.gem_verdict_tables`) and
each layout priced with the `power.PowerInputs` each gem's verdict stated, moved to the layout's histories, periods and
seeds, so at the pilot's design the MDE is the verdict's. Layouts: K folds of one history, or H histories x K periods on
the pilot's calendar ("one") or their own ("own"); one the rule would not decide is listed as refused, with why. The
cost is the pilot's own time per member-iteration and member-epoch (an upper estimate for larger designs on a GPU)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from tune_gems.analysis import defaults
from tune_gems.analysis.pairs.pairing import build_cells, history_count
from tune_gems.analysis.read.calendars import validation_calendar
from tune_gems.analysis.read.labels import history_names
from tune_gems.analysis.read.load import Experiment, load_experiment
from tune_gems.analysis.read.outcomes import last_evaluated_epochs
from tune_gems.analysis.rules.power import PowerInputs, informative_of, mde, two_stage
from tune_gems.analysis.rules.settings import Thresholds
from tune_gems.analysis.text import format_number, text_table
from tune_gems.analysis.verdicts.family import DesignFamily, Sources
from tune_gems.analysis.verdicts.gem_verdicts import gem_verdict_tables, verdict_metric
from tune_gems.analysis.verdicts.walk_forward import experiment_overlap, fold_count
from tune_gems.contracts.errors import ConfigError, DataError
from tune_gems.contracts.result_files import SPEC_FILE

PERIODS = (1, 2, 4, 6, 8, 12)
"""Periods (folds) per history the plan tries, besides the pilot's."""
HISTORIES = (3, 4, 6, 8, 12, 16)
"""Price-history counts the plan tries when the pilot has several (never fewer than the pilot's)."""
SEEDS = (6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
"""Seeds per arm and period the plan tries, besides the pilot's (6: a finite 95% rank interval)."""
SHOWN = 10
"""Layouts printed besides the pilot's (the cheapest that reach the target; else the best MDEs)."""
ONE, OWN = "one", "own"
"""A layout's histories on the pilot's calendars, or each on its own."""


@dataclass(frozen=True)
class GemPower:
    """One gem's power as its verdict stated it."""

    gem: str
    inputs: PowerInputs
    tied_share: float
    mde: float
    two_stage: float
    floor: float


@dataclass(frozen=True)
class PilotCost:
    """The pilot's recorded seconds per member-iteration and per member-epoch of evaluation."""

    per_member_iteration: float
    per_member_eval: float
    iterations_per_epoch: float
    members: int
    device: str

    def seconds(self, members: int, epochs: int) -> float:
        return epochs * members * (self.iterations_per_epoch * self.per_member_iteration + self.per_member_eval)


@dataclass
class Plan:
    """The pilot's design and power, its cost, and the layouts tried (one row each)."""

    pilot: str
    histories: int
    periods: int
    seeds: int
    arms: int
    epochs: int
    window: str
    target: float
    level: float
    power: float
    gems: list[GemPower]
    cost: PilotCost | None
    designs: pd.DataFrame
    windows: pd.DataFrame = field(default_factory=pd.DataFrame)
    notes: list[str] = field(default_factory=list)
    prefix: str = ""
    columns: tuple[str, ...] = ()
    """The pilot's price columns, then its file's other ones (`_file_columns`)."""

    @property
    def confirmed(self) -> pd.Series | None:
        """The cheapest layout whose two-stage MDE reaches the target (None: none tried does)."""
        d = self.designs
        hit = d[d["confirmed seeds"] > 0] if "confirmed seeds" in d else d.iloc[:0]
        return hit.sort_values(["confirmed seconds" if self.cost else "confirmed members", "confirmed seeds"]).iloc[0] \
            if len(hit) else None


def design_overrides(periods: int, seeds: int, epochs: int, prefix: str = "") -> str:
    """The `key=value` overrides that run a design after `tune-gems train` (`prefix` "config." for a sweep's spec)."""
    keys = ("data.folds.k", "trainer.population", "trainer.epochs")
    return " ".join(f"{prefix}{k}={int(v)}" for k, v in zip(keys, (periods, seeds, epochs)))


def _file_columns(exp: Experiment) -> tuple[str, ...]:
    """The pilot's price columns in history order, then the other numeric columns of their one file
    (empty where there is no such file)."""
    t = exp.histories
    one_file = t is not None and {"source", "column"} <= set(t.columns) and t["source"].nunique() == 1
    path = Path(str(t["source"].iloc[0])) if one_file else None
    if path is None or not path.is_file():
        return ()
    head = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path, nrows=20)
    used = [str(c) for c in t.drop_duplicates("history").sort_values("history")["column"]]
    spare = [str(c).strip() for c in head.columns if str(c).strip() not in used
             and pd.to_numeric(head[c].head(20), errors="coerce").notna().all()]
    return tuple(used + spare)


def _cost(exp: Experiment) -> PilotCost | None:
    """The pilot's median cost per member-iteration and per member-epoch of evaluation over the
    epochs that record both (None: none does)."""
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


def pilot_family(exp: Experiment, th: Thresholds) -> tuple[pd.DataFrame, DesignFamily]:
    """(the verdict table, the family) of the pilot as `analyze` decides it."""
    cells = build_cells(exp.trials, exp.members, exp.arms)
    if fold_count(cells) < 2 and history_count(cells) < 2:
        raise DataError(f"{', '.join(str(p) for p in exp.paths)}: one validation period: the period spread cannot be "
                        "estimated (a pilot needs data.folds.k >= 2, or several price histories)")
    sources = Sources(overlap=experiment_overlap(exp.folds.table), history_names=history_names(exp.histories),
                      calendar_of=partial(validation_calendar, exp.folds.dates, exp.histories))
    v, _, family = gem_verdict_tables(cells, list(exp.gems), th, exp.members, sources=sources)
    return v, family


WINDOW_CHOICES = (("last-k", {}), ("last-half", {}), ("from-epoch", {"first_epoch": 1}))
"""The verdict metric's windows the plan compares on a pilot of one history (the default's decision)."""


def window_comparison(exp: Experiment, th: Thresholds) -> pd.DataFrame:
    """Per window of WINDOW_CHOICES and gem: the pilot's pooled effect, spreads and MDE at that
    window: whether a longer average pays."""
    rows = []
    for window, extra in WINDOW_CHOICES:
        thw = th.with_window(window, **extra)
        v, family = pilot_family(exp, thw)
        epochs = int(family.cells.table["final_epoch"].min())
        for _, r in v[np.isfinite(pd.to_numeric(v["pooled_effect"], errors="coerce"))].iterrows():
            rows.append(dict(window=window, epochs=int(thw.window_length(epochs)), gem=r["gem"],
                             effect=float(r["pooled_effect"]), period=float(r["var_period"]),
                             within=float(r["var_within"]), mde=float(r["mde"])))
    return pd.DataFrame(rows)


def _refusal(histories: int, periods: int, calendar: str | None, th: Thresholds, calendars: int = 1) -> str:
    """Why the rule would not decide a layout ("" where it would)."""
    if histories >= 2 and histories < defaults.MIN_HISTORIES:
        return f"fewer than {defaults.MIN_HISTORIES} histories"
    if calendar == ONE:
        need = max(th.min_periods, defaults.MIN_SHARED_PERIODS)
        return f"fewer than {need} calendar periods shared by the histories" if periods * calendars < need else ""
    if histories * periods < th.min_periods:
        return f"fewer than {th.min_periods} {'calendar ' * (histories >= 2)}periods (--min-periods)"
    return ""


def _at(d: PowerInputs, histories: int, periods: int, informative: float, calendar: str | None) -> PowerInputs:
    """The verdict's power inputs moved to a layout; on their own calendars the calendar part joins
    each history's own period spread."""
    out = replace(d, n=informative, folds=periods, histories=histories)
    if calendar == OWN and math.isfinite(d.calendar):
        out = replace(out, tau2=d.tau2 + d.calendar, calendar=math.nan)
    return out


def plan(experiment: Experiment | str | Path | Iterable[str | Path], *, target_mde: float | None = None,
         thresholds: Thresholds | None = None, periods=PERIODS, seeds=SEEDS, histories=HISTORIES, **settings) -> Plan:
    """The plan of a finished pilot (module docstring); `target_mde` defaults to the ROPE."""
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
    v, family = pilot_family(exp, th)
    rows = v.set_index("gem")
    gems = [GemPower(g.name, family.power["inputs"][j], float(family.decision.tied_share[0, j]),
                     *(float(rows.at[g.name, key]) for key in ("mde", "mde_two_stage", "mde_floor")))
            for g in exp.gems if (j := family.gem_index(g.name)) is not None and family.power is not None
            and family.power["inputs"][j] is not None]
    if not gems:
        raise DataError(f"{label}: no gem has a pooled power statement (informative seed pairs in two or more "
                        "periods or histories): the spreads cannot be estimated, so no design can be planned from "
                        "this pilot")
    first = gems[0].inputs
    h0, k0 = first.histories, first.folds
    t = family.cells.table
    n0 = int(t.groupby(["experiment", "trial_id", "arm", "history", "fold"])["seed"].nunique().median())
    arms = int(t.groupby(["experiment", "trial_id"])["arm"].nunique().max())
    e0 = int(t["final_epoch"].min())
    shared = h0 >= 2 and math.isfinite(first.calendar)
    calendars = [ONE, OWN] if shared else [OWN] if h0 >= 2 else [None]
    layouts = [(h, k, cal) for h in (sorted({h0, *(x for x in histories if x > h0)}) if h0 >= 2 else [1])
               for k in sorted({k0, *periods}) if k >= (1 if h0 >= 2 else 2) for cal in calendars]
    p = Plan(label, h0, k0, n0, arms, e0, th.window_text(), target, th.alpha / max(family.size, 1), th.power, gems,
             _cost(exp), pd.DataFrame(), notes=[metric_note] if metric_note else [],
             prefix="config." if any((Path(x) / SPEC_FILE).is_file() for x in exp.paths) else "",
             columns=_file_columns(exp))
    pilot_layout = (h0, k0, ONE if shared else OWN if h0 >= 2 else None)
    p.designs = pd.DataFrame([_layout_row(p, h, k, cal, sorted({n0, *seeds}), th, pilot=(h, k, cal) == pilot_layout)
                              for h, k, cal in layouts])
    if h0 < 2:
        p.windows = window_comparison(exp, th)
    if p.cost is None:
        p.notes.append("no recorded time (history.parquet without train_s, or trials without "
                       "trainer.iterations_per_epoch): designs are not costed")
    return p


def _layout_row(p: Plan, histories: int, periods: int, calendar: str | None, seeds: list[int], th: Thresholds,
                pilot: bool) -> dict:
    """One layout: why the rule refuses it, or the fewest seeds whose worst MDE (and two-stage MDE)
    reaches the target, its MDEs and cost."""
    row = dict(histories=histories, calendars=calendar or "", periods=periods, pilot=pilot,
               refused=_refusal(histories, periods, calendar, th, p.gems[0].inputs.calendars))
    members = row["members per seed"] = histories * periods * p.arms
    if row["refused"]:
        return row

    def at(n: int) -> tuple[float, float]:
        mdes = [(g.mde, g.two_stage) if pilot and n == p.seeds else
                (lambda d: (mde(d, p.level, th.power, one_sided=th.one_sided_keep),
                            two_stage(d, p.level, th.power, one_sided=th.one_sided_keep)))(
                    _at(g.inputs, histories, periods, informative_of(n, g.tied_share), calendar))
                for g in p.gems]
        return max(m for m, _ in mdes), max(t for _, t in mdes)

    def fewest(which: int) -> int:  # the MDEs fall with the seeds: bisection over the list
        lo, hi = -1, len(seeds) - 1
        if not at(seeds[hi])[which] <= p.target:
            return 0
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if at(seeds[mid])[which] <= p.target else (mid, hi)
        return seeds[hi]

    for key, which in (("", 0), ("confirmed ", 1)):
        n = fewest(which)
        shown = n or seeds[-1]
        row[f"{key}seeds"], row[f"{key}shown seeds"] = n, shown
        row[f"{key}mde"], row[f"{key}two-stage"] = at(shown)
        row[f"{key}members"] = members * shown
        row[f"{key}member-iterations"] = members * shown * p.epochs * (p.cost.iterations_per_epoch if p.cost else math.nan)
        row[f"{key}seconds"] = p.cost.seconds(members * shown, p.epochs) if p.cost else math.nan
    return row


def _duration(seconds: float) -> str:
    if not np.isfinite(seconds):
        return "-"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _run_it(p: Plan, r: pd.Series, seeds: int) -> str:
    """The overrides that run a layout, or the histories it needs that no override can name."""
    h, runs = int(r["histories"]), design_overrides(int(r["periods"]), seeds, p.epochs, p.prefix)
    if r["calendars"] == OWN and p.designs["calendars"].eq(ONE).any():
        return f"needs {h} histories on their own calendars (data.histories: other eras or markets); {runs}"
    if h <= p.histories:
        return runs
    if len(p.columns) >= h:
        return f"{p.prefix}data.price_columns=[{','.join(p.columns[:h])}] {runs}"
    return f"needs {h - p.histories} more price histories than the pilot's file has (data.histories); {runs}"


def _values(x: pd.Series) -> str:
    """A layout dimension's values in words: `3`, `1, 2 or 4`."""
    v = [str(int(a)) for a in sorted(set(x))]
    return v[0] if len(v) == 1 else ", ".join(v[:-1]) + " or " + v[-1]


def format_plan(p: Plan) -> str:
    """The plan as text (what `tune-gems plan` prints)."""
    several = p.histories >= 2
    names = f" ({', '.join(p.columns[:p.histories])})" if len(p.columns) >= p.histories else ""
    over = f"{p.histories} price histories{names} x " if several else ""
    lines = [f"Plan from the pilot {p.pilot}: {over}{p.periods} period(s) x {p.seeds} seeds x {p.arms} arms, "
             f"{p.epochs} epochs (the verdict metric: {p.window}); target MDE {p.target:g} at {p.power:.0%} power, "
             f"the family's first Holm step {p.level:.3g}",
             "each gem's power as its verdict states it (units^2 of the per-seed difference):"]
    for g in p.gems:
        d = g.inputs
        parts = [f"between histories {format_number(d.history_tau2)}"] * several + [f"period {format_number(d.tau2)}",
                 f"within-fold {format_number(d.within)}", f"seeds' common part {format_number(d.seed)}"]
        if math.isfinite(d.calendar):
            parts.append(f"calendar part {format_number(d.calendar)} (the histories share their periods)")
        if d.overlap:
            parts.append(f"folds' overlap lambda {format_number(d.overlap)}")
        lines.append(f"  {g.gem}: MDE {format_number(g.mde)}, two-stage {format_number(g.two_stage)}, floor "
                     f"{format_number(g.floor)}; " + ", ".join(parts)
                     + f", ties {g.tied_share:.0%}, its scale shared by {d.contrasts} contrast(s)")
    if p.cost:
        c = p.cost
        per_it = (f"{c.per_member_iteration * 1e6:.3g} us" if c.per_member_iteration < 1e-3 else
                  f"{c.per_member_iteration * 1e3:.3g} ms")
        lines.append(f"cost: {per_it} per member-iteration and {c.per_member_eval * 1e3:.3g} "
                     f"ms of evaluation per member-epoch on the pilot's {c.device} ({c.members} members, "
                     f"{c.iterations_per_epoch:.0f} iterations per epoch; the per-member cost falls with the population "
                     "on a GPU, so larger designs are upper estimates)")
    d = p.designs
    cost = "seconds" if p.cost else "members"
    ok = d[(d["refused"] == "") & ~d["pilot"]]
    reach = ok[ok["seeds"] > 0].sort_values([cost, "mde"])
    shown = pd.concat([reach, ok[ok["seeds"] == 0].sort_values("mde")]).head(SHOWN)
    lines.append(f"layouts: the pilot's, then the cheapest whose MDE reaches {p.target:g} with the fewest seeds per arm "
                 f"and period ({len(reach)} of {len(ok)} decided layouts tried; '-': not with "
                 f"{int(ok['shown seeds'].max()) if len(ok) else '-'} seeds, the MDE shown there):")
    head = ["histories", "calendars"] * several + ["periods", "seeds", "members", "MDE", "two-stage", "time", "to run it"]
    rows = []
    for _, r in d[d["pilot"]].iterrows():
        why = f"the pilot (analyze's MDE){'; the rule refuses it: ' + r['refused'] if r['refused'] else ''}"
        rows.append([str(int(r["histories"])), str(r["calendars"])] * several + [
            str(int(r["periods"])), str(p.seeds), str(p.seeds * int(r["members per seed"])),
            format_number(max(g.mde for g in p.gems)), format_number(max(g.two_stage for g in p.gems)),
            _duration(p.cost.seconds(p.seeds * int(r["members per seed"]), p.epochs)) if p.cost else "-", why])
    for _, r in shown.iterrows():
        seeds = int(r["seeds"])
        rows.append([str(int(r["histories"])), str(r["calendars"])] * several + [
            str(int(r["periods"])), str(seeds) if seeds else "-", str(int(r["members"])), format_number(r["mde"]),
            format_number(r["two-stage"]), _duration(r["seconds"]), _run_it(p, r, int(r["shown seeds"]))])
    lines += ["  " + x for x in text_table(head, rows)]
    refused = d[(d["refused"] != "") & ~d["pilot"]]
    if len(refused):
        lines.append("refused by the rule (it would read insufficient data): " + "; ".join(
            (f"{_values(g['histories'])} histories x {_values(g['periods'])} periods on {cal} calendar(s)" if several
             else f"{_values(g['periods'])} periods") + f": {why}"
            for (cal, why), g in refused.groupby(["calendars", "refused"], sort=False)))
    best = p.confirmed
    if best is None:
        lines.append(f"with confirmation (a keep the held-out stage confirms too), no layout tried reaches MDE "
                     f"{p.target:g}: more histories or periods than tried")
    else:
        layout = (f"{int(best['histories'])} histories on {best['calendars']} calendar(s) x " if several else "")
        work = (f"{format_number(best['confirmed member-iterations'], '.3g')} member-iterations, about "
                f"{_duration(best['confirmed seconds'])} on the pilot's {p.cost.device}" if p.cost else "not costed")
        lines.append(f"with confirmation (a keep the held-out stage confirms too), MDE {p.target:g} needs at least "
                     f"{layout}{int(best['periods'])} period(s) x {int(best['confirmed seeds'])} seeds x {p.arms} arms = "
                     f"{int(best['confirmed members'])} members for {p.epochs} epochs: {work} "
                     f"({_run_it(p, best, int(best['confirmed seeds']))})")
    if len(p.windows):
        lines.append("the verdict metric's window on this pilot (--window; its pooled effect, period spread, "
                     "within-fold variance and MDE as the verdict states them):")
        lines += ["  " + x for x in text_table(["window", "epochs", "gem", "effect", "tau^2", "within", "MDE"], [
            [r["window"], str(int(r["epochs"])), r["gem"], format_number(r["effect"], "+.3g"), format_number(r["period"]),
             format_number(r["within"]), format_number(r["mde"])] for _, r in p.windows.iterrows()])]
    lines += [f"note: {n}" for n in p.notes]
    return "\n".join(lines)
