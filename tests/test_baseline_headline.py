"""The one-line standing against the baselines (end of `train`, first lines of the report):
each of its three answers, and silence where a side is missing."""

from __future__ import annotations

import math

import pandas as pd

from tune_gems.stats.baseline_headline import baseline_headline


def _table(config_sharpes: dict[str, float], base: dict[str, float]) -> pd.DataFrame:
    rows = [{"configuration": k, "members": 4, "val_sharpe": v} for k, v in config_sharpes.items()]
    rows += [{"configuration": f"baseline: {k}", "members": 0, "val_sharpe": v} for k, v in base.items()]
    return pd.DataFrame(rows)


BASE = {"flat": 0.0, "buy_and_hold": 0.94, "momentum": 0.41}


def test_every_configuration_trails_the_best_baseline():
    line = baseline_headline(_table({"proposal": 0.21, "control": 0.30}, BASE))
    assert line.endswith("best control 0.30; buy_and_hold 0.94, momentum 0.41, flat 0.00; every configuration trails buy_and_hold")


def test_some_and_all_beat_and_a_single_run():
    assert baseline_headline(_table({"a": 1.2, "b": 0.5}, BASE)).endswith("1 of 2 configurations beat buy_and_hold, the best baseline")
    assert baseline_headline(_table({"a": 1.2, "b": 1.0}, BASE)).endswith("every configuration beats every baseline")
    assert baseline_headline(_table({"default": 0.1}, BASE)).endswith("it trails buy_and_hold")


def test_nothing_to_compare_says_nothing():
    assert baseline_headline(_table({"a": 1.0}, {})) == ""
    assert baseline_headline(_table({}, BASE)) == ""
    assert baseline_headline(_table({"a": math.nan}, BASE)) == ""  # a diverged-only run has no mean
