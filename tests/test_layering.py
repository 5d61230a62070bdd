"""The package's imports keep the layering that docs/design.md draws ("Layers and dependency
direction"): every `tune_gems` import, at module level or inside a function, goes to the same
layer or to one the layer may use, and no modules import each other in a cycle (a script entry,
`if __name__ == "__main__":`, is not an import of its module). Parsed with
`ast` (nothing is imported), so an import that breaks the drawing fails here, naming it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tune_gems"

LAYERS: dict[str, tuple[str, ...]] = {
    "contracts": ("contracts",),
    "gems": ("gems",),
    "foundations": ("stats", "data", "rng"),
    "config": ("config",),
    "set-up": ("design", "market"),
    "ops": ("ops",),
    "model": ("model",),
    "built-in gems": ("builtin_gems",),
    "trainer": ("trainer",),
    "sweep": ("sweep",),
    # the analysis, floor by floor in the order it reads (docs/design.md "The analysis, stage by stage")
    "analysis base": ("analysis", "analysis.defaults", "analysis.text"),
    "analysis read": ("analysis.read",),
    "analysis pairs": ("analysis.pairs",),
    "analysis rules": ("analysis.rules",),
    "analysis verdicts": ("analysis.verdicts",),
    "analysis describe": ("analysis.describe",),
    "analysis calibrate": ("analysis.calibrate",),
    "analysis plan": ("analysis.plan",),
    "analysis render": ("analysis.render",),
    "analysis run": ("analysis.analyze",),
    "analysis cli": ("analysis.cli",),
    "cli": ("commands", "__main__"),
}
"""Which modules form each layer (a name covers the module and everything under it; the longest
name that covers a module decides, so a new module at the analysis's top is in its base floor
until the drawing places it)."""

_STACK = ("contracts", "gems", "foundations", "config", "set-up", "ops", "model", "built-in gems", "trainer", "sweep")
MAY_IMPORT: dict[str, set[str]] = {layer: set(_STACK[: i + 1]) for i, layer in enumerate(_STACK)}
"""A layer of the stack may import itself and every layer below it ..."""
ANALYSIS = tuple(layer for layer in LAYERS if layer.startswith("analysis "))
MAY_IMPORT.update({layer: {"contracts", "gems", "foundations", "config", *ANALYSIS[: i + 1]}
                   for i, layer in enumerate(ANALYSIS)})
"""... the analysis only the results contract, the metric names, the output-folder rules and the
config schema (a train folder's config.yaml; the schema is torch-free): it runs where neither
torch, the trainer nor Ray are; and inside it each stage only the stages below it ..."""
MAY_IMPORT["cli"] = set(LAYERS)
"""... and the command line everything."""


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def layer_of(module: str) -> str:
    best, layer = -1, ""
    for name, prefixes in LAYERS.items():
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, layer = len(prefix), name
    assert layer, f"tune_gems.{module} is in no layer of tests/test_layering.py (add it, and to docs/design.md)"
    return layer


def _known(name: str) -> str:
    """The package module that an imported dotted name is (or lies in)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _is_main_guard(node: ast.AST) -> bool:
    """`if __name__ == "__main__":`: what a module does when run as a script (as `__main__`, a
    module object of its own) is not an import of the module."""
    t = getattr(node, "test", None)
    return (isinstance(node, ast.If) and isinstance(t, ast.Compare) and isinstance(t.left, ast.Name)
            and t.left.id == "__name__" and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in t.comparators))


def _nodes(tree: ast.AST):
    """Every node of `tree` outside `if __name__ == "__main__":` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(c for c in ast.iter_child_nodes(node) if not _is_main_guard(c))


def imports(module: str) -> set[str]:
    """The package modules that `module` imports (anywhere in it, so lazy imports count too):
    `from tune_gems.gems import registry` is an import of the submodule gems.registry, `from
    tune_gems.gems import GemInputs` one of the package tune_gems.gems."""
    out: set[str] = set()
    for node in _nodes(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}"[len("tune_gems."):] in MODULES
                     else node.module for a in node.names]
        else:
            assert not isinstance(node, ast.ImportFrom), f"tune_gems.{module}: a relative import (use the full name)"
            continue
        out |= {_known(n[len("tune_gems."):]) for n in names if n.startswith("tune_gems.")}
    return out - {module, ""}


GRAPH = {m: imports(m) for m in MODULES}


DESIGN = PACKAGE.parent / "docs" / "design.md"


def layer_arrows() -> dict[str, set[str]]:
    """The layers each layer's modules import (itself left out): the arrows of the code."""
    arrows: dict[str, set[str]] = {layer: set() for layer in LAYERS}
    for m, targets in GRAPH.items():
        if targets:  # the package's own __init__ (module "") imports nothing and is in no layer
            arrows[layer_of(m)] |= {layer_of(t) for t in targets} - {layer_of(m)}
    return arrows


def drawn_floors(text: str) -> list[tuple[str, set[str], set[str]]]:
    """docs/design.md's floor table, bottom floor first: (layer, its packages, the layers it imports
    from), read from the code block between the layer-arrows markers (columns two spaces apart)."""
    block = text.split("<!-- layer-arrows", 1)[1].split("<!-- /layer-arrows -->", 1)[0]
    rows = [line for line in block.splitlines() if line[:6].strip().isdigit()]

    def names(cell: str) -> set[str]:
        return {n.strip() for n in re.sub(r"\(.*?\)", "", cell).split(",") if n.strip()}

    floors = []
    for row in rows:
        floor, layer, packages, imports = re.split(r"\s{2,}", row.strip())
        floors.append((int(floor), layer, names(packages), names(imports)))
    return [f[1:] for f in sorted(floors, key=lambda f: f[0])]


def test_the_drawing_in_design_md_is_the_import_graph():
    """docs/design.md draws the floors in LAYERS' order with their packages, and for each floor
    exactly the layers its modules import: an arrow drawn that the code lacks, or one the code has
    that is not drawn, fails here (issue 29 item 6: the old picture drew two the code lacked)."""
    floors = drawn_floors(DESIGN.read_text())
    assert [f[0] for f in floors] == list(LAYERS), "design.md's floors are not LAYERS' layers, bottom up"
    arrows = layer_arrows()
    for layer, packages, imports in floors:
        assert packages == set(LAYERS[layer]), f"design.md: {layer} holds {sorted(LAYERS[layer])}, drawn {sorted(packages)}"
        assert imports == arrows[layer], (f"design.md: {layer} imports {sorted(arrows[layer])}, drawn {sorted(imports)}")


def test_the_drawing_check_catches_an_arrow_not_drawn(monkeypatch):
    """The check itself: an analysis module importing the gem registry (allowed by MAY_IMPORT, but
    not drawn) makes the drawn analysis floor differ from the code's arrows."""
    drawn = dict((layer, imports) for layer, _, imports in drawn_floors(DESIGN.read_text()))
    assert drawn["analysis read"] == layer_arrows()["analysis read"]
    monkeypatch.setitem(GRAPH, "analysis.read.load", GRAPH["analysis.read.load"] | {"gems.registry"})
    assert drawn["analysis read"] != layer_arrows()["analysis read"]


def test_every_import_follows_the_documented_layering():
    bad = [
        f"tune_gems.{m} ({layer_of(m)}) imports tune_gems.{t} ({layer_of(t)})"
        for m, targets in sorted(GRAPH.items())
        for t in sorted(targets)
        if layer_of(t) not in MAY_IMPORT[layer_of(m)]
    ]
    assert not bad, "imports against docs/design.md's layers:\n" + "\n".join(bad)


def _cycle() -> list[str] | None:
    """One import cycle among the package's modules, or None (depth-first search)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in sorted(GRAPH[m]):
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state:
                found = visit(t)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(GRAPH):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_no_modules_import_each_other():
    cycle = _cycle()
    assert cycle is None, "import cycle: " + " -> ".join(f"tune_gems.{m}" for m in cycle)


@pytest.mark.parametrize("edge, layer", [(("analysis.read.labels", "trainer.trainer"), "analysis read"),
                                         (("ops.backend", "builtin_gems"), "ops"),
                                         (("analysis.verdicts.gem_verdicts", "analysis.render.report"), "analysis verdicts")])
def test_the_check_catches_an_upward_import(edge, layer):
    """The rule itself: an analysis module importing the trainer, the upward arrow from ops to the
    built-in gems that this layering removed, and the verdicts importing the renderer (for a number's
    format, before text.py: issue 36) would be refused."""
    source, target = edge
    assert layer_of(source) == layer and layer_of(target) not in MAY_IMPORT[layer]


def test_the_check_catches_a_cycle(monkeypatch):
    monkeypatch.setitem(GRAPH, "config.schema", GRAPH["config.schema"] | {"design.arms"})
    assert _cycle() is not None


def test_the_torch_free_layers_stay_torch_free():
    """Validating a config (arms expanded), the analysis and the sweep's result tables import
    neither torch nor Ray: the drawing's lazy arrows (the built-in gems by name, the ops on
    first evaluation) keep them so."""
    import subprocess
    import sys

    code = ("import sys; from tune_gems.config.load import load_config; from tune_gems.design.arms import expand_arms; "
            "expand_arms(load_config(None, ['arms.factors.gems.g10.mode=[measure,wire]'])); "
            "import tune_gems.analysis.analyze, tune_gems.sweep.results; "
            "sys.exit(','.join(m for m in ('torch', 'ray') if m in sys.modules) or None)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"imported: {r.stderr.strip()}"
