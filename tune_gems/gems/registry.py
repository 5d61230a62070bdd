"""The gem registry: one definition per gem, from which every column, config key and manifest
derives (docs/design.md "The gem registry"). Torch-free. A plug-in is trusted code, probed in a
throwaway child first (`probe_plugin`; docs/robustness.md)."""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence

from tune_gems.contracts.errors import ConfigError
from tune_gems.contracts.gem_manifest import GemEntry

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
"""A gem name and its metric name: lowercase identifiers (they become config keys and columns)."""

BUILTIN_ORIGIN = "tune_gems.builtin_gems"
RESERVED_METRICS = frozenset({"epoch", "env_steps", "updates", "loss", "q_mean", "grad_norm", "noisy_sigma", "diverged",
                              "sps", "nonfinite"})
"""Names a gem metric may not take: the trainer's own columns and accumulator rows."""
PLUGIN_IMPORT_TIMEOUT_S = 60.0
"""Default bound on one plug-in's import; `PLUGIN_IMPORT_TIMEOUT_ENV` sets another."""
PLUGIN_IMPORT_TIMEOUT_ENV = "TUNE_GEMS_PLUGIN_IMPORT_TIMEOUT_S"
PLUGIN_PROBE_ENV = "TUNE_GEMS_PLUGIN_PROBE"
"""Set to 0 to import plug-ins without probing them first (`probe_plugin`)."""
PROBE_GRACE_S = 10.0
"""Seconds the command waits for a probe child beyond the import's own time bound."""
PROBE_REPLY_MAX = 4096
PACKAGE = "tune_gems"
MODULE_NAME_MAX = 200


@dataclass(frozen=True)
class Gem:
    """One gem's definition (docs/gems.md); `null` is its value with no structure (the analysis's
    zero), `head` the parameters it owns, `origin` the module that registered it. `null_by_row_means`:
    given the inputs' `row_means`, the null reduces only through it, so each member's bits are its own and the
    trainer evaluates it once over every member instead of once per (fold, arm) block."""

    name: str
    metric: str
    description: str
    reference: Callable[..., Any]
    fused: Optional[Callable[..., Any]] = None
    null: Optional[Callable[..., Any]] = None
    head: Optional[Callable[..., Any]] = None
    null_by_row_means: bool = False
    origin: str = field(default="", compare=False)

    @property
    def builtin(self) -> bool:
        return self.origin == BUILTIN_ORIGIN


_GEMS: dict[str, Gem] = {}
_LOCK = threading.RLock()
_IMPORTING = threading.local()  # the plugins entry being imported (origin of what it registers)


def register(gem: Gem) -> Gem:
    """Add a gem at import; ConfigError for a malformed one or a clash with another module's gem."""
    origin = gem.origin if gem.origin == BUILTIN_ORIGIN else None
    origin = origin or getattr(_IMPORTING, "module", None) or gem.origin or getattr(gem.reference, "__module__", "") or ""
    gem = Gem(**{**gem.__dict__, "origin": origin})
    for what, value in (("name", gem.name), ("metric", gem.metric)):
        if not isinstance(value, str) or not NAME_PATTERN.match(value):
            raise ConfigError(f"gem {what} {value!r}: must be a lowercase identifier ([a-z][a-z0-9_]*, at most 32)")
    if gem.metric in RESERVED_METRICS or gem.metric.endswith(("_rel", "_null", "_excess")):
        raise ConfigError(f"gem {gem.name}: metric name {gem.metric!r} is reserved")
    if not callable(gem.reference):
        raise ConfigError(f"gem {gem.name}: reference must be a function of GemInputs")
    for what in ("fused", "null", "head"):
        if getattr(gem, what) is not None and not callable(getattr(gem, what)):
            raise ConfigError(f"gem {gem.name}: {what} must be a function or None")
    if not isinstance(gem.description, str) or "\n" in gem.description:
        raise ConfigError(f"gem {gem.name}: description must be one line of text")
    with _LOCK:
        for other in _GEMS.values():
            if other.origin == origin and other.name == gem.name:
                continue
            if gem.name in (other.name, other.metric) or gem.metric in (other.name, other.metric):
                kind = "the built-in gem" if other.builtin else f"gem {other.name!r} of {other.origin}"
                raise ConfigError(f"gem {gem.name} ({gem.metric}) of {origin}: clashes with {kind} {other.name} ({other.metric})")
        _GEMS[gem.name] = gem
    return gem


def _import_timeout() -> float:
    raw = os.environ.get(PLUGIN_IMPORT_TIMEOUT_ENV, "")
    try:
        value = float(raw) if raw else PLUGIN_IMPORT_TIMEOUT_S
    except ValueError:
        raise ConfigError(f"{PLUGIN_IMPORT_TIMEOUT_ENV}: {raw!r} is not a number of seconds") from None
    if not 0 < value < 1e6:
        raise ConfigError(f"{PLUGIN_IMPORT_TIMEOUT_ENV}: {raw!r} must be a positive number of seconds")
    return value


class PluginImportTimeout(Exception):
    pass


@contextlib.contextmanager
def _time_bound(seconds: float, module: str):
    """Raise PluginImportTimeout after `seconds` (a real-time timer, in the main thread only)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(_signum, _frame):
        raise PluginImportTimeout(f"the import took more than {seconds:g} s (set {PLUGIN_IMPORT_TIMEOUT_ENV} to allow longer)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def registered() -> list[Gem]:
    _ensure_builtins()
    with _LOCK:
        return list(_GEMS.values())


def get(name: str) -> Gem:
    _ensure_builtins()
    return _GEMS[name]


def builtin_gems() -> list[Gem]:
    return [g for g in registered() if g.builtin]


def run_gems(plugins: Iterable[str] = ()) -> list[Gem]:
    """The gems a run knows: the built-ins, then its (imported) `plugins` modules' in list order."""
    plugins = list(plugins)
    gems = registered()
    out = [g for g in gems if g.builtin]
    for module in plugins:
        out += [g for g in gems if g.origin == module]
    return out


def _check_entries(plugins: Sequence[Any]) -> None:
    """ConfigError naming `plugins` for an entry that is no module name, repeats, or is tune-gems's."""
    for i, module in enumerate(plugins):
        if not isinstance(module, str) or not re.match(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$", module) or len(module) > MODULE_NAME_MAX:
            raise ConfigError(f"plugins: {str(module)[:80]!r} is not a dotted module name (at most {MODULE_NAME_MAX} characters)")
        if module in plugins[:i]:
            raise ConfigError(f"plugins: {module} is listed twice")
        if module == PACKAGE or module.startswith(PACKAGE + "."):
            raise ConfigError(f"plugins: {module} is part of tune-gems (its gems are built in), not a plug-in")


def _import_one(module: str, timeout: float) -> list[Gem]:
    """Import `module` under the time bound; its gems (ConfigError when it fails or registers none)."""
    with _LOCK:
        _IMPORTING.module = module
        try:
            with _time_bound(timeout, module):
                importlib.import_module(module)
        except ConfigError as e:
            raise ConfigError(f"plugins: {module}: {e}") from None
        except BaseException as e:  # a plug-in's own failure, whatever it is, is bad input
            if isinstance(e, KeyboardInterrupt):
                raise
            msg = " ".join(str(e).split())[:300] or type(e).__name__
            raise ConfigError(f"plugins: {module}: cannot import ({type(e).__name__}: {msg})") from None
        finally:
            _IMPORTING.module = None
    mine = [g for g in registered() if g.origin == module]
    if not mine:
        raise ConfigError(f"plugins: {module}: registers no gem (call tune_gems.gems.register(Gem(...)) at import)")
    return mine


def import_plugins(plugins: Sequence[Any], validate: Callable[[list[str]], None] | None = None) -> list[Gem]:
    """Import the `plugins` modules (probed first); their gems, in order. ConfigError naming `plugins`
    for any bad entry or what `validate(plugins)` refuses."""
    _ensure_builtins()
    if plugins is None:
        return []
    if not isinstance(plugins, (list, tuple)):
        raise ConfigError(f"plugins: expected a list of module names, got {plugins!r}")
    _check_entries(plugins)
    timeout = _import_timeout() if plugins else PLUGIN_IMPORT_TIMEOUT_S
    if any(module not in sys.modules for module in plugins):
        probe_plugin(list(plugins), timeout, validate)
    found: list[Gem] = []
    for module in plugins:
        found += _import_one(module, timeout)
    if validate is not None and plugins:
        validate(list(plugins))
    return found


def _may_probe() -> bool:
    """Whether a fork is safe and wanted here (no threads, no CUDA, `PLUGIN_PROBE_ENV` not 0)."""
    if os.environ.get(PLUGIN_PROBE_ENV, "1").strip() == "0" or not hasattr(os, "fork"):
        return False
    if threading.current_thread() is not threading.main_thread() or threading.active_count() > 1:
        return False
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    return not (cuda is not None and getattr(cuda, "is_initialized", lambda: False)())


def probe_plugin(plugins: list[str], timeout: float, validate: Callable[[list[str]], None] | None = None) -> None:
    """Import `plugins` and run `validate` in a forked child in an empty folder; ConfigError with its line."""
    if not _may_probe():
        return
    cwd = os.getcwd()
    sandbox = tempfile.mkdtemp(prefix="tune-gems-plugin-probe-")
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        reply = "ok"
        try:
            os.close(read_end)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            sys.path[:] = [os.path.join(cwd, entry) for entry in sys.path]  # '' and relative entries meant the cwd
            sys.dont_write_bytecode = True  # no __pycache__ beside the user's plug-in from the probe
            os.chdir(sandbox)
            if "torch" in sys.modules:
                sys.modules["torch"].set_num_threads(1)  # as torch's own forked workers do
            for module in plugins:
                _import_one(module, timeout)
            if validate is not None:
                validate(plugins)
        except ConfigError as e:
            reply = str(e)
        except BaseException as e:  # noqa: BLE001 - reported as the plug-in's failure
            reply = f"plugins: {plugins[-1]}: cannot import ({type(e).__name__})"
        finally:
            with contextlib.suppress(BaseException):
                os.write(write_end, reply.encode()[:PROBE_REPLY_MAX])
            os._exit(0)
    os.close(write_end)
    try:
        reply = _read_reply(read_end, timeout + PROBE_GRACE_S)
    finally:
        os.close(read_end)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)  # gone already, unless it outlived its time bound
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        shutil.rmtree(sandbox, ignore_errors=True)
    if reply != "ok":
        raise ConfigError(reply or f"plugins: {plugins[-1]}: the import ended the process (no reply)")


def _read_reply(fd: int, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return f"plugins: the import ran past {seconds:g} s"
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, PROBE_REPLY_MAX)
        if not chunk:
            return b"".join(chunks).decode(errors="replace")
        chunks.append(chunk)


def manifest(plugins: Iterable[str] = ()) -> list[GemEntry]:
    """The `gems.json` entries of a run with these plugins."""
    return [GemEntry(g.name, g.metric, g.description, g.null is not None) for g in run_gems(plugins)]


def _ensure_builtins() -> None:
    if BUILTIN_ORIGIN not in {g.origin for g in _GEMS.values()}:
        importlib.import_module(BUILTIN_ORIGIN)
