"""Every module the docs name exists: a `tune_gems/...py` path in docs/*.md or README.md is a file
of the tree, and a dotted `tune_gems.a.b` name is a module (or package) of it, with the name after
the module, if any, defined at the module's top level. A module that moves (issue 29's splits)
fails here, naming the document and the stale name, until the prose follows. Parsed with `ast`
(nothing is imported)."""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]

MODULE_PATH = re.compile(r"(?<![\w/.])tune_gems/[\w/]*\w\.py\b")
"""A module path as the docs write one: `tune_gems/trainer/evaluator.py`."""
DOTTED_NAME = re.compile(r"(?<![\w.])tune_gems(?:\.[A-Za-z_]\w*)+")
"""A dotted name as the docs write one: `tune_gems.market.features.Market`, `tune_gems.sweep`."""


def _module_file(parts: list[str], root: Path) -> Path | None:
    """The file of the module `parts` names (a .py file, or a package's __init__.py), or None."""
    base = root.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@lru_cache(maxsize=None)
def _top_level_names(path: Path) -> frozenset[str]:
    """What a module defines at its top level: functions, classes, assigned names and the names of
    its `__all__` (a package's declared public API, such as the plug-in API of tune_gems.gems); not
    the other names it imports: the docs name the module that defines a thing, as the code imports it."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                names.update(ast.literal_eval(node.value))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return frozenset(names)


def dotted_problem(name: str, root: Path = ROOT) -> str | None:
    """Why `name` (tune_gems.a.b[.Attr[.more]]) names nothing in the tree at `root`, or None. The
    longest prefix that is a module counts; the next part must be a submodule or a top-level name
    there (deeper parts, a method or a field, are not checked)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        found = _module_file(parts[:i], root)
        if found is not None:
            break
    else:
        return "no such module"
    if i == len(parts) or parts[i] in _top_level_names(found):
        return None
    return f"{'.'.join(parts[:i])} defines no {parts[i]}"


def stale_names(text: str, root: Path = ROOT) -> list[str]:
    """The module paths and dotted names of `text` that the tree at `root` lacks, each with why."""
    bad = [f"{p}: no such file" for p in sorted(set(MODULE_PATH.findall(text))) if not (root / p).is_file()]
    for name in sorted(set(DOTTED_NAME.findall(text))):
        problem = dotted_problem(name, root)
        if problem:
            bad.append(f"{name}: {problem}")
    return bad


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_module_a_document_names_exists(document):
    bad = stale_names(document.read_text())
    assert not bad, f"{document.relative_to(ROOT)} names what the tree lacks:\n" + "\n".join(bad)


def test_the_check_finds_moved_modules_and_names():
    """The check itself: a module that moved, a name that moved out of a module that stays, and a
    package that never was are reported; names that exist (a package, a module, a class, a
    module-level constant) are not."""
    text = ("`tune_gems/trainer/run.py`, `tune_gems.market.env.Market`, `tune_gems.nowhere.thing`; "
            "`tune_gems/market/env.py`, `tune_gems.sweep`, `tune_gems.market.features.Market.row`, "
            "`tune_gems.market.market_cache.MARKETS_KEPT`.")
    assert stale_names(text) == [
        "tune_gems/trainer/run.py: no such file",
        "tune_gems.market.env.Market: tune_gems.market.env defines no Market",
        "tune_gems.nowhere.thing: tune_gems defines no nowhere",
    ]
