"""Training a confirmation's trials in this process (its seeds, arms, lock and record are fixed
here), into the tables a sweep writes, with the sweep's ETA line and TensorBoard layout."""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from tune_gems.commands.confirm_plan import Plan
from tune_gems.config.dotted import flatten
from tune_gems.config.schema import Config
from tune_gems.contracts.result_files import EVAL_RETURNS_FILE
from tune_gems.design.arm_sets import also_named
from tune_gems.stats.metrics import MEMBER_IDS, VERDICT_GAIN_PREFIX, epoch_metrics, member_metrics
from tune_gems.sweep.results import TERMINATED, SweepTables


def trial_tables(trainer, plan: Plan, experiment: str) -> dict[str, Any]:
    from tune_gems.design.arms import resolved_settings

    cfg = trainer.cfg
    label = cfg.label()
    arm_names = trainer.arms.names if cfg.arms is not None else ()
    cols = epoch_metrics(cfg.plugins, arm_names, histories=range(len(trainer.ids.histories)))
    ids = {"experiment": experiment, "trial_id": plan.trial_id, "config_label": label}
    history = [{**ids, **{m: r.get(m) for m in cols}} for r in trainer.history]
    members = [{**ids, **{k: r.get(k) for k in MEMBER_IDS}, **{m: r.get(m) for m in member_metrics(cfg.plugins)}}
               for r in trainer.member_history]
    last = trainer.history[-1] if trainer.history else {}
    trial = {"experiment": experiment, "trial_id": plan.trial_id, "status": TERMINATED, "error": None,
             "epochs_done": len(trainer.history), "config_label": label, "seed": cfg.seed,
             **flatten(cfg.to_dict()), **{m: last.get(m, math.nan) for m in cols},
             "objective": last.get(f"{VERDICT_GAIN_PREFIX}{plan.gem}", math.nan), "node_id": None, "gpu_ids": None}
    aliases = trainer.ids.aliases  # the control is also without-<gem> (arm_sets.confirmation_arms)
    arms = [{"trial_id": plan.trial_id, "arm": a.name, **({"also_named": also_named(aliases, a.name)} if aliases else {}),
             **resolved_settings(a.config)} for a in trainer.arms.arms]
    baselines = [{"experiment": experiment, "trial_id": plan.trial_id, **b} for b in trainer.baselines().to_dict("records")]
    histories, folds = ([{"experiment": experiment, "trial_id": plan.trial_id, **row} for row in table.to_dict("records")]
                        for table in (trainer.history_table(), trainer.fold_table()))  # the layout its overlap is read from
    with tempfile.TemporaryDirectory() as d:
        trainer.window.write(d)
        returns = (Path(d) / EVAL_RETURNS_FILE).read_bytes()
    return dict(trial=trial, history=history, members=members, arms=arms, baselines=baselines, histories=histories,
                folds=folds, returns=returns)


def finished_line(done: int, total: int, plan: Plan, trainer, durations: list[float], elapsed: float) -> str:
    """The console line of a finished trial, with the sweep's ETA rule."""
    from tune_gems.sweep.progress import eta_seconds, format_seconds

    left = max(0, total - done)
    seconds = eta_seconds(durations, [], left)
    eta = format_seconds(seconds) if left and math.isfinite(seconds) else "0s"
    metric = f"{VERDICT_GAIN_PREFIX}{plan.gem}"
    value = (trainer.history[-1] if trainer.history else {}).get(metric, math.nan)
    value = float(value) if isinstance(value, (int, float)) else math.nan
    return (f"tune-gems confirm: trial {done}/{total} finished: {plan.trial_id} ({plan.gem}) after "
            f"{len(trainer.history)} epoch(s), {metric}={value:.3f} | {format_seconds(elapsed)} elapsed, ETA {eta}")


def epoch_line(plan: Plan, trainer, ran: float) -> str:
    """A confirmation trial's console line after each epoch: the time run and the ETA at that pace."""
    from tune_gems.sweep.progress import format_seconds

    done, total = trainer.epoch, trainer.cfg.trainer.epochs
    left = ran / done * (total - done) if done else math.nan
    eta = format_seconds(left) if math.isfinite(left) else "-"
    return f"tune-gems confirm: {plan.trial_id}: epoch {done}/{total} | {format_seconds(ran)} in this trial, ETA {eta}"


def _announce(plan: Plan, cfg: Config) -> str:
    last = plan.first_seed_index + plan.population - 1
    tested = f"; tested {plan.choice.settings}" if plan.choice.settings else ""
    return (f"tune-gems confirm: {plan.gem}: trial {plan.discovery_trial}'s configuration ({cfg.label()}{tested}) against "
            f"itself with {plan.gem} measured; fresh seed {plan.seed}, seed indices {plan.first_seed_index}-{last}"
            + (f", paths {plan.path_seed}-{plan.path_seed + plan.population - 1}" if plan.path_seed is not None else ""))


def run_plans(plans: list[Plan], build: Callable[[Plan], Config], experiment: str, log: Callable[[str], None],
              events_out: Path | None = None, clock: Callable[[], float] = time.monotonic,
              open_seal: bool = False) -> SweepTables:
    """Train every plan once, in turn; their tables (console lines with ETAs; TensorBoard with
    `events_out`). `open_seal` (`confirm --final`): each trial's test is the sealed rows."""
    from tune_gems.gems import manifest
    from tune_gems.design.arms import run_arms
    from tune_gems.design.resources import check_training_fits
    from tune_gems.trainer.health import without_arm_detail
    from tune_gems.trainer.tensorboard import EpochEvents
    from tune_gems.trainer.epoch_loop import train_epochs
    from tune_gems.trainer.run_setup import prepare_market, run_device
    from tune_gems.trainer.trainer import Trainer

    configs = [build(p) for p in plans]
    arms = [run_arms(cfg) for cfg in configs]  # each run's arms, expanded once
    for cfg, run in zip(configs, arms):  # every config and its memory checked before the first trains
        check_training_fits(cfg, members=run.members)
    parts: dict[str, list] = {"trial": [], "history": [], "members": [], "arms": [], "baselines": [], "histories": [],
                             "folds": []}
    returns: dict[str, bytes] = {}
    start, durations = clock(), []
    for done, (plan, cfg, run) in enumerate(zip(plans, configs, arms), start=1):
        log(_announce(plan, cfg))
        began = clock()
        market = prepare_market(cfg, run_device(cfg), open_seal=True) if open_seal else None
        trainer = Trainer(cfg, log=lambda line: log(without_arm_detail(line)), arms=run, market=market)  # the sweep console's short line
        events = EpochEvents(events_out, plan.trial_id) if events_out is not None else None

        def after_epoch(_result, _due, trainer=trainer, plan=plan, events=events, began=began):
            if events is not None:
                events.write(trainer.history[-1], trainer.epoch)
            log(epoch_line(plan, trainer, clock() - began))

        try:
            train_epochs(trainer, after_epoch)
        finally:
            if events is not None:
                events.close()
        now = clock()
        durations.append(now - began)
        log(finished_line(done, len(plans), plan, trainer, durations, now - start))
        rows = trial_tables(trainer, plan, experiment)
        for key in parts:
            parts[key].extend(rows[key] if isinstance(rows[key], list) else [rows[key]])
        returns[plan.trial_id] = rows["returns"]
    plugins = list(configs[0].plugins) if configs else []
    return SweepTables(trials=pd.DataFrame(parts["trial"]), history=pd.DataFrame(parts["history"]),
                       members=pd.DataFrame(parts["members"]), arms=pd.DataFrame(parts["arms"]),
                       baselines=pd.DataFrame(parts["baselines"]), gems=manifest(plugins), eval_returns=returns,
                       histories=pd.DataFrame(parts["histories"]), folds=pd.DataFrame(parts["folds"]))
