"""Turn Tune's results into the experiment's three parquet files (docs/results.md).

Rows come from every result each trial reported (Tune keeps them across retries and
restores); a trial that re-ran an epoch after resuming from an older checkpoint reported it
twice, and the last report wins, so every (trial, epoch) appears exactly once.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from tune_gems.config import flatten
from tune_gems.errors import ConfigError
from tune_gems.metrics import EPOCH_METRICS, MEMBER_METRICS
from tune_gems.sweep.spec import trial_config
from tune_gems.sweep.storage import ExperimentStore
from tune_gems.sweep.trainable import HISTORY_FILE, MEMBERS_KEY

ID_COLUMNS = ("experiment", "trial_id", "config_label")


def _one_line(error: BaseException | None) -> str | None:
    if error is None:
        return None
    text = str(error).strip().splitlines()
    last = [line for line in text if line.strip()]
    return (last[-1] if last else type(error).__name__)[:500]


def _checkpoint_history(result) -> dict[str, Any] | None:
    checkpoint = getattr(result, "checkpoint", None)
    if checkpoint is None:
        return None
    try:
        with checkpoint.as_directory() as d:
            path = Path(d) / HISTORY_FILE
            return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None


def _fill_from_checkpoint(rows: list[dict[str, Any]], result) -> list[dict[str, Any]]:
    """Add the epochs that the latest checkpoint's history holds but Tune's results lack."""
    saved = _checkpoint_history(result)
    if not saved:
        return rows
    have = {int(r["epoch"]) for r in rows}
    members_by_epoch: dict[int, list] = {}
    for m in saved.get("members", []):
        members_by_epoch.setdefault(int(m["epoch"]), []).append(m)
    for h in saved.get("history", []):
        epoch = int(h["epoch"])
        if epoch not in have:
            rows.append({**h, MEMBERS_KEY: json.dumps(members_by_epoch.get(epoch, []))})
    return sorted(rows, key=lambda r: int(r["epoch"]))


def collect_frames(result_grid, base: dict[str, Any], experiment: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    trials, history, members = [], [], []
    for result in result_grid:
        params = {k: v for k, v in (result.config or {}).items()}
        try:
            cfg = trial_config(base, params)
            flat_cfg, label, seed = flatten(cfg.to_dict()), cfg.label(), cfg.seed
        except ConfigError:
            flat_cfg, label, seed = {}, "invalid config", params.get("seed")
        df = result.metrics_dataframe
        trial_id = (result.metrics or {}).get("trial_id") or result.path.rstrip("/").rsplit("/", 1)[-1]
        rows: list[dict[str, Any]] = []
        if df is not None and len(df) and "epoch" in df.columns:
            df = df.dropna(subset=["epoch"]).drop_duplicates(subset=["epoch"], keep="last").sort_values("epoch")
            rows = df.to_dict("records")
        rows = _fill_from_checkpoint(rows, result)
        for r in rows:
            history.append({"experiment": experiment, "trial_id": trial_id, "config_label": label, **{m: r.get(m) for m in EPOCH_METRICS}})
            for mrow in json.loads(r.get(MEMBERS_KEY) or "[]"):
                members.append(
                    {
                        "experiment": experiment,
                        "trial_id": trial_id,
                        "config_label": label,
                        "epoch": mrow["epoch"],
                        "member": mrow["member"],
                        "seed": mrow["seed"],
                        **{m: mrow.get(m) for m in MEMBER_METRICS},
                    }
                )
        last = rows[-1] if rows else {}
        trial = {
            "experiment": experiment,
            "trial_id": trial_id,
            "status": "ERROR" if result.error is not None else "TERMINATED",
            "error": _one_line(result.error),
            "epochs_done": len(rows),
            "config_label": label,
            "seed": seed,
        }
        trial.update(flat_cfg)
        trial.update({m: last.get(m, math.nan) for m in EPOCH_METRICS})
        trial["objective"] = last.get("objective", math.nan)
        trial["node_id"], trial["gpu_ids"] = last.get("node_id"), last.get("gpu_ids")
        trials.append(trial)
    th = pd.DataFrame(trials)
    hist = pd.DataFrame(history, columns=[*ID_COLUMNS, *EPOCH_METRICS])
    mem = pd.DataFrame(members, columns=[*ID_COLUMNS, "epoch", "member", "seed", *MEMBER_METRICS])
    for frame in (hist, mem):
        if len(frame):
            frame["diverged"] = frame["diverged"].astype(bool)
    if len(th):
        th = th.sort_values("trial_id").reset_index(drop=True)
    return th, hist.sort_values(["trial_id", "epoch"]).reset_index(drop=True), mem.sort_values(
        ["trial_id", "epoch", "member"]
    ).reset_index(drop=True)


def write_frames(store: ExperimentStore, frames: dict[str, pd.DataFrame]) -> None:
    for name, frame in frames.items():
        buf = io.BytesIO()
        frame.to_parquet(buf, index=False)
        store.write_bytes(name, buf.getvalue())
