"""Print the verdict per gem (keep wired / harmful / equivalent / inconclusive / delete) with its evidence.

Usage: python analysis/verdicts.py EXPERIMENT_DIR [EXPERIMENT_DIR ...] [options]  (--help for options)
"""

import sys
from pathlib import Path

try:
    import tune_gems  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tune_gems.analysis.scripts import verdicts_main

if __name__ == "__main__":
    sys.exit(verdicts_main())
