"""Errors a user sees for bad input: one line naming the bad field or file (exit 2), made
`printable` here once, since what the user gave may hold control characters."""


def printable(text: str) -> str:
    """`text` as one printable line: CR, LF, TAB as spaces, other controls as `\\xNN` (idempotent)."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in "\r\n\t":
            out.append(" ")
        elif code < 32 or 127 <= code < 160:
            out.append(f"\\x{code:02x}")
        else:
            out.append(ch)
    return "".join(out)


def control_characters(text: str) -> list[str]:
    """The control characters (C0, DEL, C1) in `text`, escaped (`\\x1b`), in order."""
    return [f"\\x{ord(c):02x}" for c in text if ord(c) < 32 or 127 <= ord(c) < 160]


class TuneGemsError(Exception):
    """Base of the user-facing errors: the message is one printable line."""

    def __init__(self, message: object = "", *rest: object) -> None:
        super().__init__(printable(str(message)), *rest)


class ConfigError(TuneGemsError):
    """A config or sweep spec is malformed, has unknown keys, wrong types or bad ranges."""


class DataError(TuneGemsError):
    """A price file is missing, unreadable, or its contents fail validation."""


class CheckpointError(TuneGemsError):
    """A checkpoint is missing, corrupt, or was written by an incompatible config."""


class OutputExistsError(TuneGemsError):
    """A result folder already exists and would be overwritten."""


class OutputError(TuneGemsError):
    """An output folder cannot be used (not writable, an input, not written by this tool, ...)."""


class OutputInUseError(OutputError):
    """Another live process holds the output folder's one-writer lock."""


class BadNameError(ConfigError):
    """A user-given name that becomes a path is not one portable path component."""


class StorageError(TuneGemsError):
    """A storage URI names an unknown scheme, an unreachable filesystem, or a read-only place."""


class ResourceError(TuneGemsError):
    """The run cannot fit: its memory or trial resources exceed the machine or the cluster."""


class KernelBuildError(TuneGemsError):
    """The CUDA kernels were required (kernels=cuda) but could not be built or loaded."""
