"""The hostile matrix, round four (issue 32): records that cannot lie, checks that fail closed,
inputs that cannot hang.

Every case runs like the matrix's forked families (tests/test_hostile_matrix.py `run_cases`):
the real `tune_gems.commands.cli.main` in a child forked from a server that imported the heavy
modules once, in a sandbox of its own, snapshotted before and after. Each must answer exit 2,
exactly one stderr line naming the culprit (printable: no raw control character), no stdout,
and leave the sandbox as it was; a case that hangs runs into the matrix's per-case timeout.
The cases that must run to the end (a confirmation killed and run again, a resumed searcher
against an uninterrupted one) are tests of their own below.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pandas as pd
import pytest
import yaml

from sweep_fixtures import REPO, SMOKE, TINY_SWEEP, cli_in_process
from test_bad_input import both, write
from test_hostile_matrix import Case, _experiment, _paired, _stored_sweep, misbehaved, run_cases
from test_hostile_round3 import (
    FILE_DATA, MARKER, PRICES, RESUME_SWEEP, SWEEP, TINY_TRAIN, _train_run, fifo, metric_plugin, plugin,
    stored_train, sweep_on_changed_data, symlink, train_run,
)
from tune_gems.contracts.errors import control_characters

pytestmark = pytest.mark.slow


# -- setups ------------------------------------------------------------------------------------


def _edit_marker(folder: Path, edit: Callable[[dict], dict | str]) -> None:
    body = edit(json.loads((folder / MARKER).read_text()))
    (folder / MARKER).write_text(body if isinstance(body, str) else json.dumps(body))


def drop(*keys: str) -> Callable[[dict], dict]:
    return lambda body: {k: v for k, v in body.items() if k not in keys}


def in_marker(rel: str, edit: Callable[[dict], dict | str]) -> Callable[[Path], None]:
    return lambda d: _edit_marker(d / rel, edit)


def remove(rel: str) -> Callable[[Path], None]:
    return lambda d: (d / rel).unlink()


def searched_spec(extra: list[str] | None = None) -> Callable[[Path], None]:
    return write("spec.yaml", SMOKE.read_text() + "\n".join(extra or []) + ("\n" if extra else ""))


def confirmable(rel: str = "exp", gain: float = 0.1, forged: float | None = None) -> Callable[[Path], None]:
    """A search as `confirm` reads it: the paired scenario's tables with a `verdict_gain_g12` per
    trial wiring g12, the tiny smoke spec (design wire_search) and the marker recording its
    checksum and the tables'; `forged`: the first wiring trial's gain edited afterwards."""

    def go(d: Path) -> None:
        from sweep_fixtures import store_spec
        from tune_gems.sweep.spec_load import load_spec

        exp = _paired(d / rel)
        trials = pd.read_parquet(exp / "trials.parquet")
        wired = trials["gems.g12.mode"] == "wire"
        trials["verdict_gain_g12"] = [gain if w else float("nan") for w in wired]
        trials.to_parquet(exp / "trials.parquet", index=False)
        store_spec(exp, yaml.safe_dump(load_spec(SMOKE, TINY_SWEEP).model_dump(mode="json"), sort_keys=False).encode())
        if forged is not None:  # after the sweep recorded its tables: an edit
            trials.loc[wired.idxmax(), "verdict_gain_g12"] = forged
            trials.to_parquet(exp / "trials.parquet", index=False)

    return go


def train_run_at(rel: str, change: Callable[[Path], None] = lambda run: None) -> Callable[[Path], None]:
    return lambda d: change(_train_run(d / rel))


def tensorboard_is_a_file(run: Path) -> None:
    shutil.rmtree(run / "tensorboard", ignore_errors=True)
    (run / "tensorboard").write_text("not a folder")


def data_replaced(by: str) -> Callable[[Path], None]:
    """After the setup recorded p.csv: p.csv replaced by a FIFO, or by a link to a device."""

    def go(d: Path) -> None:
        (d / "p.csv").unlink()
        if by == "fifo":
            os.mkfifo(d / "p.csv")
        else:
            (d / "p.csv").symlink_to(by)

    return go


def edit_file(rel: str, old: str, new: str) -> Callable[[Path], None]:
    def go(d: Path) -> None:
        text = (d / rel).read_text()
        assert old in text, (rel, old)
        (d / rel).write_text(text.replace(old, new))

    return go


HOLDERS: list[subprocess.Popen] = []
"""Processes holding a folder's lock while its case runs (ended by the module fixture)."""


def held(rel: str) -> Callable[[Path], None]:
    """Another live process holds `rel`'s one-writer lock (a run still training there)."""

    def go(d: Path) -> None:
        code = ("import sys; from tune_gems.contracts.output_lock import OutputLock; lock = OutputLock(sys.argv[1]).acquire(); "
                "print('held', flush=True); sys.stdin.read()")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        proc = subprocess.Popen([sys.executable, "-c", code, str(d / rel)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=env)
        HOLDERS.append(proc)
        assert proc.stdout.readline().strip() == "held"

    return go


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcdefgh", "bcdefghi"))
"""A "billion laughs": 10^9 values once its aliases are expanded, 300 bytes as text."""
FLOW_BOMB = "[&a0 [1,1,1,1,1,1,1,1,1,1], " + ", ".join(f"&a{i} [{','.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 8)) + "]"


def side_effect_plugin(metric: str) -> Callable[[Path], None]:
    """A plug-in that writes a file into the working directory at import, then is refused for
    its metric name: nothing of it may be left."""
    return plugin("shadow", "open('side_effect.txt', 'w').write('written at import')\n"
                  f"register(Gem(name='mine', metric={metric!r}, description='x', reference=MEAN))\n")


ESC = "\x1b"


# -- cases -------------------------------------------------------------------------------------


def cases() -> list[Case]:
    C = Case
    resume = ["train", "--out", "out", "--resume"]
    confirm = ["confirm", "exp"]
    c = [
        # item 1: every command that reads a recorded run verifies its record, fail-closed
        C("confirm-edited-stored-spec", confirm, ["spec.yaml", "edited"], both(confirmable(), edit_file("exp/spec.yaml", "num_samples: 4", "num_samples: 5"))),
        C("confirm-marker-missing", confirm, [MARKER, "missing"], both(confirmable(), remove(f"exp/{MARKER}"))),
        C("confirm-marker-garbage", confirm, [MARKER, "not valid JSON"], both(confirmable(), write(f"exp/{MARKER}", "{garbage"))),
        C("confirm-marker-without-checksums", confirm, [MARKER, "no checksum of spec.yaml"], both(confirmable(), in_marker("exp", drop("checksums")))),
        C("confirm-changed-data-file", ["confirm", "store/done"], ["data.path", "p.csv", "changed"], sweep_on_changed_data),
        C("train-resume-marker-deleted", resume, [MARKER, "missing", "another --out"], train_run(lambda run: (run / MARKER).unlink())),
        C("train-resume-marker-garbage", resume, [MARKER, "not valid JSON"], both(train_run(), write(f"out/{MARKER}", "garbage"))),
        C("train-resume-marker-without-checksums", resume, [MARKER, "no checksum of config.yaml"], both(train_run(), in_marker("out", drop("checksums")))),
        C("train-resume-marker-without-the-data-record", resume, [MARKER, "no checksum of the data file"],
          both(stored_train(*FILE_DATA), in_marker("out", drop("data")))),
        C("train-resume-marker-of-another-tool", resume, [MARKER, "not a tune-gems marker"],
          both(train_run(), in_marker("out", lambda b: {**b, "tool": "other"}))),
        C("sweep-resume-marker-missing", RESUME_SWEEP, [MARKER, "missing"], both(searched_spec(), _stored_sweep("store/done"), remove(f"store/done/{MARKER}"))),
        C("sweep-resume-marker-without-checksums", RESUME_SWEEP, [MARKER, "no checksum of spec.yaml"],
          both(searched_spec(), _stored_sweep("store/done"), in_marker("store/done", drop("checksums")))),
        C("analyze-edited-stored-spec", ["analyze", "exp"], ["spec.yaml", "edited"],
          both(_stored_sweep("exp"), edit_file("exp/spec.yaml", "num_samples: 4", "num_samples: 5"))),
        C("analyze-train-run-marker-missing", ["analyze", "out"], [MARKER, "missing"], train_run(lambda run: (run / MARKER).unlink())),
        C("compare-edited-train-config", ["compare", "a", "b"], ["b/config.yaml", "edited"],
          both(train_run_at("a"), train_run_at("b"), edit_file("b/config.yaml", "lr: 0.0005", "lr: 0.002"))),
        # item 2: keys the design sets per trial, and the whole grid before Ray
        C("sweep-searches-first-seed-index", [*SWEEP, "search.params={first_seed_index: {type: int, low: 0, high: 9}}"],
          ["first_seed_index", "cannot be searched"], searched_spec()),
        C("sweep-aa-replay-stream-in-the-base-config", [*SWEEP, "design=wire_search_aa", "config.trainer.replay_stream=1"],
          ["config.trainer.replay_stream", "wire_search_aa"], searched_spec()),
        C("sweep-aa-replay-stream-searched", [*SWEEP, "design=wire_search_aa", "search.params={trainer.replay_stream: {type: int, low: 0, high: 3}}"],
          ["search.params.trainer.replay_stream", "wire_search_aa"], searched_spec()),
        C("sweep-trial-seed-index-past-2-to-the-31", [*SWEEP, "config.first_seed_index=2147483647"], ["num_samples", "first_seed_index"], searched_spec()),
        C("sweep-block-seed-index-past-2-to-the-31", SWEEP, ["blocks.seed_blocks", "first_seed_index"],
          write("spec.yaml", "design: none\nobjective: {metric: val_sharpe_mean}\nblocks: {seed_blocks: 4}\n"
                             "config:\n  seed: 0\n  first_seed_index: 2147483646\n")),
        # item 3: what a check reads is a regular file, read without blocking, bounded
        C("confirm-record-is-a-fifo", confirm, ["confirmed.json", "FIFO"], both(confirmable(), fifo("exp/confirmed.json"))),
        C("confirm-record-links-to-dev-zero", confirm, ["confirmed.json", "symlink"], both(confirmable(), symlink("exp/confirmed.json", "/dev/zero"))),
        C("train-resume-data-file-is-a-fifo", resume, ["data.path", "p.csv", "FIFO"], both(stored_train(*FILE_DATA), data_replaced("fifo"))),
        C("train-resume-data-file-links-to-dev-zero", resume, ["data.path", "p.csv", "device"], both(stored_train(*FILE_DATA), data_replaced("/dev/zero"))),
        C("sweep-resume-data-file-is-a-fifo", RESUME_SWEEP, ["data.path", "p.csv", "FIFO"],
          both(searched_spec(), sweep_on_changed_data, data_replaced("fifo"))),
        C("sweep-spec-alias-bomb", ["sweep", "bomb.yaml", *TINY_SWEEP], ["bomb.yaml", "alias"], write("bomb.yaml", BOMB)),
        C("train-config-alias-bomb", ["train", "bomb.yaml"], ["bomb.yaml", "alias"], write("bomb.yaml", BOMB)),
        C("train-override-alias-bomb", ["train", f"arms.factors.trainer.lr={FLOW_BOMB}"], ["arms.factors.trainer.lr", "alias"]),
        C("sweep-spec-recursive-alias", ["sweep", "rec.yaml"], ["rec.yaml", "recursive alias"], write("rec.yaml", "config: &c {arms: {list: [*c]}}\n")),
        C("train-config-is-a-fifo", ["train", "c.yaml"], ["c.yaml", "FIFO"], fifo("c.yaml")),
        C("train-config-links-to-dev-zero", ["train", "c.yaml"], ["c.yaml", "device"], symlink("c.yaml", "/dev/zero")),
        C("train-config-name-too-long", ["train", "c" * 300 + ".yaml"], ["255"]),
        C("train-config-path-too-long", ["train", "/".join(["d" * 200] * 21) + "/c.yaml"], ["4095"]),
        C("train-data-path-too-long", [*TINY_TRAIN, "data.source=file", "data.path=" + "p" * 300 + ".csv", "--out", "out"], ["data.path", "255"]),
        C("compare-input-too-long", ["compare", "a" * 300, "b"], ["compare", "255"]),
        # item 4: a folder being written, TensorBoard's folder, control characters
        C("analyze-a-train-run-still-training", ["analyze", "out"], ["being written", "pid"], both(train_run(), held("out"))),
        C("train-resume-tensorboard-is-a-file", resume, ["tensorboard", "file"], train_run(tensorboard_is_a_file)),
        C("train-out-with-a-newline", [*TINY_TRAIN, "--out", "a\nb"], ["--out", "control character", "\\x0a"]),
        C("train-out-with-an-escape", [*TINY_TRAIN, "--out", f"a{ESC}[2Jb"], ["--out", "control character", "\\x1b"]),
        C("analyze-out-with-an-escape", ["analyze", "exp", "--out", f"r{ESC}[31m"], ["--out", "\\x1b"], _experiment()),
        C("train-arm-name-with-an-escape", [*TINY_TRAIN, 'arms.list=[{name: "a\\e[31m"}, {name: b}]', "--out", "out"],
          ["arms.list.0.name", "\\x1b"]),
        C("train-did-you-mean-echoes-no-escape", ["train", f"trainer.epoc{ESC}[2J=3"], ["unknown key", "\\x1b"]),
        C("config-plugin-lists-no-gem-train-refuses", ["config", "--plugin", "shadow"], ["plugins: shadow", "result column"], metric_plugin("val_sharpe")),
        C("train-edge-periods-with-file-data", [*TINY_TRAIN, *FILE_DATA, "data.synthetic.edge_periods=[[0, 0.5]]", "--out", "out"],
          ["data.synthetic.edge_periods", "file"], write("p.csv", PRICES)),
        C("compare-a-folder-with-itself", ["compare", "exp", "exp"], ["compare", "same folder"], _experiment()),
        C("confirm-gain-forged-to-inf", confirm, ["trials.parquet", "edited since tune-gems wrote it"], confirmable(forged=float("inf"))),
        # item 5: a plug-in's import side effects do not reach the user's folder
        *[C(f"plugin-writes-at-import-then-is-refused-{m}", [*TINY_TRAIN, "plugins=[shadow]", "--out", "out"], ["plugins: shadow", m],
            side_effect_plugin(m)) for m in ("val_alpha_sharpe_mean", "train_s", "val_sharpe", "seed", "arm", "trial_id", "objective")],
        C("sweep-plugin-writes-at-import-then-is-refused", [*SWEEP, "config.plugins=[shadow]"], ["plugins: shadow", "result column"],
          both(searched_spec(), side_effect_plugin("val_sharpe"))),
        C("plugin-exits-at-import", [*TINY_TRAIN, "plugins=[quitter]", "--out", "out"], ["plugins: quitter"],
          write("quitter.py", "open('side_effect.txt', 'w').write('x')\nimport os\nos._exit(3)\n")),
    ]
    for case in c:
        case.family = "round4"
    return c


CASES = cases()


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    try:
        yield run_cases(CASES, tmp_path_factory.mktemp("round4"))
    finally:
        for proc in HOLDERS:
            proc.stdin.close()
            proc.wait(timeout=30)


def test_case_ids_are_unique():
    assert len({c.id for c in CASES}) == len(CASES)


def test_every_round_four_case_is_one_printable_line_exit_2_and_changes_nothing(outcomes):
    def printable(out) -> None:
        assert not control_characters(out.stderr.rstrip("\n")), "a raw control character in the line"

    misbehaved(CASES, outcomes, printable)


# -- cases that run to the end -----------------------------------------------------------------


def _confirm(exp: Path, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "tune_gems", "confirm", str(exp)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _stop_once_training(proc: subprocess.Popen, exp: Path, sig: int) -> None:
    """Send `sig` the moment the confirmation's temporary folder exists (it trains then),
    polling for that state; the process is frozen while the state is confirmed."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if list(exp.glob(".confirmation.tmp-*")):
            os.killpg(proc.pid, signal.SIGSTOP)
            os.killpg(proc.pid, sig)
            os.killpg(proc.pid, signal.SIGCONT)
            proc.wait(timeout=120)
            return
        time.sleep(0.02)
    raise AssertionError("the confirmation never started training")


def test_a_stopped_or_killed_confirmation_leaves_nothing_that_cannot_be_cleared(tmp_path):
    """SIGTERM while it trains: the clean-up runs (no temporary folder, no "running" record),
    exit 143. SIGKILL while it trains: the temporary folder and the "running" record stay, but
    the next `confirm` finds the search's lock free, clears both and confirms."""
    confirmable()(tmp_path)
    exp = tmp_path / "exp"
    term = _confirm(exp, tmp_path)
    _stop_once_training(term, exp, signal.SIGTERM)
    assert term.returncode == 128 + signal.SIGTERM, term.communicate()
    assert not list(exp.glob(".confirmation.tmp-*")) and not (exp / "confirmed.json").exists()

    killed = _confirm(exp, tmp_path)
    _stop_once_training(killed, exp, signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    assert list(exp.glob(".confirmation.tmp-*")) and json.loads((exp / "confirmed.json").read_text())["status"] == "running"

    again = cli_in_process("confirm", str(exp), cwd=tmp_path)  # the next commands: in this process
    assert again.returncode == 0, again.stderr[-3000:]
    assert "was killed before it finished" in again.stdout and "cleared its record and 1 temporary folder(s)" in again.stdout
    assert not list(exp.glob(".confirmation.tmp-*")) and (exp / "confirmation" / "confirmation.csv").is_file()
    assert json.loads((exp / "confirmed.json").read_text())["status"] == "done"
    refused = cli_in_process("confirm", str(exp), cwd=tmp_path)
    assert refused.returncode == 2 and "confirmed already" in refused.stderr and refused.stderr.count("\n") == 1


def test_two_confirmations_at_once_resolve_to_one(tmp_path):
    """The second, started while the first trains, is refused in one line naming the first's pid.
    The first is frozen (SIGSTOP) from the moment it trains until the second has answered: on a
    fast machine the tiny confirmation would otherwise finish during the second's start-up."""
    confirmable()(tmp_path)
    exp = tmp_path / "exp"
    first = _confirm(exp, tmp_path)
    try:
        deadline = time.monotonic() + 180
        while not list(exp.glob(".confirmation.tmp-*")):
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.02)
        os.killpg(first.pid, signal.SIGSTOP)
        try:
            second = _confirm(exp, tmp_path)
            _, err = second.communicate(timeout=300)
        finally:
            os.killpg(first.pid, signal.SIGCONT)
        assert second.returncode == 2 and err.count("\n") == 1, err
        assert f"pid {first.pid}" in err or "is running" in err, err
    finally:
        _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-3000:]
