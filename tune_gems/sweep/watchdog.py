"""`python -m tune_gems.sweep.watchdog DRIVER_PID [EXCLUDED_PID ...]`: end a local Ray with
its driver.

Started by `tune_gems.sweep.local_ray` in a session of its own. While the driver lives it polls
the driver's process tree (from /proc; no imports beyond the standard library) and remembers
every descendant, with its start time, except the EXCLUDED children the driver had before Ray
started. When the driver is gone (ended, crashed or SIGKILLed), or this process gets SIGTERM,
it sends SIGTERM to every remembered process still alive (same pid and start time: never a
recycled pid), waits up to `GRACE_S`, then SIGKILLs the rest. Ray's dashboard and runtime-env
agents otherwise outlive a killed driver.
"""

from __future__ import annotations

import os
import signal
import sys
import time

POLL_S = 0.5
GRACE_S = 5.0


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[19]  # field 22 of stat: start time in clock ticks
    except (OSError, IndexError):
        return None


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _children(pid: int) -> list[int]:
    try:
        out: list[int] = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
        return out
    except OSError:
        return []


def _alive(pid: int, started: str) -> bool:
    return _start_time(pid) == started and _state(pid) not in (None, "Z", "X")


def track(root: int, excluded: set[int], known: dict[int, str]) -> None:
    """Add every live descendant of root (and of processes already known) to `known`."""
    excluded = excluded | {os.getpid()}
    frontier = [c for c in _children(root) if c not in excluded] + list(known)
    seen: set[int] = set()
    while frontier:
        pid = frontier.pop()
        if pid in seen:
            continue
        seen.add(pid)
        st = _start_time(pid)
        if st is None:
            continue
        known.setdefault(pid, st)
        frontier.extend(_children(pid))


def reap(known: dict[int, str], grace: float = GRACE_S) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        targets = [p for p, st in known.items() if _alive(p, st)]
        for pid in targets:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(p, known[p]) for p in targets):
            time.sleep(0.1)


def main(argv: list[str]) -> int:
    driver = int(argv[0])
    excluded = {int(x) for x in argv[1:]}
    driver_start = _start_time(driver)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__("now", True))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    known: dict[int, str] = {}
    while not stop["now"] and driver_start is not None and _alive(driver, driver_start):
        track(driver, excluded, known)
        time.sleep(POLL_S)
    alive = driver_start is not None and _alive(driver, driver_start)
    track(driver if alive else 0, excluded, known)  # known processes may have started new ones
    reap(known)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
