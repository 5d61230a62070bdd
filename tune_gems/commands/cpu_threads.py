"""How many intra-op threads a CPU run outside Ray uses: one per process, as each of a sweep's
trials, unless asked.

Why: torch's default is one thread per core of the machine, whatever share of it the process
may use, and even the process's own share is too many where other jobs hold a core. On a
shared 2-core box a `train` took 250.6 s at torch's default and 14.1 s with one thread;
`tune-gems confirm experiments/smoke` took 606 s at the process's 2 CPUs while another job
held a core, 87 s with one thread: threads that outnumber the free CPUs only wait for each
other. A sweep's trials run one thread per CPU of `resources.cpu` (1 by default: Ray sets it),
and every command whose work runs in this process (`train`, `confirm`, `analyze`, `compare`,
`plan` and the dry runs) takes the same count, set once at the start of the CLI (before torch
is imported).

The count, first that applies: the command's `--threads`; the user's own OMP_NUM_THREADS or
MKL_NUM_THREADS (kept as set); else one (`one_per_process`, whose words name the CPUs this
process may use, the smaller of its CPU affinity (`os.sched_getaffinity`) and its cgroup's CPU
quota where one is set and readable (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us` /
`cpu.cfs_period_us`), and how to use them). A sweep's dry run measures a trial, so its default
is what Ray gives a trial instead (`trial_threads`: one per CPU of `resources.cpu`). Every
count is checked by tune_gems.contracts.cpu_environment (whole, >= 1, at most
`THREADS_PER_CPU_MAX` x the machine's CPUs). The thread count changes speed, not bits: the CPU
BLAS path is pinned (tune_gems.ops.cpu_code_path: MKL's strict reproducible mode) and the
learner's own reductions are smaller than one thread's share of work
(`tests/test_cpu_threads.py` compares the members of a run at 1 and 2 threads bit for bit).
"""

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
    """The intra-op thread count of this process and where it came from (one phrase)."""

    threads: int
    source: str

    def line(self) -> str:
        return f"{self.threads} CPU thread(s) ({self.source})"


def _cgroup_dirs(proc_cgroup: Path, root: Path) -> list[Path]:
    """The folders of this process's cgroup under `root` and every folder above it up to the
    mount root (a quota set higher up caps it too; a container sees its own cgroup at the root).
    v2: the line `0::/path`; v1: the line of the `cpu` controller."""
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
    """The CPU quota written in one cgroup folder (v2 `cpu.max`, v1 the cfs pair), or None."""
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
    """The process's cgroup CPU quota in CPUs (e.g. 1.5: the smallest on its way to the root),
    or None where none is set or readable."""
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
"""A run outside Ray's count unless asked: one, as each of a sweep's trials (resources.cpu=1)."""


def one_per_process(allowance: Callable[[], tuple[int, str]] = cpu_allowance) -> tuple[int, str]:
    """(`DEFAULT_THREADS`, in words): the default thread count of a run outside Ray, with how to
    use more where the process may."""
    n, _how = allowance()
    more = f"; this process may use {n} CPU(s): {THREADS_FLAG} {n} or OMP_NUM_THREADS={n} to use them" if n > DEFAULT_THREADS else ""
    return DEFAULT_THREADS, f"one per process, as each of a sweep's trials{more}"


def choose_threads(flag: int | None, environ: MutableMapping[str, str] = os.environ,
                   default: Callable[[], tuple[int, str]] = one_per_process) -> ThreadChoice:
    """The thread count (module docstring's order; `default`: the count and its reason when
    neither the flag nor a variable sets it); a bad `--threads` or variable is refused in one
    line naming it."""
    if flag is not None:
        return ThreadChoice(thread_count(flag, THREADS_FLAG), THREADS_FLAG)
    for name in THREAD_ENVS:
        value = environ.get(name, "")
        if value.strip():
            return ThreadChoice(thread_count(value, name), f"{name} as set")
    return ThreadChoice(*default())


def apply_threads(choice: ThreadChoice, environ: MutableMapping[str, str] = os.environ) -> None:
    """Make `choice` the count of torch, OpenMP and MKL in this process: through the variables
    they read when they load (every one of them: with OMP_NUM_THREADS=1 and MKL_NUM_THREADS=2
    torch would take MKL's 2 while the run says 1; the variable that decided keeps its value),
    and through torch itself when it is loaded already (a library caller of the CLI's `main`)."""
    for name in THREAD_ENVS:
        environ[name] = str(choice.threads)
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != choice.threads:
        torch.set_num_threads(choice.threads)


def trial_threads(cpu: float) -> tuple[int, str]:
    """The threads Ray gives a trial of `cpu` CPUs (one per whole CPU, at least one): what a
    sweep's dry run measures with, so that its estimate is of the trials as they will run."""
    n = max(1, math.floor(cpu))
    return n, f"a trial's resources.cpu={cpu:g}: Ray gives a trial one thread per CPU"


def set_cpu_threads(flag: int | None, environ: MutableMapping[str, str] = os.environ,
                    default: Callable[[], tuple[int, str]] = one_per_process) -> ThreadChoice:
    """Choose and apply this process's thread count (once, at the start of the CLI); `default`
    replaces one per process (a sweep's dry run: `trial_threads`)."""
    choice = choose_threads(flag, environ, default)
    apply_threads(choice, environ)
    return choice
