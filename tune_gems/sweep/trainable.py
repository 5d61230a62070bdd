"""The Ray Tune function trainable: one trial = one Trainer for P seeds, each epoch reported, exact checkpoints written
in the background so a retried trial resumes bit-identical. A reused actor keeps only the read-only `MARKETS` cache."""

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
from tune_gems.contracts.cpu_environment import pin_cpu_code_path
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
"""In a final checkpoint instead of the state: its epoch and divergence (`finished_checkpoint`)."""

MARKETS = MarketCache()
"""This process's markets, by what built them (`market_cache.market_key`)."""


def placement() -> dict[str, Any]:
    """Where this trial runs: Ray node, GPU ids, CUDA_VISIBLE_DEVICES (read by benchmarks/seed_blocks.py)."""
    import ray

    ctx = ray.get_runtime_context()
    return {"node_id": ctx.get_node_id(), "gpu_ids": ",".join(str(g) for g in ray.get_gpu_ids()),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}


def write_history(path: Path, history: list[dict[str, Any]], members: list[dict[str, Any]]) -> None:
    """Every epoch up to the checkpoint beside it: a result Tune lost is recovered from it."""
    path.write_text(json.dumps({"history": history, "members": members}))


@dataclass(frozen=True)
class PendingCheckpoint:

    folder: Path
    written: Future


class CheckpointReports:
    """Reports with background checkpoints (docs/checkpoints.md): a due checkpoint's report waits for
    its files, so reports stay in epoch order."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.writer = AsyncCheckpointWriter()
        self._snapshot: PendingCheckpoint | None = None
        self._held: tuple[dict[str, Any], PendingCheckpoint] | None = None

    def snapshot(self, _result: EpochResult, checkpoint_due: bool) -> None:
        if not checkpoint_due:
            return
        d = Path(tempfile.mkdtemp(prefix="tune-gems-checkpoint-"))
        state, meta = self.trainer.checkpoint_payload()
        final = self.trainer.done
        written = self.writer.save(None if final else d / CHECKPOINT_FILE, {} if final else state, meta,
                                   after=lambda m: self._beside(d, m, final))
        self._snapshot = PendingCheckpoint(d, written)

    def _beside(self, d: Path, meta: dict[str, Any], final: bool) -> None:
        """The files beside the checkpoint, from its snapshot's metadata, in the writer thread."""
        write_history(d / CHECKPOINT_HISTORY_FILE, meta["history"], meta["member_history"])
        self.trainer.window.write(d, meta)
        if final:
            (d / FINAL_MARK).write_text(json.dumps({"epoch": meta["epoch"], "diverged": meta["diverged"]}))

    def __call__(self, metrics: dict[str, Any], checkpoint_due: bool) -> None:
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
    return (d / FINAL_MARK).is_file()


def trial_objective(metrics: dict[str, Any], objective: str, diverged: bool) -> float:
    """What Optuna is told: DIVERGENCE_SCORED objectives as they are; others NaN if diverged or not finite."""
    value = float(metrics[objective])
    if objective in DIVERGENCE_SCORED:
        return value
    return math.nan if diverged or not math.isfinite(value) else value


def release_finished_trials() -> None:
    """Free what earlier trials left before a trial measures its memory; `gc.freeze` what lives now."""
    if gc.get_freeze_count():
        gc.collect()
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    gc.freeze()


def trial_trainer(params: dict[str, Any], *, base: dict[str, Any], prices: pd.Series, design: str = "none",
        log: Callable[[str], None] | None = None, markets: MarketCache = MARKETS) -> Trainer:
    """A trial's Trainer as `train_trial` builds it (benchmarks/startup.py times it)."""
    release_finished_trials()
    cfg = trial_config(base, params, design)  # validated once, with the design's arms
    arms = run_arms(cfg)  # expanded once: the memory check, the trainer and the trial's label
    check_training_fits(cfg, members=arms.members, where="this trial's node: ")
    device = run_device(cfg)
    market = markets.get(market_key(cfg, device, prices),
        lambda: prepare_market(cfg, device, prices, n_seed_indices=cfg.trainer.population))
    return Trainer(cfg, prices=prices, log=log, arms=arms, market=market)


def use_trial_cpus(context=None) -> int:
    """One intra-op thread per whole CPU of the trial's resources: Ray exports OMP_NUM_THREADS only where a
    worker's environment lacks it, so a value the sweep's own process had would reach every trial."""
    cpus = (context or tune.get_context()).get_trial_resources().required_resources.get("CPU") or 1
    torch.set_num_threads(max(1, math.floor(cpus)))
    return torch.get_num_threads()


def train_trial(params: dict[str, Any], *, base: dict[str, Any], prices: pd.Series, objective: str,
        design: str = "none", verbose: bool = False) -> None:
    quiet_trial(verbose)
    pin_cpu_code_path()  # a worker of a cluster Ray started elsewhere lacks the driver's pins (before any tensor work)
    use_trial_cpus()
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
