"""A sweep trial's own files in its folder of the experiment: each epoch's member rows, and the
trial's baselines, folds and histories tables, read back into members.parquet,
baselines.parquet, folds.parquet and histories.parquet (tune_gems.sweep.results).

Why not in the trial's Tune reports: Tune hands every report to every driver callback (the
JSON and CSV loggers, the TensorBoard writer, the searcher) and keeps it in its experiment
state, while the trial waits in `tune.report`; a member table (192 members: ~240 KB per epoch)
in every report was most of what the driver did per epoch. The reports carry the epoch's
scalars; the tables go here, written before the report of their epoch.

Where: the trial's folder in the storage path, through the filesystem Tune persists the
trial's checkpoints with (`tune.get_context().get_storage()`), so on a cluster a worker node's
files reach the storage path as its checkpoints do (a local storage path must be shared by
every node, as for the checkpoints). Each file is written under a temporary name and renamed,
so a reader never sees a partial one. A retried epoch (a trial resumed from an older
checkpoint) writes its file again, last write wins, as the last report of an epoch does.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow.fs as pafs

MEMBERS_DIR = "members"
"""Per epoch, `<trial folder>/members/epoch-<epoch:06d>.json`: the epoch's member rows (a JSON list)."""
TRIAL_BASELINES = "baselines.json"
"""`<trial folder>/baselines.json`: the trial's baselines table (Trainer.baselines(), JSON records)."""
TRIAL_FOLDS = "folds.json"
"""`<trial folder>/folds.json`: the trial's fold table (Trainer.fold_table(), JSON records: a row per fold, or per
history and fold where the histories are on several calendars)."""
TRIAL_HISTORIES = "histories.json"
"""`<trial folder>/histories.json`: the trial's price-history table (Trainer.history_table(), JSON records)."""


def member_file(epoch: int) -> str:
    return f"{MEMBERS_DIR}/epoch-{int(epoch):06d}.json"


class TrialFiles:
    """A trial's folder `folder` on the filesystem `fs` (pyarrow)."""

    def __init__(self, fs: pafs.FileSystem, folder: str) -> None:
        self.fs, self.folder = fs, folder.rstrip("/")

    @classmethod
    def of_session(cls, tune: Any) -> "TrialFiles":
        """The folder of the trial running in this thread (Tune's storage context)."""
        storage = tune.get_context().get_storage()
        return cls(storage.storage_filesystem, storage.trial_fs_path)

    @classmethod
    def of_result(cls, result: Any) -> "TrialFiles":
        """The folder of a trial in Tune's results (its `path` on its `filesystem`)."""
        return cls(getattr(result, "filesystem", None) or pafs.LocalFileSystem(), str(result.path))

    def write_json(self, name: str, value: Any) -> None:
        path = f"{self.folder}/{name}"
        parent, _, leaf = path.rpartition("/")
        self.fs.create_dir(parent, recursive=True)
        tmp = f"{parent}/.{leaf}.tmp"
        with self.fs.open_output_stream(tmp) as out:
            out.write(json.dumps(value).encode())
        self.fs.move(tmp, path)

    def read_json(self, name: str) -> Any | None:
        """The file's JSON, or None when it is missing or unreadable."""
        try:
            with self.fs.open_input_stream(f"{self.folder}/{name}") as f:
                return json.loads(f.read().decode())
        except (OSError, ValueError):
            return None

    def member_epochs(self) -> set[int]:
        """The epochs whose member file exists."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(f"{self.folder}/{MEMBERS_DIR}", allow_not_found=True))
        except OSError:
            return set()
        epochs = set()
        for info in infos:
            stem = info.base_name.removesuffix(".json")
            if info.type == pafs.FileType.File and stem.startswith("epoch-") and stem[len("epoch-"):].isdigit():
                epochs.add(int(stem[len("epoch-"):]))
        return epochs
