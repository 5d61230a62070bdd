"""The shipped eight-history price file (examples/eight_histories.csv) and its CPU example
(sweeps/eight_histories_cpu.yaml): the file is what examples/make_daily_closes.py builds from the
packages that ship its data, its S&P 500 and WTI columns are arch's prices; the example reads each
history on its own calendar's dates, where the loader cuts the windows docs/data.md states (the
same rows of every history, disjoint dates across the four calendars, one period per NYSE era's
three histories: `read.calendars`), and runs end to end (`tune-gems sweep`, then `tune-gems
analyze`) at test size, its folds.parquet carrying each history's dates. The README's CPU example
over named histories (sweeps/four_calendars_cpu.yaml, one history per calendar of the same file:
sweep, analyze, plan, confirm) runs once as the README shows it: its outputs are the pasted ones,
name every history and print one interval per word, the one confirmation.csv holds."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from itertools import combinations

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from sweep_fixtures import REPO, cli_in_process, ray_address  # noqa: F401 (fixture)
from test_doc_outputs import outputs
from tune_gems.analysis.read.calendars import held_out_calendar, validation_calendar
from tune_gems.analysis.read.load import load_experiment
from tune_gems.config.load import build_config
from tune_gems.data.segments import fold_table
from tune_gems.data.summary import history_table
from tune_gems.trainer.run_setup import load_run_prices, prepare_market

pytestmark = pytest.mark.slow

FILE = REPO / "examples" / "eight_histories.csv"
SPEC = REPO / "sweeps" / "eight_histories_cpu.yaml"
CALENDARS = {  # date column -> the histories on it
    "date_nyse_1990": ["sp500_1990", "jpm_1990", "xom_1990"],
    "date_nyse_2007": ["sp500_2007", "jpm_2007", "xom_2007"],
    "date_wti_1986": ["wti_1986"],
    "date_wti_2003": ["wti_2003"],
}
HISTORIES = [h for names in CALENDARS.values() for h in names]
WINDOWS = {  # docs/data.md "Eight histories in four calendars": each calendar's validation and test window
    "date_nyse_1990": {"val": ("1998-09-15", "2002-09-06"), "test": ("2002-09-09", "2005-11-08")},
    "date_nyse_2007": {"val": ("2015-11-04", "2019-10-24"), "test": ("2019-10-25", "2022-12-28")},
    "date_wti_1986": {"val": ("1994-08-22", "1998-08-10"), "test": ("1998-08-11", "2001-10-16")},
    "date_wti_2003": {"val": ("2011-11-04", "2015-10-23"), "test": ("2015-10-26", "2019-01-03")},
}
PERIODS = [1, 1, 1, 3, 3, 3, 0, 2]
"""The calendar period of each history's one validation window, and of its test segment: the three
histories of one NYSE era share theirs, the four calendars none (ids in time order)."""
FIRST_DAY = {"date_nyse_1990": "1990-01-02", "date_nyse_2007": "2007-02-09", "date_wti_1986": "1986-01-02",
             "date_wti_2003": "2003-02-03"}


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return pd.read_csv(FILE)


def history(frame: pd.DataFrame, name: str) -> pd.Series:
    """One history's prices, indexed by its own calendar's dates."""
    calendar = next(c for c, names in CALENDARS.items() if name in names)
    return pd.Series(frame[name].to_numpy(), index=pd.DatetimeIndex(frame[calendar]), name=name)


def test_the_shipped_file_is_what_the_script_builds_from_skfolio_and_arch():
    if importlib.util.find_spec("skfolio") is None or importlib.util.find_spec("arch") is None:
        pytest.skip("needs arch and skfolio's data files (pip install --no-deps skfolio)")
    script = REPO / "examples" / "make_daily_closes.py"
    res = subprocess.run([sys.executable, str(script), "--check", "eight_histories.csv"], capture_output=True, text=True)
    assert res.returncode == 0 and "eight_histories.csv: matches" in res.stdout, res.stdout + res.stderr


def test_the_file_holds_eight_histories_in_four_calendars_and_its_index_and_oil_are_archs(frame):
    pytest.importorskip("arch")
    from arch.data import sp500, wti

    assert list(frame.columns) == [c for calendar, names in CALENDARS.items() for c in (calendar, *names)]
    assert len(frame) == 4000 and frame.notna().all().all()
    assert {c: frame[c].iloc[0] for c in CALENDARS} == FIRST_DAY
    assert {c: frame[c].iloc[-1] for c in CALENDARS} == {c: w["test"][1] for c, w in WINDOWS.items()}
    for name in HISTORIES:
        series = history(frame, name)
        assert series.index.is_monotonic_increasing and series.index.is_unique and (series > 0).all()
    # skfolio's S&P 500 closes are arch's rounded to the cent, on every day both have (1999-2018)
    index = sp500.load()["Close"]
    for name in ("sp500_1990", "sp500_2007"):
        ours = history(frame, name)
        common = ours.index.intersection(index.index)
        assert len(common) > 1500 and (ours.loc[common] == index.loc[common].round(2)).all()
    oil = wti.load()["DCOILWTICO"].dropna()
    for name in ("wti_1986", "wti_2003"):
        ours = history(frame, name)
        assert (ours == oil.loc[ours.index]).all()
    # docs/data.md: daily log returns of one NYSE era's three histories correlate 0.22-0.64 (1990) and 0.51-0.75 (2007)
    for names, (low, high) in zip(list(CALENDARS.values())[:2], [(0.22, 0.64), (0.51, 0.75)]):
        corr = np.log(frame[names]).diff().corr().to_numpy()[np.triu_indices(3, 1)].round(2)
        assert (corr.min(), corr.max()) == (low, high)


def test_at_the_examples_split_each_history_has_its_calendars_windows_and_only_one_eras_histories_share_them():
    cfg = build_config(yaml.safe_load(SPEC.read_text())["config"])
    assert [(h.name, h.time_column) for h in cfg.data.price_histories] == [
        (name, calendar) for calendar, names in CALENDARS.items() for name in names]
    market = prepare_market(cfg, torch.device("cpu"), load_run_prices(cfg))
    folds = fold_table(market.indexes, market.bounds, cfg.data.folds.layout, market.fold_ids)
    assert folds["history"].tolist() == list(range(8)) and folds["fold"].eq(0).all()
    for (h, name), row in zip(enumerate(HISTORIES), folds.itertuples()):
        calendar = next(c for c, names in CALENDARS.items() if name in names)
        assert (row.val_first, row.val_last) == WINDOWS[calendar]["val"], name
        assert (row.test_first, row.test_last) == WINDOWS[calendar]["test"], name
        assert (row.val_start, row.val_end, row.test_start) == (2200, 3200, 3200)  # the same rows of every history
    histories = history_table(cfg.data, market)
    assert validation_calendar(folds, histories, range(8), [0])[:, 0].tolist() == PERIODS
    assert held_out_calendar(folds, histories, range(8)).tolist() == PERIODS
    for seg in ("val", "test"):  # the four calendars' windows are disjoint
        for a, b in combinations(CALENDARS, 2):
            (a0, a1), (b0, b1) = WINDOWS[a][seg], WINDOWS[b][seg]
            assert a1 < b0 or b1 < a0, (seg, a, b)


TEST_SIZE = [  # the example at test size: 8 histories x 2 arms x 2 seeds, two short epochs
    "config.trainer.population=2", "config.trainer.epochs=2", "config.trainer.iterations_per_epoch=8",
    "config.trainer.batch_size=16", "config.trainer.replay_capacity=512", "config.trainer.learning_starts=32",
    "config.env.window=8", "config.env.episode_length=32",
]  # fmt: skip


@pytest.fixture(scope="module")
def analysed(tmp_path_factory, ray_address):
    """The CPU example swept at test size and analysed: (sweep result, experiment, analysis folder)."""
    root = tmp_path_factory.mktemp("eight")
    sweep = cli_in_process("sweep", str(SPEC), "--storage", str(root), "--name", "eight", *TEST_SIZE,
                           env={"RAY_ADDRESS": ray_address})  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    res = cli_in_process("analyze", str(root / "eight"), "--out", str(root / "analysis"), "--no-plots")  # tables: the claim
    assert res.returncode == 0, res.stderr[-3000:]
    return sweep, root / "eight", root / "analysis"


def test_the_cpu_example_sweeps_on_four_calendars_and_is_analysed_over_its_eight_named_histories(analysed):
    sweep, exp, out = analysed
    lines = [x.removeprefix("tune-gems sweep: ") for x in sweep.stdout.splitlines() if x.startswith("tune-gems sweep: ")]
    source = next(x for x in lines if x.startswith("data: "))
    assert "8 histories on 4 calendars, 4000 rows each" in source
    assert all(f"{h} (price column '{h}', time column '{c}')" in source for c, names in CALENDARS.items() for h in names)
    splits = [x for x in lines if x.startswith("split")]
    assert [x.split(":")[0] for x in splits] == [f"split of {', '.join(names)}" for names in CALENDARS.values()]
    for line, window in zip(splits, WINDOWS.values()):
        assert f"validation 1000 rows ({'..'.join(window['val'])}) | test 800 rows ({'..'.join(window['test'])})" in line
    histories = pd.read_parquet(exp / "histories.parquet")
    assert histories["name"].tolist() == HISTORIES
    assert histories["first"].tolist() == [FIRST_DAY[c] for c, names in CALENDARS.items() for _ in names]
    members = pd.read_parquet(exp / "members.parquet")
    assert sorted(set(members["history"])) == list(range(8)) and set(members["fold"]) == {0}
    loaded = load_experiment(exp)  # the analysis's validated tables: each history's own window dates
    assert validation_calendar(loaded.folds.dates, loaded.histories, range(8), [0])[:, 0].tolist() == PERIODS
    assert held_out_calendar(loaded.folds.dates, loaded.histories, range(8)).tolist() == PERIODS
    g6 = pd.read_csv(out / "verdicts.csv").set_index("gem").loc["g6"]
    assert g6["histories"] == 8 and g6["folds"] == 1 and isinstance(g6["verdict"], str)
    effects = pd.read_csv(out / "fold_effects.csv")
    assert sorted(set(effects.loc[effects["gem"] == "g6", "history"])) == list(range(8))


def test_the_verdict_tables_name_every_history(analysed):
    _sweep, _exp, out = analysed
    for table in ("verdicts.csv", "fold_effects.csv"):
        text = (out / table).read_text()
        assert all(name in text for name in HISTORIES), table


# -- the README's CPU example over named histories ----------------------------------------------

EXAMPLE = ("histories-cpu", "histories-cpu-plan", "histories-cpu-confirm")
"""README "A CPU example over named histories": sweeps/four_calendars_cpu.yaml swept and analysed,
planned from, confirmed (docs/regenerate_outputs.py's blocks)."""
EXAMPLE_HISTORIES = ["sp500_1990", "sp500_2007", "wti_1986", "wti_2003"]
NAMED_IN = ("histories-cpu", "histories-cpu-plan", "histories-cpu-confirm")
"""The blocks that name every history of the example (plan states their count only)."""
ROPE = 0.1
INTERVAL = re.compile(r"\[([-+]?[\d.e+-]+|[-+]?inf), ([-+]?[\d.e+-]+|[-+]?inf)\]")
WORDS = ("keep wired", "harmful", "equivalent", "inconclusive", "insufficient data", "not confirmed on held-out data")


@pytest.fixture(scope="module")
def example(tmp_path_factory, ray_address):
    """The README's CPU example, its commands run once as the README shows them (by
    docs/regenerate_outputs.py, the sweep's trials on this module's Ray): ({block name: fresh text}, the
    folder they ran in)."""
    work = tmp_path_factory.mktemp("example")
    return outputs.run_blocks(list(EXAMPLE), work, env={"RAY_ADDRESS": ray_address}), work


@pytest.mark.parametrize("name", EXAMPLE)
def test_the_readmes_cpu_example_prints_what_is_pasted(name, example):
    fresh, _work = example
    pasted = outputs.pasted_blocks()[name]
    assert pasted.document.name == "README.md" and pasted.cpu, name
    here = outputs.cpu_code_path()
    if pasted.cpu != here:
        pytest.skip(f"{name} was pasted from a {pasted.cpu} CPU; this one is {here}, whose MKL rounds otherwise")
    problem = outputs.mismatch(name, pasted.text, fresh[name])
    assert problem is None, f"{problem}\nregenerate with: python docs/regenerate_outputs.py {' '.join(EXAMPLE)}\n{fresh[name]}"


def columns(block: str, header: str) -> list[list[tuple[str, str]]]:
    """The rows of the table whose header line starts with `header`: [(column name, cell)] each,
    cut where its `---` line cuts (names repeat: two `CI` columns)."""
    lines = block.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(header))
    spans = [m.span() for m in re.finditer(r"-+", lines[at + 1])]
    spans = [(a, spans[i + 1][0] if i + 1 < len(spans) else None) for i, (a, _) in enumerate(spans)]
    rows = []
    for line in lines[at + 2:]:
        if not re.match(r"g\d+ ", line):
            break
        rows.append([(lines[at][a:b].strip(), line[a:b].strip()) for a, b in spans])
    return rows


def agrees(word: str, cell: str) -> bool:
    """Whether a verdict word and the one interval printed beside it say the same thing."""
    found = INTERVAL.findall(cell)
    if word == "insufficient data":
        return not found
    if len(found) != 1:
        return False
    lo, hi = (float(x) for x in found[0])
    return {"equivalent": -ROPE <= lo and hi <= ROPE, "keep wired": lo > 0, "harmful": hi < 0,
            "inconclusive": lo <= 0 <= hi}.get(word, True)


def test_the_cpu_example_names_every_history(example):
    fresh, work = example
    for name in NAMED_IN:
        assert all(h in fresh[name] for h in EXAMPLE_HISTORIES), name
    per_history = next(x for x in fresh["histories-cpu"].splitlines() if x.startswith("    per history"))
    assert [h for h in EXAMPLE_HISTORIES if f"{h} " in per_history] == EXAMPLE_HISTORIES


def test_the_cpu_example_prints_one_interval_per_word(example):
    fresh, work = example
    analysis = fresh["histories-cpu"]
    for row in columns(analysis, "gem  verdict "):  # the deciding interval under its header, the seeds' under theirs
        cells = dict(row[:4])
        assert agrees(cells["verdict"], cells["CI"]), row
        assert sum(bool(INTERVAL.search(c)) for _, c in row) <= 2, row
    for line in analysis.splitlines():
        if re.match(r"g\d+: ", line):
            word = next(w for w in WORDS if line.split(": ", 1)[1].startswith(w))
            assert agrees(word, line), line
    table = pd.read_csv(work / "experiments" / "four" / "confirmation" / "confirmation.csv").set_index("gem")
    for row in columns(fresh["histories-cpu-confirm"], "gem  chosen trial "):
        named = [i for i, (n, _) in enumerate(row) if n.endswith("verdict")]
        assert [row[i][0] for i in named] == ["discovery verdict", "final verdict"], row
        for i, stage in zip(named, ("discovery", "final")):  # each verdict, then its one effect [CI]: confirmation.csv's
            assert row[i + 1][0] == "its effect [CI]" and agrees(row[i][1], row[i + 1][1]), row
            csv = table.loc[row[0][1]]
            assert row[i][1] == csv[f"{stage}_verdict"], row
            printed = [float(x) for x in INTERVAL.findall(row[i + 1][1])[0]] if INTERVAL.search(row[i + 1][1]) else []
            assert np.allclose(printed, csv[[f"{stage}_ci_low", f"{stage}_ci_high"]].dropna().tolist(), rtol=5e-3), row
