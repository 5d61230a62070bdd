"""`tune-gems train`: one training run written to a result folder, everything validated before a
write; continued only with `--resume`, as recorded (`run_record`, fail-closed)."""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from tune_gems.data.summary import data_lines
from tune_gems.config.schema import Config
from tune_gems.config.yaml_io import MAX_YAML_BYTES, apply_overrides, dump_yaml, read_yaml
from tune_gems.config.load import build_config, load_config
from tune_gems.config.dotted import flatten
from tune_gems.contracts.errors import CheckpointError, ConfigError, OutputError, OutputExistsError
from tune_gems.contracts.result_files import (ARMS_CSV, BASELINES_CSV, CHECKPOINT_FILE, CONFIG_FILE, FOLDS_CSV,
                                              GEMS_FILE, HISTORIES_CSV, HISTORY_CSV, MEMBERS_CSV, SUMMARY_FILE)
from tune_gems.contracts.output_lock import LOCK_FILE, OutputLock
from tune_gems.contracts.outputs import (MARKER_FILE, check_output_folder, make_output_folder, marker_kind,
                                         marker_state, read_marker, update_marker, write_marker)
from tune_gems.contracts.run_record import (CHECKSUMS_KEY, DATA_KEY, check_data_unchanged, check_stored_unchanged,
                                            checksums, data_fingerprint, require_record)
from tune_gems.contracts.safe_files import read_regular, require_folder, write_atomic
from tune_gems.design.arms import run_arms
from tune_gems.design.resources import check_training_fits
from tune_gems.trainer.async_checkpoint import AsyncCheckpointWriter
from tune_gems.trainer.epoch_loop import train_epochs
from tune_gems.trainer.stop_signals import StopSignals, TrainingStopped
from tune_gems.trainer.tensorboard import EVENTS_DIR, EpochEvents
from tune_gems.trainer.epoch_row import EpochResult
from tune_gems.trainer.trainer import RESUMABLE_CHANGES, Trainer

TABLE_FILES = (HISTORY_CSV, MEMBERS_CSV)
OUT_FIELD = "--out"


def default_out_dir(root: str | Path = "runs") -> Path:
    return Path(root) / f"train-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"


def _write_csv(path: Path, frame: pd.DataFrame) -> None:
    write_atomic(path, frame.to_csv(index=False))


def write_tables(trainer: Trainer, out: Path) -> None:
    """history.csv and members.csv from the trainer's full history (rewritten whole, atomically)."""
    for name, rows in zip(TABLE_FILES, (trainer.history, trainer.member_history)):
        _write_csv(out / name, pd.DataFrame(rows))


def write_run_files(trainer: Trainer, out: Path) -> None:
    """The files beside the tables that do not change per epoch (docs/results.md)."""
    from tune_gems.design.arm_sets import also_named
    from tune_gems.design.arms import resolved_settings
    from tune_gems.contracts.gem_manifest import manifest_text
    from tune_gems.gems import manifest

    cfg = trainer.cfg
    write_atomic(out / GEMS_FILE, manifest_text(manifest(cfg.plugins)))
    aliases = trainer.ids.aliases  # a duplicate arm trained once: its other name (tune_gems.design.arm_sets)
    arms = pd.DataFrame([{"arm": a.name, **({"also_named": also_named(aliases, a.name)} if aliases else {}),
                          **resolved_settings(a.config)} for a in trainer.arms.arms])
    for name, frame in ((ARMS_CSV, arms), (FOLDS_CSV, trainer.fold_table()), (HISTORIES_CSV, trainer.history_table()),
                        (BASELINES_CSV, trainer.baselines())):
        _write_csv(out / name, frame)


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _deep_merge(base[k], v)
        else:
            base[k] = v
    return base


def resume_config(out: str | Path, path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """The stored config.yaml plus the command line's; a change outside `RESUMABLE_CHANGES` is refused."""
    out = Path(out)
    check_train_out(out, resume=True)  # a folder that is not a train run's is refused first
    stored_path = out / CONFIG_FILE
    if not stored_path.is_file():
        hint = "; start it again without --resume" if marker_kind(out) == "train" else ""
        raise OutputError(f"{OUT_FIELD}: {out} holds no {CONFIG_FILE}: nothing to resume there{hint}")
    marker = resume_record(out)  # fails closed: no marker, or none with the checksums, is refused
    check_stored_unchanged(marker, CONFIG_FILE, read_regular(stored_path, MAX_YAML_BYTES, None, ConfigError), str(stored_path))
    stored = load_config(stored_path)
    asked = read_yaml(path) if path is not None else {}
    apply_overrides(asked, list(overrides or []))
    cfg = build_config(_deep_merge(stored.to_dict(), asked), str(path) if path is not None else "config")
    old, new = flatten(stored.to_dict()), flatten(cfg.to_dict())
    for key in sorted(old):
        if key not in RESUMABLE_CHANGES and old[key] != new.get(key):
            raise ConfigError(
                f"{key}: the run in {out} was started with {key}={old[key]!r}, this command asks {new.get(key)!r}; "
                f"--resume continues the stored run (only {', '.join(RESUMABLE_CHANGES)} may change)"
            )
    return cfg


RESUME_FIX = "start a new run with another --out"


def resume_record(out: Path, data: Any = None) -> dict[str, Any]:
    """The marker a `--resume` relies on, fail-closed: config.yaml's checksum and with `data` its file's."""
    marker, problem = marker_state(out)
    return require_record(marker, problem, str(out / MARKER_FILE), files=[CONFIG_FILE], data=data, fix=RESUME_FIX)


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _load_if_any(trainer: Trainer, ckpt_path: Path) -> tuple[int, int] | None:
    ident = _file_id(ckpt_path)
    if ident is not None:
        trainer.load_checkpoint(ckpt_path)
    return ident


def check_tables_against_checkpoint(out: Path, trainer: Trainer) -> None:
    """CheckpointError naming history.csv or members.csv where it contradicts the checkpoint."""
    planned = trainer.cfg.trainer.epochs
    for name, rows in zip(TABLE_FILES, (trainer.history, trainer.member_history)):
        path = out / name
        if not path.is_file() or not rows:
            continue
        try:
            table = pd.read_csv(path)
        except (OSError, ValueError, UnicodeDecodeError) as e:
            raise CheckpointError(f"{path}: unreadable ({type(e).__name__}); the run folder does not match its checkpoint") from None
        want = list(rows[0])
        if sorted(table.columns) != sorted(want):
            extra = sorted(set(table.columns) - set(want))
            missing = sorted(set(want) - set(table.columns))
            what = f"extra columns {extra[:3]}" if extra else f"missing columns {missing[:3]}"
            raise CheckpointError(f"{path}: {what} that the checkpoint's history does not have; the run folder was changed")
        epochs = pd.to_numeric(table["epoch"], errors="coerce") if "epoch" in table else pd.Series(dtype=float)
        if epochs.isna().any() or (len(epochs) and (epochs.max() > max(planned, trainer.epoch) or epochs.min() < 1)):
            raise CheckpointError(
                f"{path}: epochs {epochs.min()}..{epochs.max()} do not fit the run's 1..{max(planned, trainer.epoch)}; the run folder was changed"
            )
        if name == HISTORY_CSV and list(epochs.astype(int)) != list(range(1, len(epochs) + 1)):
            raise CheckpointError(f"{path}: {len(epochs)} rows whose epochs are not 1..{len(epochs)}; the run folder was changed")


def check_train_out(out: str | Path | None, resume: bool) -> Path:
    """The output folder's up-front checks with train's advice; the resolved folder, nothing written."""
    out = Path(out) if out is not None else default_out_dir()
    try:
        folder = check_output_folder(out, kind="train", field=OUT_FIELD, resume=resume)
        require_folder(folder / EVENTS_DIR, OUT_FIELD)  # TensorBoard's folder: a file there is refused before any write
        return folder
    except OutputExistsError:
        if marker_kind(out) == "train":
            raise OutputExistsError(f"{OUT_FIELD}: {out} already holds a train run; continue it with --resume or choose another --out") from None
        raise OutputExistsError(f"{OUT_FIELD}: {out} already holds results (files not written by tune-gems train); choose another --out") from None


def run_training(cfg: Config, out: Path | None, resume: bool = False, progress: bool | None = None,
                 threads: str | None = None) -> dict[str, Any]:
    """Train to the configured epochs; the final metrics. A SIGTERM or SIGINT stops at a boundary (TrainingStopped)."""
    out = check_train_out(out, resume)
    arms = run_arms(cfg)  # the arms expanded once, for the memory estimate and the trainer
    check_training_fits(cfg, members=arms.members)  # memory from the shapes, before anything is allocated
    ckpt_path = out / CHECKPOINT_FILE

    log_lines: list[str] = []
    bar = None

    def log(line: str) -> None:
        log_lines.append(line)
        (bar.write(line, file=sys.stdout) if bar is not None else print(line, flush=True))

    if resume:
        check_data_unchanged(resume_record(out, cfg.data), cfg.data, str(out))  # before the data is even read
    trainer = Trainer(cfg, log=log, arms=arms)  # validates data and device before anything is written
    data_record = data_fingerprint(cfg.data)  # the bytes just read (a missing file was named above)
    loaded = _load_if_any(trainer, ckpt_path) if resume else None  # a bad checkpoint is refused before any write
    if loaded is not None:
        check_tables_against_checkpoint(out, trainer)
    make_output_folder(out, kind="train")
    signals = StopSignals()
    with OutputLock(out, field=OUT_FIELD), signals.installed():  # before config.yaml: a signal from then on stops cleanly
        if not resume and set(os.listdir(out)) - {LOCK_FILE, MARKER_FILE}:  # another run got here first (under the lock)
            raise OutputExistsError(f"{OUT_FIELD}: {out} already holds a train run; continue it with --resume or choose another --out")
        if resume and _file_id(ckpt_path) != loaded:  # another writer moved it on meanwhile
            loaded = _load_if_any(trainer, ckpt_path)
        if loaded is not None:
            print(f"tune-gems train: resuming {out} from its checkpoint after epoch {trainer.epoch} of {cfg.trainer.epochs} "
                  "(its newest; epochs after it are trained again)", flush=True)
            write_tables(trainer, out)  # tables past the checkpoint's epoch are re-done
            trainer.window.write(out)
        elif resume:
            print(f"tune-gems train: {out} has no checkpoint yet; starting it again from epoch 0", flush=True)
            for name in (*TABLE_FILES, SUMMARY_FILE):
                (out / name).unlink(missing_ok=True)
            shutil.rmtree(out / EVENTS_DIR, ignore_errors=True)  # its epochs are trained again
        text = dump_yaml(cfg.to_dict())
        marker = read_marker(out)
        record = {CHECKSUMS_KEY: checksums(marker, **{CONFIG_FILE: text.encode()})}
        if data_record is not None and not (marker or {}).get(DATA_KEY):
            record[DATA_KEY] = data_record
        if marker is None:  # a fresh folder whose marker went missing
            write_marker(out, "train", **record)
        else:
            update_marker(out, **record)
        write_atomic(out / CONFIG_FILE, text)  # after its checksum: a config.yaml on disk is always recorded
        write_run_files(trainer, out)
        folds = f" folds={trainer.market.n_folds}" if trainer.market.n_folds > 1 else ""
        folds = (f" histories={trainer.arms.layout.histories}" if trainer.arms.layout.histories > 1 else "") + folds
        print(
            f"tune-gems train: device={trainer.device} kernels={trainer.ops.name} population={cfg.trainer.population} "
            f"arms={len(trainer.learner.arms)}{folds} members={trainer.learner.P} graph={'on' if trainer.runner.use_graph else 'off'} out={out}",
            flush=True,
        )
        if threads:
            print(f"tune-gems train: threads: {threads}", flush=True)
        for line in data_lines(cfg.data, trainer.market):
            print(f"tune-gems train: {line}", flush=True)
        ipe = cfg.trainer.iterations_per_epoch  # the bar counts iterations; its label the epoch
        bar = tqdm(total=cfg.trainer.epochs * ipe, initial=trainer.epoch * ipe,
            desc=f"epoch {trainer.epoch + 1}/{cfg.trainer.epochs}", unit="it",
            disable=None if progress is None else not progress, file=sys.stderr)
        trainer.on_iteration = lambda: bar.update(1)

        writer = AsyncCheckpointWriter()
        events = EpochEvents(out)  # TensorBoard scalars per epoch (tune_gems.trainer.tensorboard)

        def snapshot(_result: EpochResult, checkpoint_due: bool) -> None:
            if checkpoint_due:  # the kept validation returns go with the checkpoint that holds them
                writer.save(ckpt_path, *trainer.checkpoint_payload(), after=lambda meta: trainer.window.write(out, meta))

        def on_epoch(_result: EpochResult, _checkpoint_due: bool) -> None:
            events.write(trainer.history[-1], trainer.epoch)
            bar.set_description(f"epoch {min(trainer.epoch + 1, cfg.trainer.epochs)}/{cfg.trainer.epochs}")
            write_tables(trainer, out)

        try:
            stopped = train_epochs(trainer, on_epoch, stop=signals.requested, at_boundary=snapshot)
        finally:
            trainer.on_iteration = None
            events.close()
            bar.close()
            bar = None
            writer.close()  # the last checkpoint is on disk before the run says it is done (or stopped)
        if stopped:
            raise TrainingStopped(
                signals.signum or 0, trainer.epoch,
                f"tune-gems train: stopped by {signals.name()} after epoch {trainer.epoch} of {cfg.trainer.epochs}; "
                f"checkpoint written; continue with: tune-gems train --out {out} --resume",
            )
        final = trainer.history[-1]
        summary = {"out": str(out), "device": str(trainer.device), "kernels": trainer.ops.name,
                   **{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in final.items()}}
        write_atomic(out / SUMMARY_FILE, json.dumps(summary, indent=2))
    if trainer.diverged:
        print(f"tune-gems train: diverged at epoch {trainer.epoch}; results in {out}", flush=True)
    else:
        print(f"tune-gems train: done, results in {out}", flush=True)
    headline = train_headline(trainer)
    if headline:
        print(f"tune-gems train: {headline}", flush=True)
    return final


def train_headline(trainer: Trainer) -> str:
    from types import SimpleNamespace

    from tune_gems.stats.baseline_headline import baseline_comparison, baseline_headline

    run = SimpleNamespace(members=pd.DataFrame(trainer.member_history), trials=pd.DataFrame(), baselines=trainer.baselines())
    return baseline_headline(baseline_comparison(run))
