import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# One CPU thread per test process and per command it starts, unless the caller set a count.
# CI runs two pytest workers on two cores, and the Ray tests' trials (one thread each, as Ray
# sets for a 1-CPU trial) run beside them. A torch process left at its default takes every core
# with OpenMP threads that wait by spinning, and the processes beside it then stall: a 2-thread
# torch loop next to test_faults' journal_ahead case took it from 39 s to 140 s on a quiet
# 2-core machine, some of its epochs 30x slower. Set before torch loads (it reads these once).
# A test that needs the variables unset or different passes its own environment.
for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

# The CLI pins MKL's code path (tune_gems/contracts/cpu_environment.py); the tests that build learners in-process
# get the same path, so their bit-identity checks hold on AVX2 and AVX-512 machines alike.
from tune_gems.contracts.cpu_environment import pin_cpu_code_path  # noqa: E402

pin_cpu_code_path()


@pytest.fixture(scope="session", autouse=True)
def _shared_ray_stops_at_the_end():
    """The shared local Ray (sweep_fixtures.SharedRay) ends with the session."""
    yield
    from sweep_fixtures import SHARED_RAY

    SHARED_RAY.stop()


def pytest_collection_modifyitems(items):
    """Test files longest first, so that xdist's last files are short ones (tests/file_order.py)."""
    from file_order import file_seconds, longest_first

    items[:] = longest_first(items, file_seconds())
