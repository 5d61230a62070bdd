"""Sweeps on Ray Tune + Optuna (the only package that knows Ray)."""
