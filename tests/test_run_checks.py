"""Checking a run before starting it, through the real CLI: `--version`, `tune-gems config`,
"did you mean" for a mistyped key, the data trap (`data.path` without `data.source=file`),
`--dry-run` for train and sweep (nothing written, Ray not started), and the data/split lines a
run prints at its start. The commands run through the CLI's `main` in this process (what they
print and return); the plug-in listing and the closed pipe need a process of their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweep_fixtures import SMOKE, TINY_SWEEP, cli, cli_in_process
from test_bad_input import TRAIN_TINY
from tune_gems.commands.cli import SPEC_KEYS_HEADING

ONE_THREAD = {"OMP_NUM_THREADS": "1", "RAY_ADDRESS": "127.0.0.1:9"}
"""One torch thread (a shared 2-core machine); a closed port as RAY_ADDRESS: a dry run that
reached Ray would fail loudly."""


def _files(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def _one_error_line(res, *fragments: str) -> None:
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tune-gems: error: "), res.stderr[-2000:]
    for f in fragments:
        assert f in lines[0], lines[0]


def test_version():
    from importlib.metadata import version

    res = cli_in_process("--version")
    assert res.returncode == 0 and res.stdout.startswith("tune-gems 0.") and "python" in res.stdout
    for name, dist in (("torch", "torch"), ("Ray", "ray"), ("Optuna", "optuna")):  # issue 31: what a result depends on
        assert f"{name} {version(dist)}" in res.stdout
    assert "git commit " in res.stdout  # the tests run from a checkout


def _tables(stdout: str) -> tuple[dict[str, str], dict[str, str]]:
    """`tune-gems config`'s two tables (config keys, then sweep spec keys) as {key: line}."""
    config_part, _, spec_part = stdout.partition(SPEC_KEYS_HEADING)

    def rows(text: str) -> dict[str, str]:
        lines = [line for line in text.strip().splitlines() if line]
        return {line.split()[0]: line for line in lines[1:]} if lines else {}

    return rows(config_part), rows(spec_part)


def test_config_lists_keys_with_type_default_and_description():
    res = cli_in_process("config")
    assert res.returncode == 0, res.stderr
    rows, spec = _tables(res.stdout)
    assert rows["trainer.population"].split()[1:3] == ["int", "4"] and "lockstep" in rows["trainer.population"]
    assert rows["data.source"].split()[1:3] == ["synthetic|file", "synthetic"]
    assert {"gems.g6.mode", "gems.g12.weight", "arms.factors", "model.spectral_norm"} <= set(rows)
    only = cli_in_process("config", "gems.g6")
    assert only.returncode == 0 and [line.split()[0] for line in only.stdout.splitlines()[1:]] == ["gems.g6", "gems.g6.mode", "gems.g6.weight"]
    _one_error_line(cli_in_process("config", "trainer.nope"), "trainer.nope")


def test_config_lists_every_sweep_spec_key():
    """Every leaf of the SweepSpec model, under its heading; a mapping's keys as a placeholder."""
    from tune_gems.config.keys import key_rows
    from tune_gems.sweep.spec import SweepSpec

    res = cli_in_process("config")
    assert res.returncode == 0, res.stderr
    _config, spec = _tables(res.stdout)
    assert set(spec) == {r.key for r in key_rows(SweepSpec)}
    assert {"num_samples", "objective.metric", "search.gems.<gem>.modes", "search.params.<key>.type", "resources.gpu",
            "seeds", "design", "tracking.wandb", "blocks.seed_blocks", "scheduler.type"} <= set(spec)
    assert spec["num_samples"].split()[1:3] == ["int", "4"]
    assert spec["search.gems.<gem>.modes"].split()[2] == "['measure',"
    assert spec["blocks.seed_blocks"].split()[2] == "required"
    tracking = cli_in_process("config", "tracking")  # a spec-only prefix: the spec table alone
    assert tracking.returncode == 0, tracking.stderr
    assert tracking.stdout.startswith(SPEC_KEYS_HEADING)
    assert sorted(_tables(tracking.stdout)[1]) == ["tracking.mlflow", "tracking.wandb"]
    _one_error_line(cli_in_process("config", "tracking.nope"), "tracking.nope", "no config or sweep spec key")


def test_every_listed_key_has_a_description():
    """No row of either table (a plug-in's gems included) has an empty description column."""
    from sweep_fixtures import REPO

    res = cli("config", "--plugin", "q_magnitude", env={"PYTHONPATH": str(REPO / "examples" / "gems")})
    assert res.returncode == 0, res.stderr
    assert "gems.qmag.weight" in res.stdout
    rows = 0
    for table in res.stdout.split("\n\n"):
        lines = [line for line in table.splitlines() if line and line != SPEC_KEYS_HEADING]
        start = lines[0].index("description")  # the header row: columns are padded to it
        for line in lines[1:]:
            assert line[start:].strip(), f"no description: {line.split()[0]}"
            rows += 1
    assert rows > 100


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["train", "trainer.epoch=3"], ["trainer.epoch: unknown key (did you mean trainer.epochs?)"]),
        (["train", "gems.g66.mode=wire"], ["gems.g66: unknown key (did you mean gems.g6?)"]),
        (["sweep", str(SMOKE), "num_sample=3"], ["num_sample: unknown key (did you mean num_samples?)"]),
        # a spec's config section is named with its `config.` prefix, the suggestion too
        (["sweep", str(SMOKE), "config.trainer.epoch=3"], ["config.trainer.epoch: unknown key (did you mean config.trainer.epochs?)"]),
        (["sweep", str(SMOKE), "config.gems.g6.mod=wire"], ["config.gems.g6.mod: unknown key (did you mean config.gems.g6.mode?)"]),
        # spec keys below a mapping (a gem's name, a searched config key)
        (["sweep", str(SMOKE), "search.gems.g6.mode=[wire]"], ["search.gems.g6.mode: unknown key (did you mean search.gems.g6.modes?)"]),
        (["sweep", str(SMOKE), "search.params={trainer.lr: {typ: float, low: 0.001, high: 0.01}}"],
         ["search.params.trainer.lr.typ: unknown key (did you mean search.params.trainer.lr.type?)"]),
        (["sweep", str(SMOKE), "resources.cpus=1"], ["resources.cpus: unknown key (did you mean resources.cpu?)"]),
        (["train", "trainer.zzz=3"], ["trainer.zzz: unknown key"]),
    ],
)
def test_unknown_keys_suggest_the_closest_known_one(tmp_path, args, fragments):
    res = cli_in_process(*args, "--debug") if args[0] == "train" else cli_in_process(*args)
    _one_error_line(res, *fragments)
    if "zzz" in args[-1]:
        assert "did you mean" not in res.stderr  # nothing close: no guess


def test_the_data_trap_is_refused_in_one_line(tmp_path):
    (tmp_path / "prices.csv").write_text("date,close\n2020-01-01,1\n")
    res = cli_in_process("train", *TRAIN_TINY, f"data.path={tmp_path / 'prices.csv'}", "--out", str(tmp_path / "run"))
    _one_error_line(res, "data.path is set", "data.source is synthetic", "data.source=file")
    assert _files(tmp_path) == ["prices.csv"]


@pytest.mark.slow
def test_train_dry_run_prints_the_plan_and_writes_nothing(tmp_path):
    res = cli_in_process("train", "--dry-run", *TRAIN_TINY, "arms.factors={gems.g6.mode: [measure, wire]}", "--out",
                         str(tmp_path / "run"), env=ONE_THREAD)
    assert res.returncode == 0, res.stderr[-2000:]
    out = res.stdout
    resolved = _resolved_file(out, "config (resolved): ")  # the ~150 lines of config in a file, not before the plan
    assert "trainer:" in resolved and "  population: 2" in resolved
    assert "members: 2 arm(s) x 2 seed(s) = 4 (gems.g6.mode=measure, gems.g6.mode=wire)" in out
    assert "memory: about" in out and "for 4 member(s)" in out
    assert "time: about" in out and "ms per iteration" in out and "split: train " in out
    assert f"out: {tmp_path / 'run'} (a new train run)" in out
    assert out.rstrip().endswith("dry run: nothing else was written") and len(out.splitlines()) < 20
    assert _files(tmp_path) == []


def _resolved_file(out: str, title: str) -> str:
    """The text of the file a dry run names for its resolved config (a temporary folder of its
    own, removed here)."""
    import shutil

    from tune_gems.trainer.dry_run import RESOLVED_PREFIX

    path = Path(next(line for line in out.splitlines() if line.startswith(title)).removeprefix(title).split(" (")[0])
    assert path.parent.name.startswith(RESOLVED_PREFIX), path
    text = path.read_text()
    shutil.rmtree(path.parent)
    return text


def _tree(d: Path) -> dict[str, tuple[int, int] | None]:
    """Every path below `d`, a file with its (mtime, size) (a folder's mtime moves with the
    writability probe, a file created and removed at once)."""
    return {str(p.relative_to(d)): (p.stat().st_mtime_ns, p.stat().st_size) if p.is_file() else None for p in d.rglob("*")}


@pytest.mark.slow
def test_train_dry_run_checks_the_output_folder_as_the_real_command(tmp_path):
    """--out in a pseudo-filesystem, on a file, or on a finished train run: the dry run refuses it
    with the real command's own line (and exit 2), writing nothing; `--resume` there is planned."""
    run = tmp_path / "run"
    done = cli_in_process("train", *TRAIN_TINY, "--out", str(run), env=ONE_THREAD)
    assert done.returncode == 0, done.stderr[-2000:]
    (tmp_path / "a-file").write_text("x")
    before = _tree(tmp_path)
    for out in ("/proc/run", str(tmp_path / "a-file"), str(run)):
        real = cli_in_process("train", *TRAIN_TINY, "--out", out, env=ONE_THREAD)
        dry = cli_in_process("train", "--dry-run", *TRAIN_TINY, "--out", out, env=ONE_THREAD)
        _one_error_line(dry, "--out: ")
        assert dry.stderr == real.stderr and real.returncode == 2, (dry.stderr, real.stderr)
    assert "already holds a train run; continue it with --resume" in dry.stderr
    resumed = cli_in_process("train", "--dry-run", "--out", str(run), "--resume", env=ONE_THREAD)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"out: {run} (continues the train run there from its checkpoint)" in resumed.stdout
    assert _tree(tmp_path) == before  # nothing written, nothing touched


@pytest.mark.slow
def test_sweep_dry_run_prints_the_plan_without_ray_and_writes_nothing(tmp_path):
    res = cli_in_process("sweep", str(SMOKE), "--dry-run", "--storage", str(tmp_path / "exp"), "--name", "plan", *TINY_SWEEP,
                         env=ONE_THREAD)
    assert res.returncode == 0, res.stderr[-2000:]
    out = res.stdout
    assert "num_samples: 4" in _resolved_file(out, "spec (resolved): ") and "trials: 4, design wire_search" in out
    # the widest trial of smoke.yaml's search: every searched gem wired -> proposal, control, one without-<gem> each
    assert "widest trial: 5 arm(s) x 2 seed(s) = 10" in out, out[-2000:]
    assert out.count("split: train ") == 1 and "tune-gems sweep: data: synthetic series, 900 prices" in out
    assert "sweep: about" in out and "trial(s) at a time" in out and out.rstrip().endswith("Ray was not started")
    assert _files(tmp_path) == [] and len(out.splitlines()) < 20


@pytest.mark.slow
def test_train_prints_the_data_source_matched_column_and_split(tmp_path):
    rows = "".join(f"2020-{1 + d // 28:02d}-{1 + d % 28:02d},{100 + d % 7 + d * 0.1:.2f},5\n" for d in range(300))
    (tmp_path / "p.csv").write_text("Date,Close,Volume\n" + rows)
    res = cli_in_process("train", *TRAIN_TINY, "data.source=file", f"data.path={tmp_path / 'p.csv'}",
                         "data.splits=[2020-08-01, 2020-10-01]", "--out", str(tmp_path / "run"), env=ONE_THREAD)
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"tune-gems train: data: {tmp_path / 'p.csv'}, price column 'Close' (asked 'close'), 300 rows" in res.stdout
    split = next(line for line in res.stdout.splitlines() if line.startswith("tune-gems train: split: "))
    assert "train 196 rows (2020-01-01..2020-07-28)" in split and "validation 56 rows (2020-08-01..2020-09-28)" in split
    assert "test 48 rows (2020-10-01..2020-11-20)" in split
    last = res.stdout.strip().splitlines()[-1]  # the run's standing against the baselines ends it
    assert last.startswith("tune-gems train: against the baselines (test_alpha_sharpe at the final epoch against flat (0)")
    assert "below flat" in last or "above flat" in last or "differ from flat" in last


def test_a_closed_pipe_is_not_reported_as_a_bug():
    """`tune-gems config | head -1`: the reader may close the pipe before the listing is written."""
    import subprocess
    import sys

    from sweep_fixtures import REPO

    proc = subprocess.Popen([sys.executable, "-m", "tune_gems", "config"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # long before the interpreter has started and printed
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and "internal error" not in err, err
