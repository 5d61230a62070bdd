"""Describe: the tables that are descriptions, not tests (Sharpe variance, gem magnitudes, importances)."""
