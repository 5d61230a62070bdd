"""The package's docstrings name what exists, and no ticket: every backticked dotted name in a
docstring of tune_gems/ (`periods.pool_family`, `tune_gems.data.folds`, `Trainer.step`,
`data.folds.k`) resolves to a module of the tree, a top-level name of one, an attribute of a
class the module knows, or a configuration key; a module that moves or a name that is renamed
fails here, naming the docstring, until the prose follows. And no docstring or comment says
which issue or item it came from: the why stays in the code, the history in git and
benchmarks/RESULTS.md. Parsed with `ast` (only the configuration models are imported)."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from test_doc_paths import DOTTED_NAME, _module_file, _top_level_names
from tune_gems.config.keys import key_rows
from tune_gems.config.schema import Config
from tune_gems.sweep.spec import SweepSpec

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tune_gems"
MODULES = sorted(PACKAGE.rglob("*.py"))

BACKTICKED = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\))?`")
"""A dotted name in backticks, as docstrings write one: `rules.periods`, `Trainer.step()`."""
FILE_SUFFIXES = frozenset({"py", "md", "csv", "json", "npz", "parquet", "log", "lock", "yaml", "pt", "tmp", "png", "txt"})
"""A backticked file name (`report.md`, `walk_forward.py`): a `.py` one must be a module of the tree."""
NOT_CHECKED = frozenset({"tune", "Tuner", "StorageContext", "cpu", "_None"})
"""First parts that name something outside the tree: Ray Tune's `tune.report`, `Tuner.restore`,
`StorageContext`; the cgroup files `cpu.max`, `cpu.cfs_quota_us`; markdown's `_None._`."""
TICKET = re.compile(r"\b(?:issue|item)s? \d+", re.IGNORECASE)
"""A ticket reference: `issue 21`, `item 4`."""


def _dotted(path: Path) -> list[str]:
    return list(path.relative_to(ROOT).with_suffix("").parts)


@lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


@lru_cache(maxsize=None)
def _by_last_part() -> dict[str, list[list[str]]]:
    """Every module and package of the tree by its last name: `periods` -> tune_gems.analysis.rules.periods."""
    found: dict[str, list[list[str]]] = {}
    for path in MODULES:
        parts = _dotted(path)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found.setdefault(parts[-1], []).append(parts)
    return found


@lru_cache(maxsize=None)
def _classes() -> dict[str, list[tuple[Path, ast.ClassDef]]]:
    """Every class of the tree by name, where it is defined."""
    found: dict[str, list[tuple[Path, ast.ClassDef]]] = {}
    for path in MODULES:
        for node in _tree(path).body:
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append((path, node))
    return found


def _attribute_problem(head: str, classes: list[tuple[Path, ast.ClassDef]], attribute: str) -> str | None:
    for path, node in classes:
        attributes = _class_names(path, node)
        if attributes is None or attribute in attributes:
            return None
    return f"class {head} defines no {attribute}"


@lru_cache(maxsize=None)
def _config_keys() -> frozenset[str]:
    """Every configuration and sweep-spec key and each of its sections, placeholders as `*`."""
    keys: set[str] = set()
    for row in key_rows(Config) + key_rows(SweepSpec):
        parts = [("*" if p.startswith("<") else p) for p in row.key.split(".")]
        keys.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
    return frozenset(keys)


def _is_config_key(name: str) -> bool:
    keys = _config_keys()
    parts = name.split(".")
    return any(".".join(p if i != j else "*" for i, p in enumerate(parts)) in keys for j in range(-1, len(parts)))


def _module_problem(parts: list[str], rest: list[str]) -> str | None:
    """Why module `parts` has no `rest[0]` (a submodule or a top-level name there), or None."""
    found = _module_file(parts, ROOT)
    if found is None:
        return "no such module"
    if not rest or _module_file(parts + rest[:1], ROOT) or rest[0] in _top_level_names(found):
        return None
    if rest[0] in _imported_names(found):
        return None
    return f"{'.'.join(parts)} defines no {rest[0]}"


@lru_cache(maxsize=None)
def _imported_names(path: Path) -> dict[str, tuple[str, str] | None]:
    """The names a module imports: name -> (module, name) for `from tune_gems... import name`, None
    for anything else (a third-party module, an `import x`)."""
    names: dict[str, tuple[str, str] | None] = {}
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = _dotted(path)[: -node.level]
                module = ".".join(base + ([module] if module else []))
            for alias in node.names:
                names[alias.asname or alias.name] = (module, alias.name) if module.startswith("tune_gems") else None
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = None
    return names


def _class_node(path: Path, name: str, depth: int = 0) -> tuple[Path, ast.ClassDef] | None:
    """Where class `name`, as module `path` knows it, is defined in the tree, or None."""
    for node in _tree(path).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return path, node
    source = _imported_names(path).get(name)
    if source is None or depth > 4:
        return None
    found = _module_file(source[0].split("."), ROOT)
    return None if found is None else _class_node(found, source[1], depth + 1)


def _class_names(path: Path, node: ast.ClassDef) -> set[str] | None:
    """The attributes class `node` defines, its tree bases' included; None where a base outside the
    tree (a NamedTuple, a pydantic model, a torch module) may define more."""
    names: set[str] = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(item.name)
            for sub in ast.walk(item):
                if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "setattr":
                    return None  # attributes set by name: any may exist
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target] if isinstance(sub, ast.AnnAssign) else []
                for target in targets:
                    for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                            names.add(t.attr)
        elif isinstance(item, ast.ClassDef):
            names.add(item.name)
        elif isinstance(item, ast.Assign):
            names.update(t.id for t in item.targets if isinstance(t, ast.Name))
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
    for base in node.bases:
        base_name = base.id if isinstance(base, ast.Name) else None
        found = _class_node(path, base_name) if base_name else None
        if found is None:
            return None
        more = _class_names(*found)
        if more is None:
            return None
        names |= more
    return names


def name_problem(name: str, path: Path, local: frozenset[str] = frozenset()) -> str | None:
    """Why backticked `name` in a docstring of module `path` names nothing, or None. Its first part
    is, in this order: a parameter of the documented function (`cfg.data`, not checked); the package
    (`tune_gems.x.y`); a class or module the module defines or imports (a class's attribute is
    checked); a module of the tree, nearest to `path` first (`rules.periods`, `periods.pool_family`);
    or a configuration key (`data.folds.k`); a third-party module (`torch.compile`) is not checked."""
    parts = name.split(".")
    if parts[-1] in FILE_SUFFIXES:
        if parts[-1] != "py":
            return None
        return None if name_problem(".".join(parts[:-1]), path) is None else "no such module"
    head, rest = parts[0], parts[1:]
    if head in local or head in NOT_CHECKED:
        return None
    if head == "config" and _is_config_key(".".join(rest)):
        return None  # a sweep spec's key of the run configuration
    if head == "tune_gems":
        for i in range(len(parts), 0, -1):
            if _module_file(parts[:i], ROOT):
                return _module_problem(parts[:i], parts[i:])
        return "no such module"
    known = _top_level_names(path) | set(_imported_names(path))
    if head in known:
        found = _class_node(path, head)
        if found is None:
            source = _imported_names(path).get(head)
            if source and _module_file(source[0].split(".") + [source[1]], ROOT):
                return _module_problem(source[0].split(".") + [source[1]], rest)
            return None  # a function, a constant, a third-party name: its attributes are not checked
        return _attribute_problem(head, [found], rest[0])
    here = _dotted(path)[:-1]
    for depth in range(len(here), 0, -1):
        if _module_file(here[:depth] + [head], ROOT):
            if _module_problem(here[:depth] + [head], rest) is None or _is_config_key(name):
                return None
            return _module_problem(here[:depth] + [head], rest)
    candidates = _by_last_part().get(head, [])
    problems = [_module_problem(c, rest) for c in candidates]
    if candidates and None in problems:
        return None
    if _is_config_key(name):
        return None
    if candidates:
        return problems[0]
    if head in _classes():
        return _attribute_problem(head, _classes()[head], rest[0])
    if head in sys.stdlib_module_names or importlib.util.find_spec(head) is not None:
        return None
    return "no such module, name or configuration key"


def _documented(tree: ast.Module):
    """(docstring, parameter names of its function) for the module and every class and function."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            params: frozenset[str] = frozenset()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                params = frozenset(x.arg for x in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg] if x)
            if doc:
                yield doc, params
        # attribute docstrings: a string expression right after an assignment
        body = getattr(node, "body", [])
        if isinstance(body, list):
            for before, item in zip(body, body[1:]):
                if (isinstance(before, (ast.Assign, ast.AnnAssign)) and isinstance(item, ast.Expr)
                        and isinstance(item.value, ast.Constant) and isinstance(item.value.value, str)):
                    yield item.value.value, frozenset()


def stale_docstring_names(path: Path) -> list[str]:
    bad = []
    for doc, params in _documented(_tree(path)):
        for name in sorted(set(BACKTICKED.findall(doc)) | set(DOTTED_NAME.findall(doc))):
            problem = name_problem(name, path, params)
            if problem:
                bad.append(f"`{name}`: {problem}")
    return bad


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_name_a_docstring_backticks_exists(module):
    bad = stale_docstring_names(module)
    assert not bad, f"{module.relative_to(ROOT)} names what the tree lacks:\n" + "\n".join(bad)


def test_the_check_finds_moved_names():
    """The check itself, from a module of the analysis: a module, a name in a module, a class's
    attribute, a config key and a third-party name resolve; a moved module, a renamed name and a
    class attribute that never was do not."""
    here = PACKAGE / "analysis" / "verdicts" / "gem_verdicts.py"
    assert name_problem("periods.pool_family", here) is None
    assert name_problem("rules.periods", here) is None
    assert name_problem("tune_gems.data.segments", here) is None
    assert name_problem("data.folds.k", here) is None
    assert name_problem("torch.compile", here) is None
    assert name_problem("cfg.anything", here, frozenset({"cfg"})) is None
    assert name_problem("tune_gems.trainer.run", here) == "tune_gems.trainer defines no run"
    assert name_problem("periods.no_such_function", here) == "tune_gems.analysis.rules.periods defines no no_such_function"
    assert name_problem("nowhere_module.thing", here) == "no such module, name or configuration key"
    assert name_problem("data.folds.no_such_key", here) is not None


def test_no_ticket_references_in_the_package():
    """The code says why, not which issue asked for it: no `issue N` or `item N` in tune_gems/."""
    bad = [f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
           for path in MODULES for i, line in enumerate(path.read_text().splitlines(), 1) if TICKET.search(line)]
    assert not bad, "ticket references in the package (say why instead):\n" + "\n".join(bad)
