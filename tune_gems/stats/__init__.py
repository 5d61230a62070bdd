"""Torch-free statistics: metric names and trading metrics, the exact paired test and Holm, the baseline headline."""
