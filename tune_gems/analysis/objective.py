"""Whether a sweep searched on the verdict's own metric (issue 21): the note its report carries.

The verdicts decide on the per-seed paired gain in validation alpha Sharpe over the last k
epochs, a diverged member the worst outcome, summarised by the Hodges-Lehmann pseudo-median;
`verdict_gain` (tune_gems.metrics) is that statistic on one trial's arms. A sweep whose spec
optimised anything else (raw Sharpe, a last-epoch value, a mean that drops diverged trials)
chose its configurations on another quantity than the one judged, and its report says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import yaml

from tune_gems.metrics import VERDICT_GAIN

SPEC_FILE = "spec.yaml"


def searched_objective(path: str | Path) -> str | None:
    """The objective metric of the sweep spec stored in `path` (None: no readable spec, e.g. a
    train run)."""
    f = Path(path) / SPEC_FILE
    try:
        spec = yaml.safe_load(f.read_text(encoding="utf-8")) if f.is_file() else None
    except (OSError, yaml.YAMLError):
        return None
    objective = spec.get("objective") if isinstance(spec, dict) else None
    metric = objective.get("metric") if isinstance(objective, dict) else None
    return str(metric) if metric is not None else None


def objective_notes(paths: Iterable[str | Path], labels: Iterable[str]) -> list[str]:
    """One note per experiment whose search objective is not the verdict's metric."""
    notes = []
    for path, label in zip(paths, labels):
        metric = searched_objective(path)
        if metric is not None and metric != VERDICT_GAIN:
            notes.append(f"{label}: the search objective {metric} is not the verdict's metric ({VERDICT_GAIN}: "
                         "paired gain in validation alpha Sharpe over the last k epochs, divergence the worst "
                         "outcome, pseudo-median): its trials were chosen on another quantity than the one judged")
    return notes
