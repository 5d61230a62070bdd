"""`tune-gems train`: one training run written to a result folder.

All input is validated (config, data, an existing folder) before anything is written; an
existing folder is continued only with --resume, from its checkpoint, and never overwritten.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import sys
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from tune_gems.config import Config, dump_config
from tune_gems.errors import CheckpointError, OutputExistsError
from tune_gems.trainer.trainer import Trainer

CHECKPOINT = "checkpoint.pt"


def default_out_dir(root: str | Path = "runs") -> Path:
    return Path(root) / f"train-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


def write_tables(trainer: Trainer, out: Path) -> None:
    """history.csv and members.csv from the trainer's full history (rewritten whole, atomically)."""
    for name, rows in (("history.csv", trainer.history), ("members.csv", trainer.member_history)):
        tmp = out / f".{name}.tmp"
        pd.DataFrame(rows).to_csv(tmp, index=False)
        tmp.replace(out / name)


def run_training(cfg: Config, out: Path | None, resume: bool = False, progress: bool | None = None) -> dict[str, Any]:
    """Train to the configured number of epochs; returns the final metrics."""
    out = Path(out) if out is not None else default_out_dir()
    ckpt_path = out / CHECKPOINT
    if resume:
        if not ckpt_path.is_file():
            raise CheckpointError(f"{ckpt_path}: no checkpoint to resume from")
    elif out.exists() and any(out.iterdir()):
        raise OutputExistsError(f"{out}: already holds results; choose another --out or pass --resume")

    log_lines: list[str] = []
    bar = None

    def log(line: str) -> None:
        log_lines.append(line)
        (bar.write(line, file=sys.stdout) if bar is not None else print(line, flush=True))

    trainer = Trainer(cfg, log=log)  # validates data and device before anything is written
    if resume:
        trainer.load_checkpoint(ckpt_path)
    out.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out / "config.yaml")
    print(
        f"tune-gems train: device={trainer.device} kernels={trainer.ops.name} population={cfg.trainer.population} "
        f"graph={'on' if trainer.runner.use_graph else 'off'} out={out}",
        flush=True,
    )
    every = cfg.trainer.checkpoint_every
    bar = tqdm(
        total=cfg.trainer.epochs,
        initial=trainer.epoch,
        desc="epochs",
        unit="epoch",
        disable=None if progress is None else not progress, file=sys.stderr)
    try:
        while not trainer.done:
            trainer.run_epoch()
            bar.update(1)
            write_tables(trainer, out)
            if trainer.done or (every and trainer.epoch % every == 0):
                trainer.save_checkpoint(ckpt_path)
    finally:
        bar.close()
        bar = None
    final = trainer.history[-1]
    summary = {"out": str(out), "device": str(trainer.device), "kernels": trainer.ops.name, **_jsonable(final)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    if trainer.diverged:
        print(f"tune-gems train: diverged at epoch {trainer.epoch}; results in {out}", flush=True)
    else:
        print(f"tune-gems train: done, results in {out}", flush=True)
    return final
