"""Default thresholds of the analysis, in one place.

Every function that uses one of these takes it as a keyword parameter with this default, so a
notebook user can change it per call; `docs/analysis.md` explains each value.
"""

REL_THRESHOLD = 1e-3
"""A measured gem whose mean |gem / C51 loss| is below this is called redundant (`delete`)."""

CONFIDENCE = 0.95
"""Two-sided confidence level of every bootstrap interval (percentile method)."""

N_BOOT = 2000
"""Bootstrap resamples per interval."""

MIN_MEMBERS = 4
"""Fewest members (or seed pairs) per side before a wired-vs-measured comparison is made."""

SEED = 0
"""Seed of the bootstrap generator: the same inputs and seed give the same intervals."""

STATISTIC = "iqm"
"""Location statistic of the unpaired comparison: `iqm` (interquartile mean) or `mean`."""
