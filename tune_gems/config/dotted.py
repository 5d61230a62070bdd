"""Dotted keys (`trainer.lr`) over nested mappings: the one notation of config overrides, arms
factors, sweep search spaces and the flat columns of trials.parquet.

A leaf (plain dicts, no tune_gems import), so the config schema and the arms model below it
share it without importing each other.
"""

from __future__ import annotations

from typing import Any

from tune_gems.contracts.errors import ConfigError


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> {dotted.key: leaf}."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
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
