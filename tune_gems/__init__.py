"""tune-gems: measure an auxiliary loss before you commit to it."""

__version__ = "0.1.0"
