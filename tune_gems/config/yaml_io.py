"""YAML in and out for configs and specs: a safe loader refusing duplicate keys and reading `1e-3`
as a number, `key=value` overrides, the resolved config written back. Bounded so no input can stall
validation (a regular file of at most `MAX_YAML_BYTES`; aliases measured before expansion,
`expanded_size`: an alias bomb is one line). Every failure names the file or override."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tune_gems.config.dotted import DuplicateKeyError, check_one_form, set_dotted
from tune_gems.contracts.errors import ConfigError
from tune_gems.contracts.safe_files import read_regular

if TYPE_CHECKING:
    from tune_gems.config.schema import Config

MAX_YAML_BYTES = 1 << 20
"""Largest config or spec file read (a real one is a few KiB), refused before parsing."""
MAX_YAML_NODES = 100_000
"""Most nodes a document may stand for once its aliases are expanded (a 256-arm factorial: thousands)."""
MAX_YAML_DEPTH = 200
"""Deepest nesting (PyYAML composes recursively; a real config nests 4 deep)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """The safe loader, refusing a repeated key (plain YAML silently keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: let the base class report it
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
# YAML 1.1 reads `1e-3` (an exponent without a dot) as a string; every user means a number
_UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


class _Dumper(yaml.SafeDumper):
    """The safe dumper, quoting strings the loader would read as numbers."""


_Dumper.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def dump_yaml(data: Any) -> str:
    """`data` as YAML that `safe_load_yaml` reads back equal (keys in their order)."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False)


class YAMLBoundError(yaml.YAMLError):
    """A YAML document over a bound (nodes once expanded, nesting, a recursive alias)."""


def expanded_size(root: yaml.Node, bound: int = MAX_YAML_NODES) -> int:
    """The nodes `root`'s graph stands for (aliases as copies), in linear time; YAMLBoundError past `bound`."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            total = 1 + sum(size[id(c)] for c in _children(node))
            if total > bound:
                raise YAMLBoundError(f"stands for more than {bound} values once its aliases are expanded (an alias bomb?)")
            size[key] = total
            continue
        if key in size:
            continue
        if key in on_path:
            raise YAMLBoundError("an alias refers to a node that contains it (a recursive alias)")
        on_path.add(key)
        if len(on_path) > MAX_YAML_DEPTH:
            raise YAMLBoundError(f"nests more than {MAX_YAML_DEPTH} levels deep")
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)
    return size[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def safe_load_yaml(text: str) -> Any:
    """yaml.safe_load refusing duplicate keys and documents over the bounds (before construction)."""
    loader = _UniqueKeyLoader(text)  # a SafeLoader subclass: no Python tags
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise YAMLBoundError(f"nests more than {MAX_YAML_DEPTH} levels deep") from None
        if node is None:
            return None
        expanded_size(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML mapping from a file through the bounded safe loader; ConfigError naming the file otherwise."""
    p = Path(path)
    raw = read_regular(p, MAX_YAML_BYTES, None, ConfigError)
    return yaml_mapping(raw, str(p))


def yaml_mapping(raw: bytes, where: str) -> dict[str, Any]:
    """The YAML mapping in `raw` (the bytes of `where`); ConfigError naming `where` otherwise."""
    p = where
    try:
        data = safe_load_yaml(raw.decode("utf-8"))
    except YAMLBoundError as e:
        raise ConfigError(f"{p}: refused: the YAML {e}") from None
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
    try:
        check_one_form(data)  # `trainer: {lr: ..}` beside `trainer.lr: ..` (tune_gems.config.dotted)
    except DuplicateKeyError as e:
        raise ConfigError(f"{p}: {e}") from None
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
    except YAMLBoundError as e:
        raise ConfigError(f"{key}: refused: the override's YAML value {e}") from None
    except (yaml.YAMLError, ValueError):  # ValueError: YAML's timestamp of an impossible date
        value = raw
    return key, value


def apply_overrides(tree: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for item in overrides:
        key, value = parse_override(item)
        set_dotted(tree, key, value)
    return tree


def dump_config(cfg: Config, path: str | Path) -> None:
    Path(path).write_text(dump_yaml(cfg.to_dict()))
