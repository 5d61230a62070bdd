"""`python -m tune_gems` is the `tune-gems` command."""

import sys

from tune_gems.commands.cli import main

sys.exit(main())
