"""`--dry-run` for `train` and `sweep`: every check, then what the run would do, nothing written where it would write;
its time is extrapolated from a throw-away Trainer's measured sample (`Trainer.sample_timings`)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from tune_gems.config.schema import Config
from tune_gems.data.summary import data_lines
from tune_gems.design.arms import RunArms, run_arms
from tune_gems.design.resources import MemoryEstimate, check_training_fits

TIMED_ITERATIONS = 5


@dataclass(frozen=True)
class TimeEstimate:

    device: str
    prefill_s: float
    iteration_s: float
    evaluation_s: float
    total_s: float
    threads: int = 0
    """torch's intra-op CPU threads during the measurement (0: not a CPU run)."""


def _fmt_bytes(n: int) -> str:
    gib = 1024**3
    return f"{n / gib:.2f} GiB" if n >= gib / 10 else f"{n / 1024**2:.1f} MiB"


def _fmt_s(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s < 10:
        return f"{s:.1f} s"
    return f"{s / 60:.1f} min" if s >= 120 else f"{s:.0f} s"


def estimate_time(cfg: Config, prices=None, arms: RunArms | None = None) -> tuple[TimeEstimate, object]:
    """Time one run of `cfg` from a short measured sample; also the throw-away Trainer's market."""
    import torch

    from tune_gems.trainer.trainer import Trainer

    trainer = Trainer(cfg, prices=prices, log=None, arms=arms)
    prefill, per_it, per_eval = trainer.sample_timings(TIMED_ITERATIONS)
    tc = cfg.trainer
    first = trainer.market.bounds[0]  # every fold's validation window has the same length
    val_lo, val_hi = first.val
    test_lo, test_hi = first.test
    test_eval = per_eval * (test_hi - test_lo) / max(1, val_hi - val_lo)  # the test segment, once, at the end
    total = prefill + tc.epochs * (tc.iterations_per_epoch * per_it + per_eval) + test_eval
    threads = torch.get_num_threads() if trainer.device.type == "cpu" else 0
    return TimeEstimate(str(trainer.device), prefill, per_it, per_eval, total, threads), trainer.market


def memory_line(est: MemoryEstimate) -> str:
    parts = ", ".join(f"{k} {_fmt_bytes(v)}" for k, v in est.parts().items() if v)
    where = f"{_fmt_bytes(est.device)} on the GPU, {_fmt_bytes(est.host)} host" if est.on_cuda else f"{_fmt_bytes(est.host)} host"
    return f"memory: about {where} for {est.members} member(s) ({parts})"


def time_line(t: TimeEstimate, what: str = "the run") -> str:
    threads = f" with {t.threads} CPU thread(s)" if t.threads else ""
    return (
        f"time: about {_fmt_s(t.total_s)} of training for {what} on this machine's {t.device}{threads}, start-up not counted "
        f"(measured: prefill {t.prefill_s:.2f} s, {t.iteration_s * 1000:.1f} ms per iteration, {t.evaluation_s:.2f} s per "
        "validation pass)"
    )


def members_line(cfg: Config, run: RunArms) -> str:
    """`members: H history(ies) x F fold(s) x A arm(s) x S seed(s) = P (arms)`, factors of one left out."""
    arms = list(run.names)
    p, folds, histories = cfg.trainer.population, run.layout.folds, run.layout.histories
    per_fold = (f"{histories} histories x " if histories > 1 else "") + (f"{folds} fold(s) x " if folds > 1 else "")
    return f"members: {per_fold}{len(arms)} arm(s) x {p} seed(s) = {run.members} ({', '.join(arms)})"


RESOLVED_PREFIX = "tune-gems-dry-run-"


def resolved_file(tree: dict, title: str, file_name: str) -> str:
    """The line naming the resolved config's file (~150 lines would bury the plan), in a temporary folder."""
    import tempfile

    text = yaml.safe_dump(tree, sort_keys=False)
    path = Path(tempfile.mkdtemp(prefix=RESOLVED_PREFIX)) / file_name
    path.write_text(text)
    return f"{title}: {path} ({len(text.splitlines())} lines)"


def train_plan(cfg: Config, out: Path, resume: bool = False, threads: str | None = None) -> list[str]:
    arms = run_arms(cfg)  # expanded once, for the estimates and the throw-away trainer
    est = check_training_fits(cfg, members=arms.members)
    timing, market = estimate_time(cfg, arms=arms)
    tc = cfg.trainer
    return [resolved_file(cfg.to_dict(), "config (resolved)", "config.yaml"), members_line(cfg, arms),
        f"epochs: {tc.epochs} x {tc.iterations_per_epoch} iterations", *data_lines(cfg.data, market), memory_line(est),
        *([f"threads: {threads}"] if threads else []), time_line(timing),
        f"out: {out} ({'continues the train run there from its checkpoint' if resume else 'a new train run'})",
        "dry run: nothing else was written"]


def concurrent_trials(cpu_per_trial: float, gpu_per_trial: float, max_concurrent: int | None) -> int:
    """How many trials this machine runs at once (a cluster's driver cannot know its nodes)."""
    import torch

    fits = [math.floor((os.cpu_count() or 1) / cpu_per_trial)]
    if gpu_per_trial > 0:
        fits.append(math.floor(torch.cuda.device_count() / gpu_per_trial))
    n = max(1, min(fits))
    return min(n, max_concurrent) if max_concurrent else n


def sweep_plan(spec, resolved: dict, widest: Config, prices) -> list[str]:
    import torch

    arms = run_arms(widest)
    est = check_training_fits(widest, members=arms.members, gpu_trial=bool(spec.resources.gpu))
    has_cuda = torch.cuda.is_available()
    gpu = spec.resources.gpu if spec.resources.gpu is not None else (1.0 if has_cuda else 0.0)
    early = "; at most, ASHA stops some trials early" if spec.scheduler.type != "none" else ""
    searched = [*(f"gems.{g}" for g in spec.search.gems), *spec.search.params]
    if gpu and not has_cuda:  # a GPU trial's time on this machine's CPU would say nothing of it
        timed = [f"time: not measured: a trial asks for {gpu:g} GPU (resources.gpu) and this machine has none; "
                 "run the dry run on a GPU node for the trial's time"]
    else:
        timing, _market = estimate_time(widest, prices, arms=arms)  # the data lines came before (run_sweep)
        at_once = concurrent_trials(spec.resources.cpu, gpu, spec.max_concurrent_trials)
        waves = math.ceil(spec.num_samples / at_once)
        timed = [time_line(timing, "the widest trial"),
                 f"sweep: about {_fmt_s(waves * timing.total_s)} on this machine ({at_once} trial(s) at a time, "
                 f"{spec.resources.cpu:g} CPU and {gpu:g} GPU each{early}); a cluster runs more at once"]
    return [
        resolved_file(resolved, "spec (resolved)", "spec.yaml"),
        f"trials: {spec.num_samples}, design {spec.design}, objective {spec.objective.mode} {spec.objective.metric}, "
        f"searching {', '.join(searched) or 'nothing'}",
        f"widest trial: {members_line(widest, arms).removeprefix('members: ')}",
        memory_line(est),
        *timed,
        "dry run: nothing else was written, Ray was not started",
    ]
