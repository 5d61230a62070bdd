"""The gems: a registry of definitions (built-ins and plug-ins) and their modes in a run.

A plug-in module registers a gem with `register(Gem(...))` at import; a config lists it under
`plugins:` (docs/gems.md). `GemSet` (the run's gems under their modes) imports torch, so it is
loaded on first use: validating a config never imports torch.
"""

from tune_gems.gems.inputs import GemInputs
from tune_gems.gems.registry import (
    Gem,
    builtin_gems,
    get,
    import_plugins,
    manifest,
    register,
    registered,
    run_gems,
)

__all__ = [
    "Gem",
    "GemInputs",
    "GemSet",
    "GemSetting",
    "builtin_gems",
    "get",
    "import_plugins",
    "manifest",
    "register",
    "registered",
    "run_gems",
]


def __getattr__(name: str):
    if name in ("GemSet", "GemSetting"):
        from tune_gems.gems import modes

        return getattr(modes, name)
    raise AttributeError(f"module 'tune_gems.gems' has no attribute {name!r}")
