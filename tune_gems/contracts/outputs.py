"""Output folders safe to write: the one module every writing command goes through (docs/robustness.md
"Output folders"); every refusal is one line naming the field and path."""

from __future__ import annotations

from tune_gems.contracts.result_files import (CHECKPOINT_FILE, CONFIG_FILE, HISTORY_CSV, HISTORY_FILE, JOURNAL_FILE,
                                              JOURNAL_LOCK_SUFFIX, MEMBERS_CSV, MEMBERS_FILE, SUMMARY_FILE, TRIALS_FILE)

import contextlib
import datetime as _dt
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

from tune_gems.contracts.cpu_environment import cpu_record
from tune_gems.contracts.errors import OutputError, OutputExistsError
from tune_gems.contracts.output_lock import LOCK_FILE, OutputLock
from tune_gems.contracts.paths import check_path_length, check_writable
from tune_gems.contracts.safe_files import entry_kind, read_regular, write_atomic

MARKER_FILE = ".tune-gems-output.json"
"""Written by the tool into every folder it creates; `--overwrite` needs it."""
MARKER_VERSION = 1
KINDS = ("train", "sweep", "analyze", "confirm")
MARKER_FILES_KEY = "files"
"""The marker's list of the files (relative paths) its command wrote: what `--overwrite` may delete."""
CPU_KEY = "cpu_environment"
TRAINING_KINDS = ("train", "sweep", "confirm")
"""The kinds whose markers record the CPU environment (`cpu_record`): their commands train."""
SWEEP_SIGNS = (TRIALS_FILE, HISTORY_FILE, MEMBERS_FILE, "tuner.pkl", JOURNAL_FILE)
"""Files only a sweep's experiment folder holds (a spec.yaml alone may be a user's spec)."""
TRAIN_SIGNS = (CHECKPOINT_FILE, HISTORY_CSV, MEMBERS_CSV, SUMMARY_FILE)
SCAN_DEPTH = 2
"""How deep below an output folder the checks look (results, symlinks)."""
SCAN_LIMIT = 2000
"""At most this many folders or entries looked at by a scan (a huge tree is refused, not walked)."""


def marker_body(kind: str, **fields: Any) -> dict[str, Any]:
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}")
    cpu = {CPU_KEY: [cpu_record()]} if kind in TRAINING_KINDS else {}
    return {"tool": "tune-gems", "kind": kind, "version": MARKER_VERSION,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(), **cpu, **fields}


def write_marker(folder: str | Path, kind: str, **fields: Any) -> None:
    write_atomic(Path(folder, MARKER_FILE), json.dumps(marker_body(kind, **fields)) + "\n")


def update_marker(folder: str | Path, **fields: Any) -> None:
    """Add `fields` to `folder`'s marker (a training kind's also records a changed CPU environment)."""
    body = read_marker(folder)
    if body is None:
        raise ValueError(f"{folder}: no tune-gems marker to update")
    if body["kind"] in TRAINING_KINDS:
        seen = body.get(CPU_KEY) if isinstance(body.get(CPU_KEY), list) else []
        body[CPU_KEY] = seen if seen and seen[-1] == cpu_record() else [*seen, cpu_record()]
    write_atomic(Path(folder, MARKER_FILE), json.dumps({**body, **fields}) + "\n")


MARKER_MAX_BYTES = 1 << 20


def parse_marker(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """(body, None) for a tune-gems marker's bytes, else (None, why not)."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None, "not valid JSON (not a marker tune-gems wrote)"
    if not isinstance(body, dict) or body.get("tool") != "tune-gems" or body.get("kind") not in KINDS:
        return None, "not a tune-gems marker (no tool/kind of tune-gems)"
    version = body.get("version")
    if type(version) is not int or version != MARKER_VERSION:
        return None, (f"claims format version {json.dumps(version)[:20]}, and this tune-gems reads version {MARKER_VERSION} "
                      "only (written by a newer tune-gems, or edited)")
    return body, None


def marker_state(folder: str | Path) -> tuple[dict[str, Any] | None, str | None]:
    """(the marker of `folder`, None), or (None, why not); read non-blocking, never through a link."""
    path = Path(folder, MARKER_FILE)
    kind = entry_kind(path)
    if kind is None:
        return None, "missing"
    if kind != "file":
        return None, f"is a {kind}, not the marker tune-gems writes"
    try:
        raw = read_regular(path, MARKER_MAX_BYTES, None, OutputError, follow=False)
    except OutputError as e:
        return None, str(e).removeprefix(str(path)).lstrip(":").strip() or "unreadable"
    return parse_marker(raw)


def read_marker(folder: str | Path) -> dict[str, Any] | None:
    """The marker of `folder`, or None (absent, unreadable or foreign: never authorising a replacement)."""
    return marker_state(folder)[0]


def marker_kind(folder: str | Path) -> str | None:
    m = read_marker(folder)
    return m["kind"] if m else None


def make_output_folder(folder: str | Path, kind: str) -> Path:
    """Create and mark `folder` (an existing one keeps its marker, or gets one when empty)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if read_marker(folder) is None and not _entries(folder, ignore=(LOCK_FILE, MARKER_FILE)):
        write_marker(folder, kind)
    return folder


def results_kind(folder: str | Path) -> str | None:
    """'sweep', 'train' or 'analyze' when `folder` holds that command's results, else None."""
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
    """The first folder at or below `folder` with results other than an `own_kind` folder's own, or None."""
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


def check_top_entries(folder: Path, field: str) -> None:
    """OutputError naming the first symlink, FIFO, socket or device in `folder` (to `SCAN_DEPTH`)."""
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
    """Whether `path` is Optuna's journal lock, a symlink to the journal beside it."""
    if path.name != JOURNAL_FILE + JOURNAL_LOCK_SUFFIX or not path.is_symlink():
        return False
    try:
        target = Path(os.readlink(path))
    except OSError:
        return False
    return (target if target.is_absolute() else path.parent / target) == path.parent / JOURNAL_FILE


def listed_files(folder: str | Path, field: str = "--out") -> list[str]:
    """The files `folder`'s marker lists; OutputError for one that is no plain relative path inside it
    (`folder / "/abs"` is "/abs"), before anything is deleted."""
    folder = Path(folder)
    listed = (read_marker(folder) or {}).get(MARKER_FILES_KEY)
    if listed is None:
        return []
    where = f"{field}: {folder / MARKER_FILE}"
    if not isinstance(listed, list):
        raise OutputError(f"{where}: its {MARKER_FILES_KEY!r} is not a list of paths; tune-gems wrote no such marker: "
                          "move the folder away or choose another --out")
    try:
        root = folder.resolve(strict=True)
    except (OSError, RuntimeError) as e:
        raise OutputError(f"{where}: the folder cannot be resolved ({e})") from None
    for rel in listed:
        why = _listed_path_problem(root, rel)
        if why is not None:
            raise OutputError(f"{where} lists {str(rel)[:200]!r}, {why}; a marker lists only files inside its folder, "
                              "so nothing was deleted: move the folder away or choose another --out")
    return [str(rel) for rel in listed]


def _listed_path_problem(root: Path, rel: Any) -> str | None:
    """Why the listed `rel` is not a plain path inside the (resolved) folder `root`, or None."""
    if not isinstance(rel, str) or not rel or "\0" in rel:
        return "which is not a path"
    path = Path(rel)
    if path.is_absolute():
        return "an absolute path"
    if ".." in path.parts:
        return "a path that climbs out with '..'"
    try:
        target = (root / path).resolve()
    except (OSError, RuntimeError):  # Python 3.11 raises RuntimeError for a symlink loop
        return "a path through a symlink loop"
    if target != root and root not in target.parents:
        return f"which resolves to {target}, outside the folder (through a symlink)"
    if target != root / path:
        return f"which passes through a symlink (to {target})"
    return None


def unlisted_files(folder: Path) -> list[str]:
    """Paths below `folder` its marker does not list (special files included; marker and lock excepted)."""
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
    """Every regular file below `folder` bar the marker and lock, sorted: what its marker lists."""
    out = []
    for root, _dirs, files in os.walk(folder, followlinks=False):
        for name in files:
            rel = str((Path(root) / name).relative_to(folder))
            if rel not in (MARKER_FILE, LOCK_FILE) and entry_kind(Path(root) / name) == "file":
                out.append(rel)
    return sorted(out)


def _relation(out: Path, other: Path) -> str | None:
    if out == other:
        return "is"
    if other in out.parents:
        return "lies inside"
    if out in other.parents:
        return "contains"
    return None


def check_output_folder(folder: str | Path, *, kind: str, field: str = "--out", inputs: Iterable[str | Path] = (),
        overwrite: bool = False, resume: bool = False, allow_inside: Iterable[str | Path] = ()) -> Path:
    """Every up-front check of an output folder; its resolved path, nothing written. A non-empty one is refused unless
    `resume` (this kind's results) or `overwrite` (this kind's marker, nothing unlisted)."""
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
    check_ancestors_free(out, field)
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
    if overwrite and marker_kind(out) == kind:
        listed_files(out, field)  # first: a listed path that leaves the folder is named with its marker
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


def check_ancestors_free(out: Path, field: str) -> None:
    """OutputInUseError when a folder above `out` is held by a live writer."""
    for parent in out.parents:
        if entry_kind(parent / LOCK_FILE) is not None:
            OutputLock(parent, field).check_free()


def temporary_folder(out: Path) -> tuple[Path, int]:
    """(a fresh `.<out>.tmp-*` folder beside `out`, a descriptor holding its flock; close it): a free
    flock marks a killed command's folder."""
    import fcntl

    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o777 & ~mask)  # mkdtemp makes it private
    fd = os.open(tmp, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    fcntl.flock(fd, fcntl.LOCK_EX)
    return tmp, fd


def _held(folder: Path) -> bool:
    import fcntl

    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return True  # not ours to judge: left alone
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)  # releases the probe's own flock


def clear_stale_temporaries(out: Path, kind: str) -> int:
    """Remove the `.<out>.tmp-*` folders a killed `kind` command left (flock free); how many."""
    import shutil

    from tune_gems.contracts.safe_files import tmp_name

    cleared = 0
    for tmp in sorted(out.parent.glob(f".{out.name}.tmp-*")) if out.parent.is_dir() else []:
        if entry_kind(tmp) != "folder" or _held(tmp):
            continue
        if marker_kind(tmp) == kind or {p.name for p in tmp.iterdir()} <= {tmp_name(tmp / MARKER_FILE).name}:
            shutil.rmtree(tmp, ignore_errors=True)
            cleared += 1
    return cleared


def publish_folder(tmp: str | Path, out: str | Path, *, kind: str, overwrite: bool = False) -> Path:
    """Move the finished `tmp` to `out`, replacing an existing `out` only with `overwrite` and `kind`'s marker."""
    tmp, out = Path(tmp), Path(out)
    if marker_kind(tmp) != kind:
        raise ValueError(f"{tmp}: the folder to publish carries no {kind} marker")
    if out.exists() and (not out.is_dir() or _entries(out)):
        if not overwrite:
            raise OutputExistsError(f"{out}: exists and is not empty")
        if not out.is_symlink() and marker_kind(out) == kind:
            listed_files(out)  # checked again just before: every listed path lies inside `out`
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


def _remove_listed(folder: Path) -> None:
    """Delete the listed files (never through a link), marker, lock and emptied folders."""
    try:
        listed = listed_files(folder)
    except OutputError:
        return
    for rel in [*listed, MARKER_FILE, LOCK_FILE]:
        p = folder / str(rel)
        if ".." not in Path(str(rel)).parts and entry_kind(p) == "file" and not any(q.is_symlink() for q in p.parents if folder in q.parents):
            p.unlink()
    for root, _dirs, _files in sorted(os.walk(folder, topdown=False, followlinks=False), key=lambda t: -len(t[0])):
        with contextlib.suppress(OSError):
            os.rmdir(root)
