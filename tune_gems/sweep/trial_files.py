"""A sweep trial's own files: each epoch's member rows and its side tables (read by
`sweep.results`), kept out of the reports that Tune hands to every callback; written atomically
through the filesystem of the trial's checkpoints, last write wins."""

from __future__ import annotations

import json
from typing import Any

import pyarrow.fs as pafs

MEMBERS_DIR = "members"
"""Per epoch, `<trial folder>/members/epoch-<epoch:06d>.json`: the epoch's member rows."""
TRIAL_BASELINES = "baselines.json"
"""`<trial folder>/baselines.json`: Trainer.baselines() as JSON records (likewise the two below)."""
TRIAL_FOLDS = "folds.json"
"""`<trial folder>/folds.json`: a row per fold, or per history and fold on several calendars."""
TRIAL_HISTORIES = "histories.json"


def member_file(epoch: int) -> str:
    return f"{MEMBERS_DIR}/epoch-{int(epoch):06d}.json"


class TrialFiles:

    def __init__(self, fs: pafs.FileSystem, folder: str) -> None:
        self.fs, self.folder = fs, folder.rstrip("/")

    @classmethod
    def of_session(cls, tune: Any) -> "TrialFiles":
        storage = tune.get_context().get_storage()
        return cls(storage.storage_filesystem, storage.trial_fs_path)

    @classmethod
    def of_result(cls, result: Any) -> "TrialFiles":
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
