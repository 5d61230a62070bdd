"""Read one or several experiment folders into pandas DataFrames.

The analysis reads result files only (docs/results.md), never the trainer: a finished sweep can
be analysed on a laptop without CUDA, Ray or the model code. Several folders are concatenated;
the `experiment` column keeps them apart (and is made unique if two folders share a name).
Anything that is not an experiment folder, or a file that cannot be read, raises
`DataError` with one line naming the file.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from tune_gems.errors import DataError

TRIALS_FILE = "trials.parquet"
HISTORY_FILE = "history.parquet"
MEMBERS_FILE = "members.parquet"
JOURNAL_FILE = "optuna_journal.log"

TRIALS_REQUIRED = ("trial_id", "status", "config_label")
HISTORY_REQUIRED = ("trial_id", "epoch")
MEMBERS_REQUIRED = ("trial_id", "epoch", "member", "seed", "val_sharpe")


@dataclass
class Experiment:
    """The results of one or several sweeps, as DataFrames (one row per trial / epoch / member).

    `studies` maps a study key (the experiment label, or `label/study_name` when a journal holds
    several studies) to the loaded `optuna.Study`; it is empty when no folder has a journal.
    `paths` are the folders read, in order; `labels` the matching `experiment` values.
    """

    trials: pd.DataFrame
    history: pd.DataFrame
    members: pd.DataFrame
    studies: dict[str, Any] = field(default_factory=dict)
    paths: list[Path] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        return (
            f"Experiment({', '.join(self.labels)}: {len(self.trials)} trials, "
            f"{len(self.history)} epochs, {len(self.members)} member rows, "
            f"{len(self.studies)} studies)"
        )


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _read_parquet(path: Path, required: tuple[str, ...]) -> pd.DataFrame:
    try:
        df = pd.read_parquet(path)
    except Exception as err:  # pyarrow raises several types for a corrupt file
        raise DataError(f"{path}: not a readable parquet file ({_one_line(err)})") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(missing)}")
    return df


def as_bool(values: pd.Series) -> pd.Series:
    """A flag column as plain bool: missing values are False; 'true'/'1' strings are True."""
    if values.dtype == bool:
        return values

    def conv(v: Any) -> bool:
        if v is None or (isinstance(v, float) and v != v):
            return False
        if isinstance(v, str):
            return v.strip().lower() in ("true", "1", "yes")
        try:
            return bool(v) and not pd.isna(v)
        except (TypeError, ValueError):
            return bool(v)

    return values.map(conv).astype(bool)


def _tidy(df: pd.DataFrame, label: str) -> pd.DataFrame:
    df = df.copy()
    df["experiment"] = label
    df["trial_id"] = df["trial_id"].astype(str)
    if "diverged" in df.columns:
        df["diverged"] = as_bool(df["diverged"])
    else:
        df["diverged"] = False
    cols = ["experiment"] + [c for c in df.columns if c != "experiment"]
    return df[cols]


def _experiment_name(trials: pd.DataFrame, folder: Path) -> str:
    if "experiment" in trials.columns:
        names = trials["experiment"].dropna().astype(str).unique()
        if len(names) == 1:
            return str(names[0])
    return folder.name


def _unique_label(name: str, folder: Path, taken: set[str]) -> str:
    if name not in taken:
        return name
    label = f"{folder.parent.name}/{name}"
    i = 2
    while label in taken:
        label = f"{folder.parent.name}/{name}#{i}"
        i += 1
    return label


def _load_studies(journal: Path, names: list[str], label: str) -> dict[str, Any]:
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            storage = JournalStorage(JournalFileBackend(str(journal)))
            found = optuna.get_all_study_names(storage)
            wanted = [n for n in names if n in found] or list(found)
            return {
                (label if len(wanted) == 1 else f"{label}/{n}"): optuna.load_study(
                    study_name=n, storage=storage
                )
                for n in wanted
            }
    except Exception as err:
        raise DataError(f"{journal}: not a readable Optuna journal ({_one_line(err)})") from None


def load_one(folder: str | Path, label: str | None = None, taken: set[str] | None = None):
    """Read one experiment folder: (label, trials, history, members, studies)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: not an experiment folder (no such directory)")
    for name in (TRIALS_FILE, HISTORY_FILE, MEMBERS_FILE):
        if not (folder / name).is_file():
            raise DataError(f"{folder}: not an experiment folder (missing {name})")
    trials = _read_parquet(folder / TRIALS_FILE, TRIALS_REQUIRED)
    history = _read_parquet(folder / HISTORY_FILE, HISTORY_REQUIRED)
    members = _read_parquet(folder / MEMBERS_FILE, MEMBERS_REQUIRED)

    name = _experiment_name(trials, folder)
    if label is None:
        label = _unique_label(name, folder, taken or set())

    trials = _tidy(trials, label)
    history = _tidy(history, label)
    members = _tidy(members, label)
    trials["status"] = trials["status"].astype(str).str.upper()
    if trials["trial_id"].duplicated().any():
        dup = trials.loc[trials["trial_id"].duplicated(), "trial_id"].iloc[0]
        raise DataError(f"{folder / TRIALS_FILE}: trial_id {dup!r} appears twice")
    known = set(trials["trial_id"])
    for fname, df in ((HISTORY_FILE, history), (MEMBERS_FILE, members)):
        orphans = sorted(set(df["trial_id"]) - known)
        if orphans:
            raise DataError(
                f"{folder / fname}: {len(orphans)} trial(s) absent from {TRIALS_FILE} "
                f"(e.g. {orphans[0]!r})"
            )
    # config_label is the join key of every table; take it from trials where a file lacks it.
    labels = trials.set_index("trial_id")["config_label"].astype(str)
    for df in (history, members):
        df["config_label"] = df["trial_id"].map(labels)

    studies: dict[str, Any] = {}
    journal = folder / JOURNAL_FILE
    if journal.is_file():
        studies = _load_studies(journal, list(dict.fromkeys([name, folder.name])), label)
    return label, trials, history, members, studies


def load_experiment(paths: str | Path | Iterable[str | Path]) -> Experiment:
    """Load one or several experiment folders (docs/results.md) into an `Experiment`.

    Raises `DataError` (one line naming the file) when a folder is not an experiment, a parquet
    file is corrupt or lacks a required column, or the Optuna journal cannot be read.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    folders: list[Path] = []
    seen: set[Path] = set()
    for p in paths:
        p = Path(p)
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            folders.append(p)
    if not folders:
        raise DataError("no experiment folder given")

    parts: dict[str, list[pd.DataFrame]] = {"trials": [], "history": [], "members": []}
    studies: dict[str, Any] = {}
    labels: list[str] = []
    for folder in folders:
        label, trials, history, members, found = load_one(folder, taken=set(labels))
        labels.append(label)
        parts["trials"].append(trials)
        parts["history"].append(history)
        parts["members"].append(members)
        studies.update(found)

    def cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
        frames = [f for f in frames if len(f.columns)]
        return pd.concat(frames, ignore_index=True, sort=False) if frames else pd.DataFrame()

    return Experiment(
        trials=cat(parts["trials"]),
        history=cat(parts["history"]),
        members=cat(parts["members"]),
        studies=studies,
        paths=folders,
        labels=labels,
    )
