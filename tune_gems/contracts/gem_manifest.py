"""The `gems.json` manifest (docs/results.md): which gems a run knew, one record type and one
reader, so a plug-in gem reaches every table and plot of the analysis."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from tune_gems.contracts.errors import DataError
from tune_gems.contracts.result_files import GEMS_FILE


@dataclass(frozen=True)
class GemEntry:
    """One gem of a run: name, metric column, description, and whether it has a null."""

    name: str
    metric: str
    description: str = ""
    has_null: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "metric": self.metric, "description": self.description, "has_null": self.has_null}

    @property
    def identity(self) -> tuple[str, str, bool]:
        """What two experiments must agree on to be analysed together (the description is prose)."""
        return self.name, self.metric, self.has_null


LEGACY_MANIFEST: tuple[GemEntry, ...] = (GemEntry("g6", "g6_branch_indep", "branch independence", True),
                                         GemEntry("g10", "g10_temporal", "temporal consistency", False),
                                         GemEntry("g12", "g12_predictive", "predictive coding", True))
"""The gems of results written before gems.json: the built-ins (tests/test_layering.py checks them)."""


def manifest_text(entries: Iterable[GemEntry]) -> str:
    return json.dumps([e.to_json() for e in entries], indent=2) + "\n"


def _entry(item: Any) -> GemEntry:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not isinstance(item.get("metric"), str):
        raise ValueError("expected a list of objects with text name and metric")
    has_null = item.get("has_null", True)
    if not isinstance(has_null, bool):
        raise ValueError(f"gem {item['name']}: has_null must be true or false")
    description = item.get("description", "")
    return GemEntry(item["name"], item["metric"], description if isinstance(description, str) else "", has_null)


def read_manifest(folder: str | Path) -> tuple[GemEntry, ...] | None:
    """The gems.json of `folder`, None without one; a malformed one is a DataError naming the file."""
    path = Path(folder) / GEMS_FILE
    if not path.is_file():
        return None
    try:
        items = json.loads(path.read_text())
        if not isinstance(items, list):
            raise ValueError("expected a list of objects with name and metric")
        entries = tuple(_entry(i) for i in items)
        names = [e.name for e in entries]
        if len(set(names)) < len(names):
            raise ValueError("a gem is listed twice")
        return entries
    except (OSError, ValueError, TypeError) as err:
        text = " ".join(str(err).split())
        raise DataError(f"{path}: not a readable gem list ({type(err).__name__}: {text})") from None


def folder_manifest(folder: str | Path) -> tuple[GemEntry, ...]:
    """The gems of an experiment folder: its gems.json, else LEGACY_MANIFEST (older results)."""
    entries = read_manifest(folder)
    return LEGACY_MANIFEST if entries is None else entries


def manifest_source(folder: str | Path) -> str:
    """Where `folder_manifest` took a folder's gems from, for messages."""
    path = Path(folder) / GEMS_FILE
    return str(path) if path.is_file() else f"{folder} (no {GEMS_FILE}: the three built-in gems)"


def disagreement(a: Iterable[GemEntry], b: Iterable[GemEntry]) -> str:
    """'' when two manifests list the same gems (order aside), else what differs in a few words."""
    ia, ib = {e.identity for e in a}, {e.identity for e in b}
    if ia == ib:
        return ""
    only_a = sorted(f"{n} ({m}{'' if h else ', no null'})" for n, m, h in ia - ib)
    only_b = sorted(f"{n} ({m}{'' if h else ', no null'})" for n, m, h in ib - ia)
    return "; ".join(p for p in (f"only the first has {', '.join(only_a)}" if only_a else "",
                                 f"only the second has {', '.join(only_b)}" if only_b else "") if p)
