"""A trial's fixed start-up, phase by phase: cold (a fresh process) and warm (the next trial in
the same process, as an actor reused by Ray Tune runs it) (issue 33 item 4).

    python benchmarks/startup.py [--trials 2] [--out FILE.json] [--sweep N] [KEY=VALUE ...]

The trial is the issue's: `tune-gems train` of 1 epoch x 20 iterations at P=64
(`trainer.population=64 trainer.epochs=1 trainer.iterations_per_epoch=20`, the defaults here);
KEY=VALUE are config overrides on top (`device=cuda`, `kernels=cuda`, ...). The script starts a
fresh Python process and times, with wall clock and process CPU seconds:

- the interpreter's start and the imports a trial's process pays (torch, Ray Tune, tune_gems);
- the CUDA context (CUDA only), and the driver's one load of the price series;
- per trial, built as `tune_gems.sweep.trainable.trial_trainer` builds it (the code a sweep's
  trial runs, minus Tune's reporting): config validation and the design's arms, the memory
  check, the release of earlier trials, the market's paths and features, the extension load
  (CUDA only), initial weights, the gems' dry check, the rest of the learner and trainer, the
  baselines and folds table sent with the first report, then the first epoch: prefill, graph
  capture with its warm-up (CUDA only), training iterations, evaluation.

Trial 1 is cold; trials 2.. (`--trials`) run in the same process and are what a reused actor
pays (their median is the warm column). "fixed" is a trial's wall (from the process's start for
the cold one) less its training iterations and evaluation, the part a longer trial does not
repeat. The phases are measured by wrapping the functions that run them (their own time, nested
phases excluded); a wrapped function that no longer exists stops the script, naming it.

`--sweep N` also runs the real `tune-gems sweep` of N such trials one after another (a spec with
nothing searched, `max_concurrent_trials: 1`) and reads Tune's result.json of each: the gap
before each trial's function starts (Ray's actor start and scheduling; the first gap includes
the driver's own start-up and Ray's), the trial's in-function start-up (its first report's
`time_this_iter_s` less the epoch's train_s and eval_s), and the worker process id of each trial
(one id for every trial when the actor is reused). Writes a table and, with `--out`, JSON.

For a before/after comparison run the same command with PYTHONPATH at the two trees: on a tree
whose trainable has no `trial_trainer` (before issue 33), the same calls are made in line.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

ISSUE_TRIAL = ("trainer.population=64", "trainer.epochs=1", "trainer.iterations_per_epoch=20")
"""The issue's trial: 1 epoch x 20 iterations at P=64."""
TRAINING_PHASES = ("training iterations", "evaluation")
"""What a longer trial repeats every epoch: not part of its fixed start-up."""
SWEEP_TIMEOUT_S = 3600
CHILD_FLAG = "--child"


# -- the clock ----------------------------------------------------------------------------------


@dataclass
class Phase:
    wall: float = 0.0  # the phase's own seconds (nested phases excluded)
    cpu: float = 0.0
    calls: int = 0


@dataclass
class PhaseClock:
    """Nested phases, each charged its own time: a phase's inclusive time less its children's."""

    phases: dict[str, Phase] = field(default_factory=dict)
    _stack: list[list[float]] = field(default_factory=list)  # per open phase: children's wall, cpu

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        w0, c0 = time.perf_counter(), time.process_time()
        self._stack.append([0.0, 0.0])
        try:
            yield
        finally:
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            child_wall, child_cpu = self._stack.pop()
            p = self.phases.setdefault(name, Phase())
            p.wall += wall - child_wall
            p.cpu += cpu - child_cpu
            p.calls += 1
            if self._stack:
                self._stack[-1][0] += wall
                self._stack[-1][1] += cpu

    def add(self, name: str, wall: float, cpu: float) -> None:
        p = self.phases.setdefault(name, Phase())
        p.wall, p.cpu, p.calls = p.wall + wall, p.cpu + cpu, p.calls + 1

    def take(self) -> dict[str, dict[str, float]]:
        """The phases so far as plain data; the clock starts over."""
        out = {k: {"wall_s": v.wall, "cpu_s": v.cpu, "calls": v.calls} for k, v in self.phases.items()}
        self.phases = {}
        return out


def _wrap(clock: PhaseClock, owner: Any, attr: str, phase: str) -> None:
    """Charge every call of owner.attr (a module's function or a class's method) to `phase`."""
    if not hasattr(owner, attr):
        raise SystemExit(f"benchmarks/startup.py: {getattr(owner, '__name__', owner)}.{attr} is gone; update the phase list")
    original = getattr(owner, attr)

    @functools.wraps(original)
    def timed(*args, **kwargs):
        with clock.phase(phase):
            return original(*args, **kwargs)

    setattr(owner, attr, timed)


def instrument(clock: PhaseClock) -> None:
    """Wrap the functions that run each phase of a trial (where they are looked up at call time)."""
    from tune_gems.data import series
    try:  # the market split of issue 29: the Market in market.features
        from tune_gems.market.features import Market
    except ImportError:  # a tree from before it
        from tune_gems.market.env import Market
    from tune_gems.model import network
    from tune_gems.ops import backend
    from tune_gems.sweep import trainable
    from tune_gems.trainer import graph, learner, member_gems

    trainer_cls = trainable.Trainer
    try:  # the trainer split of issue 29: arms expanded once (design.arms.run_arms), a GreedyEvaluator
        from tune_gems.design import arms as arms_mod
        from tune_gems.trainer import evaluator

        expands, evaluates = (arms_mod, "expand_arms"), (evaluator.GreedyEvaluator, "evaluate")
    except ImportError:  # a tree from before it
        expands, evaluates = (learner, "expand_arms"), (trainer_cls, "evaluate")
    wraps = [
        (trainable, "trial_config", "config validation + arms"),
        (*expands, "config validation + arms"),
        (trainable, "check_training_fits", "memory check"),
        (series, "load_paths", "market paths"),
        (Market, "__init__", "market features"),
        (backend, "load_extension", "extension load (CUDA)"),
        (network.BranchingC51, "__init__", "initial weights"),
        (member_gems.MemberGems, "check", "gems' dry check"),
        (learner.Learner, "__init__", "learner: rest (replay, optimiser, target net)"),
        (trainer_cls, "__init__", "trainer: rest"),
        (trainer_cls, "_prefill", "prefill"),
        (graph.StepRunner, "_capture", "graph capture + warm-up (CUDA)"),
        (*evaluates, "evaluation"),
        (trainer_cls, "run_epoch", "training iterations"),
    ]
    if hasattr(trainable, "release_finished_trials"):
        wraps.append((trainable, "release_finished_trials", "release earlier trials"))
    for owner, attr, phase in wraps:
        _wrap(clock, owner, attr, phase)


# -- one process: cold, then warm trials --------------------------------------------------------


def _trial_trainer(trainable: Any, base: dict, prices: Any) -> Any:
    """The trial's Trainer as the tree's trainable builds it."""
    if hasattr(trainable, "trial_trainer"):
        return trainable.trial_trainer({}, base=base, prices=prices, design="none", log=None)
    cfg = trainable.apply_spec_design(trainable.trial_config(base, {}), "none")  # before issue 33: in line
    trainable.check_training_fits(cfg, where="this trial's node: ")
    return trainable.Trainer(cfg, prices=prices, log=None)


def child(args: argparse.Namespace) -> None:
    spawned = args.spawned_at
    clock = PhaseClock()
    clock.add("interpreter start", time.time() - spawned, time.process_time())
    with clock.phase("import torch"):
        import torch
    with clock.phase("import ray.tune"):
        import ray.tune  # noqa: F401 - a trial's process imports it with the trainable
    with clock.phase("import tune_gems"):
        from tune_gems.config.load import build_config
        from tune_gems.config.yaml_io import apply_overrides
        from tune_gems.sweep import trainable
        try:  # the trainer split of issue 29
            from tune_gems.trainer.run_setup import load_run_prices as load_prices, resolve_device
        except ImportError:  # a tree from before it
            from tune_gems.trainer.trainer import load_prices, resolve_device
    instrument(clock)
    base = apply_overrides({}, [*ISSUE_TRIAL, *args.overrides])
    cfg = build_config(base, "overrides")
    device = resolve_device(cfg.device)
    cuda = device.type == "cuda"
    if cuda:
        with clock.phase("CUDA context"):
            torch.empty(1, device="cuda")
            torch.cuda.synchronize()
    process = clock.take()
    with clock.phase("driver: load prices"):
        prices = load_prices(cfg)  # once per sweep, in the driver
    driver = clock.take()

    trials = []
    for _ in range(args.trials):
        w0, c0 = time.perf_counter(), time.process_time()
        trainer = _trial_trainer(trainable, base, prices)
        with clock.phase("baselines + folds table"):
            trainer.baselines()
            trainer.fold_table()
        trainer.run_epoch()
        if cuda:
            torch.cuda.synchronize()
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        phases = clock.take()
        own = sum(p["wall_s"] for p in phases.values())
        phases["trial: rest"] = {"wall_s": wall - own, "cpu_s": cpu - sum(p["cpu_s"] for p in phases.values()), "calls": 1}
        trials.append({"phases": phases, "wall_s": wall, "cpu_s": cpu,
                       "torch._dynamo imported": "torch._dynamo" in sys.modules,
                       "torch.utils.cpp_extension imported": "torch.utils.cpp_extension" in sys.modules})
        del trainer
    Path(args.result).write_text(json.dumps({"process": process, "driver": driver, "trials": trials,
                                             "device": str(device),
                                             "torch": torch.__version__, "python": platform.python_version()}))


def run_process(trials: int, overrides: list[str]) -> dict:
    """Run `child` in a fresh interpreter and return what it measured."""
    with tempfile.TemporaryDirectory(prefix="startup-") as d:
        result = Path(d) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), CHILD_FLAG, "--result", str(result),
               "--trials", str(trials), "--spawned-at", repr(time.time()), *overrides]
        subprocess.run(cmd, check=True)
        return json.loads(result.read_text())


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summarise(measured: dict) -> dict:
    """The cold trial (with the process's start-up) and the warm trials' median, per phase."""
    trials = measured["trials"]
    cold = {**measured["process"], **trials[0]["phases"]}
    names = list(dict.fromkeys([*measured["process"], *(n for t in trials for n in t["phases"])]))
    warm = {n: {k: _median([t["phases"].get(n, {}).get(k, 0.0) for t in trials[1:]]) for k in ("wall_s", "cpu_s")} for n in names}
    process_wall = sum(p["wall_s"] for p in measured["process"].values())
    process_cpu = sum(p["cpu_s"] for p in measured["process"].values())

    def totals(wall: float, cpu: float, phases: dict) -> dict:
        training = sum(phases.get(n, {}).get("wall_s", 0.0) for n in TRAINING_PHASES)
        training_cpu = sum(phases.get(n, {}).get("cpu_s", 0.0) for n in TRAINING_PHASES)
        return {"wall_s": wall, "cpu_s": cpu, "training_and_evaluation_s": training, "fixed_s": wall - training,
                "training_and_evaluation_cpu_s": training_cpu, "fixed_cpu_s": cpu - training_cpu}

    out = {"phases": names, "cold": cold, "cold_total": totals(process_wall + trials[0]["wall_s"], process_cpu + trials[0]["cpu_s"], cold)}
    if len(trials) > 1:
        out["warm"] = warm
        out["warm_total"] = totals(_median([t["wall_s"] for t in trials[1:]]), _median([t["cpu_s"] for t in trials[1:]]), warm)
    return out


def print_table(summary: dict, driver: dict) -> None:
    warm = "warm" in summary
    print(f"{'phase':48s} {'cold wall s':>11s} {'cold cpu s':>10s}" + (f" {'warm wall s':>11s} {'warm cpu s':>10s}" if warm else ""))
    for name in summary["phases"]:
        c = summary["cold"].get(name, {"wall_s": 0.0, "cpu_s": 0.0})
        row = f"{name:48s} {c['wall_s']:11.2f} {c['cpu_s']:10.2f}"
        if warm:
            w = summary["warm"][name]
            row += f" {w['wall_s']:11.2f} {w['cpu_s']:10.2f}"
        print(row)
    rows = (("total", "wall_s", "cpu_s"), ("  of which training + evaluation", "training_and_evaluation_s", "training_and_evaluation_cpu_s"),
            ("fixed start-up", "fixed_s", "fixed_cpu_s"))
    for label, wall_key, cpu_key in rows:
        row = f"{label:48s} {summary['cold_total'][wall_key]:11.2f} {summary['cold_total'][cpu_key]:10.2f}"
        if warm:
            row += f" {summary['warm_total'][wall_key]:11.2f} {summary['warm_total'][cpu_key]:10.2f}"
        print(row)
    for name, p in driver.items():
        print(f"(once per sweep) {name}: {p['wall_s']:.2f} s wall, {p['cpu_s']:.2f} s cpu")


# -- the real sweep ------------------------------------------------------------------------------


def run_sweep(n: int, overrides: list[str]) -> dict:
    """`tune-gems sweep` of n trials one after another, and what Tune recorded of each."""
    import yaml

    from tune_gems.config.yaml_io import apply_overrides

    with tempfile.TemporaryDirectory(prefix="startup-sweep-") as d:
        spec = {"description": "benchmarks/startup.py: trials one after another, nothing searched",
                "num_samples": n, "max_concurrent_trials": 1, "seeds": "per_trial",
                "config": apply_overrides({}, [*ISSUE_TRIAL, *overrides]),
                "objective": {"metric": "val_sharpe_mean", "mode": "max"}, "resources": {"cpu": 1}}
        path = Path(d) / "startup.yaml"
        path.write_text(yaml.safe_dump(spec))
        # run from the temporary folder with the measured tree first on the path: `python -m`
        # puts the working directory first, which must not be another checkout
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_tree(), os.environ.get("PYTHONPATH")]))}
        t0 = time.time()
        subprocess.run([sys.executable, "-m", "tune_gems", "sweep", str(path), "--storage", str(Path(d) / "exp"), "--name", "startup"],
                       check=True, timeout=SWEEP_TIMEOUT_S, stdout=subprocess.DEVNULL, cwd=d, env=env)
        wall = time.time() - t0
        trials = []
        for result in (Path(d) / "exp" / "startup").glob("*/result.json"):
            first = json.loads(result.read_text().splitlines()[0])
            start = first["timestamp"] - first["time_this_iter_s"]
            trials.append({"trial_id": first["trial_id"], "pid": first["pid"], "start": start, "end": first["timestamp"],
                           "in_trial_start_up_s": first["time_this_iter_s"] - first["train_s"] - first["eval_s"],
                           "train_s": first["train_s"], "eval_s": first["eval_s"]})
    trials.sort(key=lambda t: t["start"])
    previous = t0
    for t in trials:
        t["gap_before_s"] = t["start"] - previous  # Ray: actor start (or reuse) and scheduling
        previous = t["end"]
    return {"wall_s": wall, "trials": trials, "distinct_pids": len({t["pid"] for t in trials})}


def print_sweep(sweep: dict) -> None:
    print(f"\ntune-gems sweep, {len(sweep['trials'])} trials one after another: {sweep['wall_s']:.1f} s wall, "
          f"{sweep['distinct_pids']} worker process(es)")
    print(f"{'trial':>5s} {'pid':>8s} {'gap before s':>12s} {'in-trial start-up s':>19s} {'train s':>8s} {'eval s':>7s}")
    for i, t in enumerate(sweep["trials"]):
        print(f"{i:5d} {t['pid']:8d} {t['gap_before_s']:12.2f} {t['in_trial_start_up_s']:19.2f} {t['train_s']:8.2f} {t['eval_s']:7.2f}")


def _tree() -> str:
    """The source tree whose tune_gems this process imports (the one measured)."""
    import tune_gems

    return str(Path(tune_gems.__file__).resolve().parents[1])


def _commit() -> str:
    try:
        out = subprocess.run(["git", "-C", _tree(), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    except OSError:
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def show(out: dict) -> None:
    """The tables of one run of this script (what `--out` wrote)."""
    measured = out["measured"]
    print(f"startup: {measured['device']}, torch {measured['torch']}, python {measured['python']}, tree {out['tree']} "
          f"({out['commit']}), overrides {' '.join(out['overrides'])}")
    print_table(summarise(measured), measured["driver"])
    print("torch._dynamo imported:", [t["torch._dynamo imported"] for t in measured["trials"]],
          "| torch.utils.cpp_extension imported:", [t["torch.utils.cpp_extension imported"] for t in measured["trials"]])
    if "sweep" in out:
        print_sweep(out["sweep"])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=2, help="trials in the one process: 1 cold, the rest warm")
    ap.add_argument("--sweep", type=int, default=0, help="also run a real `tune-gems sweep` of this many trials")
    ap.add_argument("--out", type=Path, help="JSON file to write")
    ap.add_argument("--show", type=Path, help="print the tables of a JSON file this script wrote, and stop")
    ap.add_argument(CHILD_FLAG, action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--spawned-at", type=float, help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="*", help="config overrides KEY=VALUE")
    args = ap.parse_args(argv)
    if args.trials < 1:
        ap.error("--trials must be at least 1")
    if args.child:
        child(args)
        return
    if args.show:
        show(json.loads(args.show.read_text()))
        return
    measured = run_process(args.trials, args.overrides)
    out = {"command": " ".join(["python", "benchmarks/startup.py", *(argv if argv is not None else sys.argv[1:])]),
           "tree": _tree(), "commit": _commit(), "host": platform.node(), "cpus": os.cpu_count(),
           "overrides": [*ISSUE_TRIAL, *args.overrides], "measured": measured, "summary": summarise(measured)}
    if args.sweep:
        out["sweep"] = run_sweep(args.sweep, args.overrides)
    show(out)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
