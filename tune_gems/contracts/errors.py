"""Errors a user sees for bad input. Each carries one line that names the bad field or file.

The CLI turns any of these into that line on stderr and exit status 2, before anything is
written.
"""


class TuneGemsError(Exception):
    """Base of the user-facing errors: the message is one line, ready to print."""


class ConfigError(TuneGemsError):
    """A config or sweep spec is malformed, has unknown keys, wrong types or bad ranges."""


class DataError(TuneGemsError):
    """A price file is missing, unreadable, or its contents fail validation."""


class CheckpointError(TuneGemsError):
    """A checkpoint is missing, corrupt, or was written by an incompatible config."""


class OutputExistsError(TuneGemsError):
    """A result folder already exists and would be overwritten."""


class OutputError(TuneGemsError):
    """An output folder cannot be used: not writable, a file, in a pseudo-filesystem, an input of
    the same command, or a folder that this tool did not write (and so will not replace)."""


class OutputInUseError(OutputError):
    """Another live process holds the output folder's one-writer lock."""


class BadNameError(ConfigError):
    """A user-given name that becomes a path is not one portable path component."""


class StorageError(TuneGemsError):
    """A storage URI names an unknown scheme, an unreachable filesystem, or a read-only place."""


class ResourceError(TuneGemsError):
    """The run cannot fit: its estimated memory or requested trial resources exceed the machine
    or the cluster."""


class KernelBuildError(TuneGemsError):
    """The CUDA kernels were required (kernels=cuda) but could not be built or loaded."""
