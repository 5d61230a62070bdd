"""The habits of the tools a user knows (issue 38 items 2, 5 and 7), outside the analysis: a
config key given to a sweep without its `config.` prefix gets that prefix suggested; Ray's,
Optuna's and Tune's start-up notices stay hidden unless `--verbose`; a search whose objectives all
tie says so while it runs and in its closing table; `--resume` says where each trial restarts; a
split beyond the data names the data's last date; a RAY_ADDRESS that Ray cannot read, or where
nothing answers, is one line in seconds (issue 39 item 4; the CLI cases are rows of
tests/test_hostile_matrix.py). The sweeps that show these through the real CLI are in
tests/test_hostile_sweep.py (Ctrl-C and --resume) and tests/test_sweep.py (the console)."""

from __future__ import annotations

import json
import logging
import math
import socket
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from sweep_fixtures import SMOKE
from tune_gems.contracts.errors import ConfigError, DataError


# -- a config key without its prefix ------------------------------------------------------------


@pytest.mark.parametrize(("override", "meant"), [
    ("trainer.epochs=3", "trainer.epochs: not a spec key (did you mean config.trainer.epochs?"),
    ("seed=3", "seed: not a spec key (did you mean config.seed?"),
    ("trainer.epoch=3", "trainer.epoch: not a spec key (did you mean config.trainer.epochs?"),  # mistyped as well
    ("gems.g6.mode=wire", "gems.g6.mode: not a spec key (did you mean config.gems.g6.mode?"),
])
def test_a_config_key_without_its_prefix_gets_the_prefix_suggested(override, meant):
    from tune_gems.sweep.spec_load import load_spec

    with pytest.raises(ConfigError) as info:
        load_spec(SMOKE, [override])
    assert str(info.value) == f"{SMOKE}: {meant} a sweep's config keys take the config. prefix)"


def test_a_spec_key_typo_keeps_the_spec_suggestion():
    from tune_gems.sweep.spec_load import load_spec

    with pytest.raises(ConfigError, match=r"num_sample: unknown key \(did you mean num_samples\?\)"):
        load_spec(SMOKE, ["num_sample=3"])
    assert load_spec(SMOKE, ["config.trainer.epochs=3"]).base_config().trainer.epochs == 3  # the prefixed key works


# -- start-up notices ---------------------------------------------------------------------------


def test_the_start_up_notices_are_hidden_unless_verbose_and_the_levels_restored():
    from tune_gems.sweep.console import DRIVER_LOGGERS, RESTORE_LOGGERS, STARTUP_LOGGERS, TUNE_LOGGER, quiet_driver

    loggers = [logging.getLogger(n) for n in (*STARTUP_LOGGERS, *RESTORE_LOGGERS, *DRIVER_LOGGERS)]
    before = [lg.level for lg in loggers]
    with quiet_driver(verbose=False):
        for name in (*STARTUP_LOGGERS, *RESTORE_LOGGERS):  # "Started a local Ray instance.", "A new study created ...", ...
            assert not logging.getLogger(name).isEnabledFor(logging.INFO)
            assert logging.getLogger(name).isEnabledFor(logging.WARNING), name  # their warnings still show
        assert not any(logging.getLogger(n).isEnabledFor(logging.WARNING) for n in DRIVER_LOGGERS)
        tune = logging.getLogger(TUNE_LOGGER)
        assert not tune.filter(_record("Experiment has been interrupted, but the most recent state was saved.\nResume ..."))
        assert not tune.filter(_record("Stop signal received (e.g. via SIGINT/Ctrl+C), ending Ray Tune run."))
        assert tune.filter(_record("any other warning"))
    assert [lg.level for lg in loggers] == before and logging.getLogger(TUNE_LOGGER).filter(_record("Stop signal received"))
    with quiet_driver(verbose=True):
        assert [lg.level for lg in loggers] == before


def test_tunes_slow_step_warnings_are_hidden_unless_verbose(monkeypatch, capsys):
    """Tune's own `warn_if_slow` (every step over 0.5 s, on a loaded machine every few results) and
    the controller's "Processing trial results took ..." reach the console only with --verbose."""
    import ray.tune.utils.util as util
    from ray.tune.utils.util import warn_if_slow

    from tune_gems.sweep.console import SLOW_NOTICE, quiet_driver

    monkeypatch.setattr(util, "START_OF_TIME", util.time.time() - 120)  # past Tune's first minute of grace
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logging.getLogger("ray.tune").addHandler(handler)
    try:
        for verbose in (False, True):
            with quiet_driver(verbose=verbose):
                with warn_if_slow("process_trial_result", threshold=1e-9):
                    util.time.sleep(0.001)
                controller = logging.getLogger("ray.tune.execution.tune_controller")
                controller.warning("Processing trial results took 0.9 s, which may be a performance bottleneck. ...")
                controller.warning("any other warning")
            assert sum(SLOW_NOTICE in m for m in seen) == (2 if verbose else 0), seen
            assert seen.count("any other warning") == 1
            seen.clear()
    finally:
        logging.getLogger("ray.tune").removeHandler(handler)


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("ray.tune.tune", logging.WARNING, __file__, 1, message, None, None)


def test_the_start_up_loggers_are_the_ones_that_print_the_notices():
    """The names are the modules that log the three lines (a rename in Ray or Optuna fails here)."""
    import inspect

    import optuna.storages.journal._storage as journal
    import ray._private.worker as worker
    import ray.tune.execution.tune_controller as controller
    import ray.tune.trainable.trainable as trainable
    import ray.tune.tune as tune

    from tune_gems.sweep.console import RESTORE_LOGGERS, STARTUP_LOGGERS, TRIAL_LOGGERS, TUNE_LOGGER, TUNE_STOP_NOTICES

    notices = {worker: "Started a local Ray instance", journal: "A new study created in Journal", tune: "Wrote the latest version"}
    restores = {controller: "Restoring the run from the latest experiment state file", trainable: "Restored on "}
    for module, notice in {**notices, **restores}.items():
        assert notice in inspect.getsource(module), module.__name__
    assert set(STARTUP_LOGGERS) == {m.__name__ for m in notices} and set(RESTORE_LOGGERS) == {m.__name__ for m in restores}
    assert trainable.__name__ in TRIAL_LOGGERS and tune.__name__ == TUNE_LOGGER  # the restore line is a worker's
    assert all(notice.split(",")[0] in inspect.getsource(tune) for notice in TUNE_STOP_NOTICES)


# -- a search with no signal --------------------------------------------------------------------


def test_objectives_that_all_tie_are_said_in_the_closing_table():
    from tune_gems.sweep.console import objective_tie, tie_note

    assert objective_tie([0.0, 0.0, -0.0]) == 0.0 and objective_tie([0.1, 0.1, math.nan]) == 0.1
    assert objective_tie([0.0]) is None and objective_tie([0.0, 1e-12]) is None and objective_tie([-math.inf, -math.inf]) is None
    trials = pd.DataFrame({"trial_id": ["a", "b", "c"], "objective": [0.0, 0.0, math.nan]})
    note = tie_note(trials, "verdict_gain")
    assert note.startswith("no signal: all 2 scored trials have verdict_gain=0.000") and "every seed pair tied" in note
    assert "seed pair" not in tie_note(trials.assign(objective=0.5), "val_sharpe_mean_lastk")
    assert tie_note(trials.assign(objective=[0.0, 0.1, 0.0]), "verdict_gain") is None


def test_the_console_says_the_tie_while_the_search_runs():
    from tune_gems.sweep.progress import SweepConsole

    printed: list[str] = []
    console = SweepConsole(total=3, metric="verdict_gain", mode="max", out=printed.append, clock=lambda: 0.0)
    trials = [SimpleNamespace(trial_id=t, status="RUNNING", last_result={"objective": v, "epoch": 2})
              for t, v in (("a", 0.0), ("b", 0.0), ("c", 0.4))]
    for t in trials:
        console.on_trial_complete(1, trials, t)
        t.status = "TERMINATED"
    assert "| best 0.000 (a) |" in printed[0]  # one trial: nothing to tie with
    assert "| best 0.000, a tie of all 2 scored trials (no signal yet) |" in printed[1]
    assert "| best 0.400 (c) |" in printed[2]


# -- where --resume restarts ----------------------------------------------------------------------


def _tune_state(root, trials: dict[str, tuple[str, list[tuple[int, bool]]]]) -> None:
    """Tune's experiment state and each trial's result.json: per trial its status and its
    processed results, (epoch, brought a checkpoint) each."""
    data = []
    for trial_id, (status, results) in trials.items():
        folder = f"train_trial_{trial_id}_1_x"
        rows = [{"epoch": e, "checkpoint_dir_name": f"checkpoint_{i:06d}" if ck else None} for i, (e, ck) in enumerate(results)]
        (root / folder).mkdir()
        (root / folder / "result.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
        data.append([json.dumps({"trial_id": trial_id, "status": status, "relative_logdir": folder}),
                     json.dumps({"last_result": rows[-1] if rows else {}})])
    (root / "experiment_state-2026-12-04_00-00-00.json").write_text(json.dumps({"trial_data": data}))


def test_resume_says_which_epoch_each_unfinished_trial_restarts_from_and_why(tmp_path):
    from tune_gems.sweep.resume import restart_lines
    from tune_gems.sweep.spec_load import load_spec
    from tune_gems.sweep.storage import ExperimentStore

    store = ExperimentStore(str(tmp_path), "exp")
    root = tmp_path / "exp"
    root.mkdir()
    spec = load_spec(SMOKE)
    assert "lists no trial yet" in restart_lines(store, spec)[0]
    _tune_state(root, {
        "aaaa0001": ("TERMINATED", [(1, False), (2, True)]),
        "bbbb0002": ("RUNNING", [(1, True), (2, True)]),  # the last result brought its checkpoint
        "cccc0003": ("RUNNING", [(1, False), (2, True), (3, False)]),  # the newest checkpoint is an earlier result's
        "dddd0004": ("RUNNING", [(1, False)]),
        "eeee0005": ("PENDING", []),
    })
    lines = restart_lines(store, spec)
    assert lines[0] == ("resuming exp: 1 finished trial(s) kept, 4 continued: bbbb0002 from its checkpoint after epoch 2; "
                        "cccc0003 from its checkpoint after epoch 2; dddd0004 from the start (no checkpoint yet); "
                        "eeee0005 from the start (not started)")
    assert lines[1].startswith("a trial without a checkpoint trains again from its start (a checkpoint is written after 300 s")


# -- a split beyond the data --------------------------------------------------------------------


def test_a_split_beyond_the_data_names_where_the_data_ends():
    from tune_gems.data.segments import split_bounds

    prices = pd.Series(np.ones(300), index=pd.bdate_range("2020-01-01", periods=300))
    with pytest.raises(DataError) as info:
        split_bounds(prices, ["2020-06-01", "2022-01-01"], min_len=5)
    assert str(info.value) == ("data.splits: test segment has 0 prices, need at least min_len=5 "
                               "(the data runs 2020-01-01..2021-02-23: 2022-01-01 is past its last date)")
    with pytest.raises(DataError, match=r"validation segment has 0 prices.*2021-06-01 and 2022-01-01 are past its last date\)$"):
        split_bounds(prices, ["2021-06-01", "2022-01-01"], min_len=5)
    with pytest.raises(DataError, match=r"^data.splits: train segment has 3 prices, need at least min_len=5 "
                                        r"\(the data runs 2020-01-01..2021-02-23\)$"):
        split_bounds(prices, ["2020-01-06", "2020-06-01"], min_len=5)


# -- RAY_ADDRESS ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("address", "endpoint"), [
    ("127.0.0.1:6379", ("127.0.0.1", 6379)), ("ray://head.example:10001", ("head.example", 10001)),
    ("[::1]:6379", ("::1", 6379)), ("auto", None), ("local", None),
])
def test_the_addresses_ray_takes_are_read(address, endpoint):
    from tune_gems.sweep.local_ray import ray_address_endpoint

    assert ray_address_endpoint(address) == endpoint


@pytest.mark.parametrize("address", ["", " ", "garbage", "http://127.0.0.1:8265", "127.0.0.1", "127.0.0.1:", ":6379",
                                     "127.0.0.1:port", "127.0.0.1:0", "127.0.0.1:70000", "user@host:6379", "host:6379/x"])
def test_an_address_ray_cannot_take_is_one_line(address):
    from tune_gems.sweep.local_ray import ray_address_endpoint

    with pytest.raises(ConfigError, match=r"^RAY_ADDRESS: "):
        ray_address_endpoint(address)


def test_an_empty_ray_address_is_unset_as_ray_reads_it(monkeypatch):
    from tune_gems.sweep.local_ray import ADDRESS_ENV, check_ray_address, joining_cluster

    monkeypatch.setenv(ADDRESS_ENV, "")
    check_ray_address()
    assert not joining_cluster()
    monkeypatch.setenv(ADDRESS_ENV, " ")
    with pytest.raises(ConfigError, match=r"^RAY_ADDRESS: ' ' is not a Ray address"):
        check_ray_address()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is: nothing listens there


def test_an_address_where_nothing_answers_is_refused_in_seconds():
    from tune_gems.sweep.local_ray import ADDRESS_PROBE_S, probe_ray_address

    address = f"127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    with pytest.raises(ConfigError) as info:
        probe_ray_address(address)
    assert time.monotonic() - start < ADDRESS_PROBE_S
    line = str(info.value)
    assert line.startswith(f"RAY_ADDRESS: no Ray cluster answers at {address} (connection refused)")
    assert "ray start --head" in line and "--resume" in line
    with socket.socket() as listening:  # something answers: the probe lets ray.init have it
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        probe_ray_address(f"127.0.0.1:{listening.getsockname()[1]}")


def test_a_cluster_on_loopback_is_joined_at_loopback(monkeypatch):
    from tune_gems.sweep.local_ray import ADDRESS_ENV, CLUSTER_SWITCH_ENV, joining_cluster, loopback_cluster, prepare_loopback

    for address, joins, loopback in (("127.0.0.1:6390", True, True), ("localhost:6390", True, True), ("[::1]:6390", True, True),
                                     ("10.0.0.5:6379", True, False), ("auto", True, False), ("local", False, False)):
        monkeypatch.setenv(ADDRESS_ENV, address)
        monkeypatch.delenv(CLUSTER_SWITCH_ENV, raising=False)
        assert (joining_cluster(), loopback_cluster()) == (joins, loopback), address
        prepare_loopback()
        assert (CLUSTER_SWITCH_ENV in __import__("os").environ) == (loopback or not joins), address
