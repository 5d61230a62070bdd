"""The sweep watchdog's process bookkeeping (psutil) against the /proc walk it replaced, on the
same real process tree: the same descendants found, the excluded child's subtree left alone, and
every tracked process ended by `reap` (a recycled pid is never signalled: psutil compares the
creation time it recorded before sending a signal)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from cluster_fixtures import wait_for
from tune_gems.sweep import watchdog

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="the reference walk reads /proc")

TREE = (
    "import subprocess, sys, time\n"
    "for k in range(int(sys.argv[1])):\n"
    "    subprocess.Popen([sys.executable, '-c', sys.argv[2], str(k), sys.argv[2]])\n"
    "time.sleep(300)\n"
)
"""`python -c TREE n TREE`: a process with n children, child k with k children of its own, and
so on: with n = 2, a driver-like process with two children, one of which has a child."""


def proc_walk(root: int, excluded: set[int]) -> set[int]:
    """The watchdog's former /proc reading: every descendant of root, excluded children (and
    what lies under them) left out."""

    def children(pid: int) -> list[int]:
        out: list[int] = []
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    out.extend(int(x) for x in f.read().split())
        except OSError:
            pass
        return out

    found: set[int] = set()
    frontier = [c for c in children(root) if c not in excluded]
    while frontier:
        pid = frontier.pop()
        if pid not in found:
            found.add(pid)
            frontier.extend(children(pid))
    return found


@pytest.fixture
def tree():
    root = subprocess.Popen([sys.executable, "-c", TREE, "2", TREE])
    try:
        wait_for(lambda: len(proc_walk(root.pid, set())) == 3, 60, "the test's process tree")
        yield root
    finally:
        for p in psutil.Process(root.pid).children(recursive=True) if root.poll() is None else []:
            p.kill()
        root.kill()
        root.wait()


def test_track_finds_what_the_proc_walk_finds_and_reap_ends_it(tree):
    first = next(c for c in psutil.Process(tree.pid).children() if c.children())  # with a child of its own
    for excluded in (set(), {first.pid}):
        known: dict[int, psutil.Process] = {}
        watchdog.track(tree.pid, excluded, known)
        assert set(known) == proc_walk(tree.pid, excluded)
    known = {}
    watchdog.track(tree.pid, set(), known)
    watchdog.reap(known, grace=10.0)
    assert not any(watchdog._alive(p) for p in known.values())
    assert tree.poll() is None  # the driver itself is not the watchdog's to end
