"""Where an experiment lives: a local folder or a URI Ray's storage understands; our files go beside
Tune's. For a URI, Optuna's journal (which needs a locked file) lives in a local mirror copied to
the experiment after every trial. `check_storage` refuses a bad URI before Ray starts."""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

import pyarrow.fs as pafs

from tune_gems.contracts.errors import StorageError

KNOWN_SCHEMES = ("file", "s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss")
CACHE_ENV = "TUNE_GEMS_CACHE"
PROBE_PREFIX = ".tune-gems-probe-"
STORAGE_TIMEOUT_S = 30.0
"""Default bound on reaching a remote storage URI before Ray starts (`storage_timeout_s`)."""


def is_uri(storage: str) -> bool:
    return "://" in storage


def scheme_of(storage: str) -> str:
    return storage.split("://", 1)[0].lower()


def open_uri(storage: str, field: str = "--storage") -> tuple[pafs.FileSystem, str]:
    """(filesystem, path) of a storage URI; StorageError naming the field otherwise."""
    scheme = scheme_of(storage)
    if scheme not in KNOWN_SCHEMES:
        raise StorageError(f"{field}: {storage!r}: unknown scheme {scheme!r}:// (known: {', '.join(KNOWN_SCHEMES)}, or a local path)")
    try:
        return pafs.FileSystem.from_uri(storage)
    except ImportError as e:
        raise StorageError(f"{field}: {storage!r}: the {scheme}:// filesystem needs a missing runtime ({e})") from None
    except Exception as e:  # noqa: BLE001 - pyarrow raises ArrowInvalid, ArrowNotImplementedError, OSError, ...
        msg = " ".join(str(e).split())[:200]
        raise StorageError(f"{field}: {storage!r}: cannot open this filesystem ({type(e).__name__}: {msg})") from None


def _within(seconds: float, call, what: str):
    """`call()`'s result, or StorageError after `seconds` (its daemon thread left behind)."""
    import threading

    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e

    t = threading.Thread(target=run, name="tune-gems-storage-probe", daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        raise StorageError(f"{what}: no answer within {seconds:g} s (no network, or the service is unreachable; storage_timeout_s)")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


def check_storage(storage: str, field: str = "--storage", timeout_s: float = STORAGE_TIMEOUT_S) -> None:
    """A URI's filesystem known, reachable and writable (a probe file), within `timeout_s`."""
    if not is_uri(storage):
        return
    if scheme_of(storage) != "file":
        _within(timeout_s, lambda: _probe(storage, field), f"{field}: {storage!r}")
        return
    _probe(storage, field)


def _probe(storage: str, field: str) -> None:
    fs, root = open_uri(storage, field)
    root = root.rstrip("/") or "/"
    if scheme_of(storage) == "file":  # a local folder: the local rules (nothing is created)
        from tune_gems.contracts.errors import OutputError
        from tune_gems.contracts.paths import check_writable

        if Path(root).is_file():
            raise StorageError(f"{field}: {storage!r} is a file, not a folder")
        try:
            check_writable(root, field)
        except OutputError as e:
            raise StorageError(f"{e} ({storage!r} cannot be reached or written)") from None
        return
    probe = f"{root}/{PROBE_PREFIX}{uuid.uuid4().hex}"
    try:
        info = fs.get_file_info(root)
        if info.type == pafs.FileType.File:
            raise StorageError(f"{field}: {storage!r} is a file, not a folder")
        with fs.open_output_stream(probe) as out:
            out.write(b"")
        fs.delete_file(probe)
    except StorageError:
        raise
    except Exception as e:  # noqa: BLE001 - every filesystem fails in its own way
        msg = " ".join(str(e).split())[:200]
        raise StorageError(f"{field}: {storage!r} cannot be reached or written ({type(e).__name__}: {msg})") from None


class ExperimentStore:
    """`local_dir`: the folder of a local path; `disk_dir`: on this machine (file:// too), else None."""

    def __init__(self, storage: str, name: str):
        self.name = name
        if is_uri(storage):
            self.storage = storage.rstrip("/")
            self.fs, root = open_uri(self.storage)
            self.root = f"{root.rstrip('/')}/{name}"
            self.local_dir = None
            self.disk_dir = Path(self.root) if scheme_of(storage) == "file" else None
        else:
            local = Path(storage).expanduser().resolve()
            self.storage = str(local)
            self.fs, self.root = pafs.LocalFileSystem(), str(local / name)
            self.local_dir = local / name
            self.disk_dir = self.local_dir

    @property
    def uri(self) -> str:
        return f"{self.storage}/{self.name}"

    def exists(self) -> bool:
        info = self.fs.get_file_info(self.root)
        return info.type != pafs.FileType.NotFound

    def has(self, relative: str) -> bool:
        return self.fs.get_file_info(f"{self.root}/{relative}").type == pafs.FileType.File

    def make(self) -> None:
        self.fs.create_dir(self.root, recursive=True)

    def read_bytes(self, relative: str) -> bytes:
        with self.fs.open_input_stream(f"{self.root}/{relative}") as f:
            return f.read()

    def write_bytes(self, relative: str, data: bytes) -> None:
        """Write through a temporary name beside the file, then rename."""
        final = f"{self.root}/{relative}"
        folder, _, leaf = final.rpartition("/")
        tmp = f"{folder}/.{leaf}.tmp"
        with self.fs.open_output_stream(tmp) as out:
            out.write(data)
        self.fs.move(tmp, final)

    def journal_path(self, filename: str) -> Path:
        if self.local_dir is not None:
            return self.local_dir / filename
        key = hashlib.sha256(self.uri.encode()).hexdigest()[:16]
        mirror = Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "tune_gems")) / "studies" / key
        mirror.mkdir(parents=True, exist_ok=True)
        return mirror / filename

    def pull_journal(self, filename: str) -> None:
        if self.local_dir is None and self.has(filename):
            pafs.copy_files(f"{self.root}/{filename}", str(self.journal_path(filename)), source_filesystem=self.fs)

    def push_journal(self, filename: str) -> None:
        if self.local_dir is None and self.journal_path(filename).is_file():
            self.write_bytes(filename, self.journal_path(filename).read_bytes())
