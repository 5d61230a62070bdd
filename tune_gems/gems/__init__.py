"""The gems: a torch-free registry of definitions (docs/gems.md) and the inputs a gem receives."""

from tune_gems.gems.inputs import GemInputs
from tune_gems.gems.registry import Gem, builtin_gems, get, import_plugins, manifest, register, registered, run_gems

__all__ = ["Gem", "GemInputs", "builtin_gems", "get", "import_plugins", "manifest", "register", "registered", "run_gems"]
