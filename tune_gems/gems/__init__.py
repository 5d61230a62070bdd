"""The gems: a registry of definitions (built-ins and plug-ins) and the inputs a gem receives;
torch-free, so validating a config never imports torch.

A plug-in module registers a gem with `register(Gem(...))` at import; a config lists it under
`plugins:` (docs/gems.md). A run's gems under their modes are the trainer's
(tune_gems.trainer.member_gems.MemberGems).
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
    "builtin_gems",
    "get",
    "import_plugins",
    "manifest",
    "register",
    "registered",
    "run_gems",
]

