"""Tracking: the spec's `tracking` section (Ray Tune's W&B / MLflow logger callbacks) refused in
one line where the package is missing and checked against the callback's signature where it is
there; TensorBoard event files from `train`."""

from __future__ import annotations

import importlib.util

import pytest

from sweep_fixtures import SMOKE, cli_in_process
from test_bad_input import TRAIN_TINY
from tune_gems.contracts.errors import ConfigError
from tune_gems.sweep import tracking
from tune_gems.sweep.tracking import TrackingSpec, check_tracking, tracking_callbacks


@pytest.mark.parametrize("key", ["wandb", "mlflow"])
def test_a_tracker_that_is_not_installed_is_refused_in_one_line(key):
    if importlib.util.find_spec(key) is not None:
        pytest.skip(f"{key} is installed here")
    res = cli_in_process("sweep", str(SMOKE), f"tracking.{key}={{project: x}}", env={"RAY_ADDRESS": "127.0.0.1:9"})
    assert res.returncode == 2
    assert res.stderr.strip() == f"tune-gems: error: {SMOKE}: tracking.{key}: needs the {key} package, which is not installed (pip install {key})"


def test_an_installed_trackers_arguments_are_checked_against_its_callback(monkeypatch):
    # a stand-in callback class from the standard library: installed, with a known signature
    monkeypatch.setitem(tracking.CALLBACKS, "wandb", ("json", "json", "JSONDecoder"))
    check_tracking(TrackingSpec(wandb={"strict": False}), "spec.yaml")
    with pytest.raises(ConfigError, match=r"^spec.yaml: tracking.wandb.projekt: not an argument of JSONDecoder$"):
        check_tracking(TrackingSpec(wandb={"projekt": "x"}), "spec.yaml")
    [callback] = tracking_callbacks(TrackingSpec(wandb={"strict": False}))
    assert type(callback).__name__ == "JSONDecoder" and callback.strict is False
    assert tracking_callbacks(TrackingSpec()) == []
