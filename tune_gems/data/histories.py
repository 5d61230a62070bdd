"""Several price histories on the population axis (docs/data.md "Several price histories"): which
histories a data config names, and what each is called.

A run trains on one history (a price file, or the synthetic series) or on several: the columns of
one multi-asset file (`data.price_columns`) or one entry per file or column (`data.histories`).
Each history is its own market (its own normalisation, folds, test segment and episodes);
members = histories x folds x arms x seeds (tune_gems.design.arms.MemberLayout). The data config
resolves itself into one `HistorySpec` per history (its name, file and columns), with no I/O
(`DataConfig.price_histories`, tune_gems.config.schema): the config's validation, the member
layout and the loader (tune_gems.data.series.load_histories) all read that one list. This module
holds the record, the names' rules and the limits, below the schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_HISTORIES = 64
"""Most price histories a run may have (`data.histories`, `data.price_columns`): more is a typo, not a design."""

NAME_RESERVED = "|/[]"
"""Characters a history name may not hold: they structure the HEALTH_DIAG line's fold block
(`folds [<history>/<fold>: ... | ...]`)."""

HISTORY_TABLE_COLUMNS = ("history", "name", "source", "column", "first", "last", "rows")
"""The history table (histories.csv / histories.parquet, tune_gems.data.summary.history_table): per
history its index (the members' `history`), name, source file (`synthetic` for the synthetic
series), the price column read (as the file spells it), the first and last timestamp (row numbers
without a time column) and its rows."""

SYNTHETIC_NAME = "synthetic"
"""The name of the one history of a synthetic run."""


@dataclass(frozen=True)
class HistorySpec:
    """One history of a run: its `name` (the results' and the start-up lines'), its file (None for
    the synthetic series) and the columns read there (`time_column` None: the file's date column
    found by name, tune_gems.data.series.load_prices)."""

    name: str
    path: str | None
    price_column: str
    time_column: str | None

    @property
    def where(self) -> str:
        """`<file>, column '<price column>'` (the synthetic series: `synthetic`)."""
        return SYNTHETIC_NAME if self.path is None else f"{self.path}, column {self.price_column!r}"


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a history, or None."""
    if not name.strip():
        return "is empty"
    bad = [c for c in name if c in NAME_RESERVED or ord(c) < 32 or 127 <= ord(c) < 160]
    if bad:
        return f"holds {bad[0]!r} (a name may not hold control characters or any of {NAME_RESERVED})"
    return None


def specs_problem(data: Any) -> str | None:
    """The first problem of a data config's histories (one line naming the key), or None: a name
    that cannot be one, two histories of one name (names compare ignoring case, as the file's
    columns do). Their number is bounded by the config's fields (MAX_HISTORIES)."""
    specs, key = data.price_histories, data.histories_key
    seen: dict[str, int] = {}
    for i, spec in enumerate(specs):
        problem = name_problem(spec.name)
        if problem is not None:
            return f"{key}.{i}: history name {spec.name!r} {problem}"
        first = seen.setdefault(spec.name.lower(), i)
        if first != i:
            fix = "give each history its own column" if key == "data.price_columns" else "give each entry its own `name`"
            return f"{key}.{i}: a second history named {spec.name!r} (entry {first} has it): {fix}"
    return None
