"""The environment variables of the CPU work, checked before torch is imported (torch, OpenMP and
MKL crash on a bad value or silently ignore it) and recorded in the run's marker (`cpu_record`;
docs/robustness.md "Environment values")."""

from __future__ import annotations

import math
import os
import platform
import re
from collections.abc import Callable, Mapping

from tune_gems.contracts.errors import ConfigError

THREAD_ENVS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""The variables torch (OpenMP) and MKL read for their thread counts, in the order consulted."""
CPU_BLAS_PATH_ENV = "MKL_CBWR"
CPU_KERNEL_WIDTH_ENV = "ATEN_CPU_CAPABILITY"
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
