"""CPU smoke tests of benchmarks/archive/compile_trial.py (the torch.compile trial of issue #15).

Archived with the trial (its verdict was "drop", benchmarks/RESULTS.md): outside `testpaths`, so
the default suite does not run it; `python -m pytest benchmarks/archive/test_compile_trial.py`
still does.

The real trial runs on a GPU with inductor, one process per run; here the whole pipeline (the
runs, glue wrappers, state comparison, verdict, JSON) runs in one subprocess with `--backend
eager --in-process` (a process per run would spend most of the time importing torch): dynamo
traces every wrapped function but generates no code, so the wrapped iteration must keep the
baseline's bits exactly. That is what makes the wrappers trustworthy: a difference the GPU
trial reports comes from inductor's code, not from how the trial wraps the learner.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from learner_fixtures import TINY  # noqa: E402 - the tests' tiny shape

SCRIPT = Path(__file__).resolve().parent / "compile_trial.py"
SMOKE_TARGETS = ("rng_draw", "env_step", "replay_sample", "optim_step")
"""Rebuilt Draws, Transition and Batch objects around the compiled regions, and a target
compiled with a graph break (the fused Adam kernel stays eager)."""


def _load():
    spec = importlib.util.spec_from_file_location("compile_trial", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ct = _load()


def _tiny_sets() -> list[str]:
    """The learner tests' tiny shape as --set overrides (device and population come as flags)."""
    out = []
    for kv in TINY:
        if not kv.startswith(("device=", "trainer.population=", "trainer.epochs", "trainer.iterations_per_epoch")):
            out += ["--set", kv]
    return out


def test_cpu_smoke_end_to_end(tmp_path):
    out = tmp_path / "trial.json"
    cmd = [
        sys.executable, str(SCRIPT), "--device", "cpu", "--population", "2", "--backend", "eager", "--in-process",
        "--targets", ",".join(SMOKE_TARGETS), "--iters", "2", "--reps", "1", "--rounds", "1",
        "--worker-timeout", "120", "--out", str(out), *_tiny_sets(),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "verdict: drop" in proc.stdout
    d = json.loads(out.read_text())
    for key in ("benchmark", "date", "device", "torch", "command", "config", "spec", "runs", "comparisons", "summary", "verdict", "reasons"):
        assert key in d, key
    assert d["benchmark"] == "compile_trial" and d["torch"] == torch.__version__
    assert "--backend eager" in d["command"]
    assert set(d["runs"]) == {"baseline", "compiled_1", "compiled_2", "per_target"}
    for role in ("baseline", "compiled_1", "compiled_2"):
        r = d["runs"][role]
        assert r["ok"], r
        assert r["mode"] == "eager" and r["capture"]["attempted"] is False
        assert r["iter_us"] > 0 and "state_file" not in r  # the work folder is removed
    for role in ("compiled_1", "compiled_2"):
        r = d["runs"][role]
        # optim_step compiles a graph only with the clip_gradients hook (else dynamo runs it eagerly)
        assert set(SMOKE_TARGETS) - {"optim_step"} <= set(r["targets_compiled"]), r["targets"]
        assert all(t["status"] in ("compiled", "no graph") for t in r["targets"]), r["targets"]
        assert all(t["calls"] > 1 for t in r["targets"])
        assert r["compile_s"] > 0
    # wrapping without code generation is bit-neutral, run to run and against the baseline
    assert d["comparisons"]["compiled_1_vs_compiled_2"]["identical"] is True
    assert d["comparisons"]["compiled_1_vs_baseline"]["identical"] is True
    alone = d["runs"]["per_target"]["per_target"]
    assert [t["name"] for t in alone] == list(SMOKE_TARGETS)
    assert all(t["equals_baseline"] is True for t in alone), alone
    assert d["summary"]["compiled_runs_identical"] is True
    assert d["verdict"] == "drop"
    for why in ("not on CUDA", "backend eager", "--in-process"):
        assert any(why in r for r in d["reasons"]), (why, d["reasons"])


def test_install_and_uninstall_leave_the_learner_as_built():
    trainer = ct.build_learner({"device": "cpu", "population": 2, "precision": "fp32", "kernels": "auto", "set": _tiny_sets()[1::2]})
    learner = trainer.learner
    fused = getattr(torch, "_fused_adam_", None)
    installed = ct.install_targets(learner, list(ct.DEFAULT_TARGETS), "auto", "eager")
    assert [g.name for g in installed.glue] == list(ct.DEFAULT_TARGETS)
    assert isinstance(learner.replay.sample, ct.CompiledGlue)
    installed.uninstall()
    assert getattr(torch, "_fused_adam_", None) is fused
    for owner, attr in ((learner, "_fresh_draws"), (learner.env, "step"), (learner.replay, "sample"), (learner.optim, "step_groups")):
        assert attr not in vars(owner), attr  # the class's method again
    assert learner.optim._fused is hasattr(torch, "_fused_adam_")


def test_compare_state_dicts_is_bitwise():
    nan = float("nan")
    a = {"x": torch.tensor([1.0, nan, 0.0]), "i": torch.tensor([1, 2])}
    assert ct.compare_state_dicts(a, {k: v.clone() for k, v in a.items()})["identical"] is True  # NaN == NaN
    signed = ct.compare_state_dicts(a, {"x": torch.tensor([1.0, nan, -0.0]), "i": a["i"]})
    assert signed["identical"] is False and signed["differing"] == ["x"]  # -0.0 is other bits
    off = ct.compare_state_dicts(a, {"x": torch.tensor([1.5, nan, 0.0]), "i": torch.tensor([1, 3])})
    assert off["differing"] == ["i", "x"] and off["max_abs_diff"] == pytest.approx(0.5)


def test_exact_subset_takes_one_of_each_pair():
    assert ct.exact_subset(["rng_draw", "fresh_draws", "optim_composite", "env_step"]) == ["fresh_draws", "env_step", "optim_composite"]
    assert ct.exact_subset(["rng_draw", "optim_step", "optim_composite"]) == ["rng_draw", "optim_step"]
    assert ct.exact_subset([]) == []


@pytest.mark.parametrize(
    "args, field",
    [
        (["--population", "0"], "--population"),
        (["--iters", "0"], "--iters"),
        (["--targets", "warp_drive"], "--targets"),
        (["--targets", "optim_step,optim_composite"], "--targets"),
        (["--targets", "fresh_draws,rng_draw"], "--targets"),
        (["--set", "novalue"], "--set"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, field, capsys):
    assert ct.main(["--device", "cpu", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(field) and "\n" not in err
