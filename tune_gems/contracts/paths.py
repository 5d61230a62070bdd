"""Paths a user names: portable names (`check_name`), lengths and text (`path_problem`), writable folders."""

from __future__ import annotations

import errno
import os
import re
import tempfile
from pathlib import Path

from tune_gems.contracts.errors import BadNameError, ConfigError, OutputError, TuneGemsError, control_characters

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


def check_name(name: str, field: str, root: str | Path | None = None) -> str:
    """`name` if one portable path component (letters, digits, '.', '_', '-', at most `NAME_MAX`, no
    Windows device name; with `root`, lying directly inside it), else `BadNameError` naming `field`."""
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
        problem = resolve_problem(root)
        if problem is not None:
            raise OutputError(f"{field}: {shown!r} cannot be made inside {root}: {problem}")
        base = Path(root).expanduser().resolve()
        target = (base / name).resolve()
        if target.parent != base:
            raise BadNameError(f"{field}: {shown!r} resolves to {target}, outside {base}")
    return name


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
    """The resolved `folder` if it can be created or written (probed with a real file), else `OutputError`."""
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


def path_problem(path: str | Path) -> str | None:
    """Why `path` cannot be used, or None: a control character, or a component or path over the byte limits."""
    raw = os.fspath(path)
    bad = control_characters(raw)
    if bad:
        return f"the path {raw[:60]!r} holds a control character ({bad[0]}); give a name without one"
    text = os.fsencode(os.path.abspath(raw))
    for part in text.split(b"/"):
        if len(part) > COMPONENT_MAX:
            shown = os.fsdecode(part)[:40]
            return f"the path component {shown!r}... is {len(part)} bytes; at most {COMPONENT_MAX}"
    if len(text) > PATH_MAX:
        return f"the path is {len(text)} bytes long; at most {PATH_MAX}"
    return None


def check_path_length(path: str | Path, field: str) -> None:
    problem = path_problem(path)
    if problem is not None:
        raise OutputError(f"{field}: {problem}")


def check_input_path(path: str | Path, field: str, error: type[TuneGemsError] = ConfigError) -> None:
    """`error` naming `field` when the input `path` fails `path_problem` or `resolve_problem`."""
    problem = path_problem(path) or resolve_problem(path)
    if problem is not None:
        raise error(f"{field}: {problem}")


def resolve_problem(path: str | Path) -> str | None:
    """Why `path` cannot be resolved (a symlink loop: `ln -s exp exp`), or None."""
    try:
        Path(path).expanduser().resolve()
    except (OSError, RuntimeError):  # Python 3.11 raises RuntimeError for a loop, later ones OSError (ELOOP)
        return f"{path} is a symlink loop (following it never reaches a file or folder); give the folder itself"
    return None
