"""What every script in this folder runs: its door of `tune_gems.analysis.cli` (one function per
script, the same options and checks), with tune_gems from this checkout when it is not installed."""

import sys
from pathlib import Path

try:
    import tune_gems  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run(door: str) -> None:
    """Exit with the status of `tune_gems.analysis.cli.main(door)` on the command line's arguments."""
    from tune_gems.analysis.cli import main

    sys.exit(main(door))
