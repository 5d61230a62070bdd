"""How many intra-op threads a CPU run outside Ray uses: one per process, as a sweep's trials,
unless `--threads`, OMP_NUM_THREADS or MKL_NUM_THREADS say otherwise; torch's one per core only
waits on a shared box (`train` on 2 cores: 250.6 s against 14.1 s). Speed, not bits."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from tune_gems.contracts.cpu_environment import THREAD_ENVS, thread_count

CGROUP_ROOT = Path("/sys/fs/cgroup")
THREADS_FLAG = "--threads"


@dataclass(frozen=True)
class ThreadChoice:
    """This process's intra-op thread count and where it came from (one phrase)."""

    threads: int
    source: str

    def line(self) -> str:
        return f"{self.threads} CPU thread(s) ({self.source})"


def _cgroup_dirs(proc_cgroup: Path, root: Path) -> list[Path]:
    """This process's cgroup folders under `root` and those above them (a quota higher up caps it too)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    own: list[Path] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        rel = Path(path.lstrip("/"))
        if controllers == "":
            own.append(root / rel)
        elif "cpu" in controllers.split(","):
            own += [root / controllers / rel, root / "cpu" / rel]
    dirs: list[Path] = []
    for d in [*own, root, root / "cpu"]:
        while d not in dirs:
            dirs.append(d)
            if d in (root, root / "cpu") or d.parent == d:
                break
            d = d.parent
    return dirs


def _quota_in(d: Path) -> float | None:
    try:
        text = (d / "cpu.max").read_text().split()
        if len(text) == 2 and text[0] != "max" and float(text[0]) > 0 and float(text[1]) > 0:
            return float(text[0]) / float(text[1])
    except (OSError, ValueError):
        pass
    try:
        quota, period = float((d / "cpu.cfs_quota_us").read_text()), float((d / "cpu.cfs_period_us").read_text())
        if quota > 0 and period > 0:  # -1: no quota
            return quota / period
    except (OSError, ValueError):
        pass
    return None


def cgroup_cpu_quota(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT) -> float | None:
    """The process's cgroup CPU quota in CPUs (the smallest on its way to the root), or None."""
    found = [q for q in map(_quota_in, _cgroup_dirs(proc_cgroup, root)) if q is not None]
    return min(found) if found else None


def cpu_allowance(affinity: Callable[[], set[int]] | None = None,
                  quota: Callable[[], float | None] = cgroup_cpu_quota) -> tuple[int, str]:
    """(CPUs this process may use, how that was found): its affinity, capped by a cgroup quota."""
    get = affinity or getattr(os, "sched_getaffinity", None)
    try:
        cpus = len(get(0)) if get is not None else (os.cpu_count() or 1)
        how = f"CPU affinity: {cpus} CPU(s)" if get is not None else f"{cpus} CPU(s)"
    except OSError:
        cpus, how = os.cpu_count() or 1, f"{os.cpu_count() or 1} CPU(s)"
    q = quota()
    if q is not None and math.ceil(q) < cpus:
        return max(1, math.ceil(q)), f"{how}, cgroup quota {q:g} CPU(s)"
    return max(1, cpus), how


DEFAULT_THREADS = 1


def one_per_process(allowance: Callable[[], tuple[int, str]] = cpu_allowance) -> tuple[int, str]:
    """(`DEFAULT_THREADS`, in words, with how to use more where the process may)."""
    n, _how = allowance()
    more = f"; this process may use {n} CPU(s): {THREADS_FLAG} {n} or OMP_NUM_THREADS={n} to use them" if n > DEFAULT_THREADS else ""
    return DEFAULT_THREADS, f"one per process, as each of a sweep's trials{more}"


def choose_threads(flag: int | None, environ: MutableMapping[str, str] = os.environ,
                   default: Callable[[], tuple[int, str]] = one_per_process) -> ThreadChoice:
    """The thread count in the module docstring's order (`default` last); a bad value refused."""
    if flag is not None:
        return ThreadChoice(thread_count(flag, THREADS_FLAG), THREADS_FLAG)
    for name in THREAD_ENVS:
        value = environ.get(name, "")
        if value.strip():
            return ThreadChoice(thread_count(value, name), f"{name} as set")
    return ThreadChoice(*default())


def apply_threads(choice: ThreadChoice, environ: MutableMapping[str, str] = os.environ) -> None:
    """Make `choice` the count of torch, OpenMP and MKL: every variable they read, and torch if loaded."""
    for name in THREAD_ENVS:
        environ[name] = str(choice.threads)
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != choice.threads:
        torch.set_num_threads(choice.threads)


def trial_threads(cpu: float) -> tuple[int, str]:
    """The threads Ray gives a trial of `cpu` CPUs (one per whole CPU)."""
    n = max(1, math.floor(cpu))
    return n, f"a trial's resources.cpu={cpu:g}: Ray gives a trial one thread per CPU"


def set_cpu_threads(flag: int | None, environ: MutableMapping[str, str] = os.environ,
                    default: Callable[[], tuple[int, str]] = one_per_process) -> ThreadChoice:
    """Choose and apply this process's thread count (once, at the start of the CLI)."""
    choice = choose_threads(flag, environ, default)
    apply_threads(choice, environ)
    return choice
