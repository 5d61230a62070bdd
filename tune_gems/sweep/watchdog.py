"""`python -m tune_gems.sweep.watchdog DRIVER_PID [EXCLUDED_PID ...]`: end a local Ray with its driver (docs/cluster.md
"Local runs"): SIGTERM then SIGKILL to every descendant it saw (creation times checked), once the driver is gone."""

from __future__ import annotations

import os
import signal
import sys
import time

import psutil

POLL_S = 0.5
GRACE_S = 5.0


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _children(proc: psutil.Process | None, recursive: bool = False) -> list[psutil.Process]:
    try:
        return proc.children(recursive=recursive) if proc is not None else []
    except psutil.Error:
        return []


def _alive(proc: psutil.Process) -> bool:
    """Still the process that was recorded (same pid and creation time) and not a zombie."""
    try:
        return proc.is_running() and proc.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return False


def track(root: int, excluded: set[int], known: dict[int, psutil.Process]) -> None:
    excluded = excluded | {os.getpid()}
    tops = [c for c in _children(_process(root) if root else None) if c.pid not in excluded] + list(known.values())
    for top in tops:
        for proc in (top, *_children(top, recursive=True)):
            if proc.pid not in excluded:
                known.setdefault(proc.pid, proc)


def reap(known: dict[int, psutil.Process], grace: float = GRACE_S) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        targets = [p for p in known.values() if _alive(p)]
        for proc in targets:
            try:
                proc.send_signal(sig)  # psutil refuses a pid that now names another process
            except psutil.Error:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(p) for p in targets):
            time.sleep(0.1)


def main(argv: list[str]) -> int:
    driver = _process(int(argv[0]))
    excluded = {int(x) for x in argv[1:]}
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__("now", True))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    known: dict[int, psutil.Process] = {}
    while not stop["now"] and driver is not None and _alive(driver):
        track(driver.pid, excluded, known)
        time.sleep(POLL_S)
    alive = driver is not None and _alive(driver)
    track(driver.pid if alive else 0, excluded, known)  # known processes may have started new ones
    reap(known)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
