"""Tune's results into the experiment's tables (docs/results.md): the last report of an epoch wins,
a lost one comes from the history beside the latest checkpoint, member rows and side tables from the
trial's files (`sweep.trial_files`); each trial's eval returns are copied out."""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from tune_gems.design.arm_sets import also_named, arm_aliases
from tune_gems.design.arms import resolved_settings, run_arms
from tune_gems.config.dotted import flatten
from tune_gems.contracts.errors import ConfigError
from tune_gems.contracts.gem_manifest import GemEntry, manifest_text
from tune_gems.gems import manifest
from tune_gems.stats.metrics import MEMBER_IDS, epoch_metrics, member_metrics
from tune_gems.sweep.objective_noise import OBJECTIVE_DF, OBJECTIVE_SE
from tune_gems.sweep.spec_load import trial_config
from tune_gems.contracts.result_files import (ARMS_PARQUET, BASELINES_KEY, BASELINES_PARQUET, CHECKPOINT_HISTORY_FILE,
                                              EVAL_RETURNS_DIR, EVAL_RETURNS_FILE, FOLDS_KEY, FOLDS_PARQUET, GEMS_FILE,
                                              HISTORIES_KEY, HISTORIES_PARQUET, HISTORY_FILE, ID_COLUMNS, MEMBERS_FILE,
                                              MEMBERS_KEY, TRIALS_FILE, trial_eval_returns)
from tune_gems.sweep.storage import ExperimentStore
from tune_gems.sweep.trial_files import TRIAL_BASELINES, TRIAL_FOLDS, TRIAL_HISTORIES, TrialFiles, member_file

TERMINATED, ERROR, UNFINISHED = "TERMINATED", "ERROR", "UNFINISHED"
"""trials.parquet's `status`: ran to its end (or was stopped early); failed after its retries; not
finished when the sweep stopped (`--resume` continues it; its partial epochs are no result)."""


def trial_status(tune_status: str | None, error: BaseException | None) -> str:
    if error is not None or tune_status == "ERROR":
        return ERROR
    if tune_status in (None, "TERMINATED"):
        return TERMINATED
    return UNFINISHED  # RUNNING, PENDING, PAUSED: Tune still owns it


def _one_line(error: BaseException | None) -> str | None:
    if error is None:
        return None
    text = str(error).strip().splitlines()
    last = [line for line in text if line.strip()]
    return (last[-1] if last else type(error).__name__)[:500]


def _checkpoint_files(result) -> tuple[dict[str, Any] | None, bytes | None]:
    """(the history beside the latest checkpoint, its eval_returns.npz bytes), each None if absent."""
    checkpoint = getattr(result, "checkpoint", None)
    if checkpoint is None:
        return None, None
    history = returns = None
    try:
        with checkpoint.as_directory() as d:
            path = Path(d) / CHECKPOINT_HISTORY_FILE
            try:
                history = json.loads(path.read_text()) if path.is_file() else None
            except (OSError, ValueError):
                history = None
            npz = Path(d) / EVAL_RETURNS_FILE
            returns = npz.read_bytes() if npz.is_file() else None
    except OSError:
        pass
    return history, returns


def _members_by_epoch(rows: list[dict[str, Any]], saved: dict[str, Any] | None, files: TrialFiles) -> dict[int, list[dict]]:
    """Each epoch's member rows: the checkpoint's history, else the epoch's file, else the report."""
    checkpointed: dict[int, list[dict]] = {}
    for m in (saved or {}).get("members", []):
        checkpointed.setdefault(int(m["epoch"]), []).append(m)
    on_disk = files.member_epochs() if any(int(r["epoch"]) not in checkpointed for r in rows) else set()
    out = {}
    for r in rows:
        epoch = int(r["epoch"])
        if epoch in checkpointed:
            out[epoch] = checkpointed[epoch]
        elif epoch in on_disk:
            out[epoch] = files.read_json(member_file(epoch)) or []
        else:
            sent = r.get(MEMBERS_KEY)
            out[epoch] = json.loads(sent) if isinstance(sent, str) else []
    return out


def _trial_table(files: TrialFiles, name: str, df: pd.DataFrame | None, key: str) -> list[dict]:
    """A trial's side-table records: its file, else the first report that carried them."""
    table = files.read_json(name)
    if isinstance(table, list):
        return table
    if df is None or key not in df.columns:
        return []
    sent = [b for b in df[key].dropna() if isinstance(b, str)]
    return json.loads(sent[-1]) if sent else []


@dataclass
class SweepTables:

    trials: pd.DataFrame
    history: pd.DataFrame
    members: pd.DataFrame
    arms: pd.DataFrame
    baselines: pd.DataFrame
    gems: list[GemEntry]
    eval_returns: dict[str, bytes] = field(default_factory=dict)
    folds: pd.DataFrame = field(default_factory=pd.DataFrame)
    histories: pd.DataFrame = field(default_factory=pd.DataFrame)


def collect_tables(result_grid, base: dict[str, Any], experiment: str, statuses: dict[str, str] | None = None,
        design: str = "none") -> SweepTables:
    trials, history, members, arms, baselines, folds, histories = [], [], [], [], [], [], []
    eval_returns: dict[str, bytes] = {}
    history_cols: list[tuple[str, ...]] = []
    plugins: list[str] = list(base.get("plugins") or [])
    statuses = statuses or {}
    for result in result_grid:
        params = {k: v for k, v in (result.config or {}).items()}
        df = result.metrics_dataframe
        trial_id = str((result.metrics or {}).get("trial_id") or result.path.rstrip("/").rsplit("/", 1)[-1])
        arm_names: tuple[str, ...] = ()
        fold_ids: tuple[int, ...] = ()
        history_ids: tuple[int, ...] = ()
        try:
            cfg = trial_config(base, params, design)
            flat_cfg, seed = flatten(cfg.to_dict()), cfg.seed
            plugins = list(cfg.plugins)
            run = run_arms(cfg)
            arm_labels, label = run.labels, run.label  # each arm's members, its settings applied
            arm_names = run.names if cfg.arms is not None else ()
            fold_ids, history_ids = tuple(range(run.layout.folds)), tuple(range(run.layout.histories))
            aliases = arm_aliases(cfg)  # a duplicate arm trained once: its other name (tune_gems.design.arm_sets)
            arms.extend({"trial_id": trial_id, "arm": a.name, "also_named": also_named(aliases, a.name),
                         **resolved_settings(a.config)} for a in run.arms)
        except ConfigError:
            flat_cfg, label, seed = {}, "invalid config", params.get("seed")
            arm_labels = {}
        history_cols.append(epoch_metrics(plugins, arm_names, fold_ids, history_ids))
        rows: list[dict[str, Any]] = []
        files = TrialFiles.of_result(result)
        if df is not None and len(df) and "epoch" in df.columns:
            rows = df.dropna(subset=["epoch"]).drop_duplicates(subset=["epoch"], keep="last").sort_values("epoch").to_dict("records")
            for name, key, out in ((TRIAL_BASELINES, BASELINES_KEY, baselines), (TRIAL_FOLDS, FOLDS_KEY, folds),
                                   (TRIAL_HISTORIES, HISTORIES_KEY, histories)):
                out.extend({"experiment": experiment, "trial_id": trial_id, **b} for b in _trial_table(files, name, df, key))
        saved, returns = _checkpoint_files(result)
        if saved:  # epochs whose report was lost, from the history beside the checkpoint
            have = {int(r["epoch"]) for r in rows}
            rows = sorted(rows + [h for h in saved.get("history", []) if int(h["epoch"]) not in have], key=lambda r: int(r["epoch"]))
        safe_name = trial_id and "/" not in trial_id and "\\" not in trial_id and not trial_id.startswith(".")
        if returns is not None and safe_name:
            eval_returns[trial_id] = returns
        members_of = _members_by_epoch(rows, saved, files)
        for r in rows:
            history.append({"experiment": experiment, "trial_id": trial_id, "config_label": label,
                            **{m: r.get(m) for m in history_cols[-1]}})
            for mrow in members_of[int(r["epoch"])]:
                members.append({"experiment": experiment, "trial_id": trial_id,
                                "config_label": arm_labels.get(str(mrow.get("arm")), label),
                                **{k: mrow.get(k) for k in MEMBER_IDS}, **{m: mrow.get(m) for m in member_metrics(plugins)}})
        last = rows[-1] if rows else {}
        trial = {"experiment": experiment, "trial_id": trial_id,
            "status": trial_status(statuses.get(trial_id), result.error), "error": _one_line(result.error),
            "epochs_done": len(rows), "config_label": label, "seed": seed}
        trial.update(flat_cfg)
        trial.update({m: last.get(m, math.nan) for m in history_cols[-1]})
        trial.update({k: last.get(k, math.nan) for k in ("objective", OBJECTIVE_SE, OBJECTIVE_DF)})
        trial["node_id"], trial["gpu_ids"] = last.get("node_id"), last.get("gpu_ids")
        trials.append(trial)
    epoch_cols = list(dict.fromkeys(c for cols in history_cols for c in cols)) or list(epoch_metrics(plugins))
    th = pd.DataFrame(trials)
    hist = pd.DataFrame(history, columns=[*ID_COLUMNS, *epoch_cols])
    mem = pd.DataFrame(members, columns=[*ID_COLUMNS, *MEMBER_IDS, *member_metrics(plugins)])
    for frame in (hist, mem):
        if len(frame):
            frame["diverged"] = frame["diverged"].astype(bool)
    if len(th):
        th = th.sort_values("trial_id").reset_index(drop=True)
    arms_df = pd.DataFrame(arms)
    if len(arms_df):
        arms_df = arms_df.sort_values(["trial_id", "arm"], kind="stable").reset_index(drop=True)
    return SweepTables(trials=th, history=hist.sort_values(["trial_id", "epoch"]).reset_index(drop=True),
        members=mem.sort_values(["trial_id", "epoch", "member"]).reset_index(drop=True), arms=arms_df,
        baselines=pd.DataFrame(baselines), gems=manifest(plugins), eval_returns=eval_returns, folds=pd.DataFrame(folds),
        histories=pd.DataFrame(histories))


def write_frames(store: ExperimentStore, frames: dict[str, pd.DataFrame]) -> dict[str, bytes]:
    written = {}
    for name, frame in frames.items():
        buf = io.BytesIO()
        frame.to_parquet(buf, index=False)
        written[name] = buf.getvalue()
        store.write_bytes(name, written[name])
    return written


def write_tables(store: ExperimentStore, tables: SweepTables) -> None:
    """Every table and gems.json and the eval returns, each atomically, then their checksums."""
    frames = {TRIALS_FILE: tables.trials, HISTORY_FILE: tables.history, MEMBERS_FILE: tables.members}
    if len(tables.arms):
        frames[ARMS_PARQUET] = tables.arms
    if len(tables.baselines):
        frames[BASELINES_PARQUET] = tables.baselines
    if len(tables.folds):
        frames[FOLDS_PARQUET] = tables.folds
    if len(tables.histories):
        frames[HISTORIES_PARQUET] = tables.histories
    from tune_gems.sweep.resume import record_tables

    written = {**write_frames(store, frames), GEMS_FILE: manifest_text(tables.gems).encode()}
    store.write_bytes(GEMS_FILE, written[GEMS_FILE])
    if tables.eval_returns:
        store.fs.create_dir(f"{store.root}/{EVAL_RETURNS_DIR}", recursive=True)
    for trial_id, data in sorted(tables.eval_returns.items()):
        store.write_bytes(f"{EVAL_RETURNS_DIR}/{trial_eval_returns(trial_id)}", data)
    record_tables(store, written)  # what `confirm` verifies them against (tune_gems.contracts.run_record)
