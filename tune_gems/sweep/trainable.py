"""The Ray Tune function trainable: one trial = one Trainer for P seeds on its own device.

Tune runs this function in a worker thread of the trial's actor; the Trainer captures and
replays its CUDA graph in that same thread. Each epoch is reported with `ray.tune.report` and
(on checkpoint epochs) an exact checkpoint, so a retried trial resumes from
`tune.get_checkpoint()` and ends bit-identical to an uninterrupted one.

Per-member rows travel in the result as one JSON string (`members_json`), so they survive
Tune's flattening of results and land in members.parquet; each checkpoint also carries the
whole history so far (`history.json`), from which the result tables fill any epoch whose
report was lost with a dying node.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
from ray import tune

from tune_gems.resources import check_training_fits
from tune_gems.sweep.spec import apply_spec_design, trial_config
from tune_gems.trainer.run import train_epochs
from tune_gems.trainer.trainer import EpochResult, Trainer

CHECKPOINT_FILE = "checkpoint.pt"
HISTORY_FILE = "history.json"
MEMBERS_KEY = "members_json"
BASELINES_KEY = "baselines_json"
"""The trial's baselines table (Trainer.baselines()) as JSON records, in its first report."""


def _finite_or_nan(x: Any) -> float:
    return float(x) if x is not None and math.isfinite(float(x)) else math.nan


def placement() -> dict[str, Any]:
    """Where this trial runs: Ray node id and the GPU ids Ray assigned it (empty on CPU)."""
    import ray

    ctx = ray.get_runtime_context()
    return {"node_id": ctx.get_node_id(), "gpu_ids": ",".join(str(g) for g in ray.get_gpu_ids())}


def write_history(path: Path, trainer: Trainer) -> None:
    """Every epoch so far, beside the checkpoint: a result that Tune lost (a node dying between
    a report and its processing) is still recovered from the checkpoint that followed it."""
    path.write_text(json.dumps({"history": trainer.history, "members": trainer.member_history}))


def train_trial(
    params: dict[str, Any], *, base: dict[str, Any], prices: pd.Series, objective: str, design: str = "none"
) -> None:
    cfg = apply_spec_design(trial_config(base, params), design)  # the design's arms, per trial
    where = placement()
    check_training_fits(cfg, where="this trial's node: ")  # on the node it landed on, before allocating
    trainer = Trainer(cfg, prices=prices, log=lambda line: print(line, flush=True))
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            trainer.load_checkpoint(Path(d) / CHECKPOINT_FILE)
    label = cfg.label()
    baselines = [json.dumps(trainer.baselines().to_dict("records"))]  # sent once, with the first report

    def report(result: EpochResult, checkpoint_due: bool) -> None:
        metrics = dict(result.metrics)
        if baselines:
            metrics[BASELINES_KEY] = baselines.pop()
        metrics["objective"] = math.nan if trainer.diverged else _finite_or_nan(metrics[objective])
        metrics["config_label"] = label
        metrics["seed"] = cfg.seed
        metrics.update(where)
        metrics[MEMBERS_KEY] = json.dumps(result.members)
        if checkpoint_due:
            with tempfile.TemporaryDirectory() as d:
                trainer.save_checkpoint(Path(d) / CHECKPOINT_FILE)
                write_history(Path(d) / HISTORY_FILE, trainer)
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))
        else:
            tune.report(metrics)

    train_epochs(trainer, report)
