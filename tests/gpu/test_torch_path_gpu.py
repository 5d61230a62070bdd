"""The learner with `model.layer_kernel: triton` on the GPU, through its CUDA graph (issue 40 item 3).

The invariants the torch path keeps with member blocks, and the two it cannot keep
(tests/gpu/test_target_copy_and_seed_blocks_gpu.py keeps those as strict expected failures),
as plain tests of the triton path, whose layer products have no member blocks and tiles that
depend on the matrix shape only:
- seed blocks pooled equal one trial of all their seeds (the moonshot's 3 arms, blocks of 8
  against 16 seeds), and an arm of S seeds equals the first S seeds of a run with 2S;
- an arm alone equals the same arm beside others (4 factorial arms against each arm alone);
- the same config twice is bit-equal, an epoch never syncs with the host, and a resumed run
  equals a straight one;
- one graphed run stays within tf32 tolerance of the torch path.
The layer products are not the only per-member computation whose bits could depend on P: the
gradient-clip norm (the reported grad_norm) and q_mean are reductions that torch splits by the
shape of its call, so this path computes them with a fixed-order kernel per member
(tune_gems.ops.triton_layers.ClipAdam, row_means; benchmarks/RESULTS.md, 2026-12-05). A failure
names the first iteration and state tensors that differ, which tells which part depends on P.

Run on the GPU machine: `pytest -m gpu tests/gpu/test_triton_learner_gpu.py -q -rfE` (skipped
without CUDA); `bash benchmarks/gpu_session.sh triton` runs it.
"""

from __future__ import annotations

import math

import pytest
import torch

from test_arms_gpu import FACTORS, _cfg as _arms_cfg, _Run as _ArmsRun, _lockstep as _arms_lockstep
from test_target_copy_and_seed_blocks_gpu import _lockstep, _members, _run
import test_trainer_gpu as trainer_tests  # its tests called with the triton switch (not collected here)
from test_trainer_gpu import WIRED, _canon, _cfg as _trainer_cfg, _same, _state
from tune_gems.design.arms import ArmsConfig, expand_arms
from tune_gems.trainer.epoch_loop import train_epochs
from tune_gems.trainer.trainer import Trainer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
pytest.importorskip("triton")

TRITON = "model.layer_kernel=triton"


def test_seed_blocks_pooled_equal_one_trial_of_all_their_seeds_bit_for_bit():
    """The moonshot's 3 arms: seed blocks 0-7 and 8-15 against one trial of the 16 seeds, every
    member through 20 graph replays."""
    trial = _run(16, 0, TRITON)
    blocks = [_run(8, 0, TRITON), _run(8, 8, TRITON)]
    refs = [(block, _members(3, 16, range(8 * b, 8 * b + 8)), _members(3, 8, range(8))) for b, block in enumerate(blocks)]
    _lockstep(trial, refs)
    params = trial.learner.online_flat.data
    assert not torch.equal(params[0], params[16]) and not torch.equal(params[0], params[1])


def test_an_arm_of_s_seeds_equals_its_first_s_seeds_of_a_run_with_2s():
    large, small = _run(6, 0, TRITON), _run(3, 0, TRITON)
    _lockstep(large, [(small, _members(3, 6, range(3)), _members(3, 3, range(3)))])


def test_factorial_arms_equal_single_arm_runs():
    base = _arms_cfg(TRITON)
    arms = expand_arms(base, ArmsConfig.model_validate({"factors": FACTORS}))
    S = base.trainer.population
    together = _ArmsRun(base, arms)
    alone = [(_ArmsRun(arm.config, None), [a * S + s for s in range(S)], list(range(S))) for a, arm in enumerate(arms)]
    _arms_lockstep(together, alone)


@pytest.mark.parametrize("extra", [[], ["trainer.precision=bf16"], ["trainer.precision=fp32"]])
def test_the_same_config_twice_is_bit_identical(extra):
    trainer_tests.test_same_seed_twice_is_bit_identical_on_gpu([TRITON, *WIRED, *extra])


def test_an_epoch_never_syncs_with_the_host():
    t = Trainer(_trainer_cfg(TRITON, *WIRED), log=None)
    t._prefill()
    t.runner()  # the first call compiles the kernels and captures
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(t.cfg.trainer.iterations_per_epoch):
            t.runner()
        for _ in range(3):
            t.learner.iteration()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert torch.isfinite(t.learner.acc[:3]).all()


def test_resume_is_bit_identical(tmp_path):
    cfg = _trainer_cfg(TRITON, *WIRED, "trainer.epochs=3")
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


def test_one_epoch_stays_within_tf32_tolerance_of_the_torch_path():
    """One graphed epoch at tf32 on each path: the epoch's loss, q_mean, grad_norm and gems
    within 1e-3 relative (tf32's operand rounding, 2^-11 each, over 40 iterations), the
    parameters within 1e-3 relative and 1e-5 absolute (as graphed against eager,
    tests/gpu/test_trainer_gpu.py)."""
    torch_run = Trainer(_trainer_cfg(*WIRED, "trainer.epochs=1", "trainer.precision=tf32"), log=None)
    triton_run = Trainer(_trainer_cfg(TRITON, *WIRED, "trainer.epochs=1", "trainer.precision=tf32"), log=None)
    train_epochs(torch_run)
    train_epochs(triton_run)
    assert triton_run.learner.online.trunk[0].products.name == "triton"
    ht, hr = torch_run.history[0], triton_run.history[0]
    for k in ("loss", "q_mean", "grad_norm", "g6_branch_indep", "g10_temporal", "g12_predictive"):
        assert math.isclose(ht[k], hr[k], rel_tol=1e-3, abs_tol=1e-6), (k, ht[k], hr[k])
    for (name, a), b in zip(torch_run.learner.online.named_parameters(), triton_run.learner.online.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5, msg=name)
