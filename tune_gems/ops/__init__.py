"""Graph-safe, deterministic ops for the gems and the C51 head, and the backend chosen once per run."""

from tune_gems.ops.backend import KERNEL_CHOICES, GemOps, custom_op_ops, reference_ops, resolve_backend
from tune_gems.ops.build import kernels_dir, load_extension

__all__ = ["KERNEL_CHOICES", "GemOps", "custom_op_ops", "reference_ops", "kernels_dir", "load_extension",
    "resolve_backend"]
