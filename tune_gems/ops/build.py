"""JIT build and process-level cache of the tune-gems CUDA extension.

The extension (kernels/binding.cpp + kernels/*.cu) is compiled with
`torch.utils.cpp_extension.load` for the current device's architecture, once per node: the
build folder is keyed by a hash of the sources, the torch / CUDA / Python versions, the arch
and the flags, so a node reuses a finished build and a changed source gets a fresh folder.
torch's file lock in that folder makes concurrent Ray workers on one node wait for one build
instead of each building.

A finished build is loaded directly, to keep a trial's start-up short: after a build succeeds and
imports, a record (`BUILT_RECORD`: the key and the library's sha256) is written beside the
library, and a later process whose key has a record matching its library imports that file
itself. No ninja run, no compiler probes, no import of torch.utils.cpp_extension: only a
process without a matching record goes through torch's JIT build (which then writes one).

The only mutable state of tune_gems.ops lives here: `_CACHE`, the loaded extension (or the
build failure) per architecture for this process, so a failing build is tried once and
warned about once.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import threading
import types
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tune_gems.contracts.errors import KernelBuildError, OutputError
from tune_gems.contracts.safe_files import sha256_regular, write_atomic

KERNELS_DIR_ENV = "TUNE_GEMS_KERNELS_DIR"
EXTENSIONS_DIR_ENV = "TUNE_GEMS_EXTENSIONS_DIR"
DEFAULT_EXTENSIONS_DIR = Path("~/.cache/tune_gems/torch_extensions")
EXTENSION_NAME_PREFIX = "tune_gems_kernels"
BINDING_SOURCE = "binding.cpp"
# Flags beyond torch's defaults; the arch flag is added per device (see _cuda_flags).
EXTRA_CUDA_FLAGS = ("-O3",)
EXTRA_CXX_FLAGS = ("-O3",)
# Hex digits of the source/toolchain hash used in folder and module names.
BUILD_KEY_LENGTH = 16
BUILD_LOG_NAME = "build_error.log"
BUILT_RECORD = "built.json"
"""Beside a finished build's library: {"key", "library", "sha256"}, written once it imported."""
LIBRARY_SUFFIX = ".pyd" if sys.platform == "win32" else ".so"
"""The file name ending torch.utils.cpp_extension gives the library it builds (its LIB_EXT)."""
# Longest excerpt of a build failure quoted in the one-line KernelBuildError.
MESSAGE_CHARS = 300


def kernels_dir() -> Path:
    """The folder holding binding.cpp and the .cu sources (TUNE_GEMS_KERNELS_DIR overrides)."""
    override = os.environ.get(KERNELS_DIR_ENV)
    if override:
        return Path(override).expanduser().resolve()
    # tune_gems/ops/build.py -> repository root (the package is installed editable).
    return Path(__file__).resolve().parents[2] / "kernels"


def extensions_root() -> Path:
    """Parent folder of the per-key build folders (TUNE_GEMS_EXTENSIONS_DIR overrides)."""
    override = os.environ.get(EXTENSIONS_DIR_ENV)
    return Path(override).expanduser() if override else DEFAULT_EXTENSIONS_DIR.expanduser()


def device_arch(device: torch.device) -> str:
    """Compute capability as nvcc spells it, e.g. "90" for an H200."""
    major, minor = torch.cuda.get_device_capability(device)
    return f"{major}{minor}"


def _cuda_flags(arch: str) -> list[str]:
    # An explicit -gencode makes torch skip its own arch detection (TORCH_CUDA_ARCH_LIST).
    return [*EXTRA_CUDA_FLAGS, f"-gencode=arch=compute_{arch},code=sm_{arch}"]


def _source_files(folder: Path) -> tuple[list[Path], list[Path]]:
    """(compiled sources, headers) of the extension; raises KernelBuildError if missing."""
    binding = folder / BINDING_SOURCE
    cuda_sources = sorted(folder.glob("*.cu"))
    if not binding.is_file() or not cuda_sources:
        raise KernelBuildError(
            f"CUDA kernel sources not found in {folder} (need {BINDING_SOURCE} and *.cu; "
            f"set {KERNELS_DIR_ENV} to the repository's kernels/ folder)"
        )
    headers = sorted([*folder.glob("*.h"), *folder.glob("*.cuh")])
    return [binding, *cuda_sources], headers


def build_key(arch: str, folder: Path | None = None) -> str:
    """Hash of everything the built library depends on: sources, toolchain versions, flags."""
    folder = folder or kernels_dir()
    sources, headers = _source_files(folder)
    digest = hashlib.sha256()
    for path in [*sources, *headers]:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    for part in (
        torch.__version__,
        str(torch.version.cuda),
        arch,
        sys.implementation.cache_tag,
        *_cuda_flags(arch),
        *EXTRA_CXX_FLAGS,
    ):
        digest.update(b"\0" + part.encode())
    return digest.hexdigest()[:BUILD_KEY_LENGTH]


def _one_line(error: BaseException) -> str:
    """The most telling line of a build failure: the first compiler "error" line if any."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    telling = next((line for line in lines if "error" in line.lower() and "Error building" not in line), None)
    text = " ".join((telling or " ".join(lines)).split())
    return text[:MESSAGE_CHARS] if text else type(error).__name__


def _library_path(build_dir: Path, name: str) -> Path:
    """Where torch's JIT build writes the library of extension `name` in `build_dir`."""
    return build_dir / f"{name}{LIBRARY_SUFFIX}"


def built_library(build_dir: Path, name: str, key: str) -> Path | None:
    """The library of a finished build of `key` in `build_dir`, or None: no record, a record of
    another key or file, or a library whose bytes are not the recorded ones (a build being
    rewritten, a file replaced by hand)."""
    try:
        record = json.loads((build_dir / BUILT_RECORD).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    library = _library_path(build_dir, name)
    if not isinstance(record, dict) or record.get("key") != key or record.get("library") != library.name:
        return None
    try:
        return library if sha256_regular(library, None, KernelBuildError) == record.get("sha256") else None
    except (OSError, KernelBuildError):
        return None


def _record_build(build_dir: Path, name: str, key: str) -> None:
    """Write BUILT_RECORD for the library just built and imported. A record that cannot be
    written is no error: the next process goes through torch's build (a no-op) again."""
    library = _library_path(build_dir, name)
    try:
        body = json.dumps({"key": key, "library": library.name, "sha256": sha256_regular(library, None, KernelBuildError)})
        write_atomic(build_dir / BUILT_RECORD, body + "\n", tmp=build_dir / f".{BUILT_RECORD}.{os.getpid()}.tmp")
    except (OSError, OutputError, KernelBuildError):
        pass


def _import_library(name: str, library: Path) -> types.ModuleType:
    """Import a built extension module from its file (what torch's JIT load does last)."""
    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise ImportError(f"{library}: not an importable extension module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compile(arch: str) -> types.ModuleType:
    """Load the finished build of `arch` directly when its record matches (built_library), else
    build (or reuse) it through torch and import it; KernelBuildError on any failure."""
    folder = kernels_dir()
    sources, _ = _source_files(folder)
    key = build_key(arch, folder)
    build_dir = extensions_root() / key
    name = f"{EXTENSION_NAME_PREFIX}_{key}"
    library = built_library(build_dir, name, key)
    if library is not None:
        try:
            return _import_library(name, library)
        except (ImportError, OSError):
            pass  # a library that does not load: torch's build below makes it again
    try:
        build_dir.mkdir(parents=True, exist_ok=True)
        module = _jit_load(name, sources, folder, build_dir, arch)
    except Exception as error:  # noqa: BLE001 - any failure (no nvcc, no ninja, compile error)
        log = build_dir / BUILD_LOG_NAME
        try:
            log.write_text(f"{type(error).__name__}: {error}\n")
            where = f"; full output in {log}"
        except OSError:
            where = ""
        raise KernelBuildError(
            f"building the CUDA kernels for sm_{arch} failed: {_one_line(error)}{where}"
        ) from error
    _record_build(build_dir, name, key)
    return module


def _jit_load(name: str, sources: list[Path], folder: Path, build_dir: Path, arch: str) -> types.ModuleType:
    """torch's JIT build and import of the extension (ninja, compiler checks, the build itself
    when a source changed)."""
    from torch.utils import cpp_extension  # deferred: only a CUDA run without a finished build needs it

    return cpp_extension.load(
        name=name,
        sources=[str(path) for path in sources],
        extra_cflags=list(EXTRA_CXX_FLAGS),
        extra_cuda_cflags=_cuda_flags(arch),
        extra_include_paths=[str(folder)],
        build_directory=str(build_dir),
        with_cuda=True,
        verbose=False,
    )


@dataclass
class _ExtensionCache:
    """Per-process record of the extension per arch: the module, or the build failure."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    modules: dict[str, types.ModuleType] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    # device index -> module, memoised so an op call does not query the device each time
    by_device_index: dict[int, types.ModuleType] = field(default_factory=dict)
    warned_fallback: set[str] = field(default_factory=set)


_CACHE = _ExtensionCache()


def _cuda_device(device: torch.device | str | int) -> torch.device:
    device = torch.device(device)
    if device.type != "cuda":
        raise KernelBuildError(f"kernels=cuda needs a CUDA device, got device '{device}'")
    if not torch.cuda.is_available():
        raise KernelBuildError("kernels=cuda needs CUDA, but torch.cuda.is_available() is False")
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def load_extension(device: torch.device | str | int = "cuda") -> types.ModuleType:
    """The compiled extension for `device`, built on first use; raises KernelBuildError.

    Thread-safe; a failed build is remembered and not retried in this process.
    """
    device = _cuda_device(device)
    arch = device_arch(device)
    with _CACHE.lock:
        module = _CACHE.modules.get(arch)
        if module is None:
            if arch in _CACHE.failures:
                raise KernelBuildError(_CACHE.failures[arch])
            try:
                module = _compile(arch)
            except KernelBuildError as error:
                _CACHE.failures[arch] = str(error)
                raise
            _CACHE.modules[arch] = module
        _CACHE.by_device_index[device.index] = module
        return module


def loaded_extension(device: torch.device) -> types.ModuleType | None:
    """The extension already loaded for `device`, or None; never builds (safe in capture)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    module = _CACHE.by_device_index.get(index)
    if module is not None or not _CACHE.modules:
        return module
    module = _CACHE.modules.get(device_arch(torch.device("cuda", index)))
    if module is not None:
        with _CACHE.lock:
            _CACHE.by_device_index[index] = module
    return module


def first_fallback_warning(arch_or_reason: str) -> bool:
    """True the first time in this process a fallback for this reason is reported."""
    with _CACHE.lock:
        if arch_or_reason in _CACHE.warned_fallback:
            return False
        _CACHE.warned_fallback.add(arch_or_reason)
        return True
