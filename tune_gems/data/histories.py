"""Several price histories on the population axis (docs/data.md "Several price histories"), each
its own market; members = histories x folds x arms x seeds. The record (`HistorySpec`), its names'
rules and limits, below the schema: `DataConfig.price_histories` resolves them without I/O."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any

MAX_HISTORIES = 64
"""Most price histories a run may have (`data.histories`, `data.price_columns`): more is a typo, not a design."""

NAME_RESERVED = "|/[]"
"""Characters a history name may not hold: they structure the HEALTH_DIAG line's fold block
(`folds [<history>/<fold>: ... | ...]`)."""
UNSEEN_CATEGORIES = ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs")
"""Unicode categories a history name may not hold (the plain space excepted): control and format
characters (zero-width spaces and joiners, right-to-left overrides), surrogates, private and
unassigned code points, and separators other than the space. Each prints as nothing or moves the
text around it, so two different histories could print as one name (`AAPL` and `AA\u200bPL`)."""
FORMULA_LEADS = "=+-@"
"""First characters a history name may not start with: a spreadsheet opening a result table reads
such a cell as a formula (CSV injection). Refused rather than escaped on write, so every table and
line shows the name the config gave."""

HISTORY_TABLE_COLUMNS = ("history", "name", "source", "column", "first", "last", "rows")
"""The history table (histories.csv / histories.parquet, tune_gems.data.summary.history_table): per
history its index (the members' `history`), name, source file (`synthetic` for the synthetic
series), the price column read (as the file spells it), the first and last timestamp (row numbers
without a time column) and its rows."""

SYNTHETIC_NAME = "synthetic"
"""The name of the one history of a synthetic run."""


@dataclass(frozen=True)
class HistorySpec:
    """One history of a run: its `name`, its file (None: synthetic) and columns (`time_column` None: found by name)."""

    name: str
    path: str | None
    price_column: str
    time_column: str | None

    @property
    def where(self) -> str:
        """`<file>, column '<price column>'` (the synthetic series: `synthetic`)."""
        return SYNTHETIC_NAME if self.path is None else f"{self.path}, column {self.price_column!r}"


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a history, or None: a name is printable and unambiguous
    (UNSEEN_CATEGORIES, NAME_RESERVED) and reads as text in a spreadsheet (FORMULA_LEADS)."""
    if not name.strip():
        return "is empty"
    bad = [c for c in name if c in NAME_RESERVED or (unicodedata.category(c) in UNSEEN_CATEGORIES and c != " ")]
    if bad:
        return (f"holds {bad[0]!r} (U+{ord(bad[0]):04X}; a name is printable and unambiguous: no control, zero-width, "
                f"right-to-left or unassigned character, no space but ' ', none of {NAME_RESERVED})")
    if name.strip()[0] in FORMULA_LEADS:
        return f"starts with {name.strip()[0]!r}, which a spreadsheet reads as a formula; start it with a letter or digit"
    return None


def name_key(name: str) -> str:
    """What two history names are compared by: their NFKC form (fullwidth `ＡＡＰＬ` is `AAPL`),
    ignoring case (as the file's columns match)."""
    return unicodedata.normalize("NFKC", name.strip()).casefold()


def specs_problem(data: Any) -> str | None:
    """The first problem of a data config's histories (one line naming the key), or None: a bad name
    or two of one name ignoring case and Unicode compatibility forms, as the columns match."""
    specs, key = data.price_histories, data.histories_key
    seen: dict[str, int] = {}
    for i, spec in enumerate(specs):
        problem = name_problem(spec.name)
        if problem is not None:
            return f"{key}.{i}: history name {spec.name!r} {problem}"
        first = seen.setdefault(name_key(spec.name), i)
        if first != i:
            fix = "give each history its own column" if key == "data.price_columns" else "give each entry its own `name`"
            return f"{key}.{i}: a second history named {spec.name!r} (entry {first} has it): {fix}"
    return None
