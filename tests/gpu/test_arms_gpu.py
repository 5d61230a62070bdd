"""Arms on the GPU (issue 12): the bit-identity invariant with the CUDA kernels and the graph.

Run on the GPU machine: `pytest -m gpu tests/gpu/test_arms_gpu.py -q` (skipped without CUDA).

Two claims, tested apart because they can fail for different reasons:
1. Same population: a member's bits do not depend on the *configurations* of the other members
   (arms [A, B] against [A, A'] and [B', B], P equal). Every kernel sees the same shapes, so a
   failure here is a real mixing bug (a Python branch on a switch, a shared reduction).
2. The issue's invariant: the members of an arm equal a run of that arm alone (P = arms x S
   against P = S). Besides mixing, this needs every kernel to compute a member's numbers the
   same way whatever the batch count P: elementwise ops and the project's kernels (one block per
   member, fixed-order reductions) do; cuBLAS batched matmuls and torch's reductions choose
   algorithms (split-K, blocks per output) from the shapes, P included, and may round
   differently. So with several arms every matmul, and every reduction whose output count is
   the number of groups, runs per arm block (tune_gems.model.layers; found with
   benchmarks/p_invariance_probe.py). The test asserts bit-identity and, if it fails, names the
   first iteration and tensors that differ, so the cause can be told apart from mixing (which
   claim 1 covers).
"""

from __future__ import annotations

import pytest
import torch

from tune_gems.design.arms import ArmsConfig, expand_arms
from tune_gems.config.load import load_config

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

SMALL = [
    "device=cuda",
    "kernels=cuda",
    "trainer.population=4",
    "trainer.batch_size=64",
    "trainer.n_envs=8",
    "trainer.replay_capacity=4096",
    "trainer.learning_starts=256",
    "trainer.target_update=16",
    "data.synthetic.n=2000",
]
ITERATIONS = 40  # two hard target copies
FACTORS = {"gems.g10.mode": ["measure", "wire"], "model.spectral_norm": [True, False]}


def _cfg(*extra: str):
    return load_config(None, [*SMALL, *extra])


class _Run:
    """A learner stepped through the captured CUDA graph, as the trainer runs it."""

    def __init__(self, cfg, arms):
        from tune_gems.ops import resolve_backend
        from tune_gems.trainer.run_setup import prepare_market
        from tune_gems.trainer.graph import StepRunner
        from tune_gems.trainer.learner import Learner

        dev = torch.device(cfg.device)
        market = prepare_market(cfg, dev, n_seed_indices=cfg.trainer.population)
        self.learner = Learner(cfg, market, dev, resolve_backend(cfg.kernels, dev), arms=arms)
        self.learner.reset_envs()
        for _ in range(cfg.trainer.learning_starts // cfg.trainer.n_envs):
            self.learner.collect()
        self.runner = StepRunner(self.learner.iteration, self.learner.state_tensors, use_graph=True)

    def step(self) -> None:
        self.runner()

    def member(self, key: str, p: int) -> torch.Tensor:
        t = self.learner.state_tensors()[key]
        if t.dim() == 0 or key.endswith(".support"):
            return t
        if key == "metrics.acc":
            return t[:, p]
        return t.reshape(self.learner.P, -1)[p]


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


def _differences(run: _Run, members: list[int], ref: _Run, ref_members: list[int]) -> list[str]:
    out = []
    for key in run.learner.state_tensors():
        for p, q in zip(members, ref_members):
            a, b = run.member(key, p), ref.member(key, q)
            if not _same(a, b):
                diff = (a.double() - b.double()).abs().nan_to_num(nan=float("inf")).max().item() if a.is_floating_point() else "int"
                out.append(f"{key}[member {p} vs {q}] max|diff|={diff}")
                break
    return out


def _lockstep(run: _Run, refs: list[tuple[_Run, list[int], list[int]]]) -> None:
    """Step every run ITERATIONS times through its graph; after each iteration compare the
    members; fail naming the first iteration and the state tensors that differ."""
    for i in range(ITERATIONS + 1):
        if i:
            run.step()
            for ref, _, _ in refs:
                ref.step()
        torch.cuda.synchronize()
        for ref, mine, theirs in refs:
            bad = _differences(run, mine, ref, theirs)
            assert not bad, f"after {i} iterations (0: after collection): " + "; ".join(bad[:6])
    assert run.runner.captured and all(ref.runner.captured for ref, _, _ in refs)
    assert int(run.learner.updates) == ITERATIONS


def test_members_do_not_depend_on_the_other_arms_at_the_same_population():
    """[A, B] against [A, A'] and [B', B] (same P = 8): arm A's members equal in the first pair,
    arm B's in the second, bit for bit, through the graph with the CUDA kernels."""
    base = _cfg()
    a = {"gems.g10.mode": "measure", "model.spectral_norm": True}
    b = {"gems.g10.mode": "wire", "model.spectral_norm": False, "model.noisy": False, "trainer.lr": 3e-4}

    def arms(*entries):
        return expand_arms(base, ArmsConfig.model_validate({"list": [{"name": n, **s} for n, s in entries]}))

    S = base.trainer.population
    mixed = _Run(base, arms(("A", a), ("B", b)))
    only_a = _Run(base, arms(("A", a), ("A2", a)))
    only_b = _Run(base, arms(("B2", b), ("B", b)))
    _lockstep(mixed, [(only_a, list(range(S)), list(range(S))), (only_b, list(range(S, 2 * S)), list(range(S, 2 * S)))])


def test_factorial_arms_equal_single_arm_runs_on_gpu():
    """gems.g10.mode {measure, wire} x model.spectral_norm {on, off}: 4 arms x 4 seeds (P = 16)
    in one graph; arm a's members equal, bit for bit, a graph run of that arm alone (P = 4)."""
    base = _cfg()
    arms = expand_arms(base, ArmsConfig.model_validate({"factors": FACTORS}))
    S = base.trainer.population
    together = _Run(base, arms)
    alone = [(_Run(arm.config, None), [a * S + s for s in range(S)], list(range(S))) for a, arm in enumerate(arms)]
    _lockstep(together, alone)
