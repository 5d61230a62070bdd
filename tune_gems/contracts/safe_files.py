"""Writing a file inside an output folder without ever writing through a symlink.

Why: a symlink (or a FIFO, a folder) planted in a run folder under the name of a file the tool
writes, or of its temporary name (`.history.csv.tmp`, `checkpoint.pt.tmp`, ...), would make
`train` or `sweep --resume` write into whatever it points to: a user's file, exit 0. Every
write here goes to a temporary name opened with `O_CREAT | O_EXCL | O_NOFOLLOW` (after a stale
entry of that name, which only the tool creates, is unlinked: unlinking a symlink removes the
link, never its target) and is then renamed over the final name (a rename replaces a symlink
itself, it does not follow it). `entry_kind` tells what a path is without following it, for the
up-front refusals in tune_gems.contracts.outputs.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from pathlib import Path
from typing import IO, Iterator

from tune_gems.contracts.errors import OutputError

HASH_CHUNK = 1 << 20
"""Bytes read at a time when hashing a file."""


def entry_kind(path: str | Path) -> str | None:
    """'file', 'folder', 'symlink', 'FIFO', 'socket', 'device' for what `path` is (not followed),
    or None when nothing is there."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError:
        return "unreadable entry"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device"


def require_regular(path: str | Path, field: str, what: str = "file") -> None:
    """OutputError (one line naming `field` and the path) unless `path` is absent or a regular file."""
    kind = entry_kind(path)
    if kind not in (None, "file"):
        raise OutputError(f"{field}: {path} is a {kind}, not a regular {what}; remove it (tune-gems never writes through it)")


def tmp_name(path: Path) -> Path:
    """The temporary name a file is written under before it is renamed into place."""
    return path.with_name(f".{path.name}.tmp")


@contextlib.contextmanager
def open_atomic(path: str | Path, tmp: str | Path | None = None, field: str = "--out") -> Iterator[IO[bytes]]:
    """A binary file that becomes `path` when the block ends without an error (renamed from
    `tmp`, default `tmp_name(path)`); never follows a symlink at either name."""
    path = Path(path)
    tmp = Path(tmp) if tmp is not None else tmp_name(path)
    if entry_kind(tmp) == "folder":
        raise OutputError(f"{field}: {tmp} is a folder, not a temporary file of tune-gems; remove it")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a stale temporary file, or a planted link: the link goes, never its target
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if entry_kind(path) == "folder":
        os.unlink(tmp)
        raise OutputError(f"{field}: {path} is a folder, not a file tune-gems writes; remove it")
    os.replace(tmp, path)


def write_atomic(path: str | Path, data: bytes | str, tmp: str | Path | None = None) -> None:
    """Write `data` to `path` through `open_atomic`."""
    with open_atomic(path, tmp) as f:
        f.write(data.encode() if isinstance(data, str) else data)


def sha256_file(path: str | Path) -> str:
    """The SHA-256 of a file's bytes (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(HASH_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
