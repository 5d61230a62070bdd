"""Where a sweep trial's wall time goes, part by part, and what each of Tune's driver callbacks costs.

    python benchmarks/sweep_efficiency.py --run [--tree PATH ...] [--spec SPEC.yaml] [--set KEY=VALUE ...] [--out FILE.json]
    python benchmarks/sweep_efficiency.py --show FILE.json
    python benchmarks/sweep_efficiency.py EXPERIMENT_DIR [--sweep-wall SECONDS] [--out FILE.json]

`--run` runs a real `tune-gems sweep` (`run_sweep`, a private local Ray) in a fresh Python
process per source tree (`--tree`, default the tree this script belongs to; PYTHONPATH at each
tree, so a before/after comparison runs one script, back to back, its columns side by side).
The sweep is `BENCH_SPEC`: the moonshot's shape (three arms of 64 seeds each, three gems
measured, one wired per arm: 192 members, so each report carries a member table of the
moonshot's size) with a tiny network and two iterations per epoch, so that everything around
training shows; three trials one after another in one reused actor (cold, then warm). `--spec`
runs another spec instead (on the GPU: `--spec benchmarks/moonshot.yaml`; its storage and name
are the script's own temporary ones), and `--set` changes a spec key (`config.trainer.epochs=10`,
`num_samples=3`). One thread (OMP_NUM_THREADS=1, MKL_NUM_THREADS=1, one CPU per trial).

Timers, each wrapped around the function that does the work (a wrapped name that no longer
exists stops the script, naming it):

- in each trial (a wrapper of the trainable, shipped to the worker by value): the worker
  process's age when the trial function starts (cold: Ray's worker start and the imports),
  the trial's own start-up before its first epoch, of which the trainer's build
  (`trial_trainer`) and the market (`prepare_market`), the trainer's training and evaluation
  seconds (its `train_s`, `eval_s`), every `tune.report` (the trial is blocked there until the
  driver has processed the result and asked for the next one), its payload (JSON bytes), and the
  rest (the epoch's rows, JSON, checkpoint snapshots);
- on the driver (this process): each Tune callback's hooks one by one (the console, the
  TensorBoard writer, the JSON and CSV loggers, ...), the searcher's and the scheduler's
  `on_trial_result`, the trial's metric bookkeeping (`Trial.update_last_result`), the whole
  processing of a result (`TuneController._process_trial_result`) and the experiment-state
  snapshots.

Without `--run`, EXPERIMENT_DIR is read as before (gpu_session.sh's moonshot and efficiency
stages): Tune's per-trial `result.json` and the trainer's per-epoch `train_s` / `eval_s` give
one row per trial (training, evaluation, wall = first report's start to last report, training /
wall) and the sweep's wall (or `--sweep-wall`) against the sum of training.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUN_TIMEOUT_S = 3600
CHILD_FLAG = "--child"
THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
MOONSHOT_ARMS = [
    {"name": "measured"},
    {"name": "g10-wired", "gems.g10.mode": "wire", "gems.g10.weight": 0.1},
    {"name": "g12-wired", "gems.g12.mode": "wire", "gems.g12.weight": 0.1},
]
BENCH_SPEC = {
    "description": "benchmarks/sweep_efficiency.py: the moonshot's shape (3 arms x 64 seeds), tiny on the CPU",
    "num_samples": 3,
    "max_concurrent_trials": 1,
    "seeds": "common",
    "config": {
        "seed": 0,
        "device": "cpu",
        "trainer": {"population": 64, "epochs": 8, "iterations_per_epoch": 2, "batch_size": 16, "n_envs": 2,
                    "replay_capacity": 256, "learning_starts": 32, "checkpoint_every": 0, "checkpoint_interval_s": 0},
        "env": {"window": 8, "episode_length": 32},
        "model": {"hidden": 16, "stream_hidden": 8, "atoms": 11, "predictor_hidden": 16},
        "data": {"synthetic": {"n": 900}},
        "gems": {"g6": {"mode": "measure"}, "g10": {"mode": "measure"}, "g12": {"mode": "measure"}},
        "arms": {"list": MOONSHOT_ARMS},
    },
    "objective": {"metric": "val_alpha_sharpe_mean_lastk", "mode": "max"},
    "resources": {"cpu": 1},
    "failure": {"max_failures": 0},
}
"""The benchmark's sweep (module doc); `--set` overrides its keys."""


# -- after the fact: a stored experiment's result.json ------------------------------------------------


def trial_rows(exp: Path) -> list[dict]:
    rows = []
    for result in sorted(exp.glob("*/result.json")):
        lines = [json.loads(line) for line in result.read_text().splitlines() if line.strip()]
        if not lines:
            continue
        by_epoch = {}
        for r in lines:  # a resumed trial may report an epoch twice: the last report wins
            if "epoch" in r:
                by_epoch[int(r["epoch"])] = r
        reports = [by_epoch[e] for e in sorted(by_epoch)]
        if not reports:
            continue
        first, last = lines[0], lines[-1]
        start = first["timestamp"] - first.get("time_this_iter_s", 0.0)
        train = sum(float(r.get("train_s", float("nan"))) for r in reports)
        evals = sum(float(r.get("eval_s", float("nan"))) for r in reports)
        wall = last["timestamp"] - start
        rows.append({
            "trial_id": last.get("trial_id", result.parent.name),
            "epochs": len(reports),
            "train_s": train,
            "eval_s": evals,
            "wall_s": wall,
            "train_share": train / wall if wall > 0 else float("nan"),
            "start": start,
            "end": last["timestamp"],
        })
    return rows


def summarise(rows: list[dict], sweep_wall: float | None = None) -> dict:
    train = sum(r["train_s"] for r in rows)
    span = (max(r["end"] for r in rows) - min(r["start"] for r in rows)) if rows else float("nan")
    wall = sweep_wall if sweep_wall is not None else span
    return {
        "trials": len(rows),
        "train_s_total": train,
        "eval_s_total": sum(r["eval_s"] for r in rows),
        "trial_wall_s_total": sum(r["wall_s"] for r in rows),
        "sweep_wall_s": wall,
        "sweep_wall_over_train": wall / train if train > 0 else float("nan"),
        "goal_wall_over_train": 1.25,
    }


def read_experiment(a: argparse.Namespace) -> int:
    rows = trial_rows(Path(a.experiment))
    if not rows:
        print(f"{a.experiment}: no trial results (result.json) found", file=sys.stderr)
        return 2
    s = summarise(rows, a.sweep_wall)
    print(f"{'trial':<14}{'epochs':>7}{'train s':>10}{'eval s':>9}{'wall s':>9}{'train/wall':>12}")
    for r in rows:
        print(f"{r['trial_id']:<14}{r['epochs']:>7}{r['train_s']:>10.1f}{r['eval_s']:>9.1f}{r['wall_s']:>9.1f}{r['train_share']:>12.2f}")
    print(
        f"sweep: {s['trials']} trials, training {s['train_s_total']:.1f} s, evaluation {s['eval_s_total']:.1f} s, "
        f"wall {s['sweep_wall_s']:.1f} s = {s['sweep_wall_over_train']:.2f} x training (goal <= {s['goal_wall_over_train']})"
    )
    if a.out:
        Path(a.out).write_text(json.dumps({"trials": rows, "summary": s}, indent=2))
    return 0


# -- the driver's timers ---------------------------------------------------------------------------


class Timers:
    """Seconds and calls per name (the driver's parts)."""

    def __init__(self) -> None:
        self.parts: dict[str, list[float]] = {}  # name -> [calls, seconds, largest]

    def add(self, name: str, seconds: float) -> None:
        p = self.parts.setdefault(name, [0, 0.0, 0.0])
        p[0] += 1
        p[1] += seconds
        p[2] = max(p[2], seconds)

    @contextlib.contextmanager
    def timing(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def wrap(self, owner, attr: str, name: str) -> None:
        if not hasattr(owner, attr):
            raise SystemExit(f"benchmarks/sweep_efficiency.py: {owner.__name__}.{attr} is gone; update the timers")
        original = getattr(owner, attr)
        timers = self

        def timed(*args, **kwargs):
            with timers.timing(name):
                return original(*args, **kwargs)

        setattr(owner, attr, timed)

    def table(self) -> dict[str, dict[str, float]]:
        return {k: {"calls": int(c), "seconds": s, "largest_s": m} for k, (c, s, m) in self.parts.items()}


CALLBACK_HOOKS = ("on_trial_result", "on_trial_save", "on_checkpoint", "on_trial_complete", "on_trial_start",
                  "on_trial_error", "on_step_begin", "on_step_end", "on_experiment_end")


def instrument_driver(timers: Timers, sizes: list[int]) -> None:
    """Time Tune's callbacks one by one (CallbackList's hooks), the searcher, the scheduler,
    the trial's bookkeeping, the whole processing of a result and the experiment snapshots."""
    from ray.tune.callback import CallbackList
    from ray.tune.execution.tune_controller import TuneController
    from ray.tune.experiment import Trial
    from ray.tune.schedulers import AsyncHyperBandScheduler, FIFOScheduler
    from ray.tune.search import SearchGenerator

    for hook in CALLBACK_HOOKS:
        if not hasattr(CallbackList, hook):
            raise SystemExit(f"benchmarks/sweep_efficiency.py: CallbackList.{hook} is gone; update the timers")

        def each(self, _hook=hook, **info):
            for callback in self._callbacks:
                with timers.timing(f"callback {type(callback).__name__}.{_hook}"):
                    getattr(callback, _hook)(**info)

        setattr(CallbackList, hook, each)
    timers.wrap(SearchGenerator, "on_trial_result", "searcher on_trial_result")
    timers.wrap(SearchGenerator, "on_trial_complete", "searcher on_trial_complete")
    timers.wrap(FIFOScheduler, "on_trial_result", "scheduler on_trial_result")
    timers.wrap(AsyncHyperBandScheduler, "on_trial_result", "scheduler on_trial_result")
    timers.wrap(Trial, "update_last_result", "trial bookkeeping (update_last_result)")
    timers.wrap(TuneController, "checkpoint", "experiment state snapshot (TuneController.checkpoint)")
    original = TuneController._process_trial_result

    def process(self, trial, result):
        sizes.append(len(json.dumps(result, default=str)))
        with timers.timing("a result, all of it (TuneController._process_trial_result)"):
            return original(self, trial, result)

    TuneController._process_trial_result = process


# -- the trial's timers (run in the worker) ---------------------------------------------------------


def make_timed_trial(records_dir: str):
    """The product's trial function with timers around its parts (module doc), writing one JSON
    line per event to `records_dir/<pid>-<trial id>.jsonl`. Built in a function of this script
    (run as __main__), so cloudpickle ships it to the worker by value; it imports the real
    trainable there by name."""

    def timed_trial(params, *, base, prices, objective, design="none", verbose=False):
        import json as _json
        import os as _os
        import time as _time

        import psutil
        from ray import tune as ray_tune

        from tune_gems.sweep import trainable as tr

        entered = _time.time()
        trial_id = ray_tune.get_context().get_trial_id()
        out = open(_os.path.join(records_dir, f"{_os.getpid()}-{trial_id}.jsonl"), "a")

        def record(kind, **fields):
            out.write(_json.dumps({"kind": kind, "pid": _os.getpid(), "trial_id": trial_id, **fields}) + "\n")
            out.flush()

        record("enter", t=entered, process_start=psutil.Process().create_time())
        real_tune, real_trainer, real_market = tr.tune, tr.trial_trainer, getattr(tr, "prepare_market", None)

        class TimedTune:
            def __getattr__(self, name):
                return getattr(real_tune, name)

            def report(self, metrics, checkpoint=None, **kw):
                t0 = _time.time()
                try:
                    return real_tune.report(metrics, checkpoint=checkpoint, **kw)
                finally:
                    record("report", start=t0, end=_time.time(), epoch=metrics.get("epoch"), train_s=metrics.get("train_s"),
                           eval_s=metrics.get("eval_s"), bytes=len(_json.dumps(metrics, default=str)),
                           checkpoint=checkpoint is not None)

        def timed(fn, kind):
            def call(*args, **kwargs):
                t0 = _time.time()
                try:
                    return fn(*args, **kwargs)
                finally:
                    record(kind, start=t0, end=_time.time())
            return call

        tr.tune = TimedTune()
        tr.trial_trainer = timed(real_trainer, "trial_trainer")
        if real_market is not None:
            tr.prepare_market = timed(real_market, "market")
        try:
            return tr.train_trial(params, base=base, prices=prices, objective=objective, design=design, verbose=verbose)
        finally:
            tr.tune, tr.trial_trainer = real_tune, real_trainer
            if real_market is not None:
                tr.prepare_market = real_market
            record("exit", t=_time.time())
            out.close()

    return timed_trial


def trial_parts(records: list[dict]) -> dict:
    """One trial's parts (module doc) from its records."""
    enter = next(r for r in records if r["kind"] == "enter")
    exit_ = next((r for r in records if r["kind"] == "exit"), None)
    reports = sorted((r for r in records if r["kind"] == "report"), key=lambda r: r["start"])
    epochs = {}
    for r in reports:
        if r["epoch"] is not None:
            epochs[int(r["epoch"])] = r  # the last report of an epoch holds its timings
    train = sum(float(r["train_s"]) for r in epochs.values())
    evals = sum(float(r["eval_s"]) for r in epochs.values())
    end = exit_["t"] if exit_ is not None else (reports[-1]["end"] if reports else enter["t"])
    wall = end - enter["t"]
    first = reports[0] if reports else None
    first_epoch = epochs[min(epochs)] if epochs else None
    start_up = (first["start"] - enter["t"] - float(first_epoch["train_s"]) - float(first_epoch["eval_s"])) if first else float("nan")
    reported = sum(r["end"] - r["start"] for r in reports)
    trainer = sum(r["end"] - r["start"] for r in records if r["kind"] == "trial_trainer")
    market = sum(r["end"] - r["start"] for r in records if r["kind"] == "market")
    return {
        "trial_id": enter["trial_id"], "pid": enter["pid"], "enter": enter["t"], "end": end,
        "process_age_at_start_s": enter["t"] - enter["process_start"],
        "epochs": len(epochs), "wall_s": wall, "train_s": train, "eval_s": evals,
        "start_up_s": start_up, "trial_trainer_s": trainer, "market_s": market,
        "reports": len(reports), "report_s": reported,
        "report_mean_ms": 1000 * reported / len(reports) if reports else float("nan"),
        "report_bytes_mean": sum(r["bytes"] for r in reports) / len(reports) if reports else float("nan"),
        "rest_s": wall - train - evals - reported - start_up,
        "wall_over_train": wall / train if train > 0 else float("nan"),
    }


def child(a: argparse.Namespace) -> None:
    """One measured sweep in this (fresh) process: the spec written, the driver instrumented,
    `run_sweep` called, every trial's records read back."""
    import yaml

    from tune_gems.config.yaml_io import apply_overrides, read_yaml
    from tune_gems.sweep import driver, trainable

    base = read_yaml(a.spec) if a.spec else json.loads(json.dumps(BENCH_SPEC))
    spec = apply_overrides(base, list(a.set or []))
    timers, sizes = Timers(), []
    instrument_driver(timers, sizes)
    with tempfile.TemporaryDirectory(prefix="sweep-efficiency-") as d:
        records_dir = Path(d) / "records"
        records_dir.mkdir()
        path = Path(d) / "bench.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        trainable.train_trial = make_timed_trial(str(records_dir))  # fit_tuner imports it at call time
        t0 = time.perf_counter()
        driver.run_sweep(path, storage=str(Path(d) / "exp"), name="bench")
        wall = time.perf_counter() - t0
        by_trial: dict[str, list[dict]] = {}
        for f in records_dir.glob("*.jsonl"):
            for line in f.read_text().splitlines():
                r = json.loads(line)
                by_trial.setdefault(r["trial_id"], []).append(r)
        exp = Path(d) / "exp" / "bench"
        files: dict[str, int] = {}
        for f in exp.rglob("*"):
            if f.is_file() and f.name in ("result.json", "progress.csv"):
                files[f.name] = files.get(f.name, 0) + f.stat().st_size
        checkpoints = [sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) for folder in sorted(exp.glob("*/checkpoint_*"))]
        tables = {name: (exp / name).stat().st_size for name in ("members.parquet", "history.parquet") if (exp / name).is_file()}
    trials = sorted((trial_parts(rs) for rs in by_trial.values()), key=lambda t: t["enter"])
    Path(a.result).write_text(json.dumps({
        "sweep_wall_s": wall, "trials": trials, "driver": timers.table(), "results": len(sizes),
        "result_bytes_mean": sum(sizes) / len(sizes) if sizes else float("nan"), "files": files, "checkpoints": checkpoints,
        "tables": tables, "spec": spec,
    }))


# -- the comparison --------------------------------------------------------------------------------------


def _tree_of_this_script() -> str:
    return str(Path(__file__).resolve().parents[1])


def _commit(tree: str) -> str:
    out = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else "(not a git tree)"


def run_tree(tree: str, sets: list[str], spec: str | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="sweep-efficiency-run-") as d:
        result = Path(d) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), CHILD_FLAG, "--result", str(result),
               *(x for s in sets for x in ("--set", s)), *(["--spec", spec] if spec else [])]
        env = {**os.environ, **THREAD_ENV, "PYTHONPATH": os.pathsep.join(filter(None, [tree, os.environ.get("PYTHONPATH")]))}
        subprocess.run(cmd, check=True, timeout=RUN_TIMEOUT_S, cwd=d, env=env, stdout=subprocess.DEVNULL)
        return json.loads(result.read_text())


TRIAL_ROWS = (
    ("trial wall, all trials (s)", "wall_s"),
    ("  training (s)", "train_s"),
    ("  evaluation (s)", "eval_s"),
    ("  blocked in tune.report (s)", "report_s"),
    ("  start-up before the first epoch (s)", "start_up_s"),
    ("    of which the trainer's build (s)", "trial_trainer_s"),
    ("    of which the market (s)", "market_s"),
    ("  the rest: rows, JSON, snapshots (s)", "rest_s"),
)


LABEL_WIDTH = 72
SHOWN_MS = 0.05
"""Driver parts cheaper than this per result in every run are summed in one row."""


def _per_result(run: dict, name: str) -> float:
    part = run["driver"].get(name)
    return 1000 * part["seconds"] / max(run["results"], 1) if part else 0.0


def show(out: dict) -> None:
    runs = out["runs"]
    labels = [f"{Path(r['tree']).name or r['tree']}@{r['commit']}" for r in runs]
    width = max(14, *(len(x) + 2 for x in labels))
    print(f"sweep_efficiency: {out['host']}, {out['cpus']} CPUs, python {out['python']}, {THREAD_ENV}")
    print(f"command: {out['command']}")
    print(f"{'':{LABEL_WIDTH}s}" + "".join(f"{x:>{width}s}" for x in labels))

    def row(label: str, values: list[float], fmt: str = "{:.2f}") -> None:
        print(f"{label:{LABEL_WIDTH}s}" + "".join(f"{fmt.format(v):>{width}s}" for v in values))

    row("sweep wall (s)", [r["m"]["sweep_wall_s"] for r in runs])
    for label, key in TRIAL_ROWS:
        row(label, [sum(t[key] for t in r["m"]["trials"]) for r in runs])
    row("trial wall / training", [sum(t["wall_s"] for t in r["m"]["trials"]) / max(sum(t["train_s"] for t in r["m"]["trials"]), 1e-9) for r in runs])
    row("cold trial: worker process age at start (s)", [r["m"]["trials"][0]["process_age_at_start_s"] for r in runs])
    row("cold trial: start-up (s)", [r["m"]["trials"][0]["start_up_s"] for r in runs])
    row("warm trials: start-up, mean (s)", [_mean([t["start_up_s"] for t in r["m"]["trials"][1:]]) for r in runs])
    row("reports (all trials)", [sum(t["reports"] for t in r["m"]["trials"]) for r in runs], "{:.0f}")
    row("per report: blocked (ms)", [_mean([t["report_mean_ms"] for t in r["m"]["trials"]]) for r in runs], "{:.1f}")
    row("per report: payload (KB)", [_mean([t["report_bytes_mean"] for t in r["m"]["trials"]]) / 1000 for r in runs], "{:.1f}")
    row("driver: results processed", [r["m"]["results"] for r in runs], "{:.0f}")
    row("driver: result size as received (KB)", [r["m"]["result_bytes_mean"] / 1000 for r in runs], "{:.1f}")
    names = list(dict.fromkeys(n for r in runs for n in r["m"]["driver"]))
    shown = [n for n in names if max(_per_result(r["m"], n) for r in runs) >= SHOWN_MS]
    print(f"driver, ms per result processed (each part's own calls; parts under {SHOWN_MS} ms in every run summed):")
    for name in sorted(shown, key=lambda n: -max(_per_result(r["m"], n) for r in runs)):
        row(f"  {name}", [_per_result(r["m"], name) for r in runs], "{:.2f}")
    row("  the other parts", [sum(_per_result(r["m"], n) for n in names if n not in shown) for r in runs], "{:.2f}")
    for r, label in zip(runs, labels):
        print(f"{label}: Tune's files {r['m']['files']} bytes, tables {r['m']['tables']} bytes, "
              f"checkpoint folders kept (bytes each) {r['m']['checkpoints']}")


def _mean(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return sum(values) / len(values) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("experiment", nargs="?", help="a stored experiment folder to read (without --run)")
    p.add_argument("--sweep-wall", type=float, help="the sweep command's own wall time, if measured around it")
    p.add_argument("--run", action="store_true", help="run the benchmark sweep with timers (module doc)")
    p.add_argument("--tree", action="append", help="a source tree to measure (repeat for side by side; default this one)")
    p.add_argument("--spec", help="a sweep spec to run instead of BENCH_SPEC (module doc)")
    p.add_argument("--set", action="append", help="KEY=VALUE: a key of the benchmark's spec")
    p.add_argument("--show", type=Path, help="print the tables of a JSON file --run wrote, and stop")
    p.add_argument("--out", help="write what was measured as JSON here")
    p.add_argument(CHILD_FLAG, action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        child(a)
        return 0
    if a.show:
        show(json.loads(a.show.read_text()))
        return 0
    if not a.run:
        if not a.experiment:
            p.error("give an experiment folder, --run or --show")
        return read_experiment(a)
    trees = [str(Path(t).resolve()) for t in (a.tree or [_tree_of_this_script()])]
    out = {"command": " ".join(["python", "benchmarks/sweep_efficiency.py", *(argv if argv is not None else sys.argv[1:])]),
           "host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(), "runs": []}
    for tree in trees:
        out["runs"].append({"tree": tree, "commit": _commit(tree), "m": run_tree(tree, a.set or [], str(Path(a.spec).resolve()) if a.spec else None)})
    show(out)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=1))
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
