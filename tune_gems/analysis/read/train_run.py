"""A `tune-gems train` folder read as a one-trial experiment (trial id `train`): its arms are the
cleanest paired design there is. Its CSVs become the sweep tables, under the same schema."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from tune_gems.contracts.config_label import arm_label
from tune_gems.contracts.errors import ConfigError, DataError
from tune_gems.contracts.result_files import CONFIG_FILE, HISTORY_CSV, MEMBERS_CSV, SUMMARY_FILE, TRIALS_FILE

TRAIN_TRIAL_ID = "train"
"""The trial id of a train run's one row (its eval_returns.npz is the folder's own)."""
FINISHED, UNFINISHED = "TERMINATED", "UNFINISHED"
HISTORY_REQUIRED = ("epoch",)
MEMBERS_REQUIRED = ("epoch", "member", "seed", "val_sharpe")


def is_train_run(folder: Path) -> bool:
    """A train run's folder: its config and CSV tables, and no sweep trials table."""
    return all((folder / n).is_file() for n in (CONFIG_FILE, HISTORY_CSV, MEMBERS_CSV)) and not (folder / TRIALS_FILE).is_file()


def _read_csv(path: Path, required: tuple[str, ...]) -> pd.DataFrame:
    """The table with its required columns; the column schema is checked by the caller
    (tune_gems.analysis.read.load.load_one), as for a sweep's tables."""
    try:
        df = pd.read_csv(path)
    except Exception as err:  # noqa: BLE001 - pandas raises many types for a broken file
        raise DataError(f"{path}: not a readable CSV table ({type(err).__name__})") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(missing)}")
    return df


def _config(folder: Path) -> tuple[Any, dict[str, Any]]:
    """(the stored config, validated; the plug-in gems' settings as dotted keys). Without a plug-in's
    module, the config validates without plug-ins and arms: the tables hold every number the analysis
    needs, only a re-run needs the code."""
    from tune_gems.config.load import load_config

    path = folder / CONFIG_FILE
    try:
        return load_config(path), {}
    except ConfigError as err:
        tables_only = _without_plugins(path)
        if tables_only is None:
            raise DataError(f"{path}: not a readable train config ({err})") from None
        return tables_only


def _without_plugins(path: Path) -> tuple[Any, dict[str, Any]] | None:
    """The config validated without plug-in gems and arms, and their stored settings; None when that
    fails too or no plug-in is named."""
    from tune_gems.config.dotted import flatten
    from tune_gems.config.load import build_config
    from tune_gems.config.yaml_io import safe_load_yaml
    from tune_gems.contracts.gem_manifest import LEGACY_MANIFEST

    try:
        tree = safe_load_yaml(path.read_text())
    except Exception:  # noqa: BLE001 - the first error is the one reported
        return None
    if not isinstance(tree, dict) or not tree.get("plugins") or not isinstance(tree.get("gems"), dict):
        return None
    builtin = {e.name for e in LEGACY_MANIFEST}
    plugin_gems = {k: v for k, v in tree["gems"].items() if k not in builtin}
    rest = {**tree, "plugins": [], "arms": None, "gems": {k: v for k, v in tree["gems"].items() if k in builtin}}
    try:
        cfg = build_config(rest, str(path))
    except ConfigError:
        return None
    return cfg, {f"gems.{k}": v for k, v in flatten(plugin_gems).items()}


def _status(folder: Path) -> str:
    """TERMINATED once summary.json is written (the run's last act), else UNFINISHED."""
    try:
        json.loads((folder / SUMMARY_FILE).read_text())
        return FINISHED
    except (OSError, ValueError):
        return UNFINISHED


def load_train_run(folder: Path, label: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(trials, history, members) of a train folder, with `trial_id` and `config_label` set
    (the caller adds `experiment` and checks the tables' column schema)."""
    from tune_gems.config.dotted import flatten

    cfg, plugin_settings = _config(folder)
    history = _read_csv(folder / HISTORY_CSV, HISTORY_REQUIRED)
    members = _read_csv(folder / MEMBERS_CSV, MEMBERS_REQUIRED)
    label_text = arm_label(cfg.label(), plugin_settings)  # a plug-in gem read from the file keeps its token
    for df in (history, members):
        df.insert(0, "trial_id", TRAIN_TRIAL_ID)
        df.insert(1, "config_label", label_text)
    last: dict[str, Any] = history.sort_values("epoch").iloc[-1].to_dict() if len(history) else {}
    trial = {
        "experiment": label, "trial_id": TRAIN_TRIAL_ID, "status": _status(folder), "error": "",
        "epochs_done": int(history["epoch"].nunique()), "config_label": label_text, "seed": cfg.seed,
        **flatten(cfg.to_dict()), **plugin_settings,
        **{k: v for k, v in last.items() if k not in ("trial_id", "config_label")},
        "objective": math.nan,  # no search: no objective
    }
    return pd.DataFrame([trial]), history, members
