"""Read one or several experiment folders into DataFrames, the `experiment` column keeping them
apart: each under its own gems.json (differing gems or a shared trial refused), every table checked
against docs/results.md's "Column types" before any statistic."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from tune_gems.analysis.read.labels import apply_arm_labels
from tune_gems.analysis.read.side_tables import FoldLayouts, read_layouts, read_table
from tune_gems.analysis.read.table_schema import as_bool, refuse_duplicates, validate_table
from tune_gems.contracts.errors import DataError
from tune_gems.contracts.paths import check_input_path
from tune_gems.contracts.gem_manifest import LEGACY_MANIFEST, GemEntry, disagreement, folder_manifest, manifest_source
from tune_gems.contracts.result_files import (ARMS_FILES, BASELINES_FILES, HISTORY_CSV, HISTORY_FILE, JOURNAL_FILE,
                                              MEMBERS_CSV, MEMBERS_FILE, TRIALS_FILE)

BASELINE_COLUMNS = ("segment", "baseline", "sharpe", "alpha_sharpe")

TRIALS_REQUIRED = ("trial_id", "status", "config_label")
HISTORY_REQUIRED = ("trial_id", "epoch")
MEMBERS_REQUIRED = ("trial_id", "epoch", "member", "seed", "val_sharpe")


@dataclass
class Experiment:
    """The results of one or several sweeps as DataFrames; `studies` maps the experiment label (or
    `label/study_name` for a journal of several) to its `optuna.Study`."""

    trials: pd.DataFrame
    history: pd.DataFrame
    members: pd.DataFrame
    studies: dict[str, Any] = field(default_factory=dict)
    paths: list[Path] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    arms: pd.DataFrame | None = None
    """The arms tables (arms.parquet / arms.csv; docs/results.md), `experiment` set; None when no
    folder has one."""
    baselines: pd.DataFrame | None = None
    """Flat, buy-and-hold and momentum on each segment (baselines.parquet / baselines.csv, written
    once per run; docs/evaluation.md), `experiment` set; None when no folder has one."""
    folds: FoldLayouts = field(default_factory=FoldLayouts)
    """The walk-forward fold tables (folds.parquet / folds.csv), validated against the members
    (`side_tables.read_folds`): the layout the overlap of folds is read from, the windows' dates,
    and why the overlap could not be read where the members span several folds."""
    histories: pd.DataFrame | None = None
    """The price-history tables (histories.parquet / histories.csv), validated against the
    members (`side_tables.read_histories`), `experiment` set; None when no folder has one."""
    gems: tuple[GemEntry, ...] = LEGACY_MANIFEST
    """The gems of the experiment (every folder's gems.json lists the same ones; a folder
    without one: the three built-ins, `gem_manifest.folder_manifest`): what every analysis
    table and plot iterates over."""

    def __repr__(self) -> str:
        return (
            f"Experiment({', '.join(self.labels)}: {len(self.trials)} trials, "
            f"{len(self.history)} epochs, {len(self.members)} member rows, "
            f"{len(self.studies)} studies)"
        )


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _side_table_with(folder: Path, names: tuple[str, ...], required: tuple[str, ...]) -> tuple[Path, pd.DataFrame] | None:
    """`side_tables.read_table`, refused in one line naming the file when a `required` column is missing."""
    found = read_table(folder, names)
    if found is None:
        return None
    path, df = found
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(missing)}")
    return path, df


def read_arms(folder: Path, label: str) -> pd.DataFrame | None:
    """The arms table of a folder (arms.parquet of a sweep, arms.csv of a train run), or None."""
    found = _side_table_with(folder, ARMS_FILES, ("arm",))
    if found is None:
        return None
    path, df = found
    validate_table(path, df, "arms")
    df = df.copy()
    df.insert(0, "experiment", label)
    if "trial_id" in df.columns:
        df["trial_id"] = df["trial_id"].astype(str)
    return df


def read_baselines(folder: Path, label: str) -> pd.DataFrame | None:
    """The baselines table of a folder (baselines.parquet of a sweep, baselines.csv of a train run), or None."""
    found = _side_table_with(folder, BASELINES_FILES, BASELINE_COLUMNS)
    if found is None:
        return None
    path, df = found
    for col in BASELINE_COLUMNS[2:]:
        if not pd.api.types.is_numeric_dtype(df[col]):
            raise DataError(f"{path}: column {col} must be numeric")
    df = df.drop(columns=["experiment"], errors="ignore")
    df.insert(0, "experiment", label)
    return df


def _read_parquet(path: Path, required: tuple[str, ...], table: str = "", gems: Iterable[str] = ()) -> pd.DataFrame:
    try:
        df = pd.read_parquet(path)
    except Exception as err:  # pyarrow raises several types for a corrupt file
        raise DataError(f"{path}: not a readable parquet file ({_one_line(err)})") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(missing)}")
    if table:
        validate_table(path, df, table, gems)
    return df


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


def load_one(folder: str | Path, label: str | None = None, taken: set[str] | None = None,
             gems: tuple[GemEntry, ...] | None = None):
    """Read one experiment folder: (label, trials, history, members, studies), its gem columns
    typed by `gems` (default: the folder's own manifest); its arms table comes from `read_arms`."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: not an experiment folder (no such directory)")
    from tune_gems.analysis.read.train_run import is_train_run, load_train_run

    train = is_train_run(folder)  # a `tune-gems train` folder: one trial, its arms the design
    for name in () if train else (TRIALS_FILE, HISTORY_FILE, MEMBERS_FILE):
        if not (folder / name).is_file():
            raise DataError(f"{folder}: not an experiment folder (missing {name}) nor a train run")
    gems = tuple(e.metric for e in (folder_manifest(folder) if gems is None else gems))
    if train:
        trials, history, members = load_train_run(folder, folder.name)
        validate_table(folder / HISTORY_CSV, history, "history", gems)
        validate_table(folder / MEMBERS_CSV, members, "members", gems)
    else:
        trials = _read_parquet(folder / TRIALS_FILE, TRIALS_REQUIRED, "trials", gems)
        history = _read_parquet(folder / HISTORY_FILE, HISTORY_REQUIRED, "history", gems)
        members = _read_parquet(folder / MEMBERS_FILE, MEMBERS_REQUIRED, "members", gems)

    names = trials["experiment"].dropna().astype(str).unique() if "experiment" in trials.columns else []
    name = str(names[0]) if len(names) == 1 else folder.name
    if label is None:
        label = _unique_label(name, folder, taken or set())

    trials = _tidy(trials, label)
    history = _tidy(history, label)
    members = _tidy(members, label)
    members_file = folder / (MEMBERS_CSV if train else MEMBERS_FILE)
    refuse_duplicates(members_file, members, ["trial_id", "epoch", "member"], "member at one epoch")
    if "seed_index" in members.columns:  # one seed index per arm, fold and history: the unit every pair is made of
        within = [c for c in ("arm", "fold", "history") if c in members.columns]
        refuse_duplicates(members_file, members, ["trial_id", *within, "seed_index", "epoch"],
                          "seed index of one arm at one epoch")
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
    # config_label is the join key of every table; take it from trials where a file lacks it
    # (a member row's own label names its arm: tune_gems.analysis.read.labels.apply_arm_labels)
    labels = trials.set_index("trial_id")["config_label"].astype(str)
    history["config_label"] = history["trial_id"].map(labels)
    own = members["config_label"] if "config_label" in members.columns else pd.Series(None, index=members.index, dtype=object)
    members["config_label"] = own.astype(object).where(own.notna(), members["trial_id"].map(labels)).astype(str)

    studies: dict[str, Any] = {}
    journal = folder / JOURNAL_FILE
    if journal.is_file():
        studies = _load_studies(journal, list(dict.fromkeys([name, folder.name])), label)
    return label, trials, history, members, studies


def load_experiment(paths: str | Path | Iterable[str | Path]) -> Experiment:
    """Load experiment folders (docs/results.md) into an `Experiment`; one-line `DataError` naming the
    file for anything unreadable."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    folders: list[Path] = []
    seen: dict[Path, Path] = {}
    for p in paths:
        p = Path(p)
        check_input_path(p, "EXPERIMENT_DIR", DataError)  # a symlink loop is named, not resolved into a crash
        key = p.expanduser().resolve()
        if key in seen:
            same = "given twice" if seen[key] == p else f"the same folder as {seen[key]}"
            raise DataError(f"EXPERIMENT_DIR: {p} is {same}: its seeds would count twice; give each folder once")
        seen[key] = p
        folders.append(p)
    if not folders:
        raise DataError("no experiment folder given")

    gems = common_manifest(folders)
    parts: dict[str, list[pd.DataFrame]] = {"trials": [], "history": [], "members": [], "arms": [], "baselines": []}
    studies: dict[str, Any] = {}
    labels: list[str] = []
    for folder in folders:
        label, trials, history, members, found = load_one(folder, taken=set(labels), gems=gems)
        labels.append(label)
        arms = read_arms(folder, label)
        trials, history, members = apply_arm_labels(trials, history, members, arms)  # labels name their arms
        parts["trials"].append(trials)
        parts["history"].append(history)
        parts["members"].append(members)
        if arms is not None:
            parts["arms"].append(arms)
        baselines = read_baselines(folder, label)
        if baselines is not None:
            parts["baselines"].append(baselines)
        studies.update(found)
    refuse_repeated_trials(folders, parts["members"])
    folds, histories = read_layouts(folders, labels, parts["members"])

    def cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
        frames = [f for f in frames if len(f.columns)]
        return pd.concat(frames, ignore_index=True, sort=False) if frames else pd.DataFrame()

    return Experiment(trials=cat(parts["trials"]), history=cat(parts["history"]), members=cat(parts["members"]),
                      studies=studies, paths=folders, labels=labels, arms=cat(parts["arms"]) if parts["arms"] else None,
                      baselines=cat(parts["baselines"]) if parts["baselines"] else None, folds=folds,
                      histories=histories, gems=gems)


def common_manifest(folders: list[Path]) -> tuple[GemEntry, ...]:
    """The gems every folder lists; DataError naming both sources when they disagree (a gem column read
    under another run's list would be dropped or mistaken)."""
    first = folder_manifest(folders[0])
    for folder in folders[1:]:
        why = disagreement(first, folder_manifest(folder))
        if why:
            raise DataError(f"{manifest_source(folders[0])} and {manifest_source(folder)} list different gems "
                            f"({why}): analyse these experiments apart")
    return first


def _trial_fingerprints(members: pd.DataFrame) -> dict[str, int]:
    """trial_id -> a hash of its first epoch's member rows (everything but the experiment label):
    equal for a copied or renamed experiment folder, different for another run."""
    if not len(members):
        return {}
    cols = sorted(c for c in members.columns if c != "experiment")
    first = members[members["epoch"] == members.groupby("trial_id")["epoch"].transform("min")]
    out = {}
    for trial_id, rows in first.groupby("trial_id", sort=False):
        rows = rows.sort_values("member")[cols].astype(str)
        out[str(trial_id)] = int(pd.util.hash_pandas_object(rows, index=False).sum())
    return out


def refuse_repeated_trials(folders: list[Path], members: list[pd.DataFrame]) -> None:
    """DataError when one trial appears in two folders (the same experiment given twice, copied
    or renamed: its seeds would count twice in every statistic)."""
    seen: dict[tuple[str, int], Path] = {}
    for folder, m in zip(folders, members):
        for trial_id, print_ in _trial_fingerprints(m).items():
            other = seen.setdefault((trial_id, print_), folder)
            if other != folder:
                raise DataError(f"{folder}: trial {trial_id!r} is also in {other} (the same experiment given twice, "
                                f"copied or renamed: its seeds would count twice)")
