"""tune_gems.contracts.outputs: the output-folder rules every writing command relies on (in-process,
fast): markers, inputs and results never replaced, writability, the one-writer lock, names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tune_gems.contracts import output_lock, outputs, paths
from tune_gems.contracts.errors import BadNameError, OutputError, OutputExistsError, OutputInUseError

ROOT = os.geteuid() == 0


def _sweep_results(d: Path) -> Path:
    d.mkdir(parents=True)
    (d / "spec.yaml").write_text("num_samples: 1\n")
    (d / "trials.parquet").write_bytes(b"PAR1")
    return d


def _train_results(d: Path) -> Path:
    d.mkdir(parents=True)
    (d / "config.yaml").write_text("seed: 0\n")
    (d / "members.csv").write_text("epoch\n1\n")
    return d


@pytest.mark.parametrize("name", ["", ".", "..", "../escaped", "a/b", "a\\b", "/abs", ".hidden", "-rf", "a..b", "x" * 101,
                                  "sp ace", "t\tab", "nul\x00", "é", "CON", "nul.txt", "a:b", "*", "~"])
def test_bad_names_are_refused(name, tmp_path):
    with pytest.raises(BadNameError) as e:
        paths.check_name(name, "--name", tmp_path)
    assert str(e.value).startswith("--name: ") and "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["exp", "smoke-2026.11.30_a", "A1", "x" * 100])
def test_good_names_pass(name, tmp_path):
    assert paths.check_name(name, "--name", tmp_path) == name


def test_a_symlinked_name_leaving_its_root_is_refused(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "link").symlink_to(tmp_path)
    with pytest.raises(BadNameError, match="outside"):
        paths.check_name("link", "--name", tmp_path / "root")


def test_marker_round_trip_and_foreign_marker(tmp_path):
    outputs.write_marker(tmp_path, "analyze")
    assert outputs.marker_kind(tmp_path) == "analyze"
    (tmp_path / outputs.MARKER_FILE).write_text(json.dumps({"tool": "other", "kind": "analyze"}))
    assert outputs.marker_kind(tmp_path) is None


def test_out_equal_to_inside_or_containing_an_input_is_refused(tmp_path):
    exp = _sweep_results(tmp_path / "exps" / "e1")
    for out, word in ((exp, "is"), (tmp_path / "exps", "contains"), (tmp_path, "contains")):
        with pytest.raises(OutputError, match=word):
            outputs.check_output_folder(out, kind="analyze", inputs=[exp], overwrite=True)
    with pytest.raises(OutputError, match="lies inside"):
        outputs.check_output_folder(exp / "sub", kind="analyze", inputs=[exp], overwrite=True)
    ok = outputs.check_output_folder(exp / "analysis", kind="analyze", inputs=[exp], allow_inside=[exp])
    assert ok == (exp / "analysis").resolve()


def test_out_holding_or_above_other_results_is_refused_even_with_overwrite(tmp_path):
    _sweep_results(tmp_path / "many" / "e1")
    _train_results(tmp_path / "many" / "run")
    outputs.write_marker(tmp_path / "many", "analyze")  # a forged marker does not make results replaceable
    with pytest.raises(OutputError, match="results"):
        outputs.check_output_folder(tmp_path / "many", kind="analyze", overwrite=True)
    with pytest.raises(OutputError, match="holds sweep results"):
        outputs.check_output_folder(tmp_path / "many" / "e1" / "x", kind="train")


def test_overwrite_needs_the_marker_of_the_same_kind(tmp_path):
    user = tmp_path / "mine"
    user.mkdir()
    (user / "thesis.tex").write_text("precious")
    with pytest.raises(OutputExistsError):
        outputs.check_output_folder(user, kind="analyze")
    with pytest.raises(OutputError, match="not written by tune-gems analyze"):
        outputs.check_output_folder(user, kind="analyze", overwrite=True)
    outputs.write_marker(user, "train")
    with pytest.raises(OutputError, match="holds train results"):
        outputs.check_output_folder(user, kind="analyze", overwrite=True)
    outputs.write_marker(user, "analyze")  # a marker alone does not make the user's file the tool's
    with pytest.raises(OutputError, match="thesis.tex was not written by tune-gems analyze"):
        outputs.check_output_folder(user, kind="analyze", overwrite=True)
    outputs.write_marker(user, "analyze", files=["thesis.tex"])
    assert outputs.check_output_folder(user, kind="analyze", overwrite=True) == user.resolve()
    assert (user / "thesis.tex").read_text() == "precious"


def test_publish_replaces_only_a_marked_folder(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep").write_text("x")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    outputs.write_marker(tmp, "analyze")
    with pytest.raises(OutputError):
        outputs.publish_folder(tmp, out, kind="analyze", overwrite=True)
    assert (out / "keep").read_text() == "x"
    outputs.write_marker(out, "analyze")
    with pytest.raises(OutputError):  # marked, but `keep` is not listed as written by it
        outputs.publish_folder(tmp, out, kind="analyze", overwrite=True)
    outputs.write_marker(out, "analyze", files=["keep"])
    outputs.publish_folder(tmp, out, kind="analyze", overwrite=True)
    assert not (out / "keep").exists() and outputs.marker_kind(out) == "analyze" and not tmp.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_overwrite_refuses_an_unlisted_file_at_any_depth_and_deletes_only_listed_ones(tmp_path):
    out = tmp_path / "out"
    (out / "plots").mkdir(parents=True)
    (out / "report.md").write_text("old")
    (out / "plots" / "a.png").write_bytes(b"png")
    outputs.write_marker(out, "analyze", files=outputs.written_files(out))
    deep = out / "plots" / "x" / "y" / "run"
    deep.mkdir(parents=True)
    (deep / "config.yaml").write_text("seed: 0\n")  # a train run kept three levels down
    with pytest.raises(OutputError, match="config.yaml was not written"):
        outputs.check_output_folder(out, kind="analyze", overwrite=True)
    (deep / "config.yaml").unlink()
    assert outputs.check_output_folder(out, kind="analyze", overwrite=True) == out.resolve()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp / "report.md").write_text("new")
    outputs.write_marker(tmp, "analyze", files=["report.md"])
    outputs.publish_folder(tmp, out, kind="analyze", overwrite=True)
    assert (out / "report.md").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_symlinked_out_or_a_symlink_inside_it_is_refused(tmp_path):
    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    outputs.write_marker(user, "analyze", files=["notes.txt"])  # even a folder that looks like ours
    (tmp_path / "analysis").symlink_to(user)
    with pytest.raises(OutputError, match="is a symlink"):
        outputs.check_output_folder(tmp_path / "analysis", kind="analyze", overwrite=True)
    run = tmp_path / "run"
    run.mkdir()
    (run / ".history.csv.tmp").symlink_to(user / "notes.txt")
    with pytest.raises(OutputError, match="history.csv.tmp is a symlink"):
        outputs.check_output_folder(run, kind="train", resume=True)
    assert (user / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("kind", ["symlink", "folder", "fifo"])
def test_a_lock_path_that_is_not_a_regular_file_is_refused_in_one_line(kind, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    lock = tmp_path / output_lock.LOCK_FILE
    {"symlink": lambda: lock.symlink_to(victim), "folder": lock.mkdir, "fifo": lambda: os.mkfifo(lock)}[kind]()
    for attempt in (output_lock.OutputLock(tmp_path).acquire, output_lock.OutputLock(tmp_path).check_free):
        with pytest.raises(OutputError) as e:
            attempt()
        assert "not a regular lock file" in str(e.value) and "\n" not in str(e.value)
    assert victim.read_text() == "mine"


def test_writes_never_follow_a_planted_symlink(tmp_path):
    from tune_gems.contracts.safe_files import write_atomic

    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (tmp_path / ".out.txt.tmp").symlink_to(victim)
    (tmp_path / "link.txt").symlink_to(victim)
    write_atomic(tmp_path / "out.txt", "tool")
    write_atomic(tmp_path / "link.txt", "tool")  # replaces the link itself
    outputs.write_marker(tmp_path, "train")
    assert victim.read_text() == "mine" and (tmp_path / "out.txt").read_text() == "tool"
    assert not (tmp_path / "link.txt").is_symlink()


def test_overlong_path_components_and_paths_are_refused(tmp_path):
    with pytest.raises(OutputError, match="at most 255"):
        outputs.check_output_folder(tmp_path / ("x" * 256), kind="train")
    with pytest.raises(OutputError, match="at most 4095"):
        outputs.check_output_folder(tmp_path.joinpath(*["y" * 200] * 21), kind="train")


@pytest.mark.parametrize("case", ["file", "under_file", "proc", "sys"])
def test_unwritable_places_are_refused(case, tmp_path):
    (tmp_path / "f").write_text("x")
    target = {"file": tmp_path / "f", "under_file": tmp_path / "f" / "sub", "proc": Path("/proc/tune-gems-out"),
              "sys": Path("/sys/kernel/tg"), "dangling": tmp_path / "dangling" / "x"}[case]
    with pytest.raises(OutputError) as e:
        outputs.check_output_folder(target, kind="train", field="--out")
    assert str(e.value).startswith("--out: ")


@pytest.mark.skipif(ROOT, reason="root ignores permission bits")
@pytest.mark.parametrize("mode,word", [(0o555, "read-only"), (0o333, "cannot be listed")])
def test_read_only_and_unlistable_folders_are_refused(mode, word, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    d.chmod(mode)
    try:
        with pytest.raises(OutputError, match=word):
            outputs.check_output_folder(d / "out", kind="train")
    finally:
        d.chmod(0o755)


def test_check_writes_nothing(tmp_path):
    before = sorted(p.name for p in tmp_path.rglob("*"))
    outputs.check_output_folder(tmp_path / "a" / "b", kind="train")
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_lock_refuses_a_second_writer_and_survives_a_dead_one(tmp_path):
    with output_lock.OutputLock(tmp_path):
        with pytest.raises(OutputInUseError, match=f"pid {os.getpid()}"):
            output_lock.OutputLock(tmp_path).acquire()
    # a holder killed without releasing: the kernel drops its flock, the file stays
    code = ("import sys, os; from tune_gems.contracts.outputs import OutputLock; lock = OutputLock(sys.argv[1]).acquire(); "
            "print('held', flush=True); os.kill(os.getpid(), 9)")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert proc.stdout.strip() == "held" and proc.returncode == -9
    assert (tmp_path / output_lock.LOCK_FILE).is_file()
    with output_lock.OutputLock(tmp_path):
        pass


def test_lock_held_by_another_live_process_is_refused(tmp_path):
    code = ("import sys; from tune_gems.contracts.outputs import OutputLock; lock = OutputLock(sys.argv[1]).acquire(); "
            "print('held', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(OutputInUseError, match=f"pid {proc.pid}"):
            output_lock.OutputLock(tmp_path, field="--out").acquire()
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def test_a_folder_holding_only_a_users_spec_is_not_an_experiment(tmp_path):
    (tmp_path / "spec.yaml").write_text("num_samples: 1\n")
    (tmp_path / "config.yaml").write_text("seed: 0\n")
    assert outputs.results_kind(tmp_path) is None
    assert outputs.check_output_folder(tmp_path / "experiments" / "x", kind="sweep") == (tmp_path / "experiments" / "x").resolve()


def _escape(route: str, out: Path, victim: Path) -> str:
    """Plant one escape route in the analysis folder `out`; returns the path its marker lists."""
    if route == "absolute":
        return str(victim)
    if route == "dotdot":
        return "../victim.txt"
    if route == "symlink_file_out":
        (out / "link.csv").symlink_to(victim)
        return "link.csv"
    if route == "symlink_folder_out":
        (out / "plots").symlink_to(victim.parent)
        return "plots/victim.txt"
    if route == "symlink_loop":
        (out / "loop").symlink_to(out / "loop")
        return "loop/x.png"
    if route == "not_a_path":
        return 7  # type: ignore[return-value]
    raise AssertionError(route)


ESCAPES = ["absolute", "dotdot", "symlink_file_out", "symlink_folder_out", "symlink_loop", "not_a_path"]


@pytest.mark.parametrize("route", ESCAPES)
def test_a_listed_path_that_leaves_the_folder_is_refused_naming_the_marker_and_nothing_is_deleted(route, tmp_path):
    """Issue 39 item 1: `folder / rel` with an absolute `rel` is `rel` itself, so a marker listing
    another tree's file made `--overwrite` delete it. Every listed path must resolve inside its
    folder: the up-front check, the publish's own check and the deletion all refuse it."""
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's thesis")
    out = tmp_path / "ana"
    out.mkdir()
    (out / "report.md").write_text("old")
    listed = _escape(route, out, victim)
    outputs.write_marker(out, "analyze", files=["report.md", listed])
    with pytest.raises(OutputError) as e:
        outputs.check_output_folder(out, kind="analyze", overwrite=True)
    line = str(e.value)
    assert outputs.MARKER_FILE in line and "nothing was deleted" in line and "\n" not in line, line
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    outputs.write_marker(tmp, "analyze", files=[])
    with pytest.raises(OutputError, match=outputs.MARKER_FILE):
        outputs.publish_folder(tmp, out, kind="analyze", overwrite=True)
    outputs._remove_listed(out)  # the deletion itself, given such a list, deletes nothing at all
    assert victim.read_text() == "the user's thesis" and (out / "report.md").read_text() == "old"
    assert outputs.marker_kind(out) == "analyze"


def test_a_listed_symlink_inside_the_folder_is_refused_too(tmp_path):
    out = tmp_path / "ana"
    out.mkdir()
    (out / "a.csv").write_text("x")
    (out / "b.csv").symlink_to(out / "a.csv")
    outputs.write_marker(out, "analyze", files=["a.csv", "b.csv"])
    with pytest.raises(OutputError, match="passes through a symlink"):
        outputs.listed_files(out)
    assert outputs.listed_files(tmp_path / "absent") == []  # no marker: nothing listed


def test_a_marker_of_an_unknown_format_version_is_no_marker(tmp_path):
    """Issue 39 item 5: a marker claiming version 999 (a newer tune-gems, or an edit) authorises
    nothing: read as absent, with the reason a command relying on it names."""
    for version in (999, "1", True, None, 0):
        body = {"tool": "tune-gems", "kind": "train", "version": version}
        (tmp_path / outputs.MARKER_FILE).write_text(json.dumps(body))
        marker, why = outputs.marker_state(tmp_path)
        assert marker is None and "format version" in why, (version, why)
    outputs.write_marker(tmp_path, "train")
    assert outputs.marker_state(tmp_path)[0]["version"] == outputs.MARKER_VERSION


def test_a_training_folders_marker_records_each_cpu_environment_it_ran_under(tmp_path, monkeypatch):
    """Issue 39 item 3: the values of the CPU variables a run used are in its marker; a resume
    under other values adds an entry, the same values add none; an analysis records none."""
    from tune_gems.contracts.cpu_environment import CPU_ENVS

    for name in CPU_ENVS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    outputs.write_marker(tmp_path, "train")
    first = {name: None for name in CPU_ENVS} | {"OMP_NUM_THREADS": "1"}
    assert outputs.read_marker(tmp_path)[outputs.CPU_KEY] == [first]
    outputs.update_marker(tmp_path, checksums={})
    assert outputs.read_marker(tmp_path)[outputs.CPU_KEY] == [first]
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    outputs.update_marker(tmp_path, checksums={})
    assert outputs.read_marker(tmp_path)[outputs.CPU_KEY] == [first, first | {"OMP_NUM_THREADS": "2"}]
    ana = tmp_path / "ana"
    ana.mkdir()
    outputs.write_marker(ana, "analyze", files=[])
    assert outputs.CPU_KEY not in outputs.read_marker(ana)


def test_a_symlink_loop_given_as_an_input_or_a_storage_is_one_line(tmp_path):
    loop = tmp_path / "exp"
    loop.symlink_to(loop)
    with pytest.raises(OutputError, match="symlink loop"):
        paths.check_input_path(loop, "EXPERIMENT_DIR", OutputError)
    with pytest.raises(OutputError, match="symlink loop"):
        paths.check_name("x", "--name", loop)
    assert paths.resolve_problem(tmp_path) is None
