"""Pair: the designed comparisons, which members may be compared to estimate one factor's effect."""
