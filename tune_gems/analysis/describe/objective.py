"""Whether a sweep searched on the verdict's own metric (`verdict_gain`): a spec that optimised anything else chose its
configurations on another quantity than the one judged, and its report says so."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd
import yaml

from tune_gems.stats.metrics import VERDICT_GAIN

SPEC_FILE = "spec.yaml"


def stored_spec(path: str | Path) -> dict | None:
    """The sweep spec stored in `path` as a tree (None: no readable spec, e.g. a train run)."""
    f = Path(path) / SPEC_FILE
    try:
        spec = yaml.safe_load(f.read_text(encoding="utf-8")) if f.is_file() else None
    except (OSError, yaml.YAMLError):
        return None
    return spec if isinstance(spec, dict) else None


def searched_objective(path: str | Path) -> str | None:
    """The objective metric of the sweep spec stored in `path` (None: no readable spec, e.g. a train run)."""
    spec = stored_spec(path)
    objective = spec.get("objective") if spec else None
    metric = objective.get("metric") if isinstance(objective, dict) else None
    return str(metric) if metric is not None else None


def searched_mode(path: str | Path) -> str:
    """Whether the sweep in `path` maximised or minimised its objective (`max` without a spec)."""
    spec = stored_spec(path)
    objective = spec.get("objective") if spec else None
    mode = objective.get("mode") if isinstance(objective, dict) else None
    return "min" if mode == "min" else "max"


def chose_anything(path: str | Path, trials: pd.DataFrame | None = None, label: str | None = None) -> bool:
    """Whether the sweep chose among configurations: it searched something over more than one trial
    (else a note about its objective does not apply)."""
    spec = stored_spec(path)
    if spec is None:
        return False
    search = spec.get("search") if isinstance(spec.get("search"), dict) else {}
    searched = bool(search.get("gems")) or bool(search.get("params"))
    if trials is not None and len(trials) and label is not None and "experiment" in trials.columns:
        n = int((trials["experiment"] == label).sum())
    else:
        n = int(spec.get("num_samples") or 0)
    return searched and n > 1


def several_wired(trials: pd.DataFrame | None, label: str) -> int:
    """How many of the experiment's trials wired two or more gems (0 without the columns)."""
    if trials is None or not len(trials):
        return 0
    t = trials[trials["experiment"] == label] if "experiment" in trials.columns else trials
    modes = [c for c in t.columns if c.startswith("gems.") and c.endswith(".mode")]
    return int((t[modes].astype(str) == "wire").sum(axis=1).ge(2).sum()) if modes else 0


def objective_notes(paths: Iterable[str | Path], labels: Iterable[str], trials: pd.DataFrame | None = None) -> list[str]:
    """One note per experiment whose objective is not the verdict's metric. `verdict_gain` compares the
    proposal with control, a gem's verdict with the proposal without that gem: the same only when a
    trial wires that gem alone, so the note also says when trials wired several."""
    notes = []
    for path, label in zip(paths, labels):
        metric = searched_objective(path)
        if not chose_anything(path, trials, label):
            continue
        if metric is not None and metric != VERDICT_GAIN:
            notes.append(f"{label}: the search objective {metric} is not the verdict's metric ({VERDICT_GAIN}: "
                         "paired gain in validation alpha Sharpe over the last k epochs, divergence the worst "
                         "outcome, pseudo-median): its trials were chosen on another quantity than the one judged")
        elif metric == VERDICT_GAIN and (n := several_wired(trials, label)):
            notes.append(f"{label}: {n} trial(s) wired several gems; there the objective {VERDICT_GAIN} is the joint "
                         "effect of their wiring (proposal - control), while each gem's verdict judges proposal - "
                         f"without-<gem> ({VERDICT_GAIN}_<gem>, which `tune-gems confirm` chooses on)")
    return notes
