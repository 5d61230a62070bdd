"""YAML in and out for configs and sweep specs: a safe loader that refuses duplicate keys and reads
`1e-3` as a number, a size bound, dotted `key=value` overrides, and the resolved config written back.

Every failure is one ConfigError naming the file (or the override).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tune_gems.config.dotted import set_dotted
from tune_gems.contracts.errors import ConfigError

if TYPE_CHECKING:
    from tune_gems.config.schema import Config

MAX_YAML_BYTES = 1 << 20
"""Largest config or spec file read (1 MiB; a real one is a few KiB): a larger file is refused
before it is parsed, so a huge file cannot stall validation."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """The safe loader, refusing a mapping that repeats a key (plain YAML keeps the last one
    silently, so a typo'd duplicate would change a run unseen)."""

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: let the base class report it
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 reads `1e-3` (an exponent without a dot) as a string; every user means a number
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def safe_load_yaml(text: str) -> Any:
    """yaml.safe_load that refuses duplicate keys."""
    loader = _UniqueKeyLoader(text)  # a SafeLoader subclass: no Python tags
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML mapping from a file, through the safe loader; ConfigError naming the file otherwise."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no such file")
    try:
        size = p.stat().st_size
    except OSError as e:
        raise ConfigError(f"{p}: cannot read ({e.strerror})") from None
    if size > MAX_YAML_BYTES:
        raise ConfigError(f"{p}: {size} bytes; a config or spec file is at most {MAX_YAML_BYTES} bytes")
    try:
        data = safe_load_yaml(p.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{p}:{where} malformed YAML ({getattr(e, 'problem', None) or e})") from None
    except ValueError as e:  # YAML's timestamp constructor on an impossible date (2020-13-01)
        raise ConfigError(f"{p}: malformed YAML ({' '.join(str(e).split())})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: cannot read ({e})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: top level must be a mapping of keys to values")
    return data


def parse_override(item: str) -> tuple[str, Any]:
    """`a.b.c=value` -> ("a.b.c", value parsed as YAML: numbers, booleans, lists, null)."""
    if "=" not in item:
        raise ConfigError(f"{item}: overrides take the form key=value")
    key, _, raw = item.partition("=")
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"{item}: empty key in override")
    try:
        value = safe_load_yaml(raw) if raw.strip() else None
    except (yaml.YAMLError, ValueError):  # ValueError: YAML's timestamp of an impossible date
        value = raw
    return key, value


def apply_overrides(tree: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for item in overrides:
        key, value = parse_override(item)
        set_dotted(tree, key, value)
    return tree


def dump_config(cfg: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
