"""JIT build and process-level cache of the CUDA extension (kernels/), keyed by a hash of sources,
versions, arch and flags. A recorded library sha256 (`BUILT_RECORD`) lets a later process import it
without ninja (a short trial start-up); `_CACHE` makes a failing build warn once per architecture."""

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
LIBRARY_SUFFIX = ".pyd" if sys.platform == "win32" else ".so"
"""The library's file ending (torch.utils.cpp_extension's LIB_EXT)."""
# Longest excerpt of a build failure quoted in the one-line KernelBuildError.
MESSAGE_CHARS = 300


def kernels_dir() -> Path:
    override = os.environ.get(KERNELS_DIR_ENV)
    if override:
        return Path(override).expanduser().resolve()
    # tune_gems/ops/build.py -> repository root (the package is installed editable).
    return Path(__file__).resolve().parents[2] / "kernels"


def extensions_root() -> Path:
    override = os.environ.get(EXTENSIONS_DIR_ENV)
    return Path(override).expanduser() if override else DEFAULT_EXTENSIONS_DIR.expanduser()


def device_arch(device: torch.device) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    return f"{major}{minor}"


def _cuda_flags(arch: str) -> list[str]:
    # An explicit -gencode makes torch skip its own arch detection (TORCH_CUDA_ARCH_LIST).
    return [*EXTRA_CUDA_FLAGS, f"-gencode=arch=compute_{arch},code=sm_{arch}"]


def _source_files(folder: Path) -> tuple[list[Path], list[Path]]:
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
    return build_dir / f"{name}{LIBRARY_SUFFIX}"


def built_library(build_dir: Path, name: str, key: str) -> Path | None:
    """The library of a finished build of `key`, or None (no record, another key, other bytes)."""
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
    """Write BUILT_RECORD for the library just built and imported (a failure costs only a start-up)."""
    library = _library_path(build_dir, name)
    try:
        body = json.dumps({"key": key, "library": library.name, "sha256": sha256_regular(library, None, KernelBuildError)})
        write_atomic(build_dir / BUILT_RECORD, body + "\n", tmp=build_dir / f".{BUILT_RECORD}.{os.getpid()}.tmp")
    except (OSError, OutputError, KernelBuildError):
        pass


def _import_library(name: str, library: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise ImportError(f"{library}: not an importable extension module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compile(arch: str) -> types.ModuleType:
    """Import the recorded build of `arch`, else build it through torch; KernelBuildError on any failure."""
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
        raise KernelBuildError(f"building the CUDA kernels for sm_{arch} failed: {_one_line(error)}{where}") from error
    _record_build(build_dir, name, key)
    return module


def _jit_load(name: str, sources: list[Path], folder: Path, build_dir: Path, arch: str) -> types.ModuleType:
    from torch.utils import cpp_extension  # deferred: only a CUDA run without a finished build needs it

    return cpp_extension.load(name=name, sources=[str(path) for path in sources], extra_cflags=list(EXTRA_CXX_FLAGS),
        extra_cuda_cflags=_cuda_flags(arch), extra_include_paths=[str(folder)], build_directory=str(build_dir),
        with_cuda=True, verbose=False)


@dataclass
class _ExtensionCache:

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
    """The compiled extension for `device`, built on first use; a failed build is not retried."""
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
    with _CACHE.lock:
        if arch_or_reason in _CACHE.warned_fallback:
            return False
        _CACHE.warned_fallback.add(arch_or_reason)
        return True
