"""Dotted keys (`trainer.lr`) over nested mappings: the one notation of overrides, factors, search spaces and flat
columns. A key given both nested and dotted is refused (flattening would silently drop one of the values)."""

from __future__ import annotations

import copy
from typing import Any

from tune_gems.contracts.errors import ConfigError


class DuplicateKeyError(ConfigError, ValueError):
    """A key given nested and dotted; a ValueError too, so pydantic reports it at its field."""


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> {dotted.key: leaf}; DuplicateKeyError when two entries flatten to one key."""
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
    """DuplicateKeyError naming the first key `tree` gives twice (lists of mappings included)."""
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
    out = copy.deepcopy(tree)
    for key, value in values.items():
        set_dotted(out, key, value)
    return out


def set_dotted(tree: dict[str, Any], key: str, value: Any) -> None:
    """Set `key` in `tree`, making the sections it names; a list's entry is addressed by its index
    (`data.histories.0.price_column`), so a wrong key inside it reaches validation and its did-you-mean."""
    parts = key.split(".")
    node: Any = tree
    for depth, part in enumerate(parts):
        at: Any = part
        if isinstance(node, list):
            if not (part.isdigit() and int(part) < len(node)):
                have = f"0 to {len(node) - 1}" if node else "none"
                raise ConfigError(f"{key}: {'.'.join(parts[:depth])} is a list of {len(node)} entries; "
                                  f"{part} is not an index of it ({have})")
            at = int(part)
        if depth == len(parts) - 1:
            node[at] = value
            return
        nxt = node[at] if isinstance(node, list) else node.get(at)
        if nxt is None:
            nxt = node[at] = {}
        elif not isinstance(nxt, (dict, list)):
            raise ConfigError(f"{key}: {part} is a value, not a section")
        node = nxt
