"""The verdict rule has one home (issue 29, item 3): `tune_gems/analysis/rules/`.

A calibration states the error rates of the rule the verdicts ship only if both run the same
decision code. These tests fail when a decision is made anywhere else:

- the verdict words are spelled (as string constants) only in `rules/settings.py`;
- outside the rule package a verdict word is only ever compared with (`==`, `in`), never chosen:
  no `np.where`, `np.select`, conditional expression, assignment or return outside the rules
  produces one, so every verdict a table or a calibration holds came out of a rule function;
- Holm is defined once (`stats/inference.py`), and its three entry points share one step-down;
- the verdicts and the calibrations hold the very same rule objects;
- on the same per-seed differences, the shipped verdict path and the calibration's rule give the
  same decision (walk-forward folds and one period).

Parsed with `ast` (nothing is imported) except the last two, which run the functions.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fake_results as fr  # noqa: E402

from tune_gems.analysis.rules import settings  # noqa: E402

PACKAGE = Path(__file__).resolve().parents[1] / "tune_gems"
RULES = PACKAGE / "analysis" / "rules"
WORD_NAMES = {"KEEP", "HARMFUL", "EQUIVALENT", "DELETE", "INCONCLUSIVE", "INCONSISTENT", "HETEROGENEOUS", "CONFOUNDED",
              "INSUFFICIENT", "NO_DATA", "NOT_TESTED", "DECISIVE", "NULL_ARM_OK", "VERDICTS"}
"""The names in rules/settings.py that are verdict words or sets of them."""
ALLOWED_CHOICES = {("analysis/verdicts/search_choice.py", "NO_DATA")}
"""Uses of a verdict word as a value outside the rules, with why: a gem that has no row in the
confirmation's verdicts was not confirmed at all (`side_by_side` shows `no data`, a fact, not a test)."""


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        if RULES not in path.parents:
            yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text())


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    for node in ast.walk(tree):  # attribute docstrings: a bare string after an assignment
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            out.add(id(node.value))
    return out


def test_the_verdict_words_are_spelled_only_in_the_rule_module():
    spelled = [w for w in settings.VERDICTS if w]
    bad = []
    for name, tree in _modules():
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and id(node) not in skip and node.value in spelled:
                bad.append(f"tune_gems/{name}:{node.lineno}: {node.value!r}")
    assert not bad, "verdict words spelled outside rules/settings.py (import them from there):\n" + "\n".join(bad)


def _word_bindings(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(local names bound to verdict words, local names bound to the settings module)."""
    names, modules = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "tune_gems.analysis.rules.settings":
            names |= {a.asname or a.name for a in node.names if a.name in WORD_NAMES}
        if isinstance(node, ast.ImportFrom) and node.module == "tune_gems.analysis.rules":
            modules |= {a.asname or a.name for a in node.names if a.name == "settings"}
    return names, modules


def _compared(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Whether `node` is an operand of a comparison (directly, or inside a tuple / list / set there)."""
    parent = parents.get(id(node))
    while isinstance(parent, (ast.Tuple, ast.List, ast.Set)):
        parent = parents.get(id(parent))
    return isinstance(parent, ast.Compare)


def test_outside_the_rules_a_verdict_word_is_only_compared_with_never_chosen():
    bad = []
    for name, tree in _modules():
        names, modules = _word_bindings(tree)
        if not names and not modules:
            continue
        parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
        for node in ast.walk(tree):
            word = (node.id if isinstance(node, ast.Name) and node.id in names else
                    node.attr if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in modules and node.attr in WORD_NAMES else None)
            if word and not _compared(node, parents) and (name, word) not in ALLOWED_CHOICES:
                bad.append(f"tune_gems/{name}:{node.lineno}: {word}")
    assert not bad, ("a verdict chosen outside tune_gems/analysis/rules/ (decide it there, in a rule function the "
                     "calibration runs too):\n" + "\n".join(bad))


def test_the_check_catches_a_verdict_chosen_outside_the_rules():
    tree = ast.parse("from tune_gems.analysis.rules.settings import KEEP, INCONCLUSIVE\n"
                     "v = KEEP if p <= alpha else INCONCLUSIVE\nok = v == KEEP\n")
    names, _ = _word_bindings(tree)
    parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    chosen = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in names and not _compared(n, parents)]
    assert chosen == ["KEEP", "INCONCLUSIVE"]


def _functions(tree: ast.AST) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def _calls(fn: ast.FunctionDef) -> set[str]:
    return {n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def test_holm_is_defined_once_and_its_entry_points_share_one_step_down():
    defined = sorted(f"tune_gems/{name}: {fn}" for name, tree in _modules() for fn in _functions(tree)
                     if "holm" in fn.lower() and name != "stats/inference.py")
    defined += sorted(f"tune_gems/analysis/rules/{p.name}: {fn}" for p in RULES.glob("*.py")
                      for fn in _functions(ast.parse(p.read_text())) if "holm" in fn.lower())
    assert not defined, "Holm defined outside stats/inference.py:\n" + "\n".join(defined)
    fns = _functions(ast.parse((PACKAGE / "stats" / "inference.py").read_text()))
    assert "holm_batch" in _calls(fns["holm"])
    assert "_holm_steps" in _calls(fns["holm_batch"]) and "_holm_steps" in _calls(fns["holm_levels"])
    assert "argsort" in ast.dump(fns["_holm_steps"]) and "argsort" not in ast.dump(fns["holm_levels"])


STAGES = {"decide_family", "market_gate", "one_period_gate", "decide_fold_data", "decide_periods", "decide_histories",
          "held_out_stage", "final_on_one_history"}
"""The stages of the rule: only `rules/decision.py` (the one composition) strings them together."""
STAGE_CALLS_OUTSIDE: set[tuple[str, str]] = set()
"""Stage calls outside the composition, with why (none: the null arms and the interactions are
families of their own, decided by the composition too)."""
COMPOSITION_CALLERS = ("analysis/verdicts/family.py", "analysis/verdicts/gem_verdicts.py", "analysis/verdicts/factors.py",
                       "analysis/calibrate/calibration.py", "analysis/calibrate/walk_forward_calibration.py",
                       "analysis/calibrate/factor_calibration.py", "analysis/calibrate/one_history_calibration.py",
                       "analysis/calibrate/decision_calibration.py")
"""Every module that decides a family: the design's family (gem verdicts and factor table alike,
over periods, and `confirm`'s final verdicts through it: `analyze(selection=...)`), the null arms
(`gem_verdicts`), the interactions (`factors`) and every calibration."""


def _called(tree: ast.AST) -> set[str]:
    return {n.func.id if isinstance(n.func, ast.Name) else n.func.attr for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))}


def test_one_function_composes_the_rule_and_every_caller_calls_it():
    """issue 36 item 2 / issue 37 item 1: a stage of the rule is called only by the composition
    (`rules.decision.decide`) and the rule's own modules; every caller that decides calls `decide`."""
    bad = [f"tune_gems/{name}: {fn}" for name, tree in _modules() for fn in sorted(_called(tree) & STAGES)
           if (name, fn) not in STAGE_CALLS_OUTSIDE]
    assert not bad, "a stage of the rule called outside rules/ (call rules.decision.decide):\n" + "\n".join(bad)
    inside = {p.name: _called(ast.parse(p.read_text())) & STAGES for p in RULES.glob("*.py")}
    assert inside["decision.py"] >= {"decide_family", "market_gate", "one_period_gate", "decide_fold_data",
                                     "decide_histories", "held_out_stage", "final_on_one_history"}
    others = {name: fns for name, fns in inside.items() if fns and name != "decision.py"}
    assert others == {"periods.py": {"decide_periods"}, "histories.py": {"decide_periods"}}, others
    trees = dict(_modules())
    missing = [name for name in COMPOSITION_CALLERS if "decide" not in _called(trees[name])]
    assert not missing, f"these decide a family without rules.decision.decide: {missing}"


def test_the_verdicts_and_the_calibrations_hold_the_same_rule_objects():
    from tune_gems.analysis import plan
    from tune_gems.analysis.calibrate import (
        calibration, decision_calibration, factor_calibration, one_history_calibration, walk_forward_calibration,
    )
    from tune_gems.analysis.rules import decision
    from tune_gems.analysis.pairs import pairing
    from tune_gems.analysis.verdicts import factors, family, gem_verdicts, held_out, redundancy, search_choice, walk_forward
    from tune_gems.analysis import analyze
    from tune_gems.analysis.rules import periods, power

    uses = {
        # the one composition: the gem verdicts (and so over periods and `confirm`'s final verdicts),
        # the factor table and every calibration hold one function
        decision.decide: (family, gem_verdicts, factors, calibration, walk_forward_calibration, factor_calibration,
                          one_history_calibration, decision_calibration),
        family.design_family: (gem_verdicts, factors),
        periods.decide_fold_data: (decision,),
        periods.pool_family: (power,),  # the power statement draws the rule's own pooling
        periods.fold_data: (walk_forward_calibration, factor_calibration, one_history_calibration),
        walk_forward.gem_folds: (family,),
        pairing.by_fold: (walk_forward,),
        pairing.revalue: (held_out,),
        walk_forward.pooled_power: (family,),
        periods.fold_estimates: (walk_forward,),
        periods.shared_seed_variance: (walk_forward,),
        periods.seed_anova: (walk_forward,),
        periods.informative_rank_test: (decision, family),
        # the power statement: the verdicts', the plan's, the calibration's and confirm's MDE
        power.mde: (search_choice, calibration, plan, decision_calibration),
        power.two_stage: (plan, decision_calibration),
        power.statement: (family, walk_forward),
        power.fewest_seeds: (search_choice,),
        power.pooled_mde: (walk_forward_calibration, decision_calibration),
        periods.fold_components: (walk_forward, walk_forward_calibration),
        # the plan reads its pilot as `analyze` does: the same family, fold overlap and calendar periods
        gem_verdicts.gem_verdict_tables: (plan,),
        walk_forward.experiment_overlap: (plan, analyze),
        decision.redundancy_finding: (redundancy,),
    }
    for fn, modules in uses.items():
        for m in modules:
            assert getattr(m, fn.__name__, None) is fn, f"{m.__name__} does not call rules' {fn.__name__}"


# ---- the same data through the shipped path and the calibration's rule ----------------------


def _fold_differences(cells, gem: str, column: str, k: int) -> np.ndarray:
    """[1, 1, K, n] per-seed differences of `gem` in each fold, as the verdicts pair them."""
    from tune_gems.analysis.pairs.selectors import wiring_pairs

    folds = sorted(cells.table["fold"].unique())
    rows = [wiring_pairs(cells, gem, column=column, k=k, select=lambda t, f=f: t["fold"] == f).diffs for f in folds]
    return np.asarray(rows, float)[None, None]


@pytest.mark.parametrize("fold_effects", [[0.5, 0.4, 0.6, 0.5], [0.5, 0.5, -0.5, -0.5], [0.0, 0.02, -0.02, 0.0],
                                          [0.3, -0.2, 0.35, 0.1], [0.3, 0.1, 0.2, 0.15, 0.25, 0.05],
                                          [0.5, 0.08, 0.3], [0.5]])
def test_the_shipped_verdict_is_the_calibrations_decision_on_the_same_differences(tmp_path, fold_effects):
    """keep wired; inconsistent (the seeds: equivalent); equivalent; inconsistent (the seeds: keep);
    keep wired over 6 periods (heterogeneous ones, tau shared with nothing: one gem);
    insufficient data over 3 periods (the seeds: keep); one period: keep wired. (The fakes'
    per-seed noise is +-0.05: a fold effect of +-0.05 would make half its pairs tie.)"""
    from tune_gems.analysis.analyze import analyze
    from tune_gems.analysis.pairs.pairing import build_cells
    from tune_gems.analysis.rules.settings import Thresholds
    from tune_gems.analysis.calibrate.walk_forward_calibration import rule_one_period, run_periods

    th = Thresholds(n_boot=50)
    res = analyze(fr.fold_scenario(tmp_path / "e", fold_effects), thresholds=th)
    row = res.verdicts.set_index("gem").loc["g12"]
    exp = res.experiment
    d = _fold_differences(build_cells(exp.trials, exp.members, exp.arms), "g12", row["outcome"], th.last_k)
    if len(fold_effects) > 1:
        code = run_periods(d, th).codes
    else:  # one period without saved returns: no market-noise interval, the seed rule alone
        code = rule_one_period(d[:, :, 0], 0.0, 1.0, th)
    assert int(code[0, 0]) == int(settings.verdict_codes(np.array([row["verdict"]]))[0]), row["reason"]
    # the factor table judges the same gem by the same rule (its family is this one gem here) ...
    factor = res.factors.set_index("factor").loc["gems.g12.mode"]
    assert factor["family_size"] == 1 and factor["verdict"] == row["verdict"], factor["reading"]
    if np.isfinite(row["mde"]):
        from tune_gems.analysis.rules.power import mde
        from tune_gems.analysis.verdicts.search_choice import discovery_power_inputs

        # ... and states its MDE (the pooled test's at K >= 2, the seed rule's at K = 1 without a
        # market-noise interval), and confirm's target (the discovery's MDE) is that number too
        assert factor["mde"] == pytest.approx(row["mde"])
        assert factor["pooled_ci_low"] == pytest.approx(row["pooled_ci_low"], nan_ok=True)
        assert mde(discovery_power_inputs(row.to_dict()), th.alpha, th.power) == pytest.approx(row["mde"], rel=1e-6)
