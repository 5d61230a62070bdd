"""The environment variables of the CPU work, checked before torch is imported (torch, OpenMP and
MKL crash on a bad value or silently ignore it) and recorded in the run's marker (`cpu_record`;
docs/robustness.md "Environment values"); and one CPU code path (AVX2) on every x86 CPU, so a CPU
run's bits do not depend on the machine (MKL and ATen round or add in other orders at AVX-512),
pinned by the CLI and again in each trial (`pin_cpu_code_path`)."""

from __future__ import annotations

import math
import os
import platform
import re
from collections.abc import Callable, Mapping, MutableMapping

from tune_gems.contracts.errors import ConfigError

THREAD_ENVS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""The variables torch (OpenMP) and MKL read for their thread counts, in the order consulted."""
CPU_BLAS_PATH_ENV = "MKL_CBWR"
CPU_KERNEL_WIDTH_ENV = "ATEN_CPU_CAPABILITY"
CPU_BLAS_PATH = "AVX2,STRICT"
CPU_KERNEL_WIDTH = "avx2"
CPU_ENVS = (*THREAD_ENVS, CPU_BLAS_PATH_ENV, CPU_KERNEL_WIDTH_ENV)
THREADS_PER_CPU_MAX = 4
"""At most this many threads per CPU: more only wait for each other."""
CPU_FLAGS_FILE = "/proc/cpuinfo"
X86_MACHINES = ("x86_64", "amd64")
AVX2_FLAGS = frozenset({"avx2"})
AVX512_FLAGS = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"})
"""What torch checks before it runs its AVX-512 kernels."""
SVE_FLAGS = frozenset({"sve"})
MKL_BRANCHES = ("AUTO", "COMPATIBLE", "SSE2", "SSE3", "SSSE3", "SSE4_1", "SSE4_2", "AVX", "AVX2", "AVX512",
                "AVX512_E1", "AVX512_MIC", "AVX512_MIC_E1")
"""The code branches of `MKL_CBWR` (oneMKL developer guide, "Specifying code branches")."""
MKL_STRICT = "STRICT"
_DIGITS = re.compile(r"\s*\+?[0-9]+\s*")
_MAX_DIGITS = 18
"""Longer digit strings are too many threads, refused unconverted (Python refuses over 4300 digits)."""


def machine_cpus() -> int:
    return os.cpu_count() or 1


def max_threads(cpus: Callable[[], int] = machine_cpus) -> int:
    return THREADS_PER_CPU_MAX * max(1, cpus())


def thread_count(text: object, where: str, cpus: Callable[[], int] = machine_cpus) -> int:
    """`text` as a thread count; ConfigError naming `where` unless ASCII digits in 1..`max_threads()`."""
    raw = str(text)
    digits = raw.strip().lstrip("+")
    n = 0 if not _DIGITS.fullmatch(raw) else int(digits) if len(digits) <= _MAX_DIGITS else math.inf
    if n < 1:
        raise ConfigError(f"{where}: expected a whole number of threads >= 1, got {raw!r}")
    limit = max_threads(cpus)
    if n > limit:
        shown = raw.strip() if len(raw.strip()) <= 24 else raw.strip()[:21] + "..."
        raise ConfigError(f"{where}: {shown} threads is more than this machine's {max(1, cpus())} CPU(s) x "
                          f"{THREADS_PER_CPU_MAX} = {limit}; give at most {limit}")
    return n


def cpu_flags(read: Callable[[], str] | None = None) -> frozenset[str]:
    """The first CPU's flags from /proc/cpuinfo (empty where unreadable); `read` replaces the file."""
    if read is None:
        def read() -> str:
            with open(CPU_FLAGS_FILE, encoding="ascii", errors="replace") as f:
                return f.read(1 << 20)

    try:
        text = read()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def kernel_widths(flags: frozenset[str] | None = None, machine: str | None = None) -> tuple[str, ...]:
    """The `ATEN_CPU_CAPABILITY` values torch knows on this machine that its CPU can run."""
    flags = cpu_flags() if flags is None else flags
    machine = (machine or platform.machine()).lower()
    widths = ["default"]
    if machine in X86_MACHINES:
        widths += ["avx2"] * (AVX2_FLAGS <= flags) + ["avx512"] * (AVX512_FLAGS <= flags)
    elif machine in ("aarch64", "arm64"):
        widths += ["sve256"] * (SVE_FLAGS <= flags)
    return tuple(widths)


def check_kernel_width(value: str, widths: tuple[str, ...]) -> None:
    if value not in widths:
        hint = f" (torch compares it as written: {value.lower()!r})" if value.lower() in widths else ""
        raise ConfigError(f"{CPU_KERNEL_WIDTH_ENV}: {value!r} is not a kernel width this CPU can run under torch{hint}; "
                          f"give one of {', '.join(widths)}, or unset it (tune-gems then pins avx2 where the CPU has it)")


def check_blas_path(value: str) -> None:
    parts = [p.strip() for p in value.split(",")]
    branch = parts[0].removeprefix("BRANCH=")
    if branch not in MKL_BRANCHES or any(p != MKL_STRICT for p in parts[1:]) or len(parts) > 2:
        raise ConfigError(f"{CPU_BLAS_PATH_ENV}: {value!r} is not an MKL code branch ([BRANCH=]<branch>[,{MKL_STRICT}] "
                          f"with <branch> one of {', '.join(MKL_BRANCHES)}); MKL does not know it")


def check_cpu_environment(environ: Mapping[str, str] = os.environ, widths: Callable[[], tuple[str, ...]] = kernel_widths,
                          cpus: Callable[[], int] = machine_cpus) -> None:
    """ConfigError naming the first variable of `CPU_ENVS` that torch, OpenMP or MKL would not take."""
    for name in THREAD_ENVS:
        value = environ.get(name, "")
        if value.strip():
            thread_count(value, name, cpus)
    width = environ.get(CPU_KERNEL_WIDTH_ENV)
    if width is not None:
        check_kernel_width(width, widths())
    path = environ.get(CPU_BLAS_PATH_ENV)
    if path is not None:
        check_blas_path(path)


def cpu_record(environ: Mapping[str, str] = os.environ) -> dict[str, str | None]:
    return {name: environ.get(name) for name in CPU_ENVS}


def cpu_has_avx2(read: Callable[[], str] | None = None) -> bool:
    """Whether this is an x86 CPU whose flags include avx2 (False where unreadable)."""
    if read is None and platform.machine().lower() not in X86_MACHINES:
        return False
    return CPU_KERNEL_WIDTH in cpu_flags(read)


def pin_cpu_code_path(environ: MutableMapping[str, str] = os.environ, has_avx2: Callable[[], bool] = cpu_has_avx2) -> str:
    """Check `environ`'s CPU variables, then pin MKL's path and (AVX2) ATen's width unless set: a user's
    checked value is kept, a CPU without AVX2 keeps ATen's choice."""
    check_cpu_environment(environ)
    if CPU_KERNEL_WIDTH_ENV not in environ and has_avx2():
        environ[CPU_KERNEL_WIDTH_ENV] = CPU_KERNEL_WIDTH
    return environ.setdefault(CPU_BLAS_PATH_ENV, CPU_BLAS_PATH)
