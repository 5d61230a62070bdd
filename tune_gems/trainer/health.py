"""The per-epoch HEALTH_DIAG line (DESIGN.md "The trainer"): one grep-able line of numbers."""

from __future__ import annotations

import math
from typing import Any

from tune_gems.gems import GemSet


def _num(x: float, fmt: str = ".4f") -> str:
    return "nan" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def health_line(m: dict[str, Any], gems: GemSet) -> str:
    parts = [
        f"HEALTH_DIAG epoch={m['epoch']}",
        f"loss={_num(m['loss'])}",
        f"q_mean={_num(m['q_mean'])}",
        f"grad_norm={_num(m['grad_norm'], '.2f')}",
        f"noisy_sigma={_num(m['noisy_sigma'], '.2f')}",
        f"val_sharpe={_num(m['val_sharpe_mean'], '.2f')}±{_num(m['val_sharpe_std'], '.2f')}",
    ]
    if not math.isnan(m["test_sharpe_mean"]):
        parts.append(f"test_sharpe={_num(m['test_sharpe_mean'], '.2f')}±{_num(m['test_sharpe_std'], '.2f')}")
    parts.append(f"sps={m['sps']:.0f}")
    gem_parts = []
    for s in gems.settings.values():
        value = "off" if s.mode == "off" else _num(m[s.metric])
        gem_parts.append(f"{s.metric}={value}")
    parts.append(f"gems [{' '.join(gem_parts)}]")
    if m["diverged"]:
        parts.append("DIVERGED")
    return " ".join(parts)
