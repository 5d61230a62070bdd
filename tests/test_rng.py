"""The per-member counter RNG: per-member streams, advancing, draw plans, member seeds."""

from __future__ import annotations

import torch

from tune_gems.rng import CounterRNG, box_muller, member_seeds, to_integers


# -- RNG ----------------------------------------------------------------------------------------


def test_counter_rng_is_per_member_and_advances():
    a = CounterRNG([1, 2, 3], "cpu")
    b = CounterRNG([1, 99, 3], "cpu")
    ua, ub = a.uniform(4, (1000,)), b.uniform(4, (1000,))
    assert torch.equal(ua[[0, 2]], ub[[0, 2]]) and not torch.equal(ua[1], ub[1])
    assert 0 < ua.min() and ua.max() < 1 and abs(ua.mean().item() - 0.5) < 0.02
    assert not torch.equal(a.uniform(5, (1000,)), ua)
    a.advance()
    assert not torch.equal(a.uniform(4, (1000,)), ua)
    z = box_muller(a.uniform(7, (40000,)))
    assert abs(z.mean().item()) < 0.03 and abs(z.std().item() - 1) < 0.03
    i = to_integers(a.uniform(8, (5000,)), torch.tensor(7))
    assert i.min() == 0 and i.max() == 6


def test_iteration_draws_are_per_member_slices_of_one_block():
    from tune_gems.rng import DrawPlan

    plan = DrawPlan({"a": 6, "b": 4000, "c": 0}, "cpu")
    r1, r2 = CounterRNG([1, 2], "cpu"), CounterRNG([1, 3], "cpu")
    d1, d2 = r1.draw(plan), r2.draw(plan)
    assert d1.uniform("a").shape == (2, 6) and d1.uniform("c").shape == (2, 0)
    assert torch.equal(d1.block[0], d2.block[0]) and not torch.equal(d1.block[1], d2.block[1])
    z = d1.normal("b")
    assert z.shape == (2, 2000) and abs(z.mean().item()) < 0.1 and abs(z.std().item() - 1) < 0.1
    r1.advance()
    assert not torch.equal(r1.draw(plan).block, d1.block)


def test_member_seeds_are_distinct_and_stable():
    s = member_seeds(0, 64)
    assert len(set(s)) == 64 and s == member_seeds(0, 64) and s[:3] == member_seeds(0, 3)
    assert set(s).isdisjoint(member_seeds(1, 64))


def test_appending_slices_to_a_plan_leaves_the_earlier_slices_bit_identical():
    """The learner reserves the epsilon-greedy slices for every member, noisy or not, after the
    noise, env-start and replay slices: a slice's numbers depend only on its offset, so adding
    slices at the end keeps the earlier draws (and today's noisy runs) bit-identical."""
    from tune_gems.rng import DrawPlan

    short = DrawPlan({"noise": 10, "env": 3, "replay": 5}, "cpu")
    long = DrawPlan({"noise": 10, "env": 3, "replay": 5, "eps_coin": 3, "eps_action": 6}, "cpu")
    d_short, d_long = CounterRNG([7, 8], "cpu").draw(short), CounterRNG([7, 8], "cpu").draw(long)
    for name in ("noise", "env", "replay"):
        assert torch.equal(d_short.uniform(name), d_long.uniform(name))
    moved = DrawPlan({"eps_coin": 3, "noise": 10, "env": 3, "replay": 5}, "cpu")  # a slice in front shifts the rest
    assert not torch.equal(CounterRNG([7, 8], "cpu").draw(moved).uniform("noise"), d_short.uniform("noise"))
