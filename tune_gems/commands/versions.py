"""What `tune-gems --version` prints: the library versions from their metadata (no slow imports) and
the package's git commit (`-dirty` when changed; nothing outside a checkout)."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path

LIBRARIES = (("torch", "torch"), ("ray", "Ray"), ("optuna", "Optuna"))
GIT_TIMEOUT_S = 5.0


def library_version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _git(args: list[str], where: Path) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None


def git_commit(where: Path | None = None) -> str | None:
    """The short commit of the checkout holding `where` (default this package), or None."""
    where = where or Path(__file__).resolve().parents[1]
    top = _git(["rev-parse", "--show-toplevel"], where)
    if top is None or top.returncode != 0 or (Path(top.stdout.strip()) / where.name).resolve() != where.resolve():
        return None  # not a checkout, or an installed copy inside some other repository
    head = _git(["rev-parse", "--short=12", "HEAD"], where)
    if head is None or head.returncode != 0 or not head.stdout.strip():
        return None
    diff = _git(["diff", "--quiet", "HEAD", "--", "."], where)
    dirty = diff is not None and diff.returncode == 1
    return head.stdout.strip() + ("-dirty" if dirty else "")


def version_text() -> str:
    from tune_gems import __version__

    libs = ", ".join(f"{name} {library_version(dist)}" for dist, name in LIBRARIES)
    commit = git_commit()
    where = f"; git commit {commit}" if commit else ""
    return f"tune-gems {__version__} (python {platform.python_version()}, {libs}{where})"
