"""Output files written and read without following a symlink: writes go to an `O_EXCL |
O_NOFOLLOW` temporary renamed into place; reads are non-blocking, bounded, of regular files only."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from pathlib import Path
from typing import IO, Iterator

from tune_gems.contracts.errors import DataError, OutputError, TuneGemsError

HASH_CHUNK = 1 << 20


def entry_kind(path: str | Path) -> str | None:
    """What `path` is, not followed: 'file', 'folder', 'symlink', 'FIFO', 'socket', 'device' or None."""
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
    """OutputError naming `field` and the path unless `path` is absent or a regular file."""
    kind = entry_kind(path)
    if kind not in (None, "file"):
        raise OutputError(f"{field}: {path} is a {kind}, not a regular {what}; remove it (tune-gems never writes through it)")


def require_folder(path: str | Path, field: str) -> None:
    """OutputError naming `field` and the path unless `path` is absent or a real folder."""
    kind = entry_kind(path)
    if kind not in (None, "folder"):
        raise OutputError(f"{field}: {path} is a {kind}, where tune-gems keeps a folder; move it away")


def tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp")


@contextlib.contextmanager
def open_atomic(path: str | Path, tmp: str | Path | None = None, field: str = "--out") -> Iterator[IO[bytes]]:
    """A binary file that becomes `path` when the block ends without error; never through a link."""
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
    with open_atomic(path, tmp) as f:
        f.write(data.encode() if isinstance(data, str) else data)


def _where(path: str | Path, field: str | None) -> str:
    return f"{field}: {path}" if field else str(path)


def _open_regular(path: str | Path, field: str | None, error: type[TuneGemsError], follow: bool) -> tuple[int, os.stat_result]:
    """A read-only descriptor and status of the regular file `path`, else `error` (`follow`: links)."""
    from tune_gems.contracts.paths import path_problem

    where = _where(path, field)
    problem = path_problem(path)
    if problem is not None:
        raise error(f"{where}: {problem}")
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise error(f"{where}: no such file") from None
    except OSError as e:
        kind = entry_kind(path)
        if kind not in (None, "file", "folder"):
            raise error(f"{where} is a {kind}, not a regular file; give the file itself") from None
        raise error(f"{where}: cannot read ({e.strerror or type(e).__name__})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "folder" if stat.S_ISDIR(st.st_mode) else "FIFO" if stat.S_ISFIFO(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode) else "device"
        raise error(f"{where} is a {kind}, not a regular file; give the file itself")
    return fd, st


def read_regular(path: str | Path, max_bytes: int, field: str | None, error: type[TuneGemsError] = DataError,
                 follow: bool = True) -> bytes:
    """The bytes of the regular file `path`, at most `max_bytes`, else `error` naming `field`."""
    fd, st = _open_regular(path, field, error, follow)
    with os.fdopen(fd, "rb") as f:
        if st.st_size > max_bytes:
            raise error(f"{_where(path, field)}: {st.st_size} bytes; at most {max_bytes} are read")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise error(f"{_where(path, field)}: grew past {max_bytes} bytes while being read")
    return data


def sha256_regular(path: str | Path, field: str | None, error: type[TuneGemsError] = DataError) -> str:
    """The SHA-256 (hex) of the regular file `path`, else `error` (also when it grows while read)."""
    fd, st = _open_regular(path, field, error, follow=True)
    h = hashlib.sha256()
    total = 0
    with os.fdopen(fd, "rb") as f:
        for chunk in iter(lambda: f.read(HASH_CHUNK), b""):
            total += len(chunk)
            if total > st.st_size:
                raise error(f"{_where(path, field)}: grew while being read; wait until whatever writes it is done")
            h.update(chunk)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
