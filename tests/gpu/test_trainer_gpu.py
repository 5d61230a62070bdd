"""The graph-captured trainer on CUDA: capture in a worker thread, no host sync inside an
epoch, bit-identical reruns and resumes, graphed == eager to float tolerance.

Run on the GPU machine: `pytest -m gpu tests/gpu -q` (skipped without CUDA).
"""

from __future__ import annotations

import json
import math
import threading

import pytest
import torch

from tune_gems.config.load import load_config
from tune_gems.trainer.epoch_loop import train_epochs
from tune_gems.trainer.trainer import Trainer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

SMALL = [
    "device=cuda",
    "kernels=cuda",
    "trainer.population=4",
    "trainer.epochs=2",
    "trainer.iterations_per_epoch=40",
    "trainer.batch_size=64",
    "trainer.n_envs=8",
    "trainer.replay_capacity=4096",
    "trainer.learning_starts=256",
    "trainer.target_update=16",
    "data.synthetic.n=2000",
]
WIRED = ["gems.g6.mode=wire", "gems.g10.mode=wire", "gems.g12.mode=wire"]


def _cfg(*extra: str):
    return load_config(None, [*SMALL, *extra])


def _canon(rows):
    return json.dumps([{k: v for k, v in r.items() if k not in ("sps", "train_s", "eval_s")} for r in rows], sort_keys=True)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """torch.equal where NaN equals NaN (the accumulator holds NaN for gems without a null)."""
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


def _state(t: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in t.learner.state_tensors().items()}


@pytest.mark.parametrize("extra", [[], WIRED, ["trainer.precision=bf16", *WIRED], ["trainer.precision=fp32"]])
def test_same_seed_twice_is_bit_identical_on_gpu(extra):
    a, b = Trainer(_cfg(*extra), log=None), Trainer(_cfg(*extra), log=None)
    train_epochs(a)
    train_epochs(b)
    assert a.runner.captured and b.runner.captured
    assert _canon(a.history) == _canon(b.history) and _canon(a.member_history) == _canon(b.member_history)
    sa, sb = _state(a), _state(b)
    for k in sa:
        assert _same(sa[k], sb[k]), k


def test_capture_and_replay_inside_a_worker_thread_matches_the_main_thread():
    main = Trainer(_cfg(*WIRED), log=None)
    train_epochs(main)
    box: dict = {}

    def work():  # what Ray Tune does with a function trainable
        try:
            t = Trainer(_cfg(*WIRED), log=None)
            train_epochs(t)
            box["history"], box["state"], box["captured"] = t.history, _state(t), t.runner.captured
        except BaseException as e:  # surfaced in the main thread below
            box["error"] = e

    th = threading.Thread(target=work)
    th.start()
    th.join()
    assert "error" not in box, box.get("error")
    assert box["captured"]
    assert _canon(box["history"]) == _canon(main.history)
    for k, v in _state(main).items():
        assert _same(v, box["state"][k]), k


def test_an_epoch_never_syncs_with_the_host():
    t = Trainer(_cfg(*WIRED), log=None)
    t._prefill()
    t.runner()  # first call captures (capture itself synchronises)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(t.cfg.trainer.iterations_per_epoch):
            t.runner()
        for _ in range(3):  # the eager iteration is sync-free as well
            t.learner.iteration()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert torch.isfinite(t.learner.acc[:3]).all()


def test_graphed_and_eager_agree_over_one_epoch():
    g = Trainer(_cfg(*WIRED, "trainer.epochs=1"), log=None)
    e = Trainer(_cfg(*WIRED, "trainer.epochs=1", "trainer.graph=off"), log=None)
    train_epochs(g)
    train_epochs(e)
    assert g.runner.captured and not e.runner.use_graph
    hg, he = g.history[0], e.history[0]
    for k in ("loss", "q_mean", "grad_norm", "g6_branch_indep", "g10_temporal", "g12_predictive"):
        assert math.isclose(hg[k], he[k], rel_tol=1e-3, abs_tol=1e-6), (k, hg[k], he[k])
    for (name, a), b in zip(g.learner.online.named_parameters(), e.learner.online.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5, msg=name)


def test_resume_on_gpu_is_bit_identical(tmp_path, extra=()):
    cfg = _cfg(*extra, *WIRED, "trainer.epochs=3")
    full = Trainer(cfg, log=None)
    train_epochs(full)
    first = Trainer(cfg, log=None)
    first.run_epoch()
    first.save_checkpoint(tmp_path / "ck.pt")
    resumed = Trainer(cfg, log=None)
    resumed.load_checkpoint(tmp_path / "ck.pt")
    train_epochs(resumed)
    assert _canon(resumed.history) == _canon(full.history)
    for k, v in _state(full).items():
        assert _same(v, _state(resumed)[k]), k


def test_cuda_kernels_and_reference_ops_train_alike():
    cu = Trainer(_cfg(*WIRED, "trainer.epochs=1"), log=None)
    ref = Trainer(_cfg(*WIRED, "trainer.epochs=1", "kernels=reference"), log=None)
    assert cu.ops.name == "cuda" and ref.ops.name == "reference"
    train_epochs(cu)
    train_epochs(ref)
    for k in ("loss", "g6_branch_indep", "g10_temporal", "g12_predictive"):
        assert math.isclose(cu.history[0][k], ref.history[0][k], rel_tol=1e-3), k


def test_a_plugin_gem_runs_inside_the_captured_graph(monkeypatch):
    """The example plug-in (examples/gems/q_magnitude.py), wired, in the CUDA graph: reported,
    bit-identical twice, and sync-free like the built-ins."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "examples" / "gems"))
    extra = [*WIRED, "plugins=[q_magnitude]", "gems.qmag.mode=wire", "gems.qmag.weight=0.01", "trainer.epochs=1"]
    a, b = Trainer(_cfg(*extra), log=None), Trainer(_cfg(*extra), log=None)
    train_epochs(a)
    train_epochs(b)
    assert a.runner.captured and a.history[0]["q_magnitude"] > 0
    assert _canon(a.history) == _canon(b.history) and _canon(a.member_history) == _canon(b.member_history)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            a.runner()
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_chunked_evaluation_graphs_equal_an_eager_pass_with_weights_recomputed_every_step():
    """Evaluation runs EVAL_STEPS_PER_GRAPH steps per captured graph (plus one graph for the
    rest) from weights computed once per pass: the returns and positions equal, bit for bit,
    an eager pass that recomputes the noise-free weights in every step (issue 15)."""
    from env_fixtures import evaluate_segment
    from tune_gems.trainer.evaluator import EVAL_STEPS_PER_GRAPH

    t = Trainer(_cfg("trainer.epochs=1"), log=None)
    train_epochs(t)
    ev, runners = t.evaluator.runners("val")
    assert ev.T % EVAL_STEPS_PER_GRAPH and len(runners) == 2 and all(r.captured for r, _ in runners)
    net = t.learner.online

    def per_step_weights(obs):
        with t.learner.matmul_precision():
            return net.expected_q(net(obs, net.weights("eval")).logits).argmax(-1)

    for _ in range(2):  # the second pass replays the captured graphs
        _, returns, positions = t.evaluator.evaluate("val")
        r2, p2 = evaluate_segment(t.market, t.learner.env.actions, t.cfg.env.cost, per_step_weights, t.learner.P, "val", t.learner.path_of_member)
        assert torch.equal(returns, r2) and torch.equal(positions, p2)
