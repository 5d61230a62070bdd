"""One CPU code path on every x86 CPU, so that a CPU run's bits do not depend on the machine.

Two libraries inside torch's CPU build pick their kernels by the instruction set they find:

- Intel MKL multiplies the matrices. It picks AVX2 or AVX-512 kernels and, outside its strict
  mode, rounds differently with the memory alignment of the operands: on an AVX-512 machine the
  members of one arm in a several-arm network (a slice at an unaligned offset) differed by an ulp
  from the same arm run alone, though not on an AVX2 machine. MKL's conditional numerical
  reproducibility (`MKL_CBWR`) pins one branch, and its STRICT flag makes the result independent
  of alignment. MKL reads the variable when it initialises, at the first BLAS call.
- ATen's own kernels (sums, softmax, exp and log, the optimiser's element-wise updates) are
  vectorised for AVX2 and for AVX-512, and the two widths add in different orders: the README's
  main job gave sweep objectives -0.319 -0.540 0.033 0.088 at ATen's AVX-512 kernels and
  -0.342 -0.596 0.003 0.103 at its AVX2 ones on the same AVX-512 machine, with MKL pinned in
  both. `ATEN_CPU_CAPABILITY` picks the width; ATen reads it once, at its first kernel call.

Both are pinned to AVX2, the widest set every x86-64 CPU of the last decade has, at the start of
the CLI (and of the tests), before any tensor work; Ray workers started by the CLI inherit them,
and each trial pins them again in its worker (tune_gems.sweep.trainable): a worker of a cluster
started elsewhere (`ray start`) has neither the driver's environment nor these values, and its
trials would round otherwise on an AVX-512 node.
A value the user set already is kept, once checked (tune_gems.contracts.cpu_environment: a
value torch or MKL would ignore, or one the CPU cannot run, is refused in one line; the pin
checks every CPU variable, so the trial's own pin refuses a worker's bad thread count too). A
CPU without AVX2 (or not x86) keeps ATen's own choice: naming a capability the CPU lacks would
crash it.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, MutableMapping

from tune_gems.contracts.cpu_environment import (
    CPU_BLAS_PATH_ENV, CPU_KERNEL_WIDTH_ENV, X86_MACHINES, check_cpu_environment, cpu_flags,
)

__all__ = ["CPU_BLAS_PATH", "CPU_BLAS_PATH_ENV", "CPU_KERNEL_WIDTH", "CPU_KERNEL_WIDTH_ENV",
           "cpu_has_avx2", "pin_cpu_code_path"]

CPU_BLAS_PATH = "AVX2,STRICT"
CPU_KERNEL_WIDTH = "avx2"


def cpu_has_avx2(read: Callable[[], str] | None = None) -> bool:
    """Whether this is an x86 CPU whose flags include avx2 (Linux's /proc/cpuinfo; False where
    it cannot be read: then ATen keeps its own choice)."""
    if read is None and platform.machine().lower() not in X86_MACHINES:
        return False
    return CPU_KERNEL_WIDTH in cpu_flags(read)


def pin_cpu_code_path(environ: MutableMapping[str, str] = os.environ, has_avx2: Callable[[], bool] = cpu_has_avx2) -> str:
    """Check the CPU variables of `environ` (ConfigError naming a bad one), then set MKL's code
    path and, on an AVX2 CPU, ATen's kernel width, unless the user chose them; return MKL's path
    in force."""
    check_cpu_environment(environ)
    if CPU_KERNEL_WIDTH_ENV not in environ and has_avx2():
        environ[CPU_KERNEL_WIDTH_ENV] = CPU_KERNEL_WIDTH
    return environ.setdefault(CPU_BLAS_PATH_ENV, CPU_BLAS_PATH)
