"""Bad input through the real command line: each case is one line on stderr naming the field or
file, exit status 2, and nothing written, overwritten or lost.

Every case runs `python -m tune_gems ...` in a sandbox folder of its own (the working
directory, so default output folders such as runs/ and experiments/ would land inside it too),
and the sandbox is snapshotted (every path, size, mtime and content hash) before and after.
RAY_ADDRESS points at a closed port, so a sweep that got past validation to Ray would fail
loudly instead of starting a cluster. The cases run a few at a time, each in a process of its
own forked from one that has the heavy modules imported (a few also as fresh processes, which
must answer the same), and are then checked one test each.

Also here, safe by default: YAML goes through a safe loader (a `!!python/...` tag is refused,
not executed) and checkpoints load with `weights_only=True` (a malicious pickle is refused).
"""

from __future__ import annotations

import ast
import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd
import pytest

from fake_results import paired_scenario
from sweep_fixtures import REPO, SMOKE, TINY_SWEEP

TRAIN_TINY = [o.removeprefix("config.") for o in TINY_SWEEP if o.startswith("config.")] + ["trainer.epochs=1", "trainer.population=2"]
PARALLEL = 3


@dataclass
class Case:
    id: str
    args: list[str]
    fragments: list[str]  # must all appear in the error line (the field or file it names)
    setup: Callable[[Path], None] = lambda d: None
    markers: list[str] = field(default_factory=list)  # files a payload would create if it ran


# -- inputs ------------------------------------------------------------------------------------

PRICES_OK = "date,close\n" + "".join(f"2020-01-{d:02d},{100 + d}\n" for d in range(1, 29))


def write(rel: str, text: str | bytes) -> Callable[[Path], None]:
    def go(d: Path) -> None:
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        (p.write_bytes if isinstance(text, bytes) else p.write_text)(text)

    return go


def both(*fns: Callable[[Path], None]) -> Callable[[Path], None]:
    def go(d: Path) -> None:
        for fn in fns:
            fn(d)

    return go


def smoke_spec(rel: str = "spec.yaml", extra: str = "") -> Callable[[Path], None]:
    return write(rel, SMOKE.read_text() + extra)


def long_prices(bad_row: int | None = None, bad_value: str = "") -> str:
    rows = [f"{i},{100 + (i % 7)}" for i in range(1200)]
    if bad_row is not None:
        rows[bad_row] = f"{bad_row},{bad_value}"
    return "t,close\n" + "\n".join(rows) + "\n"


def experiment(extra: Callable[[Path], None] | None = None) -> Callable[[Path], None]:
    def go(d: Path) -> None:
        paired_scenario(d / "exp")
        if extra is not None:
            extra(d / "exp")

    return go


def _corrupt_parquet(name: str) -> Callable[[Path], None]:
    return lambda exp: (exp / name).write_bytes(b"PAR1" + os.urandom(300))


def _drop_column(name: str, column: str) -> Callable[[Path], None]:
    def go(exp: Path) -> None:
        df = pd.read_parquet(exp / name)
        df.drop(columns=[column]).to_parquet(exp / name, index=False)

    return go


def stored_config(d: Path, *overrides: str) -> None:
    """out/config.yaml of a train run of the tiny config (what `train --resume` continues), and
    the marker recording its checksum (a resume refuses a run folder without one)."""
    from tune_gems.config.yaml_io import dump_config
    from tune_gems.config.load import load_config
    from tune_gems.contracts.outputs import write_marker
    from tune_gems.contracts.run_record import CHECKSUMS_KEY, checksums

    (d / "out").mkdir(exist_ok=True)
    dump_config(load_config(None, [*TRAIN_TINY, *overrides]), d / "out" / "config.yaml")
    write_marker(d / "out", "train", **{CHECKSUMS_KEY: checksums(None, **{"config.yaml": (d / "out" / "config.yaml").read_bytes()})})


def checkpoint_case(kind: str, *config_overrides: str) -> Callable[[Path], None]:
    """out/config.yaml and out/checkpoint.pt for `train --resume`: a checkpoint truncated, a
    pickle that runs code, or a real one (written by the tiny config; `config_overrides` make
    the stored config.yaml another one)."""

    def go(d: Path) -> None:
        good = Path(os.environ["TG_GOOD_CHECKPOINT"]).read_bytes()
        stored_config(d, *config_overrides)
        path = d / "out" / "checkpoint.pt"
        if kind == "truncated":
            path.write_bytes(good[: len(good) // 2])
        elif kind == "garbage":
            path.write_bytes(os.urandom(4096))
        elif kind == "malicious":
            write_malicious_checkpoint(path, d / "PWNED")
        else:
            path.write_bytes(good)

    return go


class _Payload:
    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def write_malicious_checkpoint(path: Path, marker: Path) -> None:
    """A file in the checkpoint's format whose unpickling runs `touch MARKER`."""
    import torch

    from tune_gems.trainer.checkpoint import FORMAT

    torch.save({"format": FORMAT, "meta": {"epoch": _Payload(marker)}, "state": {}}, path)


TAG = '!!python/object/apply:os.system ["touch {d}/PWNED"]'

CASES = [
    # ---- train ----
    Case("train-missing-config", ["train", "nope.yaml"], ["nope.yaml", "no such file"]),
    Case("train-malformed-yaml", ["train", "c.yaml"], ["c.yaml", "malformed YAML"], write("c.yaml", "trainer: {epochs: [1\n")),
    Case("train-not-a-mapping", ["train", "c.yaml"], ["c.yaml", "mapping"], write("c.yaml", "- 1\n- 2\n")),
    Case("train-unknown-key-file", ["train", "c.yaml"], ["trainer.epochz", "unknown key"], write("c.yaml", "trainer:\n  epochz: 3\n")),
    Case("train-unknown-key-override", ["train", "trainer.typo=3"], ["trainer.typo", "unknown key"]),
    Case("train-unknown-section", ["train", "optimizer.lr=3"], ["optimizer", "unknown key"]),
    Case("train-wrong-type", ["train", "trainer.epochs=abc"], ["trainer.epochs", "integer"]),
    Case("train-wrong-type-file", ["train", "c.yaml"], ["model.noisy", "bool"], write("c.yaml", "model:\n  noisy: maybe\n")),
    Case("train-out-of-range-lr", ["train", "trainer.lr=-1"], ["trainer.lr", "greater than 0"]),
    Case("train-out-of-range-cost", ["train", "env.cost=0.5"], ["env.cost"]),
    Case("train-bad-splits", ["train", "data.splits=[0.5,0.2,0.2]"], ["data.splits", "sum to 1"]),
    Case("train-bad-device", ["train", "device=tpu"], ["device"]),
    Case("train-python-tag", ["train", "c.yaml"], ["c.yaml", "malformed YAML"], lambda d: write("c.yaml", f"seed: {TAG.format(d=d)}\n")(d), ["PWNED"]),
    Case("train-missing-data", ["train", "data.source=file", "data.path=prices.csv"], ["prices.csv", "no such file"]),
    Case("train-data-needs-path", ["train", "data.source=file"], ["data.path", "required"]),
    Case("train-corrupt-data-nonnumeric", ["train", "data.source=file", "data.path=p.csv"], ["p.csv", "non-numeric price 'abc'", "row 3"],
         write("p.csv", "date,close\n2020-01-01,100\n2020-01-02,101\n2020-01-03,abc\n")),
    Case("train-corrupt-data-binary", ["train", "data.source=file", "data.path=p.csv"], ["p.csv", "binary"], write("p.csv", b"\x00\x01\x02" * 300)),
    Case("train-corrupt-data-parquet", ["train", "data.source=file", "data.path=p.parquet"], ["p.parquet", "cannot read as Parquet"],
         write("p.parquet", b"PAR1" + b"\x07" * 500)),
    Case("train-data-wrong-column", ["train", "data.source=file", "data.path=p.csv", "data.price_column=last"], ["p.csv", "no price column 'last'"],
         write("p.csv", PRICES_OK)),
    Case("train-data-too-short", ["train", "data.source=file", "data.path=p.csv"], ["p.csv", "rows, need at least"], write("p.csv", PRICES_OK)),
    Case("train-existing-out", ["train", *TRAIN_TINY, "--out", "out"], ["out", "already holds results"], write("out/history.csv", "epoch\n1\n")),
    Case("train-resume-not-a-run", ["train", *TRAIN_TINY, "--out", "out", "--resume"], ["--out", "out", "not written by tune-gems train"],
         write("out/history.csv", "epoch\n1\n")),
    Case("train-corrupt-checkpoint", ["train", *TRAIN_TINY, "--out", "out", "--resume"], ["checkpoint.pt", "corrupt"], checkpoint_case("truncated")),
    Case("train-garbage-checkpoint", ["train", *TRAIN_TINY, "--out", "out", "--resume"], ["checkpoint.pt", "corrupt"], checkpoint_case("garbage")),
    Case("train-malicious-checkpoint", ["train", *TRAIN_TINY, "--out", "out", "--resume"], ["checkpoint.pt", "corrupt"], checkpoint_case("malicious"),
         ["PWNED"]),
    Case("train-resume-with-a-differing-override", ["train", *TRAIN_TINY, "model.hidden=24", "--out", "out", "--resume"],
         ["model.hidden", "model.hidden=16", "24", "--resume"], checkpoint_case("good")),
    Case("train-checkpoint-of-another-config", ["train", "--out", "out", "--resume"],
         ["checkpoint.pt", "model.hidden=16", "model.hidden=24"], checkpoint_case("good", "model.hidden=24")),
    Case("train-list-without-brackets", ["train", "data.source=file", "data.path=p.csv", "data.price_columns=AAPL,PG"],
         ["data.price_columns", "a list is written in brackets: data.price_columns=[AAPL,PG]"]),
    Case("command-misspelt", ["swep", "spec.yaml"], ["invalid choice: 'swep'", "did you mean 'sweep'?"]),
    # ---- sweep ----
    Case("sweep-missing-spec", ["sweep", "nope.yaml"], ["nope.yaml", "no such file"]),
    Case("sweep-malformed-yaml", ["sweep", "s.yaml"], ["s.yaml", "malformed YAML"], write("s.yaml", "num_samples: [1\n")),
    Case("sweep-unknown-key-file", ["sweep", "spec.yaml"], ["spec.yaml", "schedular", "unknown key"], smoke_spec(extra="schedular: {type: asha}\n")),
    Case("sweep-unknown-key-override", ["sweep", "spec.yaml", "config.trainer.typo=3"], ["trainer.typo", "unknown key"], smoke_spec()),
    Case("sweep-wrong-type", ["sweep", "spec.yaml", "num_samples=many"], ["spec.yaml", "num_samples"], smoke_spec()),
    Case("sweep-out-of-range", ["sweep", "spec.yaml", "num_samples=0"], ["spec.yaml", "num_samples"], smoke_spec()),
    Case("sweep-gpu-fraction", ["sweep", "spec.yaml", "resources.gpu=1.5"], ["resources.gpu"], smoke_spec()),
    Case("sweep-search-out-of-range", ["sweep", "spec.yaml", "search.params={trainer.gamma: {type: float, low: 0.9, high: 1.5}}"],
         ["search.params.trainer.gamma", "1.5"], smoke_spec()),
    Case("sweep-python-tag", ["sweep", "s.yaml"], ["s.yaml", "malformed YAML"], lambda d: write("s.yaml", f"num_samples: {TAG.format(d=d)}\n")(d),
         ["PWNED"]),
    Case("sweep-missing-data", ["sweep", "spec.yaml", "config.data.source=file", "config.data.path=prices.csv"], ["prices.csv", "no such file"],
         smoke_spec()),
    Case("sweep-corrupt-data", ["sweep", "spec.yaml", "config.data.source=file", "config.data.path=p.csv"], ["p.csv", "non-positive price", "row 8"],
         both(smoke_spec(), write("p.csv", long_prices(bad_row=7, bad_value="-3")))),
    Case("sweep-existing-experiment", ["sweep", "spec.yaml", "--storage", "store", "--name", "taken", *TINY_SWEEP],
         ["taken", "already exists", "--resume"], both(smoke_spec(), write("store/taken/trials.parquet", b"earlier results"))),
    Case("sweep-existing-experiment-by-spec-name", ["sweep", "spec.yaml", *TINY_SWEEP], ["experiments/mine", "already exists"],
         both(smoke_spec(extra="name: mine\n"), write("experiments/mine/notes.txt", "keep me"))),
    Case("sweep-resume-nothing-there", ["sweep", "spec.yaml", "--storage", "store", "--name", "ghost", "--resume", *TINY_SWEEP],
         ["ghost", "no sweep to resume"], smoke_spec()),
    Case("sweep-resume-without-name", ["sweep", "spec.yaml", "--resume", *TINY_SWEEP], ["--resume", "--name"], smoke_spec()),
    # ---- analyze ----
    Case("analyze-missing-folder", ["analyze", "nope"], ["nope", "not an experiment folder"]),
    Case("analyze-not-an-experiment", ["analyze", "exp"], ["exp", "missing trials.parquet"], write("exp/readme.txt", "hello")),
    Case("analyze-corrupt-parquet", ["analyze", "exp"], ["trials.parquet", "not a readable parquet"], experiment(_corrupt_parquet("trials.parquet"))),
    Case("analyze-missing-column", ["analyze", "exp"], ["members.parquet", "missing column", "val_sharpe"],
         experiment(_drop_column("members.parquet", "val_sharpe"))),
    Case("analyze-corrupt-journal", ["analyze", "exp"], ["optuna_journal.log", "not a readable Optuna journal"],
         experiment(lambda e: (e / "optuna_journal.log").write_text("{not json\n{nor this\n"))),
    Case("analyze-existing-output", ["analyze", "exp"], ["analysis", "not empty"],
         experiment(lambda e: write("analysis/keep.txt", "my notes")(e))),
    Case("analyze-output-is-a-file", ["analyze", "exp", "--out", "report.txt"], ["report.txt", "not a folder"],
         both(experiment(), write("report.txt", "not a folder"))),
]


# -- running the matrix ------------------------------------------------------------------------


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under root: folders, and files with size, mtime and content hash."""
    out: dict[str, tuple] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_dir():
            out[rel] = ("dir",)
        elif not p.is_file():  # a FIFO or socket: never opened (reading a FIFO blocks)
            out[rel] = ("special", p.lstat().st_mode)
        else:
            st = p.stat()
            out[rel] = ("file", st.st_size, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


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


def _prepare(case: Case, sandbox: Path) -> dict:
    sandbox.mkdir(parents=True)
    case.setup(sandbox)
    return snapshot(sandbox)


def run_fresh(case: Case, sandbox: Path) -> Outcome:
    """The case as a user runs it: a new `python -m tune_gems` process."""
    before = _prepare(case, sandbox)
    env = {**os.environ, **_env(sandbox), "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    res = subprocess.run([sys.executable, "-m", "tune_gems", *case.args], cwd=sandbox, env=env, capture_output=True, text=True, timeout=300)
    return Outcome(sandbox, before, snapshot(sandbox), res.returncode, res.stdout, res.stderr)


@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory):
    """A real checkpoint of the tiny config after one epoch (for the checkpoint cases)."""
    from tune_gems.config.load import load_config
    from tune_gems.trainer.trainer import Trainer

    trainer = Trainer(load_config(None, TRAIN_TINY), log=None)
    trainer.run_epoch()
    path = tmp_path_factory.mktemp("ckpt") / "checkpoint.pt"
    trainer.save_checkpoint(path)
    return path


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory, good_checkpoint):
    """Every case through `tune_gems.commands.cli.main` in a child process of its own, forked from a
    server that imported torch, Ray Tune, pandas and Optuna once: what a fresh process would do
    (test_a_fresh_process_answers_the_same checks that), without paying ~2.5 s of imports 50
    times."""
    from cluster_fixtures import cli_in_child, forked_cli_pool

    root = tmp_path_factory.mktemp("bad_input")
    io = root / "_io"
    io.mkdir()
    os.environ["TG_GOOD_CHECKPOINT"] = str(good_checkpoint)  # read by setups, in this process
    try:
        befores = {c.id: _prepare(c, root / c.id) for c in CASES}
    finally:
        os.environ.pop("TG_GOOD_CHECKPOINT", None)
    with forked_cli_pool(PARALLEL) as pool:
        futures = {
            c.id: pool.submit(cli_in_child, c.args, str(root / c.id), _env(root / c.id), str(io / f"{c.id}.out"), str(io / f"{c.id}.err"))
            for c in CASES
        }
        codes = {k: f.result(timeout=300) for k, f in futures.items()}
    return {
        c.id: Outcome(root / c.id, befores[c.id], snapshot(root / c.id), codes[c.id],
                      (io / f"{c.id}.out").read_text(), (io / f"{c.id}.err").read_text())
        for c in CASES
    }


def test_case_ids_are_unique():
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case, outcomes):
    out = outcomes[case.id]
    assert out.returncode == 2, f"exit {out.returncode}\nstdout: {out.stdout[-2000:]}\nstderr: {out.stderr[-3000:]}"
    assert out.stderr.startswith("tune-gems: error: ") and out.stderr.count("\n") == 1, out.stderr[-3000:]
    line = out.stderr.strip()
    for fragment in case.fragments:
        assert fragment in line, f"{fragment!r} not in: {line}"
    assert out.stdout == "", out.stdout[-2000:]
    added = sorted(set(out.after) - set(out.before))
    removed = sorted(set(out.before) - set(out.after))
    changed = sorted(k for k in set(out.before) & set(out.after) if out.before[k] != out.after[k])
    assert not (added or removed or changed), f"added {added}, removed {removed}, changed {changed}"
    for marker in case.markers:
        assert not (out.sandbox / marker).exists(), f"the payload ran: {marker} exists"


FRESH = ("train-unknown-key-override", "sweep-malformed-yaml", "analyze-missing-folder", "train-python-tag")


@pytest.mark.slow
@pytest.mark.parametrize("case_id", FRESH)
def test_a_fresh_process_answers_the_same(case_id, outcomes, tmp_path):
    """A new `python -m tune_gems` process (import-time warnings and all) gives the same exit
    status and the same one line as the forked run of the matrix, and writes nothing."""
    case = next(c for c in CASES if c.id == case_id)
    fresh, forked = run_fresh(case, tmp_path / case.id), outcomes[case.id]
    assert (fresh.returncode, fresh.stdout) == (forked.returncode, forked.stdout) == (2, "")
    assert fresh.stderr.replace(str(fresh.sandbox), "<sandbox>") == forked.stderr.replace(str(forked.sandbox), "<sandbox>")
    assert fresh.after == fresh.before


# -- safe by default ---------------------------------------------------------------------------


def test_yaml_tags_that_run_code_are_refused_not_executed(tmp_path):
    from tune_gems.config.yaml_io import parse_override, read_yaml
    from tune_gems.contracts.errors import ConfigError
    from tune_gems.sweep.spec_load import load_spec

    marker = tmp_path / "PWNED"
    payload = f'!!python/object/apply:os.system ["touch {marker}"]'
    for text in (f"seed: {payload}\n", f"config:\n  seed: {payload}\n", f"{payload}\n"):
        f = tmp_path / "c.yaml"
        f.write_text(text)
        with pytest.raises(ConfigError, match="malformed YAML"):
            read_yaml(f)
        with pytest.raises(ConfigError, match="malformed YAML"):
            load_spec(f)
    key, value = parse_override(f"data.path={payload}")  # an override value stays a plain string
    assert key == "data.path" and isinstance(value, str)
    assert not marker.exists()


def test_a_checkpoint_carrying_a_malicious_pickle_is_refused(tmp_path):
    from tune_gems.contracts.errors import CheckpointError
    from tune_gems.trainer import checkpoint

    path, marker = tmp_path / "checkpoint.pt", tmp_path / "PWNED"
    write_malicious_checkpoint(path, marker)
    with pytest.raises(CheckpointError, match="checkpoint.pt"):
        checkpoint.load(path)
    assert not marker.exists()
    # the payload is live: a plain (weights_only=False) torch.load does run it
    probe = f"import torch; torch.load({str(path)!r}, weights_only=False)"
    subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=120)
    assert marker.exists()


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
            yield node, f"{node.func.value.id}.{node.func.attr}"


def test_the_source_only_loads_yaml_safely_and_checkpoints_weights_only():
    """A guard on every module of the package (and the analysis scripts): no unsafe YAML loader,
    no torch.load without weights_only=True, no pickle loading."""
    unsafe_yaml = {"yaml.load", "yaml.load_all", "yaml.unsafe_load", "yaml.unsafe_load_all", "yaml.full_load", "yaml.full_load_all"}
    pickles = {"pickle.load", "pickle.loads", "cloudpickle.load", "cloudpickle.loads", "dill.load", "dill.loads"}
    files = [*(REPO / "tune_gems").rglob("*.py"), *(REPO / "analysis").rglob("*.py")]
    assert files
    problems = []
    for f in files:
        tree = ast.parse(f.read_text(), str(f))
        for node, name in _calls(tree):
            where = f"{f.relative_to(REPO)}:{node.lineno}"
            if name in unsafe_yaml or name in pickles:
                problems.append(f"{where}: {name}")
            if name == "torch.load":
                kw = {k.arg: k.value for k in node.keywords}
                if not (isinstance(kw.get("weights_only"), ast.Constant) and kw["weights_only"].value is True):
                    problems.append(f"{where}: torch.load without weights_only=True")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "yaml" and node.attr in (
                "Loader", "UnsafeLoader", "FullLoader"
            ):
                problems.append(f"{f.relative_to(REPO)}:{node.lineno}: yaml.{node.attr}")
    assert not problems, problems
