"""One CPU code path (AVX2) on every x86 CPU, so a CPU run's bits do not depend on the machine (MKL
and ATen round or add in other orders at AVX-512). Pinned by the CLI and again in each trial; a
user's checked value is kept, a CPU without AVX2 keeps ATen's choice."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, MutableMapping

from tune_gems.contracts.cpu_environment import (CPU_BLAS_PATH_ENV, CPU_KERNEL_WIDTH_ENV, X86_MACHINES,
    check_cpu_environment, cpu_flags)

__all__ = ["CPU_BLAS_PATH", "CPU_BLAS_PATH_ENV", "CPU_KERNEL_WIDTH", "CPU_KERNEL_WIDTH_ENV",
           "cpu_has_avx2", "pin_cpu_code_path"]

CPU_BLAS_PATH = "AVX2,STRICT"
CPU_KERNEL_WIDTH = "avx2"


def cpu_has_avx2(read: Callable[[], str] | None = None) -> bool:
    """Whether this is an x86 CPU whose flags include avx2 (False where unreadable)."""
    if read is None and platform.machine().lower() not in X86_MACHINES:
        return False
    return CPU_KERNEL_WIDTH in cpu_flags(read)


def pin_cpu_code_path(environ: MutableMapping[str, str] = os.environ, has_avx2: Callable[[], bool] = cpu_has_avx2) -> str:
    """Check `environ`'s CPU variables, then pin MKL's path and (AVX2) ATen's width unless set."""
    check_cpu_environment(environ)
    if CPU_KERNEL_WIDTH_ENV not in environ and has_avx2():
        environ[CPU_KERNEL_WIDTH_ENV] = CPU_KERNEL_WIDTH
    return environ.setdefault(CPU_BLAS_PATH_ENV, CPU_BLAS_PATH)
