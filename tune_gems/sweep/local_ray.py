"""Where a sweep's Ray runs: RAY_ADDRESS's cluster (probed first) or a private loopback instance
that dies with the driver (docs/cluster.md "Local runs"). Private Ray names for want of public
ones: `ray_constants.ENABLE_RAY_CLUSTER`, `ray.init(_node_ip_address=...)`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from tune_gems.contracts.errors import ConfigError

LOOPBACK = "127.0.0.1"
CLUSTER_SWITCH_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch between "node address = loopback" (off) and "= the network address" (on)."""
ADDRESS_ENV = "RAY_ADDRESS"
RAY_CORE_PROCESSES = ("gcs_server", "raylet")
"""The processes of a local Ray without which it is gone."""
WATCH_POLL_S = 1.0
EXIT_RAY_LOST = 75
"""Exit status of a sweep whose Ray stopped under it (EX_TEMPFAIL: try again with --resume)."""


LOCAL_ADDRESS = "local"
"""RAY_ADDRESS's word for a new local instance (here the private loopback one)."""
AUTO_ADDRESS = "auto"
"""RAY_ADDRESS's word for the cluster `ray start` last started on this machine."""
CLIENT_SCHEME = "ray://"
ADDRESS_PROBE_S = 5.0
ADDRESS_FORMS = "host:port, ray://host:port, auto or local"
JOIN_ADVICE = (f"start the cluster there (ray start --head), or unset {ADDRESS_ENV} to run on a private local Ray; "
               "a sweep that stopped with it continues with --resume once it answers")


def joining_cluster() -> bool:
    return os.environ.get(ADDRESS_ENV, "") not in ("", LOCAL_ADDRESS)


def ray_address_endpoint(address: str) -> tuple[str, int] | None:
    """(host, port) of a RAY_ADDRESS to probe (None for `auto`, `local`); anything else refused."""
    if address in (AUTO_ADDRESS, LOCAL_ADDRESS):
        return None
    rest = address.removeprefix(CLIENT_SCHEME)
    host, sep, port = rest.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")  # an IPv6 host: [::1]:6379
    bad = f"{ADDRESS_ENV}: {address!r} is not a Ray address ({ADDRESS_FORMS}); unset it to run on a private local Ray"
    if not sep or not host or not port.isascii() or not port.isdigit() or any(c.isspace() or c in "/@?#" for c in host):
        raise ConfigError(bad)
    if not 0 < int(port) < 65536:
        raise ConfigError(f"{ADDRESS_ENV}: {address!r}: port {port} is outside 1-65535")
    return host, int(port)


def loopback_cluster() -> bool:
    """Whether RAY_ADDRESS names a cluster on this machine's loopback (Ray would resolve it away)."""
    import ipaddress

    endpoint = ray_address_endpoint(os.environ[ADDRESS_ENV]) if joining_cluster() else None
    if endpoint is None:
        return False
    if endpoint[0] == "localhost":
        return True
    try:
        return ipaddress.ip_address(endpoint[0]).is_loopback
    except ValueError:
        return False


def check_ray_address() -> None:
    if os.environ.get(ADDRESS_ENV):
        ray_address_endpoint(os.environ[ADDRESS_ENV])


def probe_ray_address(address: str, timeout_s: float = ADDRESS_PROBE_S) -> None:
    """Refuse a cluster address where nothing accepts a TCP connection within `timeout_s`."""
    endpoint = ray_address_endpoint(address)
    if endpoint is None:
        return
    try:
        socket.create_connection(endpoint, timeout=timeout_s).close()
    except socket.gaierror:
        raise ConfigError(f"{ADDRESS_ENV}: {address}: no such host {endpoint[0]!r}; {JOIN_ADVICE}") from None
    except TimeoutError:
        raise ConfigError(f"{ADDRESS_ENV}: no Ray cluster answers at {address} (no answer within {timeout_s:g} s); "
                          f"{JOIN_ADVICE}") from None
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise ConfigError(f"{ADDRESS_ENV}: no Ray cluster answers at {address} ({why.lower()}); {JOIN_ADVICE}") from None


def probe_cluster() -> None:
    if joining_cluster():
        probe_ray_address(os.environ[ADDRESS_ENV])


def prepare_loopback() -> None:
    """Before Ray is imported: a bad RAY_ADDRESS refused, a local instance kept on loopback."""
    check_ray_address()
    if not joining_cluster() or loopback_cluster():
        os.environ[CLUSTER_SWITCH_ENV] = "0"


def _children(pid: int) -> set[int]:
    import psutil

    try:
        return {c.pid for c in psutil.Process(pid).children()}
    except psutil.Error:
        return set()


def core_processes(pids: set[int]) -> dict[int, str]:
    import psutil

    out = {}
    for pid in pids:
        try:
            name = psutil.Process(pid).name()
        except psutil.Error:
            continue
        if any(name.startswith(core) for core in RAY_CORE_PROCESSES):
            out[pid] = name
    return out


class RayWatch(threading.Thread):
    """Polls `watched` ({pid: name}); the first that ends calls `on_lost(name, pid)` once."""

    def __init__(self, watched: dict[int, str], on_lost: Callable[[str, int], None], poll_s: float = WATCH_POLL_S) -> None:
        super().__init__(name="tune-gems-ray-watch", daemon=True)
        import psutil

        self.on_lost, self.poll_s = on_lost, poll_s
        self._done = threading.Event()
        self._procs = {}
        for pid, name in watched.items():
            try:
                self._procs[pid] = (psutil.Process(pid), name)  # creation time kept: never a recycled pid
            except psutil.Error:
                self._procs[pid] = (None, name)

    def _ended(self) -> tuple[str, int] | None:
        for pid, (proc, name) in self._procs.items():
            if proc is None or not proc.is_running() or proc.status() == "zombie":
                return name, pid
        return None

    def run(self) -> None:
        import psutil

        while not self._done.wait(self.poll_s):
            try:
                ended = self._ended()
            except psutil.Error:
                continue
            if ended is not None and not self._done.is_set():
                self._done.set()
                self.on_lost(*ended)
                return

    def stop(self) -> None:
        self._done.set()


def report_lost_and_exit(hint: str) -> Callable[[str, int], None]:
    """One line on stderr and exit EXIT_RAY_LOST at once (Ray's client would wait, then kill)."""

    def lost(name: str, pid: int) -> None:
        sys.stdout.flush()
        sys.stderr.write(f"tune-gems sweep: Ray stopped under the sweep (its {name} process, pid {pid}, ended); "
                         f"{hint}\n")
        sys.stderr.flush()
        os._exit(EXIT_RAY_LOST)

    return lost


@dataclass
class RaySession:

    started: bool
    address: str
    watchdog: subprocess.Popen | None = None
    _before: set[int] = field(default_factory=set)
    watch: RayWatch | None = None

    def stop(self) -> None:
        if self.watch is not None:
            self.watch.stop()
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


def start_or_join(log_to_driver: bool = True, lost_hint: str | None = None) -> RaySession:
    """Join RAY_ADDRESS or start a private watched instance (an initialised Ray is used as it is)."""
    import ray

    if ray.is_initialized():
        return RaySession(False, ray.get_runtime_context().gcs_address)
    if joining_cluster():
        address = os.environ[ADDRESS_ENV]
        probe_cluster()
        if loopback_cluster():
            prepare_loopback()
            from ray._private import ray_constants

            ray_constants.ENABLE_RAY_CLUSTER = False  # read when Ray resolves the address
        try:
            ray.init(address=address, log_to_driver=log_to_driver)
        except (ConnectionError, TimeoutError) as e:  # it answered TCP, but not as a Ray cluster
            raise ConfigError(f"{ADDRESS_ENV}: no Ray cluster at {address} ({type(e).__name__}: "
                              f"{' '.join(str(e).split())[:200]}); {JOIN_ADVICE}") from None
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
    if lost_hint is not None:
        session.watch = RayWatch(core_processes(_children(os.getpid()) - before), report_lost_and_exit(lost_hint))
        session.watch.start()
    return session
