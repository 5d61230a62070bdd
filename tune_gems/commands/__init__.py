"""The command line: `tune-gems` and the commands above the sweep (confirm, compare)."""
