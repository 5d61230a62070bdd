"""Small configs and helpers shared by the learner tests (CPU, seconds each)."""

from __future__ import annotations

import json

import torch

from tune_gems.config.schema import Config
from tune_gems.config.load import load_config

TINY = [
    "trainer.population=3",
    "trainer.epochs=3",
    "trainer.iterations_per_epoch=6",
    "trainer.batch_size=16",
    "trainer.n_envs=2",
    "trainer.replay_capacity=512",
    "trainer.learning_starts=32",
    "trainer.target_update=4",
    "env.window=8",
    "env.episode_length=32",
    "model.hidden=16",
    "model.stream_hidden=8",
    "model.atoms=11",
    "model.predictor_hidden=16",
    "data.synthetic.n=900",
    "device=cpu",
]


def tiny_config(*overrides: str) -> Config:
    return load_config(None, [*TINY, *overrides])


def all_wired() -> list[str]:
    return [f"gems.{g}.mode=wire" for g in ("g6", "g10", "g12")]


def member_slice(t: torch.Tensor, population: int, p: int) -> torch.Tensor:
    """Member p's part of a tensor with a leading member (or member-major group) axis."""
    return t.reshape(population, -1)[p]


WALL_CLOCK = ("sps", "train_s", "eval_s")
"""History columns that measure time, not training."""


def canon(rows: list[dict]) -> str:
    """Rows as canonical JSON without the wall-clock columns: NaN compares equal to NaN, and any
    other difference, down to the last bit of a float, shows."""
    return json.dumps([{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in rows], sort_keys=True)


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """torch.equal where NaN equals NaN (the accumulator holds NaN for gems without a null)."""
    return a.shape == b.shape and a.dtype == b.dtype and bool(((a == b) | (a.isnan() & b.isnan())).all())


def assert_same_run(a, b) -> None:
    """Two trainers ended the same run: every epoch's metrics and member rows (sps and the
    timings aside) and every state tensor, bit for bit."""
    assert canon(a.history) == canon(b.history)
    assert canon(a.member_history) == canon(b.member_history)
    theirs = b.learner.state_tensors()
    for k, v in a.learner.state_tensors().items():
        assert bits_equal(v, theirs[k]), k


def full_and_resumed(cfg: Config, path, after_load=None):
    """(an uninterrupted run of `cfg`, a run resumed from its epoch-1 checkpoint at `path`), both
    trained to the end; `after_load(resumed)` is called right after the checkpoint is loaded."""
    from tune_gems.trainer.epoch_loop import train_epochs
    from tune_gems.trainer.trainer import Trainer

    full = Trainer(cfg, log=None)
    full.run_epoch()
    full.save_checkpoint(path)
    train_epochs(full)
    resumed = Trainer(cfg, log=None)
    resumed.load_checkpoint(path)
    if after_load is not None:
        after_load(resumed)
    train_epochs(resumed)
    return full, resumed


def prefilled_learner(cfg: Config, arms=None):
    """A CPU learner of `cfg` (reference ops; `arms` as the learner takes them) with its replay
    filled to trainer.learning_starts, ready for `iteration()`."""
    from tune_gems.ops import resolve_backend
    from tune_gems.trainer.run_setup import prepare_market
    from tune_gems.trainer.learner import Learner

    dev = torch.device("cpu")
    market = prepare_market(cfg, dev, n_seed_indices=cfg.trainer.population)
    learner = Learner(cfg, market, dev, resolve_backend("reference", dev), arms=arms)
    learner.reset_envs()
    for _ in range(cfg.trainer.learning_starts // cfg.trainer.n_envs):
        learner.collect()
    return learner


def member_part(key: str, t: torch.Tensor, population: int, p: int) -> torch.Tensor:
    """Member p's part of a learner state tensor: the accumulator has members on its second
    axis, counters and the support are shared, everything else has a member-first axis."""
    if t.dim() == 0 or key.endswith(".support"):
        return t
    if key == "metrics.acc":
        return t[:, p]
    return t.reshape(population, -1)[p]


def trained_with_lines(cfg: Config):
    """(a Trainer of `cfg` trained to its end, the HEALTH_DIAG lines it logged)."""
    from tune_gems.trainer.epoch_loop import train_epochs
    from tune_gems.trainer.trainer import Trainer

    lines: list[str] = []
    t = Trainer(cfg, log=lines.append)
    train_epochs(t)
    return t, lines


def assert_runs_alone_equal_their_members(together, alone, iterations: int = 9) -> dict[str, torch.Tensor]:
    """Step `together` and every learner of `alone` `iterations` times; then the members of
    `alone[j]` equal `together`'s next `alone[j].P` members (in order), every state tensor bit for
    bit. Returns `together`'s state."""
    for _ in range(iterations):
        together.iteration()
        for run in alone:
            run.iteration()
    state, start = together.state_tensors(), 0
    for j, run in enumerate(alone):
        ref = run.state_tensors()
        for q in range(run.P):
            for k, v in state.items():
                assert bits_equal(member_part(k, v, together.P, start + q), member_part(k, ref[k], run.P, q)), (j, q, k)
        start += run.P
    assert start == together.P
    return state
