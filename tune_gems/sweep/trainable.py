"""The Ray Tune function trainable: one trial = one Trainer for P seeds on its own device.

Tune runs this function in a worker thread of the trial's actor; the Trainer captures and
replays its CUDA graph in that same thread. Each epoch is reported with `ray.tune.report` and
(when one is due: `trainer.checkpoint_interval_s`, `trainer.checkpoint_every`, the end) an
exact checkpoint written in the background (CheckpointReports), so a retried trial resumes from
`tune.get_checkpoint()` and ends bit-identical to an uninterrupted one.

Per-member rows travel in the result as one JSON string (`members_json`), so they survive
Tune's flattening of results and land in members.parquet; each checkpoint also carries the
whole history so far (`result_files.CHECKPOINT_HISTORY_FILE`), from which the result tables fill
any epoch whose report was lost with a dying node.

One actor runs trial after trial (Tune's `reuse_actors`, tune_gems.sweep.tune_run): its process,
imports, CUDA context and loaded extension stay. What a trial builds is its own (config,
Trainer, checkpoint writer, random numbers: every draw comes from the members' own seeds) and
is released before the next trial measures its memory (`release_finished_trials`); the one
thing a trial leaves to the next is this process's market cache (`MARKETS`), read-only and
keyed by what built the market. A retried trial restores from its checkpoint as before, in a
fresh actor or a reused one.
"""

from __future__ import annotations

import gc
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import torch
from ray import tune

from tune_gems.stats.metrics import DIVERGENCE_SCORED
from tune_gems.ops.cpu_code_path import pin_cpu_code_path
from tune_gems.design.arms import run_arms
from tune_gems.design.resources import check_training_fits
from tune_gems.contracts.result_files import (
    BASELINES_KEY, CHECKPOINT_FILE, CHECKPOINT_HISTORY_FILE, FOLDS_KEY, HISTORIES_KEY, MEMBERS_KEY,
)
from tune_gems.market.market_cache import MarketCache, market_key
from tune_gems.sweep.console import quiet_trial
from tune_gems.sweep.progress import HEALTH_KEY
from tune_gems.sweep.results import config_label
from tune_gems.sweep.spec_load import apply_spec_design, trial_config
from tune_gems.trainer.async_checkpoint import AsyncCheckpointWriter
from tune_gems.trainer.train_command import train_epochs
from tune_gems.trainer.epoch_row import EpochResult
from tune_gems.trainer.run_setup import prepare_market, run_device
from tune_gems.trainer.trainer import Trainer

MARKETS = MarketCache()
"""This process's markets, by what built them (tune_gems.market.market_cache.market_key). A function
trainable keeps nothing between the trials of a reused actor but its modules' state: the
markets are the one thing a trial leaves to the next (read-only), so the next trial of the same
data config and seed set does not rebuild its paths and features."""


def _finite_or_nan(x: Any) -> float:
    return float(x) if x is not None and math.isfinite(float(x)) else math.nan


def placement() -> dict[str, Any]:
    """Where this trial runs: Ray node id, the GPU ids Ray assigned it (empty on CPU) and the
    CUDA_VISIBLE_DEVICES Ray set for it (the devices its `cuda:0` can be; in Tune's result.json,
    read by benchmarks/seed_blocks.py)."""
    import ray

    ctx = ray.get_runtime_context()
    return {"node_id": ctx.get_node_id(), "gpu_ids": ",".join(str(g) for g in ray.get_gpu_ids()),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}


def write_history(path: Path, history: list[dict[str, Any]], members: list[dict[str, Any]]) -> None:
    """Every epoch up to the checkpoint, beside it: a result that Tune lost (a node dying between
    a report and its processing) is still recovered from the checkpoint that followed it."""
    path.write_text(json.dumps({"history": history, "members": members}))


class CheckpointReports:
    """Reports to Tune, with checkpoints written in the background (docs/checkpoints.md).

    Tune copies a checkpoint's directory into the trial's storage when it is reported, so the
    report must wait for the file. A due checkpoint is therefore snapshotted at its epoch's
    boundary and written into a temporary directory while the next epoch trains; that epoch's
    report is held back and sent, with the checkpoint, before the next report (or at once at
    the end of training, or when an epoch fails). Reports stay in epoch order, each checkpoint
    belongs to the report of the epoch it holds, so Tune's `training_iteration` restored with a
    checkpoint equals the trainer's epoch and ASHA sees the same iterations as without the
    delay (one epoch later, for checkpoint epochs only)."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.writer = AsyncCheckpointWriter()
        self._held: tuple[dict[str, Any], Path] | None = None

    def __call__(self, metrics: dict[str, Any], checkpoint_due: bool) -> None:
        self.flush()
        if not checkpoint_due:
            tune.report(metrics)
            return
        d = Path(tempfile.mkdtemp(prefix="tune-gems-checkpoint-"))
        self.writer.save(d / CHECKPOINT_FILE, *self.trainer.checkpoint_payload(), after=lambda meta: self._beside(d, meta))
        self._held = (metrics, d)
        if self.trainer.done:
            self.flush()

    def _beside(self, d: Path, meta: dict[str, Any]) -> None:
        """The files beside the checkpoint, from its snapshot's metadata (in the writer thread):
        the history so far, and the kept validation returns (Trainer.window: EvalWindow.write)."""
        write_history(d / CHECKPOINT_HISTORY_FILE, meta["history"], meta["member_history"])
        self.trainer.window.write(d, meta)

    def flush(self) -> None:
        """Send the held report with its checkpoint, once the checkpoint is written."""
        if self._held is None:
            return
        metrics, d = self._held
        self._held = None
        try:
            self.writer.wait()
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(str(d)))
        finally:
            shutil.rmtree(d, ignore_errors=True)  # Tune copied it into the trial's storage

    def close(self) -> None:
        """Wait for the write in flight; a report still held (the trial was stopped) is dropped."""
        try:
            self.writer.close()
        finally:
            if self._held is not None:
                shutil.rmtree(self._held[1], ignore_errors=True)
                self._held = None


def trial_objective(metrics: dict[str, Any], objective: str, diverged: bool) -> float:
    """What Optuna is told: an objective that scores divergence itself (DIVERGENCE_SCORED: the
    verdict's worst-outcome rule, -inf allowed) as it is, NaN only where it is undefined; any
    other objective NaN when the trial diverged (Optuna records a failure) or not finite."""
    value = float(metrics[objective])
    if objective in DIVERGENCE_SCORED:
        return value
    return math.nan if diverged else _finite_or_nan(value)


def release_finished_trials() -> None:
    """Free what earlier trials of this process left before a trial measures the memory it
    needs: a finished Trainer lingers until the cyclic collector runs (its evaluators' policy is
    one of its own methods), and the CUDA caching allocator keeps the freed blocks, which the
    device's free memory (check_training_fits) does not count.

    A full collection scans every object of the process (torch, Ray, pandas: ~0.3 s of CPU), so
    what is alive at a trial's start (modules, Ray's state, the market cache: nothing of an
    earlier trial, whose thread has ended) is frozen out of later collections (`gc.freeze`), and
    the next trial's collection scans only what was made since. The first trial of a process
    has nothing to release (nothing frozen yet) and only freezes."""
    if gc.get_freeze_count():
        gc.collect()
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    gc.freeze()


def trial_trainer(
    params: dict[str, Any], *, base: dict[str, Any], prices: pd.Series, design: str = "none",
    log: Callable[[str], None] | None = None, markets: MarketCache = MARKETS,
) -> Trainer:
    """A trial's Trainer as `train_trial` builds it: what earlier trials left released first,
    then the trial's config with the design's arms, the memory check on the node it landed on
    (before allocating), the market from this process's cache. Also what benchmarks/startup.py
    times."""
    release_finished_trials()
    cfg = apply_spec_design(trial_config(base, params), design)  # the design's arms, per trial
    arms = run_arms(cfg)  # the trial's arms, expanded once for the memory check and the trainer
    check_training_fits(cfg, members=arms.members, where="this trial's node: ")
    device = run_device(cfg)
    market = markets.get(
        market_key(cfg, device, prices), lambda: prepare_market(cfg, device, prices, n_seed_indices=cfg.trainer.population)
    )
    return Trainer(cfg, prices=prices, log=log, arms=arms, market=market)


def train_trial(
    params: dict[str, Any], *, base: dict[str, Any], prices: pd.Series, objective: str, design: str = "none",
    verbose: bool = False,
) -> None:
    quiet_trial(verbose)
    pin_cpu_code_path()  # a worker of a cluster Ray started elsewhere lacks the driver's pins (before any tensor work)
    where = placement()
    lines: list[str] = []  # the epoch's HEALTH_DIAG line, sent with its report (tune_gems.sweep.progress)
    trainer = trial_trainer(params, base=base, prices=prices, design=design, log=lines.append)
    cfg = trainer.cfg
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            trainer.load_checkpoint(Path(d) / CHECKPOINT_FILE)
    label = config_label(cfg)  # its arms' settings applied (Optuna's user attribute too)
    baselines = [json.dumps(trainer.baselines().to_dict("records"))]  # sent once, with the first report
    folds = [json.dumps(trainer.fold_table().to_dict("records"))]  # likewise
    histories = json.dumps(trainer.history_table().to_dict("records"))  # likewise
    reports = CheckpointReports(trainer)

    def report(result: EpochResult, checkpoint_due: bool) -> None:
        metrics = dict(result.metrics)
        if baselines:
            metrics[BASELINES_KEY] = baselines.pop()
            metrics[FOLDS_KEY] = folds.pop()
            metrics[HISTORIES_KEY] = histories
        metrics["objective"] = trial_objective(metrics, objective, trainer.diverged)
        metrics["config_label"] = label
        metrics["seed"] = cfg.seed
        metrics.update(where)
        metrics[MEMBERS_KEY] = json.dumps(result.members)
        if lines:
            metrics[HEALTH_KEY] = lines[-1]
            lines.clear()
        reports(metrics, checkpoint_due)

    try:
        train_epochs(trainer, report)
    except Exception:
        try:
            reports.flush()  # the last good checkpoint reaches Tune before the error: the retry starts there
        except Exception:  # noqa: BLE001 - the epoch's error is the one to raise
            pass
        raise
    finally:
        reports.close()
