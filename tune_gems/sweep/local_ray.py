"""Where a sweep's Ray runs: a cluster named by RAY_ADDRESS, or a private local instance that
listens on loopback only and dies with the driver.

Why: `ray.init()` on Linux binds its servers and agents to the machine's network address, so a
laptop sweep would expose Ray's unauthenticated-by-default services on the network; and when
the driver is SIGKILLed, Ray's dashboard and runtime-env agents outlive it, still listening.

- Joining a cluster is explicit: RAY_ADDRESS set (by the user, or by `ray job submit`).
- Otherwise a new instance (`address="local"`, never a stray `ray start` cluster found on the
  machine), with its node address on loopback: Ray resolves "127.0.0.1" to the network address
  unless `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER` is off, so that switch is turned off (in the
  environment, for the processes Ray spawns, and in the already imported constant).
- A watchdog process (`tune_gems.sweep.watchdog`, in a session of its own) records every
  process the driver's Ray starts and ends them (SIGTERM, then SIGKILL) when the driver ends or
  dies.

Two private Ray names remain, each because Ray has no public way to do the same: the constant
`ray._private.ray_constants.ENABLE_RAY_CLUSTER` (the switch above, read when Ray resolves the
node address, imported before this module could set the environment) and
`ray.init(_node_ip_address=...)` (the node address of a local instance).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field

LOOPBACK = "127.0.0.1"
CLUSTER_SWITCH_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch between "node address = loopback" (off) and "= the network address" (on)."""
ADDRESS_ENV = "RAY_ADDRESS"


def joining_cluster() -> bool:
    return bool(os.environ.get(ADDRESS_ENV))


def prepare_loopback() -> None:
    """Before Ray is imported (where possible): keep a local instance on loopback. Does nothing
    when joining a cluster (whose nodes must reach this driver)."""
    if not joining_cluster():
        os.environ[CLUSTER_SWITCH_ENV] = "0"


def _children(pid: int) -> set[int]:
    import psutil

    try:
        return {c.pid for c in psutil.Process(pid).children()}
    except psutil.Error:
        return set()


@dataclass
class RaySession:
    """What `start_or_join` did: whether this driver started Ray (and so must stop it)."""

    started: bool
    address: str
    watchdog: subprocess.Popen | None = None
    _before: set[int] = field(default_factory=set)

    def stop(self) -> None:
        """Shut down a Ray this driver started, then let the watchdog sweep up stragglers."""
        if not self.started:
            return
        import ray

        ray.shutdown()
        if self.watchdog is not None and self.watchdog.poll() is None:
            self.watchdog.send_signal(signal.SIGTERM)  # clean up now, then exit
            try:
                self.watchdog.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.watchdog.kill()
                self.watchdog.wait()


def start_or_join(log_to_driver: bool = True) -> RaySession:
    """Join RAY_ADDRESS, or start a private loopback instance guarded by a watchdog. An already
    initialised Ray (e.g. the caller's own) is used as it is."""
    import ray

    if ray.is_initialized():
        return RaySession(False, ray.get_runtime_context().gcs_address)
    if joining_cluster():
        ray.init(address=os.environ[ADDRESS_ENV], log_to_driver=log_to_driver)
        return RaySession(False, ray.get_runtime_context().gcs_address)
    prepare_loopback()
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False  # read when Ray resolves the node address
    before = _children(os.getpid())
    ray.init(address="local", include_dashboard=False, _node_ip_address=LOOPBACK, log_to_driver=log_to_driver)
    session = RaySession(True, ray.get_runtime_context().gcs_address, _before=before)
    session.watchdog = subprocess.Popen(
        [sys.executable, "-m", "tune_gems.sweep.watchdog", str(os.getpid()), *map(str, sorted(before))],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C or a kill of the driver's group does not reach it
        close_fds=True,
    )
    return session
