"""The sealed segment (`data.sealed`): rows at the end of every history that no search reads,
opened once by `tune-gems confirm --final` (docs/data.md "The sealed segment", docs/analysis.md
"Search, then confirm").

- nothing of the sealed rows reaches a search's market: changing them changes no feature,
  return, segment or baseline of it (bitwise); opened, the market's test segment is those rows
  and every other window is the search's;
- the experiment's record holds a SHA-256 of the sealed rows and their openings; a seal whose
  rows changed is refused in one line naming the data file;
- a confirmation's member seeds never meet the search's, nor an earlier confirmation's (checked
  on the seeds themselves, a forced hash collision included);
- end to end through the CLI on a Ray-free search: the first opening is pre-registered and
  recorded, a second is refused in one line (exit 2) unless asked for, and then every output of
  it is labelled "not pre-registered".
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from sweep_fixtures import SMOKE, TINY_SWEEP, cli_in_process
from tune_gems.config.load import load_config
from tune_gems.contracts.errors import ConfigError, DataError
from tune_gems.contracts.outputs import MARKER_FILE, read_marker
from tune_gems.contracts.run_record import DATA_KEY, SEAL_KEY, data_fingerprint
from tune_gems.data.segments import fold_bounds, seal_digest, sealed_rows
from tune_gems.data.series import synthetic_prices
from tune_gems.trainer.run_setup import load_run_prices, prepare_market, seal_record

ROWS, SEALED = 900, 150
TINY = [o.removeprefix("config.") for o in TINY_SWEEP if o.startswith("config.")]


def _prices_file(path: Path, change_row: int | None = None) -> Path:
    prices = synthetic_prices(ROWS, seed=3).to_numpy().copy()
    if change_row is not None:
        prices[change_row] *= 1.01
    pd.DataFrame({"date": pd.bdate_range("2001-01-01", periods=ROWS).strftime("%Y-%m-%d"), "close": prices}).to_csv(
        path, index=False)
    return path


def _cfg(path: Path, *extra: str):
    return load_config(None, [*TINY, "data.source=file", f"data.path={path}", f"data.sealed={SEALED}", *extra])


# -- the rows and the market ------------------------------------------------------------------------


def test_the_seal_is_a_fraction_or_rows_and_too_few_is_one_line_naming_the_key():
    assert sealed_rows(1000, 0, 10) == 0 and sealed_rows(1000, 0.15, 10) == 150 and sealed_rows(1000, 150, 10) == 150
    with pytest.raises(DataError, match=r"^data\.sealed: 5 seals 5 of the 1000 rows, need at least min_len=10"):
        sealed_rows(1000, 5, 10)
    with pytest.raises(ConfigError, match="data.sealed seals rows of a price file"):
        load_config(None, ["data.sealed=0.1"])


def test_nothing_of_the_sealed_rows_reaches_the_search_and_opening_moves_only_the_test(tmp_path):
    cfg = _cfg(_prices_file(tmp_path / "p.csv"))
    market = prepare_market(cfg, torch.device("cpu"))
    changed = prepare_market(_cfg(_prices_file(tmp_path / "q.csv", change_row=ROWS - 1)), torch.device("cpu"))
    assert market.n == ROWS - SEALED and market.bounds[0].sealed == SEALED
    prefix = load_run_prices(cfg).iloc[: ROWS - SEALED]
    assert [b.test for b in market.bounds] == [b.test for b in fold_bounds(prefix, cfg.data.splits, cfg.data.folds, 10)]
    assert torch.equal(market.features, changed.features) and torch.equal(market.returns_next, changed.returns_next)
    opened = prepare_market(cfg, torch.device("cpu"), open_seal=True)
    b, o = market.bounds[0], opened.bounds[0]
    assert o.test == (ROWS - SEALED, ROWS) and (o.train, o.val) == (b.train, b.val) and opened.n == ROWS
    n = market.n
    assert torch.equal(opened.features[:, :n], market.features)  # normalised on the same training rows
    with pytest.raises(DataError, match=r"data\.sealed: sealing 880 of the 900 rows leaves 20, fewer than the"):
        prepare_market(_cfg(tmp_path / "p.csv", "data.sealed=880"), torch.device("cpu"))


def test_the_record_holds_a_hash_of_the_sealed_rows_alone(tmp_path):
    cfg = _cfg(_prices_file(tmp_path / "p.csv"))
    seal = seal_record(cfg, load_run_prices(cfg))
    assert seal["rows"] == SEALED and seal["first_row"] == ROWS - SEALED and seal["openings"] == []
    assert seal["spans"] == {"p": "2003-11-17..2004-06-11"}
    digest = lambda name: seal_digest([load_run_prices(_cfg(tmp_path / name))], ["p"], SEALED)["sha256"]  # noqa: E731
    _prices_file(tmp_path / "first.csv", change_row=0)
    _prices_file(tmp_path / "last.csv", change_row=ROWS - 1)
    assert digest("first.csv") == seal["sha256"] != digest("last.csv")  # the sealed rows alone
    assert data_fingerprint(cfg.data, seal)[SEAL_KEY] == seal and SEAL_KEY not in data_fingerprint(cfg.data)
    assert load_config(None, TINY).data.sealed == 0  # the default: nothing sealed


def test_the_split_line_says_what_is_sealed(tmp_path):
    from tune_gems.data.summary import data_lines

    cfg = _cfg(_prices_file(tmp_path / "p.csv"))
    line = data_lines(cfg.data, prepare_market(cfg, torch.device("cpu")))[-1]
    assert line.endswith(f"| sealed {SEALED} rows after it (no search reads them; `tune-gems confirm --final` opens them)")


# -- seeds --------------------------------------------------------------------------------------------


def test_a_confirmations_member_seeds_never_meet_the_searchs_or_an_earlier_confirmations():
    """Checked on the member seeds themselves: the search's members table is given the very seeds
    the first plan would draw (a forced 31-bit collision), and the plan passes that trial seed over."""
    from tune_gems.commands.confirm_plan import Taken, plan_confirmation, used_member_seeds
    from tune_gems.rng import member_seeds
    from tune_gems.sweep.spec_load import load_spec
    from test_confirm_plan import GEMS, _discovery

    spec = load_spec(SMOKE)
    trials, members = _discovery()
    members = members.assign(seed=member_seeds(99, len(members)))
    earlier = [Taken(int(trials["seed"].max()) + 1, 40, 4)]  # a confirmation before this one
    before, _, _ = plan_confirmation(spec, trials, members, GEMS, taken=earlier)
    assert before[0].seed > earlier[0].seed and before[0].first_seed_index == 44  # past the earlier one
    clash = member_seeds(before[0].seed, before[0].population, before[0].first_seed_index)[1]
    search = members.assign(seed=[clash, *members["seed"][1:]])  # the search trained one of those seeds
    plans, _, build = plan_confirmation(spec, trials, search, GEMS, taken=earlier)
    assert plans[0].seed == before[0].seed + 1 and plans[0].first_seed_index == 44  # that trial seed passed over
    used = used_member_seeds(search, earlier)
    assert used == set(search["seed"]) | set(member_seeds(earlier[0].seed, 4, 40))
    drawn: set[int] = set()
    for p in plans:
        cfg = build(p)
        block = set(member_seeds(cfg.seed, cfg.trainer.population, cfg.first_seed_index))
        assert not block & used and not block & drawn and cfg.first_seed_index >= 44
        drawn |= block


# -- end to end: open once, refuse, reopen labelled ------------------------------------------------------


@pytest.fixture(scope="module")
def sealed_search(tmp_path_factory) -> Path:
    """The confirmable search of the hostile matrix, its spec on a price file with a seal and its
    marker recording the file and the seal as a sweep does."""
    from sweep_fixtures import store_spec
    from test_hostile_round4 import confirmable
    from tune_gems.contracts.outputs import update_marker
    from tune_gems.sweep.spec_load import load_spec

    d = tmp_path_factory.mktemp("sealed")
    confirmable()(d)
    csv = _prices_file(d / "p.csv")
    spec = load_spec(SMOKE, [*TINY_SWEEP, "config.data.source=file", f"config.data.path={csv}",
                             f"config.data.sealed={SEALED}"])
    store_spec(d / "exp", yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False).encode())
    cfg = spec.base_config()
    update_marker(d / "exp", **{DATA_KEY: data_fingerprint(cfg.data, seal_record(cfg, load_run_prices(cfg)))})
    return d / "exp"


def _openings(exp: Path) -> list[dict]:
    return read_marker(exp)[DATA_KEY][SEAL_KEY]["openings"]


def test_the_seal_opens_once_then_only_labelled_not_pre_registered(sealed_search):
    exp = sealed_search
    first = cli_in_process("confirm", str(exp), "--final")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "final confirmation on the sealed rows, opening 1 of the seal: pre-registered" in first.stdout
    out = exp / "final-confirmation"
    folds = pd.read_parquet(out / "folds.parquet")
    assert set(zip(folds["test_start"], folds["test_end"])) == {(ROWS - SEALED, ROWS)}  # its test is the sealed rows
    assert pd.read_parquet(out / "members.parquet")["test_alpha_sharpe"].notna().any()
    [opening] = _openings(exp)
    assert opening["status"] == "done" and opening["pre_registered"] is True and opening["out"] == str(out)
    assert opening["results"]["verdicts.csv"] == __import__("hashlib").sha256((out / "verdicts.csv").read_bytes()).hexdigest()
    assert not (exp / "confirmed.json").exists()  # a plain confirmation is still to come, or not

    again = cli_in_process("confirm", str(exp), "--final")
    assert again.returncode == 2 and again.stderr.count("\n") == 1, again.stderr
    assert "opened 1 time(s) already" in again.stderr and "--not-pre-registered" in again.stderr
    alone = cli_in_process("confirm", str(exp), "--not-pre-registered")
    assert alone.returncode == 2 and "--not-pre-registered: labels a second opening" in alone.stderr
    assert len(_openings(exp)) == 1

    second = cli_in_process("confirm", str(exp), "--final", "--not-pre-registered", "--out", str(exp.parent / "again"))
    assert second.returncode == 0, second.stderr[-3000:]
    logged = [line for line in second.stdout.splitlines() if line.startswith("tune-gems confirm") or "] tune-gems" in line]
    assert logged and all(line.startswith("[not pre-registered] ") for line in logged), logged[:3]
    assert "opening 2 of the seal: not pre-registered" in second.stdout
    label = "opening 2 of the seal: not pre-registered"
    assert set(pd.read_csv(exp.parent / "again" / "confirmation.csv")["seal_opening"]) == {label}
    assert set(pd.read_csv(exp.parent / "again" / "verdicts.csv")["seal_opening"]) == {label}
    assert label in (exp.parent / "again" / "report.md").read_text()
    assert read_marker(exp.parent / "again")["seal_opening"] == label
    openings = _openings(exp)
    assert [o["pre_registered"] for o in openings] == [True, False] and openings[1]["status"] == "done"
    seeds = [json.loads(json.dumps(o["trials"]))["g12"]["seed"] for o in openings]
    assert seeds[1] > seeds[0]  # the second opening kept clear of the first's seeds


def test_bad_seals_are_one_line_exit_2_naming_the_key_or_file(sealed_search, tmp_path):
    """Too many rows sealed for a run (through `train`); --final on a search that sealed nothing
    (the hostile matrix's confirmable search: synthetic data) or whose record of the seal no
    longer matches its data: one line, exit 2, no opening recorded, nothing written."""
    import shutil

    from test_hostile_round4 import confirmable

    res = cli_in_process("train", *TINY, "data.source=file", f"data.path={sealed_search.parent / 'p.csv'}",
                         "data.sealed=880", "--out", str(tmp_path / "run"))
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "data.sealed: sealing 880 of the 900 rows" in res.stderr
    assert not (tmp_path / "run").exists()
    confirmable()(tmp_path / "plain")
    res = cli_in_process("confirm", str(tmp_path / "plain" / "exp"), "--final")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "records no seal; --final opens" in res.stderr
    assert not (tmp_path / "plain" / "exp" / "final-confirmation").exists()

    exp = tmp_path / "exp"
    shutil.copytree(sealed_search, exp)
    marker = read_marker(exp)
    if marker[DATA_KEY][SEAL_KEY]["openings"]:  # this copy is opened already: start it sealed
        marker[DATA_KEY][SEAL_KEY]["openings"] = []
    marker[DATA_KEY][SEAL_KEY]["sha256"] = "0" * 64
    (exp / MARKER_FILE).write_text(json.dumps(marker) + "\n")
    for name in ("final-confirmation", "confirmed.json"):
        shutil.rmtree(exp / name, ignore_errors=True)
    res = cli_in_process("confirm", str(exp), "--final")
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith("tune-gems: error: data.path: the sealed rows of") and "the seal is broken" in res.stderr
    assert _openings(exp) == [] and not (exp / "final-confirmation").exists()
