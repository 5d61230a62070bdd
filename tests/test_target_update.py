"""The hard target update scheduled from the host (issue 33, item 1): with trainer.tau = 0 the
iteration's device part has no lerp over the parameters; the host copies the online network
into the target on the iterations where the copy is due (Learner._after_iteration, run by
tune_gems.trainer.graph.SplitStep). The copy keeps the bits of the lerp it replaces."""

from __future__ import annotations

import pytest
import torch

from learner_fixtures import bits_equal, prefilled_learner, tiny_config
from tune_gems.trainer.graph import SplitStep, StepRunner

ITERATIONS = 23  # target_update=4: five copies, and three iterations past the last


def _lerp_every_iteration(learner):
    """The path the host-scheduled copy replaced: after every iteration's optimizer step, a lerp
    of every target pair towards the online network by the device weight
    (updates % target_update == 0), 1.0 exactly when due and 0.0 otherwise."""

    def host(_: int) -> None:
        with torch.no_grad():
            w = (learner.updates % learner.cfg.trainer.target_update == 0).float()
            for t, o, _follows_tau in learner._target_pairs:
                t.lerp_(o, w)

    return SplitStep(learner._iteration_on_device, host, lambda: learner.updates)


def _cfg():
    # every switch that puts a tensor in the target pairs: spectral norm (its u, v buffers), NoisyNets, a gem head
    return tiny_config("trainer.target_update=4", "model.spectral_norm=true", "gems.g12.mode=wire", "gems.g10.mode=wire")


def test_the_host_scheduled_copy_equals_the_lerp_it_replaced_bit_for_bit():
    """Eager CPU, 23 iterations (five copies): every state tensor of the learner whose target is
    copied when due equals, after every iteration, that of a learner that lerps every iteration."""
    cfg = _cfg()
    new, old = prefilled_learner(cfg), prefilled_learner(cfg)
    old.iteration = _lerp_every_iteration(old)  # the cached SplitStep replaced by the old path
    assert cfg.trainer.tau == 0
    copies = 0
    for i in range(1, ITERATIONS + 1):
        before = new.target_flat.data.clone()
        new.iteration()
        old.iteration()
        due = i % cfg.trainer.target_update == 0
        copies += due
        assert int(new.updates) == i
        # the copy happened exactly when due (so the comparison below can fail)
        assert torch.equal(new.target_flat.data, new.online_flat.data) == due, i
        if not due:
            assert torch.equal(new.target_flat.data, before), i
        theirs = old.state_tensors()
        for k, v in new.state_tensors().items():
            assert bits_equal(v, theirs[k]), (i, k)
    assert copies == 5
    assert not torch.equal(new.target_flat.data, new.online_flat.data)  # three iterations past the last copy


def test_no_lerp_runs_in_the_device_part_with_a_hard_update_and_one_per_pair_with_tau():
    """The iteration's device part (what a CUDA graph captures) dispatches no lerp at tau = 0;
    with tau > 0 it blends every target pair in every iteration, as before."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.lerps = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.lerps += func.overloadpacket.__name__.startswith("lerp")
            return func(*args, **(kwargs or {}))

    for tau, want in ((0.0, 0), (0.1, None)):
        learner = prefilled_learner(tiny_config("model.spectral_norm=true", f"trainer.tau={tau}"))
        with Count() as count:
            learner.iteration.device()
        assert count.lerps == (len(learner._target_pairs) if want is None else want), tau


def test_resuming_mid_period_from_copied_state_equals_the_straight_run():
    """Stop after 6 iterations (two before the next copy), copy the state into a fresh learner
    and go on: after 23 iterations the two learners agree bit for bit (the host reads the
    update count from the state, so the copies stay on schedule)."""
    cfg = _cfg()
    straight, first = prefilled_learner(cfg), prefilled_learner(cfg)
    for _ in range(6):
        straight.iteration()
        first.iteration()
    resumed = prefilled_learner(cfg)
    with torch.no_grad():
        mine = resumed.state_tensors()
        for k, v in first.state_tensors().items():
            mine[k].copy_(v)
    for _ in range(ITERATIONS - 6):
        straight.iteration()
        resumed.iteration()
    theirs = straight.state_tensors()
    for k, v in resumed.state_tensors().items():
        assert bits_equal(v, theirs[k]), k


def test_an_eager_runner_runs_both_parts_and_a_split_step_is_one_step_per_replay():
    calls: list[tuple[str, int]] = []
    counter = torch.zeros((), dtype=torch.int64)

    def device() -> None:
        counter.add_(1)
        calls.append(("device", int(counter)))

    step = SplitStep(device, lambda n: calls.append(("host", n)), lambda: counter)
    runner = StepRunner(step, lambda: {"c": counter}, use_graph=False)
    runner()
    runner()
    assert calls == [("device", 1), ("host", 1), ("device", 2), ("host", 2)]
    counter.fill_(10)  # state copied in by hand: off CUDA the counter is read every call
    runner()
    assert calls[-1] == ("host", 11)
    with pytest.raises(ValueError, match="one step per replay"):
        StepRunner(step, lambda: {}, use_graph=False, steps=2)
