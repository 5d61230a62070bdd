"""Output folders that are safe to write: the one module every writing command goes through.

Why: a results tool that deletes what its user owns, or lets two runs interleave their files in
one folder, is worse than no tool. The rules, for `train`, `sweep` and `analyze` alike:

- **Marker.** Every folder a command creates gets `MARKER_FILE` (JSON naming the tool and the
  command kind). `--overwrite` only ever replaces a folder carrying the marker of the same kind:
  anything else (a user's folder, an experiment, a train run) is refused, never deleted.
- **Inputs and results are never outputs.** An output folder that is, contains or lies inside an
  input of the command, or a folder holding sweep/train results, is refused.
- **Writable, checked up front.** A path that is a file, lies under a file, is in a
  pseudo-filesystem (/proc, /sys, ...), or whose nearest existing folder is read-only or cannot
  be listed is refused before anything is computed.
- **One writer.** `OutputLock` holds an advisory lock (`LOCK_FILE`, `filelock`: an `fcntl.flock`) for as long
  as a command writes; a second writer is refused in one line naming the holder's pid. A lock
  left by a dead process is no obstacle: the kernel releases `flock` locks with their process.
- **Names are names.** `check_name` accepts one portable path component only; a path with a
  component longer than `COMPONENT_MAX` bytes or longer than `PATH_MAX` bytes in all is refused.
- **No symlinks.** An output folder given as a symlink, or one holding a symlink, FIFO, socket or
  device at its top level (where the lock, the marker and every temporary file live), is
  refused; the lock and the marker are opened with `O_NOFOLLOW` (tune_gems.safe_files).
- **`--overwrite` removes only what the command wrote.** An analysis lists every file it wrote
  in its marker (`MARKER_FILES_KEY`); replacing that folder is refused while it holds anything
  not listed (a user's notes, a run kept three levels down), and only listed files are deleted.

All refusals are `TuneGemsError` subclasses with one line naming the field and the path, so the
CLI prints them and exits 2.

Typical use (a command that writes a fresh folder, or continues its own)::

    out = check_output_folder(out, kind="train", field="--out", resume=resume)
    make_output_folder(out, kind="train")
    with OutputLock(out, field="--out"):
        ...write...

and for a command that builds its result in a temporary folder and publishes it at the end
(analysis)::

    out = check_output_folder(out, kind="analyze", inputs=experiments, overwrite=overwrite)
    tmp = <temporary folder beside out>; write_marker(tmp, "analyze"); ...write into tmp...
    publish_folder(tmp, out, kind="analyze", overwrite=overwrite)
"""

from __future__ import annotations

from tune_gems.result_files import (
    CHECKPOINT_FILE, CONFIG_FILE, HISTORY_CSV, HISTORY_FILE, JOURNAL_FILE, JOURNAL_LOCK_SUFFIX, MEMBERS_CSV, MEMBERS_FILE, SUMMARY_FILE,
    TRIALS_FILE,
)

import contextlib
import datetime as _dt
import errno
import json
import os
import re
import socket
import stat
import tempfile
from pathlib import Path
from typing import Any, Iterable

from tune_gems.errors import BadNameError, OutputError, OutputExistsError, OutputInUseError
from tune_gems.safe_files import entry_kind, require_regular, write_atomic

MARKER_FILE = ".tune-gems-output.json"
"""Written by the tool into every folder it creates; `--overwrite` needs it."""
LOCK_FILE = ".tune-gems.lock"
"""The one-writer lock of an output folder (holds the pid, host and start time of the writer)."""
MARKER_VERSION = 1
LOCK_ATTEMPTS = 5
LOCK_RETRY_S = 0.02
KINDS = ("train", "sweep", "analyze", "confirm")
MARKER_FILES_KEY = "files"
"""The marker's list of the files (relative paths) its command wrote: what `--overwrite` may delete."""
COMPONENT_MAX = 255
"""Longest path component in bytes (the limit of every common filesystem)."""
PATH_MAX = 4095
"""Longest path in bytes (Linux PATH_MAX less the terminating NUL)."""

NAME_MAX = 100
"""Longest user-given name that becomes a path component (well inside every filesystem's 255)."""
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_WINDOWS_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)), *(f"lpt{i}" for i in range(1, 10))}

PSEUDO_FILESYSTEMS = frozenset(
    "proc sysfs devtmpfs devpts cgroup cgroup2 debugfs tracefs securityfs pstore bpf configfs "
    "fusectl mqueue hugetlbfs efivarfs autofs binfmt_misc rpc_pipefs nsfs".split()
)
PSEUDO_ROOTS = (Path("/proc"), Path("/sys"))
"""Refused by path even where the mount table is unreadable."""

SWEEP_SIGNS = (TRIALS_FILE, HISTORY_FILE, MEMBERS_FILE, "tuner.pkl", JOURNAL_FILE)
"""Files only a sweep's experiment folder holds (a spec.yaml alone may be a user's spec)."""
TRAIN_SIGNS = (CHECKPOINT_FILE, HISTORY_CSV, MEMBERS_CSV, SUMMARY_FILE)
SCAN_DEPTH = 2
"""How deep below an output folder `check_output_folder` looks for results it must not replace."""
SCAN_LIMIT = 2000
"""At most this many folders are inspected by that scan (a huge tree is refused, not walked)."""


# -- names ---------------------------------------------------------------------------------------


def check_name(name: str, field: str, root: str | Path | None = None) -> str:
    """`name` if it is one portable path component, else `BadNameError` naming `field`.

    Portable: ASCII letters, digits, '.', '_' and '-', starting with a letter or digit (so
    never '.', '..', hidden, or an option), at most `NAME_MAX` characters, not a Windows device
    name. With `root`, the resolved `root/name` must also stay directly inside `root` (a
    symlink named `name` pointing elsewhere is refused)."""
    if not isinstance(name, str) or not name:
        raise BadNameError(f"{field}: empty name")
    shown = name if len(name) <= 60 else name[:57] + "..."
    if len(name) > NAME_MAX:
        raise BadNameError(f"{field}: {shown!r} is {len(name)} characters; at most {NAME_MAX}")
    if "/" in name or "\\" in name or name in (".", ".."):
        raise BadNameError(f"{field}: {shown!r} must be one folder name, without '/' or '..'")
    if not _NAME_RE.match(name) or ".." in name:
        raise BadNameError(
            f"{field}: {shown!r} may use only letters, digits, '.', '_' and '-', starting with a letter or digit"
        )
    if name.split(".")[0].lower() in _WINDOWS_RESERVED:
        raise BadNameError(f"{field}: {shown!r} is a reserved device name on Windows")
    if root is not None:
        base = Path(root).expanduser().resolve()
        target = (base / name).resolve()
        if target.parent != base:
            raise BadNameError(f"{field}: {shown!r} resolves to {target}, outside {base}")
    return name


# -- markers -------------------------------------------------------------------------------------


def marker_body(kind: str, **fields: Any) -> dict[str, Any]:
    """The marker of a `tune-gems <kind>` folder, with extra `fields` (e.g. the files it wrote,
    the checksums of what it recorded)."""
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}")
    return {"tool": "tune-gems", "kind": kind, "version": MARKER_VERSION,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(), **fields}


def write_marker(folder: str | Path, kind: str, **fields: Any) -> None:
    """Mark `folder` as written by `tune-gems <kind>` (creating nothing else; never through a symlink)."""
    write_atomic(Path(folder, MARKER_FILE), json.dumps(marker_body(kind, **fields)) + "\n")


def update_marker(folder: str | Path, **fields: Any) -> None:
    """Add or replace `fields` in the marker of `folder` (which must carry one)."""
    body = read_marker(folder)
    if body is None:
        raise ValueError(f"{folder}: no tune-gems marker to update")
    write_atomic(Path(folder, MARKER_FILE), json.dumps({**body, **fields}) + "\n")


def read_marker(folder: str | Path) -> dict[str, Any] | None:
    """The marker of `folder`, or None when absent or unreadable (a foreign file of that name
    counts as absent: it never authorises a replacement)."""
    if entry_kind(Path(folder, MARKER_FILE)) != "file":
        return None  # a symlinked marker is foreign: it authorises nothing
    try:
        body = json.loads(Path(folder, MARKER_FILE).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(body, dict) or body.get("tool") != "tune-gems" or body.get("kind") not in KINDS:
        return None
    return body


def marker_kind(folder: str | Path) -> str | None:
    m = read_marker(folder)
    return m["kind"] if m else None


def make_output_folder(folder: str | Path, kind: str) -> Path:
    """Create `folder` (and parents) and mark it; an existing folder keeps its marker, or gets
    one when it is empty (apart from a lock)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if read_marker(folder) is None and not _entries(folder, ignore=(LOCK_FILE, MARKER_FILE)):
        write_marker(folder, kind)
    return folder


# -- what a folder holds -------------------------------------------------------------------------


def results_kind(folder: str | Path) -> str | None:
    """'sweep', 'train' or 'analyze' when `folder` holds that command's results (by marker, or
    by the files such results consist of, for folders written before markers existed); else None."""
    folder = Path(folder)
    kind = marker_kind(folder)
    if kind is not None:
        return kind
    try:
        names = set(os.listdir(folder))
    except OSError:
        return None
    if names & set(SWEEP_SIGNS) or any(n.startswith("experiment_state") for n in names):
        return "sweep"
    if CONFIG_FILE in names and names & set(TRAIN_SIGNS):
        return "train"
    return None


def _entries(folder: Path, ignore: Iterable[str] = ()) -> list[str]:
    skip = set(ignore)
    return [n for n in os.listdir(folder) if n not in skip]


def _results_below(folder: Path, own_kind: str | None) -> Path | None:
    """The first folder at or below `folder` (to `SCAN_DEPTH`) holding results other than a
    `own_kind` folder's own; None when there is none."""
    seen = 0
    level = [folder]
    for depth in range(SCAN_DEPTH + 1):
        nxt: list[Path] = []
        for d in level:
            seen += 1
            if seen > SCAN_LIMIT:
                return d
            kind = results_kind(d)
            if kind is not None and not (d == folder and kind == own_kind):
                return d
            if depth < SCAN_DEPTH:
                try:
                    nxt.extend(p for p in (d / n for n in sorted(os.listdir(d))) if p.is_dir() and not p.is_symlink())
                except OSError:
                    continue
        level = nxt
    return None


# -- filesystems ---------------------------------------------------------------------------------


def _mount_table() -> list[tuple[Path, str]]:
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) >= 3:
            out.append((Path(parts[1].replace("\\040", " ")), parts[2]))
    return out


def filesystem_type(path: str | Path) -> str | None:
    """The type of the filesystem `path` lies on (longest matching mount point), if known."""
    path = Path(path)
    best, fstype = -1, None
    for mount, kind in _mount_table():
        if (path == mount or mount in path.parents) and len(mount.parts) > best:
            best, fstype = len(mount.parts), kind
    return fstype


def is_pseudo_filesystem(path: str | Path) -> bool:
    path = Path(path)
    if any(path == r or r in path.parents for r in PSEUDO_ROOTS):
        return True
    return filesystem_type(path) in PSEUDO_FILESYSTEMS


def check_writable(folder: str | Path, field: str = "--out") -> Path:
    """The resolved `folder` if it can be created (or written) here; `OutputError` naming the
    field otherwise: a file, under a file, a pseudo-filesystem, a read-only or unlistable
    folder. Probes with a real temporary file (os.access alone misses read-only mounts), which
    is removed at once."""
    path = Path(folder).expanduser()
    check_path_length(path, field)
    try:
        path = path.resolve()
    except (OSError, RuntimeError) as e:  # symlink loops
        raise OutputError(f"{field}: {folder}: cannot resolve the path ({e})") from None
    if is_pseudo_filesystem(path):
        raise OutputError(f"{field}: {path} is in a pseudo-filesystem ({filesystem_type(path) or 'system'}); choose a normal folder")
    existing = path
    while not existing.exists():  # resolved: symlinks (dangling ones too) are followed already
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing == path else f"lies under a file ({existing})"
        raise OutputError(f"{field}: {path} {what}, not a folder")
    if not os.access(existing, os.R_OK | os.X_OK):
        raise OutputError(f"{field}: {existing} cannot be listed (permission denied)")
    if not os.access(existing, os.W_OK):
        raise OutputError(f"{field}: {existing} is read-only (permission denied)")
    try:
        fd, probe = tempfile.mkstemp(prefix=".tune-gems-probe-", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        why = "read-only filesystem" if e.errno == errno.EROFS else (e.strerror or type(e).__name__)
        raise OutputError(f"{field}: cannot write in {existing} ({why})") from None
    return path


def check_path_length(path: str | Path, field: str) -> None:
    """OutputError when a component of `path` is over `COMPONENT_MAX` bytes or the whole
    (absolute) path over `PATH_MAX` bytes: the filesystem would refuse it half-way through."""
    text = os.fsencode(os.path.abspath(os.fspath(path)))
    for part in text.split(b"/"):
        if len(part) > COMPONENT_MAX:
            shown = os.fsdecode(part)[:40]
            raise OutputError(f"{field}: the path component {shown!r}... is {len(part)} bytes; at most {COMPONENT_MAX}")
    if len(text) > PATH_MAX:
        raise OutputError(f"{field}: the path is {len(text)} bytes long; at most {PATH_MAX}")


def check_top_entries(folder: Path, field: str) -> None:
    """OutputError naming the first symlink, FIFO, socket or device in `folder` or up to
    `SCAN_DEPTH` levels below it (at most `SCAN_LIMIT` entries looked at): the lock, the
    marker, every temporary file of a command and a sweep's per-trial files live there, and
    none may be written through (tune_gems.safe_files)."""
    level, seen = [folder], 0
    for _depth in range(SCAN_DEPTH + 1):
        nxt: list[Path] = []
        for d in level:
            try:
                names = sorted(os.listdir(d))
            except OSError:
                continue
            for name in names:
                seen += 1
                if seen > SCAN_LIMIT:
                    return
                kind = entry_kind(d / name)
                if kind == "folder":
                    nxt.append(d / name)
                elif kind != "file" and not is_journal_lock(d / name):
                    raise OutputError(f"{field}: {d / name} is a {kind}; tune-gems writes no such entry and never writes through one: remove it")
        level = nxt


def is_journal_lock(path: Path) -> bool:
    """Whether `path` is Optuna's own lock of the study journal beside it: a symlink
    `optuna_journal.log.lock` pointing at `optuna_journal.log` (optuna's JournalFileSymlinkLock
    creates it around every journal write, and a driver killed during one leaves it behind).
    tune-gems never writes through it; `--resume` removes it (sweep.search.clear_stale_journal_lock)."""
    if path.name != JOURNAL_FILE + JOURNAL_LOCK_SUFFIX or not path.is_symlink():
        return False
    try:
        target = Path(os.readlink(path))
    except OSError:
        return False
    return (target if target.is_absolute() else path.parent / target) == path.parent / JOURNAL_FILE


def unlisted_files(folder: Path) -> list[str]:
    """Paths (relative) below `folder` that its marker does not list as written by its
    command (symlinks and special files included; the marker and lock excepted)."""
    body = read_marker(folder) or {}
    listed = body.get(MARKER_FILES_KEY)
    listed = {str(p) for p in listed} if isinstance(listed, list) else set()
    out: list[str] = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        rel_root = Path(root).relative_to(folder)
        for name in sorted(files) + sorted(d for d in dirs if (Path(root) / d).is_symlink()):
            rel = str(rel_root / name) if str(rel_root) != "." else name
            if rel in (MARKER_FILE, LOCK_FILE):
                continue
            if rel not in listed or entry_kind(Path(root) / name) != "file":
                out.append(rel)
        if len(out) > 0:
            break
    return out


def written_files(folder: Path) -> list[str]:
    """Every regular file below `folder` (relative paths, sorted), bar the marker and lock:
    what a command that built `folder` lists in its marker."""
    out = []
    for root, _dirs, files in os.walk(folder, followlinks=False):
        for name in files:
            rel = str((Path(root) / name).relative_to(folder))
            if rel not in (MARKER_FILE, LOCK_FILE) and entry_kind(Path(root) / name) == "file":
                out.append(rel)
    return sorted(out)


# -- the combined check --------------------------------------------------------------------------


def _relation(out: Path, other: Path) -> str | None:
    if out == other:
        return "is"
    if other in out.parents:
        return "lies inside"
    if out in other.parents:
        return "contains"
    return None


def check_output_folder(
    folder: str | Path,
    *,
    kind: str,
    field: str = "--out",
    inputs: Iterable[str | Path] = (),
    overwrite: bool = False,
    resume: bool = False,
    allow_inside: Iterable[str | Path] = (),
) -> Path:
    """Every up-front check of an output folder; returns its resolved path. Writes nothing.

    - `inputs`: folders or files the command reads; the output may not be, contain or lie
      inside any of them.
    - No ancestor of the output may hold sweep/train results, except the folders listed in
      `allow_inside` (e.g. analysis's default `<experiment>/analysis`).
    - The output itself, or anything up to `SCAN_DEPTH` below it, may not hold results other
      than its own kind's (so `--out` on a folder of experiments is refused).
    - An existing non-empty output folder is refused (`OutputExistsError`) unless `resume`
      (continue it: it must carry this kind's marker or hold this kind's results) or
      `overwrite` (replace it: it must carry this kind's marker).
    - Writability (`check_writable`)."""
    check_path_length(Path(folder).expanduser(), field)
    if Path(folder).expanduser().is_symlink():
        raise OutputError(f"{field}: {folder} is a symlink; give the folder itself (tune-gems never writes through a symlink)")
    out = check_writable(folder, field)
    allowed = {Path(a).expanduser().resolve() for a in allow_inside}
    for inp in inputs:
        ip = Path(inp).expanduser().resolve()
        rel = _relation(out, ip)
        if rel == "lies inside" and ip in allowed:
            continue
        if rel is not None:
            raise OutputError(f"{field}: {out} {rel} the input {ip}; write the output somewhere else")
    for parent in out.parents:
        if parent in allowed:
            break
        pk = results_kind(parent)
        if pk is not None and pk != "analyze":
            raise OutputError(f"{field}: {out} lies inside {parent}, which holds {pk} results; write the output somewhere else")
    if not out.exists():
        return out
    if not os.access(out, os.R_OK | os.X_OK | os.W_OK):
        raise OutputError(f"{field}: {out} is not readable and writable (permission denied)")
    check_top_entries(out, field)
    OutputLock(out, field).check_free()  # a live writer is named first, whatever else holds
    entries = _entries(out, ignore=(LOCK_FILE,))
    if not entries or (entries == [MARKER_FILE] and marker_kind(out) == kind):
        return out  # empty, or only this kind's marker (a run that stopped before writing anything)
    own = results_kind(out)
    below = _results_below(out, own_kind=kind)
    if below is not None:
        where = "holds" if below == out else f"contains {below}, which holds"
        raise OutputError(f"{field}: {out} {where} {results_kind(below) or 'too many'} results; write the output somewhere else")
    if resume:
        if own != kind:
            raise OutputError(f"{field}: {out} was not written by tune-gems {kind}; nothing to resume there")
        return out
    if not overwrite:
        raise OutputExistsError(f"{field}: {out} exists and is not empty; choose another folder" + (" or pass --overwrite" if kind == "analyze" else ""))
    if marker_kind(out) != kind:
        raise OutputError(
            f"{field}: {out} was not written by tune-gems {kind} (no {MARKER_FILE}); --overwrite replaces only such folders"
        )
    foreign = unlisted_files(out)
    if foreign:
        raise OutputError(
            f"{field}: {out / foreign[0]} was not written by tune-gems {kind} (not listed in its {MARKER_FILE}); "
            "--overwrite deletes only the files the command wrote: move it away or choose another --out"
        )
    return out


def publish_folder(tmp: str | Path, out: str | Path, *, kind: str, overwrite: bool = False) -> Path:
    """Move the finished folder `tmp` (which must carry `kind`'s marker) to `out`. An existing
    `out` is replaced only with `overwrite` and only when it carries `kind`'s marker (checked
    again here, just before): it is renamed aside, `tmp` renamed in, and the old one deleted."""
    tmp, out = Path(tmp), Path(out)
    if marker_kind(tmp) != kind:
        raise ValueError(f"{tmp}: the folder to publish carries no {kind} marker")
    if out.exists() and (not out.is_dir() or _entries(out)):
        if not overwrite:
            raise OutputExistsError(f"{out}: exists and is not empty")
        if out.is_symlink() or marker_kind(out) != kind or _results_below(out, own_kind=kind) is not None or unlisted_files(out):
            raise OutputError(f"{out}: was not written by tune-gems {kind}; refusing to replace it")
        aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        old = aside / out.name
        os.replace(out, old)
        os.replace(tmp, out)
        _remove_listed(old)
        with contextlib.suppress(OSError):
            aside.rmdir()  # left in place (never deleted) when something unlisted appeared meanwhile
        return out
    if out.exists():
        out.rmdir()  # empty
    os.replace(tmp, out)
    return out


# -- one writer ----------------------------------------------------------------------------------


def _remove_listed(folder: Path) -> None:
    """Delete the files `folder`'s marker lists (regular files only, never through a symlink),
    then the marker, the lock and the folders left empty; anything else stays."""
    listed = (read_marker(folder) or {}).get(MARKER_FILES_KEY) or []
    for rel in [*listed, MARKER_FILE, LOCK_FILE]:
        p = folder / str(rel)
        if ".." not in Path(str(rel)).parts and entry_kind(p) == "file" and not any(q.is_symlink() for q in p.parents if folder in q.parents):
            p.unlink()
    for root, _dirs, _files in sorted(os.walk(folder, topdown=False, followlinks=False), key=lambda t: -len(t[0])):
        with contextlib.suppress(OSError):
            os.rmdir(root)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class OutputLock:
    """The one-writer lock of an output folder, as a context manager (or acquire/release).

    Held through `filelock.FileLock` (an `fcntl.flock` on `folder/LOCK_FILE`), which the kernel
    releases when the holder dies, so a lock file left by a killed run never blocks the next one. Where `flock` is not
    supported (some network filesystems), the pid written in the file decides: a live pid on
    this host holds the lock, a dead one is taken over. The file stays after release (removing
    a flock'd file races with a waiting writer); its content describes the last holder."""

    def __init__(self, folder: str | Path, field: str = "--out"):
        self.folder = Path(folder)
        self.field = field
        self.path = self.folder / LOCK_FILE
        self._lock = None  # the filelock.FileLock held (None: not held, or no flock on this filesystem)

    def _holder(self) -> str:
        try:
            info = json.loads(self.path.read_text())
            return f"pid {info.get('pid')} on {info.get('host')}, since {info.get('since')}"
        except (OSError, ValueError):
            return "another process"

    def _open(self, flags: int) -> int:
        """The lock file's descriptor, opened without following a symlink; OutputError (one
        line) when the lock path is a symlink, a folder, a FIFO or anything but a regular file."""
        require_regular(self.path, self.field, "lock file")
        try:
            fd = os.open(self.path, flags | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK, 0o644)
        except OSError as e:
            raise OutputError(f"{self.field}: {self.path}: cannot open the lock file ({e.strerror})") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped in between the check and the open
            os.close(fd)
            require_regular(self.path, self.field, "lock file")
            raise OutputError(f"{self.field}: {self.path} is not a regular lock file; remove it")
        return fd

    def acquire(self) -> "OutputLock":
        from filelock import FileLock, Timeout

        os.close(self._open(os.O_RDWR | os.O_CREAT))  # created here, never through a symlink, FIFO or folder

        lock = FileLock(self.path, timeout=LOCK_ATTEMPTS * LOCK_RETRY_S, poll_interval=LOCK_RETRY_S, mode=0o644,
                        thread_local=False, fallback_to_soft=False)  # a soft lock would outlive a killed run
        try:
            lock.acquire()  # a `check_free` probe holds it for microseconds: retried until the timeout
        except Timeout:
            raise OutputInUseError(
                f"{self.field}: {self.folder} is being written by {self._holder()}; wait for it or choose another folder"
            ) from None
        except OSError:  # no flock here: fall back to the recorded pid
            lock = None
            try:
                info = json.loads(self.path.read_text() or "{}")
            except (OSError, ValueError):
                info = {}
            pid = info.get("pid")
            if isinstance(pid, int) and pid != os.getpid() and info.get("host") == socket.gethostname() and _pid_alive(pid):
                raise OutputInUseError(
                    f"{self.field}: {self.folder} is being written by {self._holder()}; wait for it or choose another folder"
                ) from None
        body = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})
        fd = self._open(os.O_RDWR | os.O_CREAT)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (body + "\n").encode(), 0)
        finally:
            os.close(fd)
        self._lock = lock
        return self

    def check_free(self) -> None:
        """OutputInUseError when a live process holds the lock; takes nothing, writes nothing
        (a folder without a lock file is free)."""
        if entry_kind(self.path) is None:
            return
        fd = self._open(os.O_RDONLY)
        try:
            import fcntl
        except ImportError:
            os.close(fd)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputInUseError(
                f"{self.field}: {self.folder} is being written by {self._holder()}; wait for it or choose another folder"
            ) from None
        except OSError:
            pass
        finally:
            os.close(fd)

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()  # the lock file stays: removing it races with a waiting writer
        self._lock = None

    def __enter__(self) -> "OutputLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
