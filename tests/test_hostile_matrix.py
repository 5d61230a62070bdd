"""The hostile-input matrix: generated bad values for every config key, every path argument and
every table column, each through the command line, each answered with exit status 2, exactly
one stderr line naming the culprit, no stdout, and nothing changed in the sandbox.

The cases are generated, not listed: from the live pydantic `Config` (every leaf, with values of
the wrong type, out of its declared range, non-finite, huge, null), from the path arguments of
`train`, `sweep` and `analyze` (a file, under a file, a pseudo-filesystem, inside or equal to an
experiment, a traversing name, an unknown storage scheme, ...), and from the columns of the
result tables that docs/results.md types (text in a number column, fractions or negatives in an
id column, a missing id, a flag that is not a flag, a required column dropped). A new config key
or table column joins the matrix by itself.

Like tests/test_bad_input.py, every case runs `tune_gems.commands.cli.main` (what the console script
runs) in a child forked from a server that imported the heavy modules once, in a sandbox of its
own, snapshotted before and after; `test_fresh_processes_answer_the_same` runs a few cases as
real `python -m tune_gems` processes. RAY_ADDRESS points at a closed port, so a sweep that got
past validation would fail loudly instead of starting a cluster. The case counts are printed
by `test_case_counts` (run with -s) for the issue note.
"""

from __future__ import annotations

import os
import subprocess
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd
import pytest
from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel

from fake_results import paired_scenario
from sweep_fixtures import REPO, SMOKE, TINY_SWEEP, cli_in_process
from test_bad_input import TRAIN_TINY, both as _both, snapshot, write as _write
from tune_gems.config.schema import Config

PARALLEL = 2
CASE_TIMEOUT = 120

# -- cases -------------------------------------------------------------------------------------


@dataclass
class Case:
    id: str
    args: list[str]
    fragments: list[str]  # at least one of each inner alternative must appear ("a|b" = either)
    setup: Callable[[Path], None] = lambda d: None
    family: str = "config"
    env: dict[str, str] = field(default_factory=dict)  # the case's own environment (forked families)


def leaves(model: type[BaseModel] = Config, prefix: str = ""):
    """(dotted key, annotation, constraints, default) of every leaf of the config models."""
    for name, f in model.model_fields.items():
        ann = f.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from leaves(ann, f"{prefix}{name}.")
        else:
            default = f.default_factory() if f.default_factory is not None else f.default
            yield f"{prefix}{name}", ann, f.metadata, default


SIZE_KEYS = {
    "trainer.population", "trainer.replay_capacity", "trainer.batch_size", "trainer.n_envs",
    "model.hidden", "model.stream_hidden", "model.predictor_hidden", "data.synthetic.n",
}
"""Integer keys whose huge values must be refused by the memory estimate (named numbers)."""
HUGE_INT = "1000000000000000000000000000000"
HUGE_FLOAT = "1.0e308"


def _bounds(meta) -> tuple[float | None, float | None, bool, bool]:
    low = high = None
    low_open = high_open = False
    for m in meta:
        if isinstance(m, Ge):
            low = m.ge
        elif isinstance(m, Gt):
            low, low_open = m.gt, True
        elif isinstance(m, Le):
            high = m.le
        elif isinstance(m, Lt):
            high, high_open = m.lt, True
    return low, high, low_open, high_open


def _kind(ann) -> str:
    args = typing.get_args(ann)
    origin = typing.get_origin(ann)
    if ann is bool:
        return "bool"
    if ann is int:
        return "int"
    if ann is float:
        return "float"
    if ann is str:
        return "str"
    if origin is typing.Literal:
        return "literal"
    if origin is list:
        return "list"
    if type(None) in args and str in args:
        return "optional_str"
    return "other"


def hostile_values(key: str, ann, meta, default) -> list[tuple[str, str]]:
    """(label, YAML text) of values `key` must refuse."""
    kind = _kind(ann)
    common = [("text", "abc"), ("mapping", "{a: 1}")]
    nullable = type(None) in typing.get_args(ann)
    if not nullable:
        common.append(("null", "null"))
    if kind == "bool":
        return common + [("int", "2"), ("zero", "0"), ("word", "maybe"), ("list", "[true]")]
    if kind in ("int", "float"):
        vals = common + [("bool", "true"), ("nan", ".nan"), ("inf", ".inf"), ("neg_inf", "-.inf"),
                         ("overflow", "1e999"), ("list", "[1]")]
        if kind == "int":
            vals += [("fraction", "1.5"), ("float_form", "2.0")]
        low, high, low_open, high_open = _bounds(meta)
        if low is not None:
            below = low - (1 if kind == "int" else max(abs(low) * 0.5, 1e-3))
            vals.append(("below_range", str(low if low_open else below)))
        if high is not None:
            above = high + (1 if kind == "int" else max(abs(high) * 0.5, 1e-3))
            vals.append(("above_range", str(high if high_open else above)))
            vals.append(("huge", HUGE_INT if kind == "int" else HUGE_FLOAT))
        elif kind == "int" and key in SIZE_KEYS:
            vals.append(("huge", HUGE_INT))
        return vals
    if kind == "literal":
        return common + [("unknown_choice", "no_such_choice"), ("number", "7"), ("list", "[auto]")]
    if kind == "str":
        return [("mapping", "{a: 1}"), ("number", "7"), ("list", "[a]")] + ([("null", "null")] if not nullable else [])
    if kind == "optional_str":
        return [("mapping", "{a: 1}"), ("number", "7"), ("list", "[a]")]
    if kind == "list":
        vals = [("scalar", "5"), ("nested", "[[1]]"), ("mapping", "{a: 1}"), ("null", "null")]
        if isinstance(default, list) and default and isinstance(default[0], float):
            n = len(default)
            vals += [("nan_element", "[" + ", ".join([".nan"] + ["0.5"] * (n - 1)) + "]"),
                     ("inf_element", "[" + ", ".join([".inf"] + ["0.5"] * (n - 1)) + "]"),
                     ("text_element", "[" + ", ".join(["abc"] * n) + "]"),
                     ("empty", "[]")]
        return vals
    return common


KEY_SPECIFIC: dict[str, list[tuple[str, str]]] = {
    "data.splits": [("two_floats", "[0.5, 0.5]"), ("bad_date", "[2020-13-01, 2021-01-01]"),
                    ("dates_reversed", "[2021-01-01, 2020-01-01]"), ("negative", "[1.2, -0.1, -0.1]")],
    "env.directions": [("out_of_range", "[-2.0, 0.0, 2.0]"), ("one", "[1.0]")],
    "env.sizes": [("zero", "[0.0, 0.5, 1.0]"), ("above_one", "[0.5, 1.0, 1.5]")],
}


def _culprit(key: str) -> list[str]:
    """What the error line must name: the key (or, for lists, the key's section)."""
    return [f"{key}|memory|{key.rsplit('.', 1)[0]}"]


def config_cases() -> list[Case]:
    cases = []
    base = ["train", *TRAIN_TINY, "trainer.epochs=1", "--out", "out"]
    for key, ann, meta, default in leaves():
        values = hostile_values(key, ann, meta, default) + KEY_SPECIFIC.get(key, [])
        for label, text in values:
            cases.append(Case(f"config-{key}-{label}", [*base, f"{key}={text}"], _culprit(key)))
    return cases


PRICES = "t,close\n" + "".join(f"{i},{100 + (i % 7)}\n" for i in range(1200))


def data_cases() -> list[Case]:
    """data.path and columns pointing at hostile files."""
    file_args = ["train", *TRAIN_TINY, "trainer.epochs=1", "data.source=file", "--out", "out"]
    cases = [
        Case("data-path-missing", [*file_args, "data.path=nope.csv"], ["nope.csv"], family="data"),
        Case("data-path-a-folder", [*file_args, "data.path=folder"], ["folder"], _write("folder/x", "1"), family="data"),
        Case("data-path-empty-file", [*file_args, "data.path=p.csv"], ["p.csv"], _write("p.csv", ""), family="data"),
        Case("data-path-proc", [*file_args, "data.path=/proc/self/status"], ["/proc/self/status"], family="data"),
        Case("data-path-dev-null", [*file_args, "data.path=/dev/null"], ["/dev/null"], family="data"),
        Case("data-path-header-only", [*file_args, "data.path=p.csv"], ["p.csv"], _write("p.csv", "t,close\n"), family="data"),
        Case("data-path-nan-price", [*file_args, "data.path=p.csv"], ["p.csv"], _write("p.csv", PRICES.replace("\n7,100\n", "\n7,nan\n", 1)), family="data"),
        Case("data-path-inf-price", [*file_args, "data.path=p.csv"], ["p.csv"], _write("p.csv", PRICES.replace("\n8,101\n", "\n8,inf\n", 1)), family="data"),
        Case("data-time-column-missing", [*file_args, "data.path=p.csv", "data.time_column=when"], ["p.csv|when"], _write("p.csv", PRICES), family="data"),
        Case("data-price-column-empty", [*file_args, "data.path=p.csv", "data.price_column="], ["price_column|p.csv"], _write("p.csv", PRICES), family="data"),
    ]
    return cases


_TEMPLATE: list[Path] = []


def _paired(dest: Path) -> Path:
    """A copy of one paired-scenario experiment (written once per session: fast setups)."""
    import shutil
    import tempfile

    if not _TEMPLATE:
        import atexit

        home = Path(tempfile.mkdtemp(prefix="tg-hostile-"))
        atexit.register(shutil.rmtree, home, True)
        _TEMPLATE.append(paired_scenario(home / "exp", journal=False))
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(_TEMPLATE[0], dest)
    return dest


def _experiment(rel: str = "exp") -> Callable[[Path], None]:
    return lambda d: _paired(d / rel)


def path_cases() -> list[Case]:
    tiny_train = ["train", *TRAIN_TINY, "trainer.epochs=1"]
    sweep = ["sweep", "spec.yaml", *TINY_SWEEP]
    spec = _write("spec.yaml", SMOKE.read_text())
    c = [
        # train --out
        Case("train-out-is-a-file", [*tiny_train, "--out", "f"], ["--out", "f"], _write("f", "x"), "path"),
        Case("train-out-under-a-file", [*tiny_train, "--out", "f/run"], ["--out", "f"], _write("f", "x"), "path"),
        Case("train-out-in-proc", [*tiny_train, "--out", "/proc/tune-gems-run"], ["--out", "/proc"], family="path"),
        Case("train-out-in-sys", [*tiny_train, "--out", "/sys/tune-gems-run"], ["--out", "/sys"], family="path"),
        Case("train-out-inside-an-experiment", [*tiny_train, "--out", "exp/run"], ["--out", "exp"], _experiment(), "path"),
        Case("train-out-is-an-experiment", [*tiny_train, "--out", "exp"], ["--out", "exp"], _experiment(), "path"),
        Case("train-out-holds-experiments", [*tiny_train, "--out", "many"], ["--out", "many"],
             _both(_experiment("many/a"), _experiment("many/b")), "path"),
        Case("train-out-user-folder", [*tiny_train, "--out", "mine"], ["--out", "mine"], _write("mine/thesis.tex", "x"), "path"),
        Case("train-out-analysis-folder", [*tiny_train, "--out", "ana"], ["--out", "ana"],
             _write("ana/.tune-gems-output.json", '{"tool": "tune-gems", "kind": "analyze", "version": 1}'), "path"),
        Case("train-resume-without-out", [*tiny_train, "--resume"], ["--resume", "--out"], family="path"),
        Case("train-resume-an-experiment", [*tiny_train, "--out", "exp", "--resume"], ["--out", "exp"], _experiment(), "path"),
        Case("train-config-is-a-folder", ["train", "cfgdir"], ["cfgdir"], _write("cfgdir/x", "1"), "path"),
        Case("train-config-is-binary", ["train", "c.yaml"], ["c.yaml"], _write("c.yaml", b"\xff\xfe\x00\x01" * 64), "path"),
        # sweep --name / --storage / spec
        *[Case(f"sweep-name-{label}", [*sweep, "--storage", "store", "--name", name], ["--name"], spec, "path")
          for label, name in (("parent", "../escaped"), ("dot", "."), ("dotdot", ".."), ("slash", "a/b"), ("absolute", "/tmp/x"),
                              ("empty", ""), ("hidden", ".x"), ("option-like", "-rf"), ("option-like-joined", "=-rf"), ("long", "x" * 300), ("space", "a b"),
                              ("backslash", "a\\b"), ("unicode", "caf\u00e9"), ("device", "NUL"))],
        Case("sweep-spec-name-parent", [*sweep, "name=../escaped"], ["name"], spec, "path"),
        Case("sweep-storage-is-a-file", [*sweep, "--storage", "f", "--name", "x"], ["f"], _both(spec, _write("f", "x")), "path"),
        Case("sweep-storage-under-a-file", [*sweep, "--storage", "f/store", "--name", "x"], ["f"], _both(spec, _write("f", "x")), "path"),
        Case("sweep-storage-in-proc", [*sweep, "--storage", "/proc/tg", "--name", "x"], ["/proc"], spec, "path"),
        Case("sweep-storage-inside-an-experiment", [*sweep, "--storage", "exp", "--name", "x"], ["exp"], _both(spec, _experiment()), "path"),
        Case("sweep-storage-unknown-scheme", [*sweep, "--storage", "foo://bucket/x", "--name", "x"], ["--storage", "foo"], spec, "path"),
        Case("sweep-storage-file-uri-in-proc", [*sweep, "--storage", "file:///proc/tg", "--name", "x"], ["--storage", "/proc/tg"], spec, "path"),
        Case("sweep-storage-file-uri-a-file", [*sweep, "--storage", "file://{sandbox}/f", "--name", "x"], ["--storage"],
             _both(spec, _write("f", "x")), "path"),
        Case("sweep-spec-is-a-folder", ["sweep", "specdir", *TINY_SWEEP], ["specdir"], _write("specdir/x", "1"), "path"),
        Case("sweep-resume-differing-override", [*sweep, "--storage", "store", "--name", "done", "--resume", "config.trainer.lr=0.1"],
             ["config.trainer.lr", "--resume"], _both(spec, _stored_sweep("store/done")), "path"),
        Case("sweep-resume-a-train-run", [*sweep, "--storage", "store", "--name", "run", "--resume"], ["run"],
             _both(spec, _write("store/run/config.yaml", "seed: 0\n"), _write("store/run/members.csv", "epoch\n1\n")), "path"),
        # analyze inputs and --out (the data-loss cases of the issue)
        Case("analyze-out-is-the-experiment", ["analyze", "exp", "--out", "exp", "--overwrite"], ["--out", "exp"], _experiment(), "path"),
        Case("analyze-out-holds-the-experiments", ["analyze", "all/a", "--out", "all", "--overwrite"], ["--out", "all"],
             _both(_experiment("all/a"), _experiment("all/b")), "path"),
        Case("analyze-out-inside-another-experiment", ["analyze", "a", "--out", "b/x", "--overwrite"], ["--out", "b"],
             _both(_experiment("a"), _experiment("b")), "path"),
        Case("analyze-out-user-folder-overwrite", ["analyze", "exp", "--out", "mine", "--overwrite"], ["--out", "mine"],
             _both(_experiment(), _write("mine/thesis.tex", "precious")), "path"),
        Case("analyze-out-train-run-overwrite", ["analyze", "exp", "--out", "run", "--overwrite"], ["--out", "run"],
             _both(_experiment(), _write("run/config.yaml", "seed: 0\n"), _write("run/checkpoint.pt", b"x")), "path"),
        Case("analyze-out-under-a-file", ["analyze", "exp", "--out", "f/x"], ["--out", "f"], _both(_experiment(), _write("f", "x")), "path"),
        Case("analyze-out-in-proc", ["analyze", "exp", "--out", "/proc/tg"], ["--out", "/proc"], _experiment(), "path"),
        Case("analyze-input-is-a-file", ["analyze", "f"], ["f"], _write("f", "x"), "path"),
        Case("analyze-input-empty-folder", ["analyze", "empty"], ["empty"], lambda d: (d / "empty").mkdir(), "path"),
        Case("analyze-bad-gems-json", ["analyze", "exp"], ["gems.json"], _experiment_with(lambda e: (e / "gems.json").write_text("{nope")), "path"),
    ]
    return c


def _stored_sweep(rel: str) -> Callable[[Path], None]:
    """An experiment folder as a sweep leaves it: its spec.yaml (the tiny smoke spec), its marker
    recording the spec's checksum, and tables."""

    def go(d: Path) -> None:
        import yaml

        from sweep_fixtures import store_spec
        from tune_gems.sweep.spec_load import load_spec

        spec = load_spec(SMOKE, TINY_SWEEP)
        _paired(d / rel)
        store_spec(d / rel, yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False).encode())  # as a sweep records it

    return go


def _experiment_with(change: Callable[[Path], None]) -> Callable[[Path], None]:
    def go(d: Path) -> None:
        _paired(d / "exp")
        change(d / "exp")

    return go


def _table_change(table: str, column: str, value) -> Callable[[Path], None]:
    def change(exp: Path) -> None:
        df = pd.read_parquet(exp / f"{table}.parquet")
        if value is DROP:
            df = df.drop(columns=[column])
        else:
            df[column] = pd.Series([value] * len(df), dtype=object if not isinstance(value, float) else float)
            if isinstance(value, str) or value is None:
                df[column] = df[column].astype(object)
        df.to_parquet(exp / f"{table}.parquet", index=False)

    return _experiment_with(change)


DROP = object()


def table_cases() -> list[Case]:
    """Every column of the three tables that docs/results.md types, made hostile."""
    from tune_gems.analysis.read import load, table_schema
    from tune_gems.contracts.gem_manifest import folder_manifest

    import tempfile

    with tempfile.TemporaryDirectory() as d:
        exp = paired_scenario(Path(d) / "exp")
        columns = {t: list(pd.read_parquet(exp / f"{t}.parquet").columns) for t in ("trials", "history", "members")}
        gems = [e.metric for e in folder_manifest(exp)]
    required = {"trials": load.TRIALS_REQUIRED, "history": load.HISTORY_REQUIRED, "members": load.MEMBERS_REQUIRED}
    cases = []
    for table, cols in columns.items():
        for col in cols:
            if col == "experiment":
                continue  # a label the loader sets itself
            hostile = []
            if col in required[table]:
                hostile.append(("dropped", DROP))
            if col in table_schema.INT_COLUMNS:
                hostile += [("text", "abc"), ("fraction", 1.5), ("negative", -3.0)]
                if (table, col) not in table_schema.NULLABLE_INT:
                    hostile.append(("missing", float("nan")))
            elif col in table_schema.FLAG_COLUMNS:
                hostile.append(("not_a_flag", "maybe"))
            elif col in table_schema.TEXT_COLUMNS:
                if table_schema.TEXT_COLUMNS[col]:
                    hostile.append(("missing", None))
                hostile.append(("number", 1.5))
            elif table_schema._is_float_column(col, frozenset(gems)):
                hostile.append(("text", "abc"))
                if col in table_schema.NONNEGATIVE_COLUMNS:  # timings and counts (issue 39 item 5)
                    hostile += [("negative", -1.0), ("inf", float("inf"))]
                elif col in table_schema.FINITE_COLUMNS.get(table, ()):
                    hostile.append(("inf", float("inf")))
            for label, value in hostile:
                cases.append(Case(f"table-{table}-{col}-{label}", ["analyze", "exp"], [f"{table}.parquet", col],
                                  _table_change(table, col, value), "table"))
    return cases


def option_cases() -> list[Case]:
    """Every numeric option of every command (today: analyze's thresholds), with values that
    are not numbers, not finite, or not whole where a whole number is expected. No experiment
    folder exists: an option that got through would be answered about the folder instead."""
    from tune_gems.commands.cli import build_parser

    cases = []
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for command, parser in sub.choices.items():
        for action in parser._actions:
            if not action.option_strings or action.type not in (int, float) and not callable(action.type):
                continue
            if action.nargs == 0 or action.type is None:
                continue
            flag = max(action.option_strings, key=len)
            values = [("text", "abc"), ("nan", "nan"), ("inf", "inf"), ("neg_inf", "-inf"), ("overflow", "1e400")]
            if action.type is int:
                values.append(("fraction", "1.5"))
            for label, value in values:
                cases.append(Case(f"option-{command}{flag}-{label}", [command, "exp", f"{flag}={value}"], [flag], family="option"))
    return cases


MARKER = ".tune-gems-output.json"
VICTIM = "the user's thesis, in another tree"


def _analysis_listing(route: str) -> Callable[[Path], None]:
    """An experiment whose `analysis/` marker lists, beside the report it wrote, a path that
    leaves the folder by `route`; the user's `victim.txt` (outside) must survive `--overwrite`."""
    import json

    def go(d: Path) -> None:
        _paired(d / "exp")
        ana = d / "exp" / "analysis"
        ana.mkdir()
        (ana / "report.md").write_text("old report")
        (d / "elsewhere").mkdir()
        (d / "elsewhere" / "victim.txt").write_text(VICTIM)
        listed = {"absolute": str(d / "elsewhere" / "victim.txt"), "dotdot": "../../elsewhere/victim.txt",
                  "symlink-out": "link.txt", "symlink-folder-out": "plots/victim.txt", "symlink-loop": "loop/x.png"}[route]
        if route == "symlink-out":
            (ana / "link.txt").symlink_to(d / "elsewhere" / "victim.txt")
        elif route == "symlink-folder-out":
            (ana / "plots").symlink_to(d / "elsewhere")
        elif route == "symlink-loop":
            (ana / "loop").symlink_to(ana / "loop")
        body = {"tool": "tune-gems", "kind": "analyze", "version": 1, "files": ["report.md", listed]}
        (ana / MARKER).write_text(json.dumps(body))

    return go


def _loop(rel: str) -> Callable[[Path], None]:
    """`ln -s REL REL`: a symlink to itself."""
    return lambda d: (d / rel).symlink_to(rel)


def _write_file(rel: str, text: str) -> Callable[[Path], None]:
    def go(d: Path) -> None:
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)

    return go


ENV_VALUES = {
    "OMP_NUM_THREADS": [("text", "abc"), ("zero", "0"), ("negative", "-3"), ("2^70", str(2 ** 70)), ("billion", "1000000000")],
    "MKL_NUM_THREADS": [("text", "abc"), ("billion", "1000000000")],
    "ATEN_CPU_CAPABILITY": [("garbage", "garbage"), ("upper-case", "AVX2")],
    "MKL_CBWR": [("garbage", "garbage")],
}
"""Issue 39 item 3: environment values torch, OpenMP or MKL would crash on or ignore."""
ENV_COMMANDS = {
    "train": ["train", *TRAIN_TINY, "--out", "out"], "sweep": ["sweep", "spec.yaml", *TINY_SWEEP],
    "analyze": ["analyze", "exp"], "plan": ["plan", "exp"], "confirm": ["confirm", "exp"], "compare": ["compare", "a", "b"],
}
THREADS_COMMANDS = {**{k: v for k, v in ENV_COMMANDS.items() if k != "sweep"},
                    "sweep-dry-run": ["sweep", "spec.yaml", *TINY_SWEEP, "--dry-run"]}
"""The commands that take `--threads` (a sweep only with --dry-run)."""


def issue39_cases() -> list[Case]:
    """Issue 39 (hostile input, round five), the parts outside the analysis package: a marker's
    file list that leaves its folder (every escape route), symlink loops given as a path, every
    CPU environment value and `--threads` in every command, a train marker of an unknown format
    version on --resume, a config key given nested and dotted."""
    c = [Case(f"analyze-overwrite-listed-{route}", ["analyze", "exp", "--overwrite"], [MARKER, "nothing was deleted"],
              _analysis_listing(route), "issue39")
         for route in ("absolute", "dotdot", "symlink-out", "symlink-folder-out", "symlink-loop")]
    c += [
        Case("plan-symlink-loop", ["plan", "exp"], ["exp", "symlink loop"], _loop("exp"), "issue39"),
        Case("analyze-symlink-loop", ["analyze", "exp"], ["exp", "symlink loop"], _loop("exp"), "issue39"),
        Case("analyze-out-symlink-loop", ["analyze", "exp", "--out", "loop"], ["--out", "symlink loop"],
             _both(_experiment(), _loop("loop")), "issue39"),
        Case("compare-symlink-loop", ["compare", "exp", "b"], ["exp", "symlink loop"], _both(_loop("exp"), _experiment("b")), "issue39"),
        Case("confirm-symlink-loop", ["confirm", "exp"], ["exp", "symlink loop"], _loop("exp"), "issue39"),
        Case("sweep-storage-symlink-loop", ["sweep", "spec.yaml", *TINY_SWEEP, "--storage", "store", "--name", "x"],
             ["store", "symlink loop"], _both(_write("spec.yaml", SMOKE.read_text()), _loop("store")), "issue39"),
        Case("train-resume-marker-version-999", ["train", *TRAIN_TINY, "--out", "out", "--resume"], [MARKER, "999"],
             _both(_write_file("out/config.yaml", "seed: 0\n"), _write_file("out/members.csv", "epoch\n1\n"),
                   _write_file(f"out/{MARKER}", '{"tool": "tune-gems", "kind": "train", "version": 999, "checksums": {}}')),
             "issue39"),
        Case("config-key-nested-and-dotted", ["train", "c.yaml", *TRAIN_TINY, "--out", "out"], ["c.yaml", "trainer.lr", "twice"],
             _write_file("c.yaml", "trainer:\n  lr: 0.001\ntrainer.lr: 0.002\n"), "issue39"),
        Case("config-factor-nested-and-dotted", ["train", "c.yaml", *TRAIN_TINY, "--out", "out"],
             ["arms.factors.gems.g12.mode", "twice"],
             _write_file("c.yaml", "arms:\n  factors:\n    gems.g12.mode: [measure, wire]\n    gems: {g12: {mode: [wire, measure]}}\n"),
             "issue39"),
        Case("config-factor-dotted-in-file-nested-override", ["train", "c.yaml", *TRAIN_TINY, "arms.factors.gems.g12.mode=[wire]",
             "--out", "out"], ["arms.factors.gems.g12.mode", "twice"],
             _write_file("c.yaml", "arms:\n  factors:\n    gems.g12.mode: [measure, wire]\n"), "issue39"),
        Case("config-arm-list-nested-and-dotted", ["train", "c.yaml", *TRAIN_TINY, "--out", "out"],
             ["arms.list[0].gems.g12.mode", "twice"],
             _write_file("c.yaml", "arms:\n  list:\n    - {name: a, gems.g12.mode: wire, gems: {g12: {mode: measure}}}\n"
                                   "    - {name: b}\n"), "issue39"),
        Case("sweep-spec-factor-nested-and-dotted", ["sweep", "spec.yaml", *TINY_SWEEP, "--storage", "store", "--name", "x"],
             ["config.arms.factors.gems.g12.mode", "twice"],
             lambda d: _write("spec.yaml", _spec_with_factor_twice())(d), "issue39"),
    ]
    for name, values in ENV_VALUES.items():
        for label, value in values:
            for command, args in ENV_COMMANDS.items():
                c.append(Case(f"env-{name}-{label}-{command}", args, [f"{name}: "], family="issue39", env={name: value}))
    for label, value in (("zero", "0"), ("negative", "-1"), ("million", "1000000")):
        for command, args in THREADS_COMMANDS.items():
            c.append(Case(f"threads-{label}-{command}", [*args, f"--threads={value}"], ["--threads"], family="issue39"))
    return c


def _spec_with_factor_twice() -> str:
    """The smoke spec as a `design: none` sweep whose config gives one factor key nested and dotted."""
    import yaml

    spec = yaml.safe_load(SMOKE.read_text())
    spec["design"] = "none"
    spec.get("search", {}).pop("gems", None)
    spec.setdefault("config", {})["arms"] = {"factors": {"gems.g12.mode": ["measure", "wire"],
                                                         "gems": {"g12": {"mode": ["wire", "measure"]}}}}
    return yaml.safe_dump(spec, sort_keys=False)


def _wired(rel: str = "exp", change: Callable[[Path], None] = lambda e: None) -> Callable[[Path], None]:
    """A two-arm experiment with its arms.parquet (control / g12 wired, 6 seeds, 4 epochs), then `change`."""

    def go(d: Path) -> None:
        from fake_results import wire_scenario

        change(wire_scenario(d / rel, n=6))

    return go


def _pilot_with(change: Callable[[Path], None]) -> Callable[[Path], None]:
    """A 4-fold pilot (`tune-gems plan`'s input) with recorded time, then `change`."""

    def go(d: Path) -> None:
        from fake_results import fold_scenario

        f = fold_scenario(d / "exp", [0.5, 0.3, 0.7, 0.4], n=6)
        pd.read_parquet(f / "history.parquet").assign(train_s=2.0, eval_s=0.5).to_parquet(f / "history.parquet", index=False)
        t = pd.read_parquet(f / "trials.parquet").assign(**{"trainer.iterations_per_epoch": 50})
        t.to_parquet(f / "trials.parquet", index=False)
        change(f)

    return go


def _parquet_edit(table: str, edit: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[Path], None]:
    """Rewrite `<experiment>/<table>.parquet` through `edit`."""

    def go(exp: Path) -> None:
        edit(pd.read_parquet(exp / f"{table}.parquet")).to_parquet(exp / f"{table}.parquet", index=False)

    return go


def _set(column: str, value) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def edit(df: pd.DataFrame) -> pd.DataFrame:
        df = df.copy()
        df[column] = value
        return df

    return edit


def _at(row: int, column: str, value) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def edit(df: pd.DataFrame) -> pd.DataFrame:
        df = df.copy()
        df.loc[row, column] = value
        return df

    return edit


FROM_EPOCH = ["--window", "from-epoch", "--first-epoch"]


def issue39_analysis_cases() -> list[Case]:
    """Issue 39 (hostile input, round five), the analysis's cases: a window the data cannot honour
    (`--first-epoch` past the last evaluated epoch, or without `--window from-epoch`) in analyze,
    compare, plan and confirm alike; tables that do not fit their schema (an arm listed twice, an
    arm without a level, a seed index or member repeated, negative or infinite timings and counts,
    an infinite Sharpe); a plan from a pilot with no finite validation result; one folder given
    twice. The paired experiment has 3 epochs, the wired one and the pilot 4."""
    nan = float("nan")
    past = ["--first-epoch", "past the last evaluated epoch"]
    alone = ["--first-epoch", "--window from-epoch"]
    c = [
        Case("analyze-first-epoch-past-the-run", ["analyze", "exp", *FROM_EPOCH, "50"], [*past, "(3)"], _experiment()),
        Case("analyze-first-epoch-one-past-the-run", ["analyze", "exp", *FROM_EPOCH, "4"], past, _experiment()),
        Case("analyze-first-epoch-without-its-window", ["analyze", "exp", "--first-epoch", "2"], alone, _experiment()),
        Case("analyze-first-epoch-with-last-half", ["analyze", "exp", "--window", "last-half", "--first-epoch", "2"], alone,
             _experiment()),
        Case("compare-first-epoch-past-the-run", ["compare", "exp", "b", *FROM_EPOCH, "50"], past,
             _both(_experiment(), _experiment("b"))),
        Case("plan-first-epoch-past-the-run", ["plan", "exp", *FROM_EPOCH, "50"], [*past, "(4)"], _pilot_with(lambda f: None)),
        Case("plan-first-epoch-without-its-window", ["plan", "exp", "--first-epoch", "2"], alone, _pilot_with(lambda f: None)),
        Case("confirm-first-epoch-past-the-search", ["confirm", "exp", *FROM_EPOCH, "99"], [*past, "(3)"], _stored_sweep("exp")),
        Case("confirm-first-epoch-without-its-window", ["confirm", "exp", "--first-epoch", "2"], alone, _stored_sweep("exp")),
        Case("analyze-the-same-folder-twice", ["analyze", "exp", "exp"], ["EXPERIMENT_DIR", "exp", "given twice"], _experiment()),
        Case("analyze-one-folder-by-two-names", ["analyze", "exp", "exp/../exp"], ["EXPERIMENT_DIR", "the same folder as exp"],
             _experiment()),
        Case("analyze-arms-duplicated-rows", ["analyze", "exp"], ["arms.parquet", "repeat one arm"],
             _wired(change=_parquet_edit("arms", lambda a: pd.concat([a, a], ignore_index=True)))),
        Case("analyze-arms-nan-level", ["analyze", "exp"], ["arms.parquet", "gems.g12.weight", "missing"],
             _wired(change=_parquet_edit("arms", _at(1, "gems.g12.weight", nan)))),
        Case("analyze-arms-nan-mode", ["analyze", "exp"], ["arms.parquet", "gems.g12.mode", "missing"],
             _wired(change=_parquet_edit("arms", _at(0, "gems.g12.mode", None)))),
        Case("analyze-arms-without-a-name", ["analyze", "exp"], ["arms.parquet", "column arm", "missing"],
             _wired(change=_parquet_edit("arms", _at(0, "arm", None)))),
        Case("analyze-duplicate-seed-indices", ["analyze", "exp"], ["members.parquet", "seed index"],
             _wired(change=_parquet_edit("members", _set("seed_index", 0)))),
        Case("analyze-duplicate-member-rows", ["analyze", "exp"], ["members.parquet", "repeat one member"],
             _wired(change=_parquet_edit("members", lambda m: pd.concat([m, m], ignore_index=True)))),
        Case("analyze-infinite-sharpe", ["analyze", "exp"], ["members.parquet", "val_alpha_sharpe", "inf"],
             _wired(change=_parquet_edit("members", _at(3, "val_alpha_sharpe", float("inf"))))),
        Case("analyze-iterations-per-epoch-negative", ["analyze", "exp"], ["trials.parquet", "trainer.iterations_per_epoch"],
             _pilot_with(_parquet_edit("trials", _set("trainer.iterations_per_epoch", -50)))),
        Case("plan-negative-train-time", ["plan", "exp"], ["history.parquet", "train_s", ">= 0"],
             _pilot_with(_parquet_edit("history", _at(0, "train_s", -922.0)))),
        Case("plan-infinite-eval-time", ["plan", "exp"], ["history.parquet", "eval_s"],
             _pilot_with(_parquet_edit("history", _at(1, "eval_s", float("inf"))))),
        Case("plan-iterations-per-epoch-negative", ["plan", "exp"], ["trials.parquet", "trainer.iterations_per_epoch"],
             _pilot_with(_parquet_edit("trials", _set("trainer.iterations_per_epoch", -50)))),
        Case("plan-iterations-per-epoch-fraction", ["plan", "exp"], ["trials.parquet", "trainer.iterations_per_epoch"],
             _pilot_with(_parquet_edit("trials", _set("trainer.iterations_per_epoch", 2.5)))),
        Case("plan-all-nan-validation", ["plan", "exp"], ["exp", "no member has a finite val_alpha_sharpe or val_sharpe"],
             _pilot_with(_parquet_edit("members", lambda m: m.assign(val_alpha_sharpe=nan, val_sharpe=nan)))),
        Case("plan-infinite-sharpe", ["plan", "exp"], ["members.parquet", "val_sharpe", "inf"],
             _pilot_with(_parquet_edit("members", _at(0, "val_sharpe", float("inf"))))),
    ]
    for case in c:
        case.family = "issue39_analysis"
    return c


CASES = (config_cases() + data_cases() + path_cases() + table_cases() + option_cases() + issue39_cases()
         + issue39_analysis_cases())


# -- running -----------------------------------------------------------------------------------


@dataclass
class Outcome:
    sandbox: Path
    before: dict
    after: dict
    returncode: int
    stdout: str
    stderr: str


def _env(sandbox: Path) -> dict[str, str]:
    return {"RAY_ADDRESS": "127.0.0.1:1", "TUNE_GEMS_CACHE": str(sandbox / ".cache")}


def _args(case: Case, sandbox: Path) -> list[str]:
    return [a.replace("{sandbox}", str(sandbox)) for a in case.args]


def _snap(sandbox: Path) -> dict:
    return {k: v for k, v in snapshot(sandbox).items() if not k.startswith(".cache")}


IN_PROCESS = ("config", "table", "option", "issue39_analysis")
"""Families run by `tune_gems.commands.cli.main` in this process (validation only: fast); the others
(data files, paths: they reach torch, the data loader, Ray's client) run in forked children."""


def run_in_process(case: Case, sandbox: Path) -> tuple[int, str, str]:
    """`tune_gems.commands.cli.main(args)` here, in the sandbox as working directory."""
    res = cli_in_process(*_args(case, sandbox), env=_env(sandbox), cwd=sandbox)
    return res.returncode, res.stdout, res.stderr


def run_cases(cases: list[Case], root: Path, env_of: Callable[[Case], dict[str, str]] = lambda c: {},
              in_process: tuple[str, ...] = IN_PROCESS) -> dict[str, Outcome]:
    """Every case in a sandbox `root/<id>` (set up and snapshotted here), the `in_process`
    families in this process, the others through `tune_gems.commands.cli.main` in children forked from a
    server that imported the heavy modules once (`env_of(case)`: extra environment)."""
    from cluster_fixtures import cli_in_child, forked_cli_pool

    io_dir = root / "_io"
    io_dir.mkdir()
    befores = {}
    for c in cases:
        (root / c.id).mkdir()
        c.setup(root / c.id)
        befores[c.id] = _snap(root / c.id)
    results: dict[str, tuple] = {}
    forked = [c for c in cases if c.family not in in_process]
    with forked_cli_pool(PARALLEL) as pool:
        futures = {
            c.id: pool.submit(cli_in_child, _args(c, root / c.id), str(root / c.id), {**_env(root / c.id), **env_of(c)},
                              str(io_dir / f"{c.id}.out"), str(io_dir / f"{c.id}.err"))
            for c in forked
        }
        for c in cases:  # meanwhile, the in-process families here
            if c.family in in_process:
                results[c.id] = run_in_process(c, root / c.id)
        for c in forked:
            try:
                code = futures[c.id].result(timeout=CASE_TIMEOUT)
            except Exception as e:  # noqa: BLE001 - reported per case below
                code = f"{type(e).__name__}: {e}"
            results[c.id] = (code, (io_dir / f"{c.id}.out").read_text(errors="replace"), (io_dir / f"{c.id}.err").read_text(errors="replace"))
    return {c.id: Outcome(root / c.id, befores[c.id], _snap(root / c.id), *results[c.id]) for c in cases}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("hostile"), env_of=lambda c: c.env)


def check(case: Case, out: Outcome) -> None:
    assert out.returncode == 2, f"exit {out.returncode}\nstdout: {out.stdout[-1500:]}\nstderr: {out.stderr[-3000:]}"
    assert out.stderr.startswith("tune-gems: error: ") and out.stderr.count("\n") == 1, out.stderr[-3000:]
    line = out.stderr.strip()
    for fragment in case.fragments:
        assert any(alt in line for alt in fragment.split("|")), f"{fragment!r} not in: {line}"
    assert out.stdout == "", out.stdout[-2000:]
    added = sorted(set(out.after) - set(out.before))
    removed = sorted(set(out.before) - set(out.after))
    changed = sorted(k for k in set(out.before) & set(out.after) if out.before[k] != out.after[k])
    assert not (added or removed or changed), f"added {added}, removed {removed}, changed {changed}"


def misbehaved(cases: list[Case], outcomes: dict[str, Outcome], extra: Callable[[Outcome], None] = lambda out: None) -> None:
    """Every case `check`ed (and `extra`), then one failure listing each that misbehaved."""
    failures = []
    for case in cases:
        try:
            check(case, outcomes[case.id])
            extra(outcomes[case.id])
        except AssertionError as e:
            failures.append(f"{case.id}: {str(e).splitlines()[0][:400]}")
    assert not failures, f"{len(failures)} of {len(cases)} cases misbehaved:\n" + "\n".join(failures)


KNOWN_DEFECTS: dict[str, str] = {}
"""Cases that still reach the last line of defence, each with its reason; a case listed here
that starts passing fails the test (strict), so the list only ever shrinks."""


def test_case_ids_are_unique():
    assert len({c.id for c in CASES}) == len(CASES)


def test_case_counts():
    """The matrix's size by family (printed for the issue note); every config leaf is covered."""
    counts: dict[str, int] = {}
    for c in CASES:
        counts[c.family] = counts.get(c.family, 0) + 1
    import test_bad_input
    import test_hostile_round3
    import test_hostile_round4
    import test_hostile_round6

    rounds = {"ray_address": len(RAY_ADDRESS_CASES), "bad_input": len(test_bad_input.CASES),
              **{f"round{r}": len(m.CASES) for r, m in ((3, test_hostile_round3), (4, test_hostile_round4), (6, test_hostile_round6))}}
    print(f"\nhostile-input matrix: {len(CASES)} cases {counts}; with the rounds {rounds}: "
          f"{len(CASES) + sum(rounds.values())} hostile inputs")
    keys = {k for k, *_ in leaves()}
    covered = {c.id.split("-")[1] for c in CASES if c.family == "config"}
    assert keys <= covered, sorted(keys - covered)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["config", "data", "path", "table", "option", "issue39", "issue39_analysis"])
def test_every_hostile_input_is_one_line_exit_2_and_changes_nothing(family, outcomes):
    """All cases of a family are checked; the failure lists every case that misbehaved."""
    failures = []
    for case in (c for c in CASES if c.family == family):
        try:
            check(case, outcomes[case.id])
        except AssertionError as e:
            if case.id not in KNOWN_DEFECTS:
                failures.append(f"{case.id}: {str(e).splitlines()[0][:400]}")
            else:
                assert outcomes[case.id].returncode == 1 and "internal error" in outcomes[case.id].stderr, outcomes[case.id].stderr
        else:
            if case.id in KNOWN_DEFECTS:
                failures.append(f"{case.id}: passes now; remove it from KNOWN_DEFECTS")
    assert not failures, f"{len(failures)} of {sum(c.family == family for c in CASES)} cases misbehaved:\n" + "\n".join(failures)


FRESH = ("config-model.hidden-huge", "sweep-name-parent")
"""One case of a family run in this process and one of a family run in forked children (test_bad_input's
fresh processes cover train, sweep and analyze once each too)."""


@pytest.mark.slow
def test_fresh_processes_answer_the_same(outcomes, tmp_path):
    """A few cases as real `python -m tune_gems` processes: the same exit status and line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    for case_id in FRESH:
        case = next(c for c in CASES if c.id == case_id)
        sandbox = tmp_path / case.id
        sandbox.mkdir()
        case.setup(sandbox)
        before = _snap(sandbox)
        res = subprocess.run([sys.executable, "-m", "tune_gems", *_args(case, sandbox)], cwd=sandbox,
                             env={**env, **_env(sandbox)}, capture_output=True, text=True, timeout=300)
        fresh = Outcome(sandbox, before, _snap(sandbox), res.returncode, res.stdout, res.stderr)
        check(case, fresh)
        forked = outcomes[case.id]
        assert _normal(fresh.stderr, sandbox) == _normal(forked.stderr, forked.sandbox)


def _normal(line: str, sandbox: Path) -> str:
    """The error line with the sandbox path and numbers (free memory varies) abstracted."""
    import re

    return re.sub(r"\d+(\.\d+)?", "N", line.replace(str(sandbox), "<s>"))


# -- RAY_ADDRESS (issue 39 item 4): an address Ray cannot read, or where nothing answers -----------

RAY_SWEEP = ["sweep", "spec.yaml", *TINY_SWEEP, "--storage", "store", "--name", "x"]
RAY_ADDRESS_CASES = {
    # (RAY_ADDRESS, args, fragments): each refused in one line before Ray is asked (it would wait minutes)
    "ray-address-nothing-listening": ("127.0.0.1:1", RAY_SWEEP, ["RAY_ADDRESS", "127.0.0.1:1", "--resume", "ray start"]),
    "ray-address-garbage": ("not an address", RAY_SWEEP, ["RAY_ADDRESS", "'not an address'", "host:port"]),
    "ray-address-dashboard-url": ("http://127.0.0.1:8265", RAY_SWEEP, ["RAY_ADDRESS", "http://127.0.0.1:8265"]),
    "ray-address-port-out-of-range": ("127.0.0.1:70000", RAY_SWEEP, ["RAY_ADDRESS", "70000"]),
    "ray-address-no-port": ("127.0.0.1", RAY_SWEEP, ["RAY_ADDRESS", "'127.0.0.1'"]),
    "ray-address-garbage-dry-run": ("garbage", ["sweep", "spec.yaml", *TINY_SWEEP, "--dry-run"], ["RAY_ADDRESS", "'garbage'"]),
}


@pytest.mark.slow
def test_a_ray_address_that_does_not_answer_or_is_not_one_is_one_line_exit_2(tmp_path):
    cases = [Case(cid, args, fragments, _write("spec.yaml", SMOKE.read_text()), "ray_address")
             for cid, (_, args, fragments) in RAY_ADDRESS_CASES.items()]
    misbehaved(cases, run_cases(cases, tmp_path, env_of=lambda c: {"RAY_ADDRESS": RAY_ADDRESS_CASES[c.id][0]}))
