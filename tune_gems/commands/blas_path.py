"""One BLAS code path on every x86 CPU, so that a CPU run's bits do not depend on the machine.

torch's CPU build multiplies matrices with Intel MKL, which picks its kernels by instruction set
(AVX2, AVX-512) and, outside its strict mode, rounds differently with the memory alignment of
the operands. On an AVX-512 machine the members of one arm in a several-arm network (a slice at
an unaligned offset) then differed by an ulp from the same arm run alone, though not on an AVX2
machine. MKL's conditional numerical reproducibility (the `MKL_CBWR` variable) pins one branch,
and its STRICT flag makes the result independent of alignment. MKL reads the variable when it
initialises, at the first BLAS call, so this runs at the start of the CLI (and of the tests),
before any matmul; a value the user set already is kept.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

CPU_BLAS_PATH_ENV = "MKL_CBWR"
CPU_BLAS_PATH = "AVX2,STRICT"


def pin_cpu_blas_path(environ: MutableMapping[str, str] = os.environ) -> str:
    """Set MKL's code path unless the user chose one; return the path in force."""
    return environ.setdefault(CPU_BLAS_PATH_ENV, CPU_BLAS_PATH)
