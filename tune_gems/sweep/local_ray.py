"""Where a sweep's Ray runs: a cluster named by RAY_ADDRESS, or a private local instance that
listens on loopback only and dies with the driver.

Why: `ray.init()` on Linux binds its servers and agents to the machine's network address, so a
laptop sweep would expose Ray's unauthenticated-by-default services on the network; and when
the driver is SIGKILLed, Ray's dashboard and runtime-env agents outlive it, still listening.

- Joining a cluster is explicit: RAY_ADDRESS set (by the user, or by `ray job submit`); a
  cluster on loopback (a head started with `--node-ip-address 127.0.0.1`) is joined at that
  address, with the switch below, where Ray would resolve it to the network address. Its
  value is checked before anything else (`ray_address_endpoint`: host:port, ray://host:port or
  auto; `local` means the private instance below), and a host:port must answer a TCP connection
  within ADDRESS_PROBE_S before `ray.init` is asked (`probe_ray_address`): Ray's own client
  waits for a GCS that never answers for a minute and more, silently, then fails with a C++ log.
- Otherwise a new instance (`address="local"`, never a stray `ray start` cluster found on the
  machine), with its node address on loopback: Ray resolves "127.0.0.1" to the network address
  unless `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER` is off, so that switch is turned off (in the
  environment, for the processes Ray spawns, and in the already imported constant).
- A watchdog process (`tune_gems.sweep.watchdog`, in a session of its own) records every
  process the driver's Ray starts and ends them (SIGTERM, then SIGKILL) when the driver ends or
  dies.
- A watch thread in the driver (`RayWatch`) polls the local instance's core processes (the GCS
  server and the raylet): when one ends under a running sweep (killed, out of memory), Ray's
  own client would wait a minute for the GCS, print a C++ error and exit 1; instead the driver
  says in one line that Ray stopped and how `--resume` continues, and exits `EXIT_RAY_LOST`
  at once (Tune's state and the trials' checkpoints are already in the experiment folder; the
  watchdog ends what is left of Ray, the kernel releases the folder's lock).

Two private Ray names remain, each because Ray has no public way to do the same: the constant
`ray._private.ray_constants.ENABLE_RAY_CLUSTER` (the switch above, read when Ray resolves the
node address, imported before this module could set the environment) and
`ray.init(_node_ip_address=...)` (the node address of a local instance).
"""

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
"""The processes of a local Ray without which it is gone (their names as the system shows them)."""
WATCH_POLL_S = 1.0
EXIT_RAY_LOST = 75
"""The exit status of a sweep whose Ray stopped under it (sysexits' EX_TEMPFAIL: try again,
with --resume)."""


LOCAL_ADDRESS = "local"
"""RAY_ADDRESS's word for "start a new local instance" (here: the private loopback one)."""
AUTO_ADDRESS = "auto"
"""RAY_ADDRESS's word for "the cluster `ray start` last started on this machine" (Ray finds it)."""
CLIENT_SCHEME = "ray://"
ADDRESS_PROBE_S = 5.0
"""Seconds a cluster's address has to accept a TCP connection before the sweep is refused."""
ADDRESS_FORMS = "host:port, ray://host:port, auto or local"
JOIN_ADVICE = (f"start the cluster there (ray start --head), or unset {ADDRESS_ENV} to run on a private local Ray; "
               "a sweep that stopped with it continues with --resume once it answers")


def joining_cluster() -> bool:
    """Whether RAY_ADDRESS names a cluster to join (set, and not `local`)."""
    return os.environ.get(ADDRESS_ENV, "") not in ("", LOCAL_ADDRESS)


def ray_address_endpoint(address: str) -> tuple[str, int] | None:
    """(host, port) of a RAY_ADDRESS value to probe, None for `auto` and `local` (Ray resolves
    them); anything else that is not host:port or ray://host:port is refused in one line."""
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
    """Whether RAY_ADDRESS names a cluster on this machine's loopback (127.x, ::1, localhost): a
    head started with `--node-ip-address 127.0.0.1` (docs/cluster.md). Ray would resolve the
    address to the machine's network address, where that head does not listen, and wait for it;
    the switch that keeps a local instance on loopback keeps the address as given."""
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
    """RAY_ADDRESS, if set, is a value Ray takes (`ray_address_endpoint`); before anything else.
    Set but empty is unset, as Ray reads it."""
    if os.environ.get(ADDRESS_ENV):
        ray_address_endpoint(os.environ[ADDRESS_ENV])


def probe_ray_address(address: str, timeout_s: float = ADDRESS_PROBE_S) -> None:
    """Refuse, in one line naming the address, a cluster address where nothing accepts a TCP
    connection within `timeout_s` (closed port, no such host, a firewall that drops)."""
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
    """When joining a cluster: its address answers (`probe_ray_address`), or the one-line refusal."""
    if joining_cluster():
        probe_ray_address(os.environ[ADDRESS_ENV])


def prepare_loopback() -> None:
    """Before Ray is imported (where possible): a RAY_ADDRESS Ray cannot take refused
    (`check_ray_address`, seconds into the command rather than after its imports), and a local
    instance kept on loopback, and so is the driver of a cluster on loopback (`loopback_cluster`);
    nothing more when joining another cluster (whose nodes must reach this driver)."""
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
    """{pid: name} of the Ray core processes (RAY_CORE_PROCESSES) among `pids`."""
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
    """Polls `watched` ({pid: name}) every `poll_s`; the first that ends calls `on_lost(name, pid)`
    (once). `stop()` ends the watch first, so a shutdown of Ray is not reported as its loss."""

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
    """What the driver does when its Ray is lost: one line on stderr, then exit EXIT_RAY_LOST
    at once (Ray's client would otherwise wait for the GCS and then kill the process itself)."""

    def lost(name: str, pid: int) -> None:
        sys.stdout.flush()
        sys.stderr.write(f"tune-gems sweep: Ray stopped under the sweep (its {name} process, pid {pid}, ended); "
                         f"{hint}\n")
        sys.stderr.flush()
        os._exit(EXIT_RAY_LOST)

    return lost


@dataclass
class RaySession:
    """What `start_or_join` did: whether this driver started Ray (and so must stop it)."""

    started: bool
    address: str
    watchdog: subprocess.Popen | None = None
    _before: set[int] = field(default_factory=set)
    watch: RayWatch | None = None

    def stop(self) -> None:
        """Shut down a Ray this driver started, then let the watchdog sweep up stragglers."""
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
    """Join RAY_ADDRESS, or start a private loopback instance guarded by a watchdog. An already
    initialised Ray (e.g. the caller's own) is used as it is. With `lost_hint` (what continues
    the run, e.g. its --resume command) a private instance is watched (`RayWatch`): its loss is
    reported in one line ending with the hint, and the process exits EXIT_RAY_LOST."""
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
