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


class KernelBuildError(TuneGemsError):
    """The CUDA kernels were required (kernels=cuda) but could not be built or loaded."""
