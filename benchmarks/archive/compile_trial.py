"""Trial: torch.compile (inductor, without its own CUDA graphs) on the elementwise glue of the
training iteration, inside the manually captured CUDA graph (issue #15, item 4).

The rule the trial answers: keep compiled glue only if two runs stay bit-identical, the
iteration gets faster, and the compile time is paid once per node (a second process finds the
inductor cache). So one invocation runs worker processes one after the other, at the
train_step shape (benchmarks/train_step.py):
- `baseline`: a Learner as the trainer builds it, the iteration captured as one CUDA graph
  (StepRunner), timed over replays (CUDA events), its state saved after `--iters` iterations;
- `compiled_1`: a fresh Learner whose glue functions (TARGETS) are wrapped in
  torch.compile(backend="inductor", options={"triton.cudagraphs": False}); one eager iteration
  compiles them (each function's first-call wall time is its compile time; the state is rolled
  back after it), then the same StepRunner captures and times the iteration. It starts with an
  empty inductor cache (TORCHINDUCTOR_CACHE_DIR: a fresh folder unless --cache-dir);
- `compiled_2`: the same in a new process on the now warm cache: its compile time and the
  inductor cache counters say whether the compile is paid once per node;
- `per_target`: each target compiled alone against the uncompiled iteration (eager iterations,
  one process, warm cache): which glue keeps the baseline's bits and which changes them.
Each run starts from the same prefilled state; the parent compares the saved states bit for bit
(compiled_1 vs compiled_2: the rule; compiled vs baseline: reported, with the largest difference).
Inductor's deterministic mode (no on-device benchmarking that changes numerics) is on where
the torch has it (--deterministic), so that two processes cannot pick different reduction
configs.

Glue functions are wrapped per Learner instance, in the worker only; no library file changes.
`optim_step` compiles the gradient clip only where PopulationAdam has a `clip_gradients` method
apart from the fused Adam kernel (a hook the library does not have yet); without it the
wrapped step_groups compiles no graph (recorded as "no graph": the status says whether dynamo
produced a graph, not only that nothing raised). Not a target: the C51 target under no_grad
in `Learner._learn`, two custom ops now
(`ops.c51_target`, `ops.c51_project`) that inductor calls as they are and cannot fuse into.

Robust by design: a glue function whose compile fails runs uncompiled (recorded with the
error; with --fullgraph auto a fullgraph failure is first retried with graph breaks allowed);
a failed capture falls back to eager iterations (recorded); a worker that crashes or runs past
--worker-timeout is recorded with the tail of its output. A failed trial is a result.

On CPU (--device cpu) there is no graph: iterations run eagerly (a smoke test, not the issue's
question); inductor's C++ backend needs a compiler, without one every target records its
failure. `--backend eager` exercises the whole trial without code generation (the CPU test).

    python benchmarks/archive/compile_trial.py [--population 64] [--out benchmarks/results/compile_trial.json]
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import inspect
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

BENCHMARKS = Path(__file__).resolve().parents[1]  # archived under benchmarks/archive/
REPO = BENCHMARKS.parent
DEFAULT_OUT = BENCHMARKS / "results" / "compile_trial.json"
sys.path.insert(0, str(BENCHMARKS))
import train_step  # noqa: E402 (a sibling script: its shape is this trial's shape)

BASE = [o for o in train_step.BASE if not o.startswith("device=")] + train_step.GEMS["measure"]
"""benchmarks/train_step.py's shape, gems measured (the device is chosen per run here)."""
CUBLAS_DETERMINISTIC = ":4096:8"  # as tune_gems.trainer.run_setup sets it for CUDA runs
INDUCTOR_OPTIONS = {"triton.cudagraphs": False}  # the manual capture is the only CUDA graph
ROLES = ("baseline", "compiled_1", "compiled_2")
PER_TARGET = "per_target"
TAIL_CHARS = 4000

TARGETS: dict[str, str] = {
    "fresh_draws": "Learner._fresh_draws: RNG counter, the iteration's uniforms (integer hash), Box-Muller, NoisyNet noise install",
    "rng_draw": "CounterRNG.draw: the iteration's uniforms only (integer hash, exact arithmetic); Box-Muller stays eager",
    "env_step": "VecTradingEnv.step: rewards, episode ends and restarts",
    "replay_add": "ReplayBuffer.add: ring-slot index copies",
    "replay_sample": "ReplayBuffer.sample: sample indices, n-step returns, gathers, observation rebuild",
    "gem_nulls": "MemberGems.nulls: the gems' null reductions",
    "optim_step": "PopulationAdam.clip_gradients (the proposed hook; else step_groups): per-member clip norms and clip; the fused Adam kernel stays eager",
    "optim_composite": "PopulationAdam.step_groups with the plain-torch Adam, compiled whole (not the fused kernel's arithmetic)",
    "update_target": "Learner._update_target: target lerp",
    "accumulate": "Learner._accumulate: per-member metric rows",
}
EXCLUSIVE = (("fresh_draws", "rng_draw"), ("optim_step", "optim_composite"))
"""Targets that wrap the same code (the first of a pair contains the second's, or both wrap
PopulationAdam.step_groups): one of each pair per run; `per_target` tries each alone."""
DEFAULT_TARGETS = tuple(n for n in TARGETS if n not in {b for _, b in EXCLUSIVE})  # "all": the widest of each pair


# ---------------------------------------------------------------------------------- the glue
class CompiledGlue:
    """One glue function run through torch.compile, falling back to the plain function when
    compiling fails (the error is kept). `fn` returns tensors (or containers of them);
    `rebuild(out, *args)` turns its output into what the library's caller expects (a Batch, a
    Transition...), outside the compiled region."""

    def __init__(self, name: str, fn: Callable, rebuild: Callable[[Any], Any] | None, fullgraph: str, backend: str):
        self.name, self.fn, self.rebuild = name, fn, rebuild or (lambda out, *args: out)
        self.backend, self.fullgraph_choice = backend, fullgraph
        self.fullgraph = fullgraph != "off"
        self.compiled: Callable | None = self._compile()
        self.calls = 0
        self.first_call_s: float | None = None
        self.graphs = 0  # graphs dynamo compiled on the first call (0: it ran everything eagerly)
        self.status = "pending"  # compiled | no graph | failed | not called
        self.errors: list[str] = []

    def _compile(self) -> Callable:
        options = dict(INDUCTOR_OPTIONS) if self.backend == "inductor" else None  # options are inductor's
        return torch.compile(self.fn, backend=self.backend, fullgraph=self.fullgraph, options=options)

    def __call__(self, *args):
        self.calls += 1
        if self.compiled is None:
            return self.rebuild(self.fn(*args), *args)
        if self.calls > 1:
            return self.rebuild(self.compiled(*args), *args)
        t0, graphs_before = time.perf_counter(), _unique_graphs()
        while True:
            try:
                out = self.compiled(*args)
                self.graphs = _unique_graphs() - graphs_before
                self.status = "compiled" if self.graphs else "no graph"
                break
            except Exception as e:  # a failed compile is a result: record it, run uncompiled
                self.errors.append(_one_line(e))
                if self.fullgraph and self.fullgraph_choice == "auto":
                    self.fullgraph = False  # try again, allowing graph breaks
                    self.compiled = self._compile()
                    continue
                self.compiled, self.status = None, "failed"
                out = self.fn(*args)
                break
        self.first_call_s = time.perf_counter() - t0
        return self.rebuild(out, *args)

    def record(self) -> dict:
        return {
            "name": self.name,
            "status": self.status if self.calls else "not called",
            "fullgraph": self.fullgraph if self.status == "compiled" else None,
            "graphs": self.graphs,
            "first_call_s": None if self.first_call_s is None else round(self.first_call_s, 3),
            "calls": self.calls,
            "errors": self.errors,
        }


def _unique_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"].get("unique_graphs", 0))


def _one_line(e: BaseException, limit: int = 600) -> str:
    msg = " ".join(str(e).split()) or type(e).__name__
    return f"{type(e).__name__}: {msg}"[:limit]


def _fields(obj: Any, names: list[str]) -> tuple:
    """The named attributes of one object, as a tuple (what a compiled region returns)."""
    return tuple(getattr(obj, n) for n in names)


class Installed:
    """The glue wrappers installed on one Learner, and how to take them off again."""

    def __init__(self):
        self.glue: list[CompiledGlue] = []
        self._undo: list[Callable[[], None]] = []

    def records(self) -> list[dict]:
        return [g.record() for g in self.glue]

    def on_uninstall(self, undo: Callable[[], None]) -> None:
        self._undo.append(undo)

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()


def install_targets(learner, names: list[str], fullgraph: str, backend: str = "inductor") -> Installed:
    """Wrap the chosen glue functions of one Learner as instance attributes (the library's
    classes and every other Learner are untouched; `Installed.uninstall` takes them off)."""
    from tune_gems.market.env import Transition
    from tune_gems.trainer.replay import Batch
    from tune_gems.rng import Draws

    done = Installed()

    def wrap(name: str, owner: Any, attr: str, fn: Callable, rebuild: Callable | None = None) -> None:
        glue = CompiledGlue(name, fn, rebuild, fullgraph, backend)
        setattr(owner, attr, glue)
        done.glue.append(glue)
        done.on_uninstall(lambda: delattr(owner, attr))

    tr_fields = [p for p in inspect.signature(Transition.__init__).parameters if p not in ("self", "source")]
    batch_fields = [f.name for f in dataclasses.fields(Batch)]
    optim = learner.optim
    for name in names:
        if name == "fresh_draws":
            orig_draws = learner._fresh_draws
            wrap(name, learner, "_fresh_draws", lambda: orig_draws().block, lambda block: Draws(learner.plan, block))
        elif name == "rng_draw":
            orig_draw = learner.rng.draw
            wrap(name, learner.rng, "draw", lambda plan: orig_draw(plan).block, lambda block, plan: Draws(plan, block))
        elif name == "env_step":
            env, orig_step = learner.env, learner.env.step
            wrap(
                name, env, "step",
                lambda action, start_u: _fields(orig_step(action, start_u), tr_fields),
                lambda out, *_: Transition(*out, source=env),
            )  # fmt: skip
        elif name == "replay_add":
            wrap(name, learner.replay, "add", learner.replay.add)
        elif name == "replay_sample":
            orig_sample = learner.replay.sample
            wrap(name, learner.replay, "sample", lambda u: _fields(orig_sample(u), batch_fields), lambda out, *_: Batch(*out))
        elif name == "gem_nulls":
            wrap(name, learner.member_gems, "nulls", learner.member_gems.nulls)
        elif name == "optim_step":
            if callable(getattr(optim, "clip_gradients", None)):  # the hook the trial's report proposes
                wrap(name, optim, "clip_gradients", optim.clip_gradients)
                continue
            if optim._fused:
                # inductor cannot functionalize the in-place fused kernel over views of the flat
                # matrix, so it is left out of the graph; without the clip_gradients hook dynamo
                # then compiles no graph at all here (recorded as "no graph")
                fused = torch._fused_adam_
                torch._fused_adam_ = torch.compiler.disable(fused)
                done.on_uninstall(lambda: setattr(torch, "_fused_adam_", fused))
            wrap(name, optim, "step_groups", optim.step_groups)
        elif name == "optim_composite":
            was = optim._fused
            optim._fused = False  # the plain-torch Adam, compiled whole (not the fused kernel's bits)
            done.on_uninstall(lambda: setattr(optim, "_fused", was))
            wrap(name, optim, "step_groups", optim.step_groups)
        elif name == "update_target":
            wrap(name, learner, "_update_target", learner._update_target)
        elif name == "accumulate":
            wrap(name, learner, "_accumulate", learner._accumulate)
        else:  # parse_targets refuses unknown names; this is a programming error
            raise AssertionError(name)
    return done


# ------------------------------------------------------------------------------------ worker
def build_learner(spec: dict):
    """A prefilled Learner at the trial's shape, as the Trainer builds it."""
    from tune_gems.config.load import load_config
    from tune_gems.trainer.trainer import Trainer

    overrides = [
        *BASE,
        f"device={spec['device']}",
        f"trainer.population={spec['population']}",
        f"trainer.precision={spec['precision']}",
        f"kernels={spec['kernels']}",
        "trainer.graph=off",  # the trial drives its own StepRunner
        *spec["set"],
    ]
    trainer = Trainer(load_config(None, overrides), log=None)
    trainer._prefill()
    return trainer


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _snapshot(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in state.items()}


@torch.no_grad()
def _restore(state: dict[str, torch.Tensor], snapshot: dict[str, torch.Tensor]) -> None:
    for k, v in state.items():
        v.copy_(snapshot[k])


def _time_iterations(runner, device: torch.device, reps: int, rounds: int) -> float:
    """Median microseconds per iteration over `rounds` blocks of `reps` (CUDA events on CUDA)."""
    times = []
    for _ in range(rounds):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                runner()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000.0 / reps)
        else:
            t0 = time.perf_counter()
            for _ in range(reps):
                runner()
            times.append((time.perf_counter() - t0) * 1e6 / reps)
    return statistics.median(times)


def _profile(learner, iterations: int) -> dict:
    """Kernels launched per eager iteration (the kernels a replay runs), as train_step.py counts
    them; `triton_per_iter` are inductor's."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iterations):
            learner.iteration()
        torch.cuda.synchronize()
    events = list(prof.key_averages())

    def dev_time(e):
        return getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)

    kernels = [e for e in events if not e.key.lower().startswith(("memcpy", "memset"))]
    return {
        "launches_per_iter": sum(e.count for e in kernels) / iterations,
        "triton_per_iter": sum(e.count for e in kernels if e.key.startswith("triton_")) / iterations,
        "memcpy_memset_per_iter": sum(e.count for e in events if e not in kernels) / iterations,
        "kernel_us_per_iter": round(sum(dev_time(e) for e in kernels) / iterations, 1),
    }


def _counters() -> dict:
    """Dynamo / inductor counters of this process: graphs, graph breaks, cache hits."""
    try:
        from torch._dynamo.utils import counters
    except Exception as e:  # pragma: no cover - torch without dynamo
        return {"error": _one_line(e)}
    breaks = dict(counters.get("graph_break", {}))
    return {
        "unique_graphs": int(counters["stats"].get("unique_graphs", 0)),
        "calls_captured": int(counters["stats"].get("calls_captured", 0)),
        "graph_breaks": int(sum(breaks.values())),
        "graph_break_reasons": [r[:200] for r in list(breaks)[:5]],
        "fxgraph_cache_hit": int(counters["inductor"].get("fxgraph_cache_hit", 0)),
        "fxgraph_cache_miss": int(counters["inductor"].get("fxgraph_cache_miss", 0)),
        "fxgraph_cache_bypass": int(counters["inductor"].get("fxgraph_cache_bypass", 0)),
        "autograd_cache_hit": int(counters["aot_autograd"].get("autograd_cache_hit", 0)),
        "autograd_cache_miss": int(counters["aot_autograd"].get("autograd_cache_miss", 0)),
    }


def _setup_worker(spec: dict, res: dict) -> None:
    if spec["device"] == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC)
    import torch._inductor.config as inductor_config

    available = hasattr(inductor_config, "deterministic")
    if spec["deterministic"] == "on" and not available:
        raise RuntimeError(f"--deterministic on: torch {torch.__version__} has no inductor deterministic mode")
    if available and spec["deterministic"] != "off":
        inductor_config.deterministic = True
    res["inductor_deterministic"] = bool(getattr(inductor_config, "deterministic", False))


def _build(spec: dict, res: dict):
    t0 = time.perf_counter()
    trainer = build_learner(spec)
    res["build_s"] = round(time.perf_counter() - t0, 2)
    res["kernels"] = trainer.ops.name
    device = trainer.device
    res["device_name"] = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    return trainer.learner, device


def _cpu_state(learner) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in learner.state_tensors().items()}


def run_worker(spec: dict, role: str, state_out: Path, res: dict) -> None:
    """One run, filling `res` as it goes: build, (compile), capture, save the state after
    spec['iters'] iterations, time, profile. A failed compile or capture is recorded and
    the run goes on (uncompiled function, eager iterations)."""
    learner, device = _build(spec, res)
    state = learner.state_tensors()
    start = _snapshot(state)  # the prefilled state every run starts from

    installed = install_targets(learner, spec["targets"] if role != "baseline" else [], spec["fullgraph"], spec["backend"])
    try:
        _run_installed(spec, learner, device, state, start, installed, state_out, res)
    finally:
        installed.uninstall()


def _run_installed(spec: dict, learner, device, state, start, installed: Installed, state_out: Path, res: dict) -> None:
    from tune_gems.trainer.graph import StepRunner

    res["targets"] = installed.records()
    # one eager iteration compiles every target (first calls); then the state is rolled back
    t0 = time.perf_counter()
    learner.iteration()
    _sync(device)
    res["first_iteration_s"] = round(time.perf_counter() - t0, 3)
    _restore(state, start)
    res["targets"] = installed.records()
    res["targets_compiled"] = [g.name for g in installed.glue if g.status == "compiled"]
    res["compile_s"] = round(sum(g.first_call_s or 0.0 for g in installed.glue), 3)
    counters_after_compile = _counters()

    use_graph = device.type == "cuda" and not spec["no_graph"]
    runner = StepRunner(learner.iteration, learner.state_tensors, use_graph)
    res["capture"] = {"attempted": use_graph, "ok": None, "error": None, "wall_s": None}
    res["mode"] = "eager"
    if use_graph:
        t0 = time.perf_counter()
        try:
            runner()  # warm-up (rolled back), capture, first replay: iteration 1 from `start`
            _sync(device)
            res["capture"].update(ok=True, wall_s=round(time.perf_counter() - t0, 3))
        except Exception as e:
            res["capture"].update(ok=False, error=_one_line(e))
            res["capture_traceback"] = traceback.format_exc()[-TAIL_CHARS:]
            runner = StepRunner(learner.iteration, learner.state_tensors, use_graph=False)
            _restore(state, start)
            runner()
    else:
        runner()
    res["mode"] = "graph" if runner.captured else "eager"
    for _ in range(spec["iters"] - 1):
        runner()
    _sync(device)
    torch.save(_cpu_state(learner), state_out)
    res["state_file"] = str(state_out)
    res["iters"] = spec["iters"]

    res["iter_us"] = round(_time_iterations(runner, device, spec["reps"], spec["rounds"]), 1)
    res["targets"] = installed.records()  # with the call counts of the whole run
    counters_end = _counters()
    res["counters"] = counters_end
    res["compiles_after_warmup"] = counters_end.get("unique_graphs", 0) - counters_after_compile.get("unique_graphs", 0)
    res["profile"] = None
    if device.type == "cuda" and spec["profile_iters"] > 0:
        try:
            res["profile"] = _profile(learner, spec["profile_iters"])
        except Exception as e:
            res["profile"] = {"error": _one_line(e)}
    res["peak_mem_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1) if device.type == "cuda" else None
    res["ok"] = True


def run_per_target(spec: dict, res: dict) -> None:
    """Each target alone against the uncompiled iteration, in one process (eager iterations,
    the same arithmetic a replay runs): which glue compiles to the baseline's bits."""
    learner, device = _build(spec, res)
    state = learner.state_tensors()
    start = _snapshot(state)

    def run_from_start() -> dict[str, torch.Tensor]:
        _restore(state, start)
        for _ in range(spec["iters"]):
            learner.iteration()
        _sync(device)
        return _cpu_state(learner)

    reference = run_from_start()
    res["per_target"] = []
    for name in spec["per_target"]:
        installed = install_targets(learner, [name], spec["fullgraph"], spec["backend"])
        row: dict[str, Any] = {}
        try:
            if installed.glue:
                cmp = compare_state_dicts(reference, run_from_start())
                row = {"equals_baseline": cmp["identical"], "differing": cmp["differing"][:6], "max_abs_diff": cmp["max_abs_diff"]}
        except Exception as e:
            row = {"equals_baseline": None, "error": _one_line(e)}
        finally:
            installed.uninstall()
        res["per_target"].append({**installed.records()[0], **row})
    res["ok"] = True


def worker_main(spec_path: Path, role: str, result_path: Path, state_out: Path) -> int:
    spec = json.loads(spec_path.read_text())
    res: dict[str, Any] = {"role": role, "ok": False}
    try:
        _setup_worker(spec, res)
        if role == "per_target":
            run_per_target(spec, res)
        else:
            run_worker(spec, role, state_out, res)
    except Exception as e:  # a failure outside the recorded steps: still a result
        res.update(ok=False, error=_one_line(e), traceback=traceback.format_exc()[-TAIL_CHARS:])
    result_path.write_text(json.dumps(res, indent=2))
    return 0


# ------------------------------------------------------------------------------------ parent
def spawn_worker(role: str, spec_path: Path, work: Path, cache_dir: Path, timeout_s: float) -> dict:
    """Run one worker in its own process (fresh dynamo state; the inductor cache on disk is
    shared through TORCHINDUCTOR_CACHE_DIR), in its own process group so that a timeout
    also ends inductor's compile workers."""
    result_path, state_out = work / f"{role}.json", work / f"{role}.pt"
    env = dict(os.environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir)
    env["TRITON_CACHE_DIR"] = str(cache_dir / "triton")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", role, "--spec", str(spec_path),
           "--result", str(result_path), "--state-out", str(state_out)]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group of the worker this call started
        output, _ = proc.communicate()
        timed_out = True
    wall = round(time.perf_counter() - t0, 2)
    if result_path.exists():
        res = json.loads(result_path.read_text())
    else:
        why = f"ran past --worker-timeout={timeout_s:g}s" if timed_out else f"exited with {proc.returncode} and no result"
        res = {"role": role, "ok": False, "error": why}
    res["process_wall_s"] = wall
    if not res.get("ok"):
        res["output_tail"] = (output or "")[-TAIL_CHARS:]
    return res


def run_in_process(role: str, spec_path: Path, work: Path, cache_dir: Path) -> dict:
    """`spawn_worker` without the process (--in-process, for smoke tests): dynamo is reset
    between runs, but the process's in-memory caches make the cold/warm compile times moot."""
    import torch._dynamo

    result_path, state_out = work / f"{role}.json", work / f"{role}.pt"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir)
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    t0 = time.perf_counter()
    worker_main(spec_path, role, result_path, state_out)
    res = json.loads(result_path.read_text())
    res["process_wall_s"] = round(time.perf_counter() - t0, 2)
    return res


def compare_states(a_path: str | None, b_path: str | None) -> dict:
    """`compare_state_dicts` of two saved states."""
    if not a_path or not b_path or not Path(a_path).exists() or not Path(b_path).exists():
        return {"compared": False, "identical": None, "why": "a run has no saved state"}
    return compare_state_dicts(torch.load(a_path), torch.load(b_path))


def compare_state_dicts(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict:
    """Bit-for-bit comparison of two states (NaN equals NaN with the same bits; -0.0 differs
    from 0.0): identical, the tensors that differ, and the largest absolute difference over
    the floating ones (where both are finite)."""
    if set(a) != set(b):
        return {"compared": False, "identical": None, "why": f"different state keys: {sorted(set(a) ^ set(b))[:5]}"}
    differing, max_diff = [], 0.0
    for k in sorted(a):
        x, y = a[k], b[k]
        if x.shape != y.shape or x.dtype != y.dtype:
            differing.append(k)
            continue
        if x.is_floating_point():
            bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
            same = torch.equal(x.view(bits), y.view(bits))
            if not same:
                ok = torch.isfinite(x) & torch.isfinite(y)
                if ok.any():
                    max_diff = max(max_diff, float((x[ok].double() - y[ok].double()).abs().max()))
        else:
            same = torch.equal(x, y)
        if not same:
            differing.append(k)
    return {"compared": True, "identical": not differing, "differing": differing, "n_differing": len(differing),
            "max_abs_diff": max_diff}  # fmt: skip


def verdict(runs: dict, comparisons: dict, a: argparse.Namespace) -> tuple[str, list[str], dict]:
    """keep iff both compiled runs compiled something and ran it (captured on CUDA), stay bit-
    identical, beat the baseline by --min-gain, and the second process paid (almost) no compile."""
    reasons: list[str] = []
    base, c1, c2 = (runs.get(r, {}) for r in ROLES)
    summary: dict[str, Any] = {}
    for r in (base, c1, c2):
        if not r.get("ok"):
            reasons.append(f"{r.get('role', '?')} run failed: {r.get('error', 'no result')}")
    for r in (c1, c2):
        if r.get("ok") and not r.get("targets_compiled"):
            reasons.append(f"{r['role']}: no target compiled")
        if r.get("ok") and r.get("capture", {}).get("attempted") and not r["capture"].get("ok"):
            reasons.append(f"{r['role']}: capture failed ({r['capture'].get('error')})")
    same = comparisons["compiled_1_vs_compiled_2"].get("identical")
    summary["compiled_runs_identical"] = same
    summary["compiled_equals_baseline"] = comparisons["compiled_1_vs_baseline"].get("identical")
    summary["compiled_vs_baseline_max_abs_diff"] = comparisons["compiled_1_vs_baseline"].get("max_abs_diff")
    if same is not True:
        reasons.append("the two compiled runs are not bit-identical" if same is False else "bit identity not established")
    if base.get("ok") and c1.get("ok") and c2.get("ok"):
        compiled_us = statistics.mean([c1["iter_us"], c2["iter_us"]])
        speedup = base["iter_us"] / compiled_us
        summary.update(
            baseline_iter_us=base["iter_us"], compiled_iter_us=round(compiled_us, 1),
            compiled_iter_us_runs=[c1["iter_us"], c2["iter_us"]], speedup=round(speedup, 3),
        )  # fmt: skip
        if speedup < 1.0 + a.min_gain:
            reasons.append(f"not faster: speedup {speedup:.3f} < {1.0 + a.min_gain:.3f} (--min-gain)")
        cold, warm = c1.get("compile_s", 0.0), c2.get("compile_s", 0.0)
        misses = c2.get("counters", {}).get("fxgraph_cache_miss")
        hits = c2.get("counters", {}).get("fxgraph_cache_hit")
        paid_once = misses == 0 and (warm <= a.warm_compile_frac * cold or warm <= a.warm_compile_max_s)
        summary.update(
            compile_cold_s=cold, compile_warm_s=warm, warm_cache_hits=hits, warm_cache_misses=misses,
            compile_paid_once=paid_once,
        )  # fmt: skip
        if not paid_once:
            reasons.append(
                f"compile not paid once: second process compiled {warm:.1f}s (first {cold:.1f}s), "
                f"{misses} inductor cache misses"
            )
    alone = runs.get(PER_TARGET, {}).get("per_target", [])
    if alone:
        exact = [t["name"] for t in alone if t.get("equals_baseline") is True]
        summary["targets_equal_to_baseline"] = exact
        summary["targets_changing_bits"] = [t["name"] for t in alone if t.get("equals_baseline") is False]
        summary["exact_subset"] = ",".join(exact_subset(exact))
    if a.in_process:
        reasons.append("--in-process: one process, so the compile-once-per-node measurement does not hold")
    if a.backend != "inductor":
        reasons.append(f"backend {a.backend}: a smoke test of the trial, not the inductor trial")
    if a.device != "cuda":
        reasons.append("not on CUDA: no captured graph, the issue's question is not answered here")
    return ("drop" if reasons else "keep"), reasons, summary


def exact_subset(exact: list[str]) -> list[str]:
    """The targets that keep the baseline's bits alone, at most one of each EXCLUSIVE pair (the
    wider one when both do): what a second trial could compile without changing any bit."""
    chosen: list[str] = []
    for name in TARGETS:
        rivals = {n for pair in EXCLUSIVE if name in pair for n in pair} - {name}
        if name in exact and not rivals & set(chosen):
            chosen.append(name)
    return chosen


def print_table(runs: dict, comparisons: dict, decision: str, reasons: list[str], summary: dict) -> None:
    print(f"\n{'run':11} {'ok':3} {'mode':5} {'compiled':>8} {'compile_s':>9} {'capture':8} {'iter_us':>9} {'launch/it':>9} {'triton/it':>9}")
    for role in ROLES:
        r = runs.get(role, {})
        prof = r.get("profile") or {}
        cap = r.get("capture", {})
        cap_s = "-" if not cap.get("attempted") else ("ok" if cap.get("ok") else "FAILED")
        n_targets = len(r.get("targets", []))
        print(
            f"{role:11} {'yes' if r.get('ok') else 'NO':3} {r.get('mode', '-'):5} "
            f"{len(r.get('targets_compiled', [])):>3}/{n_targets:<4} {r.get('compile_s', 0.0):>9.2f} {cap_s:8} "
            f"{r.get('iter_us', float('nan')):>9.1f} {prof.get('launches_per_iter', float('nan')):>9.0f} "
            f"{prof.get('triton_per_iter', float('nan')):>9.0f}"
        )
        if not r.get("ok") and r.get("error"):
            print(f"            error: {r['error']}")
    if PER_TARGET in runs and not runs[PER_TARGET].get("ok"):
        print(f"per_target run failed: {runs[PER_TARGET].get('error')}")
    exact = {t["name"]: t for t in runs.get(PER_TARGET, {}).get("per_target", [])}
    in_runs = runs.get("compiled_1", {}).get("targets", [])
    shown = {t["name"] for t in in_runs}
    alone_only = [{**t, "status": f"alone:{t['status']}"[:10]} for n, t in exact.items() if n not in shown]
    for t in [*in_runs, *alone_only]:
        alone = exact.get(t["name"], {})
        same = {True: "= baseline", False: f"!= baseline ({alone.get('max_abs_diff', 0):.2g})"}.get(alone.get("equals_baseline"), "")
        compiled = t["status"] in ("compiled", "alone:comp")
        err = f"  {t['errors'][-1][:150]}" if t.get("errors") and not compiled else ""
        if compiled and t.get("fullgraph") is False:
            err = "  (graph breaks)"
        first = "-" if t.get("first_call_s") is None else f"{t['first_call_s']:.2f}s"
        print(f"  target {t['name']:15} {t['status']:10} first call {first:>7}  alone: {same:22}{err}")
    for name, c in comparisons.items():
        if c.get("compared"):
            some = ", ".join(c["differing"][:4])
            extra = "" if c["identical"] else f" ({c['n_differing']} tensors differ, max |diff| {c['max_abs_diff']:.3g}: {some})"
            print(f"{name}: {'bit-identical' if c['identical'] else 'DIFFERENT'}{extra}")
        else:
            print(f"{name}: not compared ({c.get('why')})")
    print("summary:", json.dumps(summary))
    if summary.get("targets_changing_bits") and summary.get("exact_subset"):
        print(f"only the glue that keeps the baseline's bits: --targets {summary['exact_subset']}")
    print(f"verdict: {decision}" + ("" if not reasons else " - " + "; ".join(reasons)))


def parse_targets(text: str) -> list[str]:
    if text == "all":
        return list(DEFAULT_TARGETS)
    if text == "none":
        return []
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in TARGETS]
    if unknown or not names:
        raise ValueError(f"--targets: unknown {', '.join(unknown) or repr(text)} (choose from {', '.join(TARGETS)}; or all, none)")
    for pair in EXCLUSIVE:
        if all(n in names for n in pair):
            raise ValueError(f"--targets: {' and '.join(pair)} wrap the same code; pick one")
    return list(dict.fromkeys(names))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--population", type=int, default=64, help="P, the members")
    ap.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="fp32")
    ap.add_argument("--kernels", choices=("auto", "cuda", "reference"), default="auto")
    ap.add_argument("--targets", default="all",
                    help=f"comma list of {', '.join(TARGETS)}; all ({', '.join(DEFAULT_TARGETS)}); none. "
                         "The per-target run tries every target when all")  # fmt: skip
    ap.add_argument("--backend", choices=("inductor", "aot_eager", "eager"), default="inductor",
                    help="torch.compile backend; eager / aot_eager only smoke-test the trial (no code generation)")  # fmt: skip
    ap.add_argument("--fullgraph", choices=("auto", "on", "off"), default="auto",
                    help="auto: fullgraph=True, retried with graph breaks allowed when that fails")  # fmt: skip
    ap.add_argument("--deterministic", choices=("auto", "on", "off"), default="auto",
                    help="inductor's deterministic mode: no on-device benchmarking that changes numerics, so that "
                         "processes pick the same reduction configs (auto: on where this torch has it)")  # fmt: skip
    ap.add_argument("--iters", type=int, default=20, help="iterations before the state is compared")
    ap.add_argument("--reps", type=int, default=100, help="iterations per timed round")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds (median)")
    ap.add_argument("--profile-iters", type=int, default=3, help="eager iterations profiled for kernel counts (CUDA; 0: none)")
    ap.add_argument("--no-graph", action="store_true", help="eager iterations on CUDA too (no capture)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra config override (repeatable)")
    ap.add_argument("--cache-dir", type=Path, default=None, help="inductor cache (default: a fresh folder, so the first compile is cold)")
    ap.add_argument("--no-per-target", action="store_true", help="skip the per-target exactness run (a fourth process)")
    ap.add_argument("--in-process", action="store_true",
                    help="run every worker in this process (smoke tests: fast, but no cold/warm compile measurement)")  # fmt: skip
    ap.add_argument("--keep-work", action="store_true", help="keep the workers' states and results")
    ap.add_argument("--worker-timeout", type=float, default=240.0, help="seconds per worker process")
    ap.add_argument("--min-gain", type=float, default=0.02, help="keep needs speedup >= 1 + this")
    ap.add_argument("--warm-compile-frac", type=float, default=0.5, help="paid once: second compile <= this x the first ...")
    ap.add_argument("--warm-compile-max-s", type=float, default=2.0, help="... or <= this many seconds")
    # internal: one worker run
    ap.add_argument("--worker", choices=(*ROLES, PER_TARGET), help=argparse.SUPPRESS)
    ap.add_argument("--spec", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--state-out", type=Path, help=argparse.SUPPRESS)
    return ap


def check_args(a: argparse.Namespace) -> str | None:
    """The first bad argument as a one-line message naming it, or None."""
    for name, low in (("population", 1), ("iters", 1), ("reps", 1), ("rounds", 1), ("profile_iters", 0)):
        if getattr(a, name) < low:
            return f"--{name.replace('_', '-')}: must be >= {low}, got {getattr(a, name)}"
    if a.worker_timeout <= 0:
        return f"--worker-timeout: must be > 0, got {a.worker_timeout}"
    for s in a.set:
        if "=" not in s:
            return f"--set: expected KEY=VALUE, got {s!r}"
    if a.device == "cuda" and not torch.cuda.is_available():
        return "--device: cuda requested but no CUDA device is available (use --device cpu)"
    try:
        a.target_names = parse_targets(a.targets)
    except ValueError as e:
        return str(e)
    return None


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.worker:
        return worker_main(a.spec, a.worker, a.result, a.state_out)
    error = check_args(a)
    if error:
        print(error, file=sys.stderr)
        return 2
    spec = {
        "device": a.device, "population": a.population, "precision": a.precision, "kernels": a.kernels,
        "targets": a.target_names, "per_target": list(TARGETS) if a.targets == "all" else a.target_names,
        "backend": a.backend, "fullgraph": a.fullgraph, "deterministic": a.deterministic, "iters": a.iters,
        "reps": a.reps, "rounds": a.rounds, "profile_iters": a.profile_iters, "no_graph": a.no_graph, "set": a.set,
    }  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="compile_trial_"))
    cache_dir = a.cache_dir.resolve() if a.cache_dir else work / "inductor_cache"
    cache_dir.mkdir(parents=True, exist_ok=True)
    spec_path = work / "spec.json"
    spec_path.write_text(json.dumps(spec))
    t0 = time.perf_counter()
    runs: dict[str, dict] = {}
    roles = [*ROLES, *([PER_TARGET] if a.target_names and not a.no_per_target else [])]
    for role in roles:
        print(f"--- {role} ({time.perf_counter() - t0:.0f}s)", flush=True)
        if a.in_process:
            runs[role] = run_in_process(role, spec_path, work, cache_dir)
        else:
            runs[role] = spawn_worker(role, spec_path, work, cache_dir, a.worker_timeout)
        r = runs[role]
        print(f"    ok={r.get('ok')} mode={r.get('mode')} compile_s={r.get('compile_s')} iter_us={r.get('iter_us')} "
              f"wall={r.get('process_wall_s')}s" + (f" error={r.get('error')}" if not r.get("ok") else ""), flush=True)  # fmt: skip
    comparisons = {
        "compiled_1_vs_compiled_2": compare_states(runs["compiled_1"].get("state_file"), runs["compiled_2"].get("state_file")),
        "compiled_1_vs_baseline": compare_states(runs["compiled_1"].get("state_file"), runs["baseline"].get("state_file")),
    }
    decision, reasons, summary = verdict(runs, comparisons, a)
    print_table(runs, comparisons, decision, reasons, summary)
    if not a.keep_work:
        shutil.rmtree(work, ignore_errors=True)  # states, results and (without --cache-dir) the cache
        for r in runs.values():
            r.pop("state_file", None)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({
        "benchmark": "compile_trial",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": runs["baseline"].get("device_name") or runs["compiled_1"].get("device_name"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "command": " ".join(shlex.quote(x) for x in ["python", "benchmarks/archive/compile_trial.py", *(sys.argv[1:] if argv is None else argv)]),
        "config": [*BASE, f"trainer.population={a.population}", f"trainer.precision={a.precision}", f"kernels={a.kernels}", *a.set],
        "spec": spec,
        "inductor_options": INDUCTOR_OPTIONS,
        "cache_dir": str(cache_dir),
        "work_dir": str(work) if a.keep_work else None,
        "targets": {n: TARGETS[n] for n in a.target_names},
        "runs": runs,
        "comparisons": comparisons,
        "summary": summary,
        "verdict": decision,
        "reasons": reasons,
        "wall_s": round(time.perf_counter() - t0, 1),
    }, indent=2))  # fmt: skip
    print(f"wrote {a.out} ({time.perf_counter() - t0:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
