"""The analysis's text for numbers, intervals and tables: the bottom floor, so the verdicts never
import the renderer. By hand (no `tabulate`): a markdown cell has 4 significant digits, a missing
value is blank; prose spells out +inf / -inf and shows a missing value as `-`."""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np
import pandas as pd


def _cell(v: Any, digits: int = 4) -> str:
    if v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        if math.isnan(v):
            return ""
        return f"{v:.{digits}g}"
    try:
        if pd.isna(v):
            return ""
    except (TypeError, ValueError):
        pass
    return str(v).replace("|", "\\|").replace("\n", " ")


def markdown_table(df: pd.DataFrame, columns: Iterable[str] | None = None, digits: int = 4) -> str:
    """A GitHub-markdown table of `df` (selected `columns`, in order); `_None._` if empty."""
    cols = [c for c in (columns or df.columns) if c in df.columns]
    if not len(df) or not cols:
        return "_None._"
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, r in df[cols].iterrows():
        lines.append("| " + " | ".join(_cell(r[c], digits) for c in cols) + " |")
    return "\n".join(lines)


def format_number(v: Any, fmt: str = ".3g", missing: str = "-") -> str:
    """A number for a table or a verdict's text: +inf / -inf spelled out, `missing` for NaN or
    for something that is not a number."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return missing
    if np.isinf(f):
        return "+inf" if f > 0 else "-inf"
    return missing if np.isnan(f) else format(f, fmt)


def text_table(header: list[str], rows: list[list[str]], groups: dict[int, str] | None = None,
               rule: bool = True) -> list[str]:
    """Rows aligned in columns for a terminal: the header, a rule (unless `rule` is False), the rows;
    `groups` (first column -> title) a line above the header naming the columns from there on."""
    table = [header, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]
    if rule:
        lines.insert(1, "  ".join("-" * w for w in widths))
    top = ""
    for i, title in sorted((groups or {}).items()):
        top = top.ljust(sum(w + 2 for w in widths[:i])) + title
    return [top.rstrip()] + lines if top else lines


def percent(share: Any) -> str:
    """A share as a whole percentage, `-` where it is unknown (never `-%`)."""
    text = format_number(100 * share if isinstance(share, (int, float, np.floating)) else share, ".0f")
    return text if text == "-" else f"{text}%"


def counted(n: Any, noun: str) -> str:
    """`1 history`, `3 histories`, `2 periods`: a count with its noun in the number it needs."""
    plural = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return f"{format_number(n, '.0f')} {noun if format_number(n, '.0f') == '1' else plural}"


def format_interval(lo: Any, hi: Any) -> str:
    """`[lo, hi]` in `format_number`'s words, `-` where both ends are missing."""
    return "-" if format_number(lo) == "-" and format_number(hi) == "-" else f"[{format_number(lo)}, {format_number(hi)}]"
