"""The Ray Tune function trainable: one trial = one Trainer for P seeds on its own device.

Tune runs this function in a worker thread of the trial's actor; the Trainer captures and
replays its CUDA graph in that same thread. Each epoch is reported with `ray.tune.report` and
(when one is due: `trainer.checkpoint_interval_s`, `trainer.checkpoint_every`, the end) an
exact checkpoint written in the background (CheckpointReports), so a retried trial resumes from
`tune.get_checkpoint()` and ends bit-identical to an uninterrupted one.

The reports carry the epoch's scalars; the epoch's member rows and the trial's baselines,
folds and histories tables go to the trial's own folder (tune_gems.sweep.trial_files), written before the
report of their epoch, so that Tune's driver callbacks (loggers, TensorBoard, the searcher)
never handle a member table. Each checkpoint also carries the whole history so far
(`result_files.CHECKPOINT_HISTORY_FILE`), from which the result tables fill any epoch whose
report was lost with a dying node. A trial's final checkpoint (its last epoch, or divergence:
nothing ever resumes from it) holds only the files beside it, no training state.

On CUDA the next epoch is queued before an epoch is reported (tune_gems.trainer.epoch_loop), so
the GPU trains while the trial waits for the driver in `tune.report`.

One actor runs trial after trial (Tune's `reuse_actors`, tune_gems.sweep.tune_run): its process,
imports, CUDA context and loaded extension stay. What a trial builds is its own (config,
Trainer, checkpoint writer, random numbers: every draw comes from the members' own seeds) and
is released before the next trial measures its memory (`release_finished_trials`); the one
thing a trial leaves to the next is this process's market cache (`MARKETS`), read-only and
keyed by what built the market. A retried trial restores from its checkpoint as before, in a
fresh actor or a reused one.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import shutil
import tempfile
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import torch
from ray import tune

from tune_gems.stats.metrics import DIVERGENCE_SCORED
from tune_gems.ops.cpu_code_path import pin_cpu_code_path
from tune_gems.design.arms import run_arms
from tune_gems.design.resources import check_training_fits
from tune_gems.contracts.result_files import CHECKPOINT_FILE, CHECKPOINT_HISTORY_FILE
from tune_gems.market.market_cache import MarketCache, market_key
from tune_gems.sweep.console import quiet_trial
from tune_gems.sweep.objective_noise import NONE, OBJECTIVE_DF, OBJECTIVE_SE, objective_noise
from tune_gems.sweep.progress import HEALTH_KEY
from tune_gems.sweep.spec_load import trial_config
from tune_gems.sweep.trial_files import TRIAL_BASELINES, TRIAL_FOLDS, TRIAL_HISTORIES, TrialFiles, member_file
from tune_gems.trainer.async_checkpoint import AsyncCheckpointWriter
from tune_gems.trainer.epoch_loop import train_epochs
from tune_gems.trainer.epoch_row import EpochResult
from tune_gems.trainer.run_setup import prepare_market, run_device
from tune_gems.trainer.trainer import Trainer

FINAL_MARK = "final.json"
"""In a trial's final checkpoint (CheckpointReports), in place of the checkpoint file: its epoch
and whether it diverged. A trial restored from it has finished (`finished_checkpoint`)."""

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


@dataclass(frozen=True)
class PendingCheckpoint:
    """A checkpoint's temporary directory and the background write that fills it."""

    folder: Path
    written: Future


class CheckpointReports:
    """Reports to Tune, with checkpoints written in the background (docs/checkpoints.md).

    Tune copies a checkpoint's directory into the trial's storage when it is reported, so the
    report must wait for the file. A due checkpoint is therefore snapshotted at its epoch's
    boundary (`snapshot`, before the next epoch is queued) and written into a temporary
    directory while the next epoch trains; that epoch's report is held back and sent, with the
    checkpoint, before the next report (or at once at the end of training, or when an epoch
    fails). Reports stay in epoch order, each checkpoint belongs to the report of the epoch it
    holds, so Tune's `training_iteration` restored with a checkpoint equals the trainer's epoch
    and ASHA sees the same iterations as without the delay (one epoch later, for checkpoint
    epochs only).

    The checkpoint of a finished trainer (its last epoch, or diverged) is final: a trial that
    finished is never resumed, so it holds the files beside it (the history, the kept
    validation returns) and FINAL_MARK, no checkpoint file with the training state."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.writer = AsyncCheckpointWriter()
        self._snapshot: PendingCheckpoint | None = None
        self._held: tuple[dict[str, Any], PendingCheckpoint] | None = None

    def snapshot(self, _result: EpochResult, checkpoint_due: bool) -> None:
        """At the epoch's boundary: a due checkpoint's snapshot, its files written in the
        background into a temporary directory."""
        if not checkpoint_due:
            return
        d = Path(tempfile.mkdtemp(prefix="tune-gems-checkpoint-"))
        state, meta = self.trainer.checkpoint_payload()
        final = self.trainer.done
        written = self.writer.save(None if final else d / CHECKPOINT_FILE, {} if final else state, meta,
                                   after=lambda m: self._beside(d, m, final))
        self._snapshot = PendingCheckpoint(d, written)

    def _beside(self, d: Path, meta: dict[str, Any], final: bool) -> None:
        """The files beside the checkpoint, from its snapshot's metadata (in the writer thread):
        the history so far, the kept validation returns (Trainer.window: EvalWindow.write) and,
        in a final checkpoint, FINAL_MARK."""
        write_history(d / CHECKPOINT_HISTORY_FILE, meta["history"], meta["member_history"])
        self.trainer.window.write(d, meta)
        if final:
            (d / FINAL_MARK).write_text(json.dumps({"epoch": meta["epoch"], "diverged": meta["diverged"]}))

    def __call__(self, metrics: dict[str, Any], checkpoint_due: bool) -> None:
        """Report the epoch: at once, or held with its checkpoint (class doc)."""
        self.flush()
        if not checkpoint_due:
            tune.report(metrics)
            return
        if self._snapshot is None:
            raise RuntimeError("a due checkpoint was reported without its snapshot (CheckpointReports.snapshot)")
        self._held, self._snapshot = (metrics, self._snapshot), None
        if self.trainer.done:
            self.flush()

    def flush(self) -> None:
        """Send the held report with its checkpoint, once the checkpoint is written."""
        if self._held is None:
            return
        metrics, pending = self._held
        self._held = None
        try:
            pending.written.result()
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(str(pending.folder)))
        finally:
            shutil.rmtree(pending.folder, ignore_errors=True)  # Tune copied it into the trial's storage

    def close(self) -> None:
        """Wait for the write in flight; a report still held (the trial was stopped) is dropped."""
        try:
            self.writer.close()
        finally:
            left = [self._snapshot, self._held[1] if self._held is not None else None]
            for pending in left:
                if pending is not None:
                    shutil.rmtree(pending.folder, ignore_errors=True)
            self._held = self._snapshot = None


def finished_checkpoint(d: Path) -> bool:
    """A trial's final checkpoint (CheckpointReports): the trial finished; nothing to resume."""
    return (d / FINAL_MARK).is_file()


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
    cfg = trial_config(base, params, design)  # validated once, with the design's arms
    arms = run_arms(cfg)  # expanded once: the memory check, the trainer and the trial's label
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
    checkpoint = tune.get_checkpoint()
    lines: list[str] = []  # the epoch's HEALTH_DIAG line, sent with its report (tune_gems.sweep.progress)
    with checkpoint.as_directory() if checkpoint is not None else contextlib.nullcontext(None) as d:
        if d is not None and finished_checkpoint(Path(d)):
            return  # restored after it finished (its node lost after its last report): its results are in
        trainer = trial_trainer(params, base=base, prices=prices, design=design, log=lines.append)
        if d is not None:
            trainer.load_checkpoint(Path(d) / CHECKPOINT_FILE)
    cfg = trainer.cfg
    where = placement()
    files = TrialFiles.of_session(tune)
    label = trainer.arms.label  # its arms' settings applied (Optuna's user attribute too)
    for name, table in ((TRIAL_BASELINES, trainer.baselines()), (TRIAL_FOLDS, trainer.fold_table()),
                        (TRIAL_HISTORIES, trainer.history_table())):
        files.write_json(name, table.to_dict("records"))
    reports = CheckpointReports(trainer)

    def report(result: EpochResult, checkpoint_due: bool) -> None:
        files.write_json(member_file(result.metrics["epoch"]), result.members)
        metrics = dict(result.metrics)
        metrics["objective"] = trial_objective(metrics, objective, trainer.diverged)
        metrics[OBJECTIVE_SE], metrics[OBJECTIVE_DF] = NONE if math.isnan(metrics["objective"]) else objective_noise(
            objective, trainer.member_history, metrics["epoch"], cfg.trainer.objective_last_k, trainer.ids.aliases)
        metrics["config_label"] = label
        metrics["seed"] = cfg.seed
        metrics.update(where)
        if lines:
            metrics[HEALTH_KEY] = lines[-1]
            lines.clear()
        reports(metrics, checkpoint_due)

    try:
        train_epochs(trainer, report, at_boundary=reports.snapshot)
    except Exception:
        try:
            reports.flush()  # the last good checkpoint reaches Tune before the error: the retry starts there
        except Exception:  # noqa: BLE001 - the epoch's error is the one to raise
            pass
        raise
    finally:
        reports.close()
