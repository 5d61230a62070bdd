"""Where an experiment lives: a local folder or a URI that Ray's storage understands
(s3://, gs://, or any pyarrow filesystem). Ray writes its trial folders there itself; this
class writes our own files (spec, parquet tables, the Optuna journal) beside them.

Optuna's journal needs a real file with locking, so for a remote URI it lives in a local
mirror next to the driver and is copied to the experiment folder after the sweep (and back
before a resume).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pyarrow.fs as pafs


def is_uri(storage: str) -> bool:
    return "://" in storage and not storage.startswith("file://")


class ExperimentStore:
    def __init__(self, storage: str, name: str):
        self.name = name
        if is_uri(storage):
            self.storage = storage.rstrip("/")
            self.fs, root = pafs.FileSystem.from_uri(self.storage)
            self.root = f"{root.rstrip('/')}/{name}"
            self.local_dir = None
        else:
            local = Path(storage.removeprefix("file://")).expanduser().resolve()
            self.storage = str(local)
            self.fs, self.root = pafs.LocalFileSystem(), str(local / name)
            self.local_dir = local / name

    @property
    def uri(self) -> str:
        """The experiment folder as Ray and users address it."""
        return f"{self.storage}/{self.name}"

    def exists(self) -> bool:
        info = self.fs.get_file_info(self.root)
        return info.type != pafs.FileType.NotFound

    def has(self, relative: str) -> bool:
        return self.fs.get_file_info(f"{self.root}/{relative}").type == pafs.FileType.File

    def make(self) -> None:
        self.fs.create_dir(self.root, recursive=True)

    def write_bytes(self, relative: str, data: bytes) -> None:
        """Write through a temporary name and rename, so readers never see a partial file."""
        final = f"{self.root}/{relative}"
        tmp = f"{self.root}/.{relative}.tmp"
        with self.fs.open_output_stream(tmp) as out:
            out.write(data)
        self.fs.move(tmp, final)

    def journal_path(self, filename: str) -> Path:
        if self.local_dir is not None:
            return self.local_dir / filename
        key = hashlib.sha256(self.uri.encode()).hexdigest()[:16]
        mirror = Path(os.environ.get("TUNE_GEMS_CACHE", Path.home() / ".cache" / "tune_gems")) / "studies" / key
        mirror.mkdir(parents=True, exist_ok=True)
        return mirror / filename

    def pull_journal(self, filename: str) -> None:
        """Before a resume from a URI: bring the journal back to the local mirror."""
        if self.local_dir is None and self.has(filename):
            pafs.copy_files(f"{self.root}/{filename}", str(self.journal_path(filename)), source_filesystem=self.fs)

    def push_journal(self, filename: str) -> None:
        if self.local_dir is None and self.journal_path(filename).is_file():
            pafs.copy_files(str(self.journal_path(filename)), f"{self.root}/{filename}", destination_filesystem=self.fs)
