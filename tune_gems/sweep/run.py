"""`tune-gems sweep`: validate, start or join Ray, run Tune + Optuna, write the result tables.

Everything a user can get wrong (spec, search space, data, an existing experiment folder) is
checked before Ray starts, and nothing is written until it passes. The same function is the
entrypoint of `ray job submit ... -- tune-gems sweep SPEC`: `ray.init()` then joins the
cluster named by RAY_ADDRESS (set by the job runtime) instead of starting one.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
import yaml

from tune_gems.errors import ConfigError, OutputExistsError
from tune_gems.sweep.results import collect_frames, write_frames
from tune_gems.sweep.search import JOURNAL_FILE, close_orphaned_trials, make_searcher
from tune_gems.sweep.spec import SweepSpec, load_spec
from tune_gems.sweep.storage import ExperimentStore, is_uri
from tune_gems.trainer.trainer import load_prices, prepare_market

SPEC_FILE = "spec.yaml"
RAY_JOB_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
"""Set by Ray for the entrypoint of `ray job submit`."""
TABLES = ("trials.parquet", "history.parquet", "members.parquet")


@dataclass
class SweepOutcome:
    experiment: str  # folder (path or URI)
    trials: pd.DataFrame
    history: pd.DataFrame
    members: pd.DataFrame


def _resolve_data_path(spec: SweepSpec, spec_path: Path) -> None:
    """Relative data paths are relative to the current directory (where the user runs the
    command); made absolute here so the driver reads the same file wherever Ray runs it."""
    data = spec.config.get("data") or {}
    path = data.get("path")
    if path and not Path(path).is_absolute() and "://" not in str(path):
        data["path"] = str(Path(path).resolve())


def _ensure_ray() -> None:
    import ray

    if ray.is_initialized():
        return
    address = os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=True)
    else:
        ray.init(include_dashboard=False, log_to_driver=True)


def _gpus_per_trial(spec: SweepSpec) -> float:
    import ray

    if spec.resources.gpu is not None:
        return spec.resources.gpu
    return 1.0 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0


def _print_summary(trials: pd.DataFrame, experiment: str) -> None:
    cols = [c for c in ("trial_id", "status", "config_label", "epochs_done", "val_sharpe_mean", "test_sharpe_mean", "diverged") if c in trials]
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_colwidth", 48):
        table = trials[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}")
    # flushed at once: a driver attached to a running cluster can exit without flushing stdout
    print(f"\n{table}\n\nresults: {experiment}/{{trials,history,members}}.parquet\nanalyze: tune-gems analyze {experiment}", flush=True)


def run_sweep(
    spec_path: str | Path,
    overrides: list[str] | None = None,
    storage: str | None = None,
    name: str | None = None,
    resume: bool = False,
) -> SweepOutcome:
    spec_path = Path(spec_path)
    spec = load_spec(spec_path, overrides)
    _resolve_data_path(spec, spec_path)
    base_cfg = spec.base_config()
    prices = load_prices(base_cfg)
    prepare_market(base_cfg, torch.device("cpu"), prices)  # validates splits and segment lengths now

    if resume and not (name or spec.name):
        raise ConfigError("--resume needs --name: the experiment to finish")
    name = name or spec.name or f"{spec_path.stem}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    storage = storage or spec.storage
    if os.environ.get(RAY_JOB_ENV) and not is_uri(storage) and not Path(storage).is_absolute():
        raise ConfigError(
            f"storage: {storage!r} is relative; inside a Ray job it would land in the job's temporary working "
            "directory: pass --storage with an absolute path on shared storage or a URI"
        )
    store = ExperimentStore(storage, name)
    if resume:
        if not store.has(SPEC_FILE):
            raise ConfigError(f"{store.uri}: no sweep to resume there")
    elif store.exists():
        raise OutputExistsError(f"{store.uri}: experiment already exists; use --resume to finish it or another --name")

    from ray import tune

    from tune_gems.sweep.trainable import train_trial

    _ensure_ray()
    store.make()
    if not resume:
        store.write_bytes(SPEC_FILE, yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False).encode())
    else:
        store.pull_journal(JOURNAL_FILE)

    trainable = tune.with_parameters(
        train_trial, base=spec.config, prices=prices, objective=spec.objective.metric
    )
    resources = {"cpu": spec.resources.cpu, "gpu": _gpus_per_trial(spec)}
    trainable = tune.with_resources(trainable, resources)
    if resume:
        tuner = tune.Tuner.restore(store.uri, trainable=trainable, resume_unfinished=True, resume_errored=True)
    else:
        tuner = tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(
                search_alg=make_searcher(spec, name, store.journal_path(JOURNAL_FILE)),
                scheduler=_scheduler(spec),
                num_samples=spec.num_samples,
                max_concurrent_trials=spec.max_concurrent_trials,
            ),
            run_config=tune.RunConfig(
                name=name,
                storage_path=store.storage,
                failure_config=tune.FailureConfig(max_failures=spec.failure.max_failures, fail_fast=spec.failure.fail_fast),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=spec.checkpoints_to_keep),
            ),
        )
    grid = tuner.fit()
    journal = store.journal_path(JOURNAL_FILE)
    if journal.is_file():
        closed = close_orphaned_trials(name, journal)
        if closed:
            print(f"tune-gems sweep: marked {closed} orphaned Optuna trial(s) FAIL (asked before a driver restart)", flush=True)
    trials, history, members = collect_frames(grid, spec.config, name)
    write_frames(store, dict(zip(TABLES, (trials, history, members))))
    store.push_journal(JOURNAL_FILE)
    _print_summary(trials, store.uri)
    return SweepOutcome(store.uri, trials, history, members)


def _scheduler(spec: SweepSpec):
    if spec.scheduler.type == "none":
        return None
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(
        metric="objective",
        mode=spec.objective.mode,
        time_attr="training_iteration",
        max_t=spec.base_config().trainer.epochs,
        grace_period=spec.scheduler.grace_period,
        reduction_factor=spec.scheduler.reduction_factor,
    )
