"""The config's and the sweep spec's keys as a user sees them (`tune-gems config`) and "did you
mean", read from the pydantic models so the listing never drifts from validation."""

from __future__ import annotations

import difflib
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

SUGGEST_CUTOFF = 0.6
"""difflib similarity a known key needs to be offered for a mistyped one."""


@dataclass(frozen=True)
class KeyRow:
    key: str
    type: str
    default: str
    description: str


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (`X`, `X | None`, `Annotated[X, ...]`), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _submodel(arg)
        if found is not None:
            return found
    return None


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return "|".join(str(a) for a in args)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args if a is not type(None)) + (" or null" if type(None) in args else "")
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type_name(a) for a in args)}]"
    return getattr(annotation, "__name__", str(annotation))


def _key(name: str, field: Any) -> str:
    return field.alias or name


def _is_list(annotation: Any) -> bool:
    """Whether an annotation is a list of models, addressed by index (`data.histories.0.name`)."""
    if typing.get_origin(annotation) is list:
        return _submodel(annotation) is not None
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and any(
        _is_list(a) for a in typing.get_args(annotation)
    )


def _is_mapping(annotation: Any) -> bool:
    """Whether an annotation is a mapping whose keys are the user's (a gem's name, a dotted key)."""
    if typing.get_origin(annotation) is dict:
        return True
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and any(
        _is_mapping(a) for a in typing.get_args(annotation)
    )


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    default = field.get_default(call_default_factory=True)
    return "-" if default is None else '""' if default == "" else str(default)


def key_rows(model: type[BaseModel], prefix: str = "") -> list[KeyRow]:
    """One row per leaf key of `model`, in declaration order (a mapping's keys as `<placeholder>`)."""
    rows: list[KeyRow] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{_key(name, field)}"
        sub = _submodel(field.annotation)
        if sub is not None:
            if field.description:
                rows.append(KeyRow(key, "section", "-" if field.default is None else "", field.description))
            placeholder = f"<{(field.json_schema_extra or {}).get('key_name', 'key')}>"  # a mapping's user-chosen key
            below = f"{key}.{placeholder}." if _is_mapping(field.annotation) else f"{key}."
            rows.extend(key_rows(sub, below))
            continue
        rows.append(KeyRow(key, _type_name(field.annotation), _default(field), field.description or ""))
    return rows


def known_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys accepted beside the last element of the pydantic error location `loc` ([] outside)."""
    parts = list(loc[:-1])
    while parts:
        part = parts.pop(0)
        fields = {_key(n, f): f for n, f in model.model_fields.items()}
        if not isinstance(part, str) or part not in fields:
            return []
        sub = _submodel(fields[part].annotation)
        if sub is None:
            return []
        if _is_mapping(fields[part].annotation) or _is_list(fields[part].annotation):
            if not parts:
                return []
            parts.pop(0)  # the user's key (any name) or the entry's index
        model = sub
    return [_key(n, f) for n, f in model.model_fields.items()]


def did_you_mean(model: type[BaseModel] | None, loc: tuple[Any, ...], prefix: str = "") -> str:
    """` (did you mean <key>?)` for an unknown key at `loc` close to a known one (after `prefix`), else ''."""
    if model is None or not loc or not isinstance(loc[-1], str):
        return ""
    known = known_keys(model, tuple(loc))
    close = difflib.get_close_matches(loc[-1], known, n=1, cutoff=SUGGEST_CUTOFF)
    if not close:  # a key's first word (`prices` for `price_column`)
        words = {k.split("_")[0]: k for k in known if "_" in k}
        close = [words[w] for w in difflib.get_close_matches(loc[-1], list(words), n=1, cutoff=SUGGEST_CUTOFF)]
    if not close:
        return ""
    return f" (did you mean {prefix}{''.join(f'{p}.' for p in loc[:-1])}{close[0]}?)"


def format_rows(rows: list[KeyRow]) -> str:
    table = [("key", "type", "default", "description"), *((r.key, r.type, r.default, r.description) for r in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths)) + "  " + row[3] for row in table
    ).rstrip()
