"""Dotted keys (`trainer.lr`) over nested mappings: the one notation of config overrides, arms
factors, sweep search spaces and the flat columns of trials.parquet.

A leaf (plain dicts, no tune_gems import but the error type), so the config schema and the arms
model below it share it without importing each other.

One key, one form: a mapping that gives a key both nested (`gems: {g12: {mode: ...}}`) and
dotted (`gems.g12.mode: ...`), in one file or across a file and an override, is refused naming
the key (`flatten`, `check_one_form`): flattening would keep whichever came last, so one of the
two values would be dropped without a word.
"""

from __future__ import annotations

import copy
from typing import Any

from tune_gems.contracts.errors import ConfigError


class DuplicateKeyError(ConfigError, ValueError):
    """A key given twice in one mapping, nested and dotted. A ValueError too, so that raised
    inside a pydantic validator it is reported at its field like any other bad value."""


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> {dotted.key: leaf}; DuplicateKeyError when two entries flatten to one
    key (the same key nested and dotted)."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        items = flatten(v, f"{prefix}{k}.").items() if isinstance(v, dict) else [(f"{prefix}{k}", v)]
        for key, leaf in items:
            if key in out:
                raise DuplicateKeyError(f"{key}: given twice, once nested and once dotted (one of the two values would "
                                        "be dropped without a word); give it once")
            out[key] = leaf
    return out


def check_one_form(tree: Any, prefix: str = "") -> None:
    """DuplicateKeyError naming the first key that `tree` (a config or spec, lists of mappings
    such as `arms.list` included) gives twice, nested and dotted."""
    if isinstance(tree, list):
        for i, item in enumerate(tree):
            check_one_form(item, f"{prefix.removesuffix('.')}[{i}].")
        return
    if not isinstance(tree, dict):
        return
    for key, leaf in flatten(tree, prefix).items():
        if isinstance(leaf, list):
            check_one_form(leaf, f"{key}.")


def with_dotted(tree: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A copy of `tree` with each dotted key of `values` set (`tree` itself unchanged)."""
    out = copy.deepcopy(tree)
    for key, value in values.items():
        set_dotted(out, key, value)
    return out


def set_dotted(tree: dict[str, Any], key: str, value: Any) -> None:
    """Write `value` at dotted `key`, creating intermediate mappings."""
    parts = key.split(".")
    node = tree
    for part in parts[:-1]:
        nxt = node.get(part)
        if nxt is None:
            nxt = node[part] = {}
        elif not isinstance(nxt, dict):
            raise ConfigError(f"{key}: {part} is a value, not a section")
        node = nxt
    node[parts[-1]] = value
