import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# The CLI pins MKL's code path (tune_gems/commands/blas_path.py); the tests that build learners in-process
# get the same path, so their bit-identity checks hold on AVX2 and AVX-512 machines alike.
from tune_gems.commands.blas_path import pin_cpu_blas_path  # noqa: E402

pin_cpu_blas_path()
