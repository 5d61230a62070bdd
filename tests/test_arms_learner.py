"""Arms on the population axis (issue 12): per-member switches inside one graph, and the
bit-identity invariant: the members of an arm equal a run of that arm's configuration alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from learner_fixtures import bits_equal, member_part, prefilled_learner, tiny_config
from tune_gems.design.arms import ArmsConfig, expand_arms
from tune_gems.gems.registry import run_gems
from tune_gems.model.network import BranchingC51
from tune_gems.rng import CounterRNG, box_muller, member_seeds

REPO_ROOT = Path(__file__).resolve().parents[1]

# -- the network's per-member switches -----------------------------------------------------------

OBS, K, A = 9, 2, 3


def _heads() -> dict:
    return {g.name: g.head for g in run_gems(()) if g.head is not None}


def _net(seeds: list[int], sn: list[bool], noisy: list[bool]) -> BranchingC51:
    return BranchingC51(tiny_config().model, OBS, K, A, seeds, _heads(), spectral_norm=sn, noisy=noisy)


def _run_net(net: BranchingC51, seeds: list[int], obs: torch.Tensor) -> dict[str, torch.Tensor]:
    """One training forward (noise from the members' counter RNG, power iteration advancing) and
    the gradients of a per-member loss; everything per member, [P, ...]."""
    rng = CounterRNG(seeds, "cpu")
    net.resample_noise(box_muller(rng.uniform(1, (2 * net.noise_size,))))
    w = net.weights("train")
    out = net(obs, w)
    loss = (out.logits.square().mean(dim=(1, 2, 3, 4)) + out.h.mean(dim=(1, 2))).sum()
    params = dict(net.named_parameters())
    grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
    res = {f"param.{k}": v.detach() for k, v in params.items()}
    res.update({f"grad.{k}": (g if g is not None else torch.zeros_like(p)) for (k, p), g in zip(params.items(), grads)})
    res.update({f"buffer.{k}": v for k, v in net.named_buffers() if not k.endswith(("_on", "support"))})
    res.update(logits=out.logits.detach(), h=out.h.detach(), sigma=net.noisy_sigma())
    res.update({f"weight.{k}.{i}": t.detach() for k, wb in w.items() for i, t in enumerate(wb)})
    return res


def _member(t: torch.Tensor, P: int, p: int) -> torch.Tensor:
    return t.reshape(P, -1)[p]


SWITCHES = [(True, True), (True, False), (False, True), (False, False)]


def test_mixed_switches_equal_each_members_uniform_network_bit_for_bit():
    """Four members, one per (spectral_norm, noisy) combination, in one network: each equals,
    in parameters, effective weights, outputs, gradients and spectral-norm state, member s of a
    network where every member has its switches (same seeds)."""
    seeds = member_seeds(3, 4)
    obs = torch.randn(4, 7, OBS, generator=torch.Generator().manual_seed(0))
    mixed = _run_net(_net(seeds, [s for s, _ in SWITCHES], [n for _, n in SWITCHES]), seeds, obs)
    for p, (sn, noisy) in enumerate(SWITCHES):
        alone = _run_net(_net(seeds, [sn] * 4, [noisy] * 4), seeds, obs)
        for k, v in mixed.items():
            assert torch.equal(_member(v, 4, p), _member(alone[k], 4, p)), (p, k)


def test_initial_weights_depend_on_the_seed_only():
    seeds = member_seeds(5, 2)
    ref = dict(_net(seeds, [True, True], [True, True]).named_parameters())
    for sn, noisy in SWITCHES[1:]:
        other = dict(_net(seeds, [sn, sn], [noisy, noisy]).named_parameters())
        assert all(torch.equal(ref[k], other[k]) for k in ref)
    assert not torch.equal(ref["trunk.0.weight"], dict(_net(member_seeds(6, 2), [True] * 2, [True] * 2).named_parameters())["trunk.0.weight"])


def test_switched_off_members_use_raw_and_mean_weights_and_sigma_gets_no_gradient():
    seeds = member_seeds(3, 4)
    net = _net(seeds, [s for s, _ in SWITCHES], [n for _, n in SWITCHES])
    obs = torch.randn(4, 7, OBS, generator=torch.Generator().manual_seed(1))
    r = _run_net(net, seeds, obs)
    for p, (sn, noisy) in enumerate(SWITCHES):
        raw = _member(r["param.trunk.0.weight"], 4, p)
        eff = _member(r["weight.trunk0.0"], 4, p)
        assert torch.equal(eff, raw) != sn  # spectral norm off: W itself; on: W / sigma
        mu = _member(r["param.stream_in.mu_w"], 4, p)
        noisy_w = _member(r["weight.stream_in.0"], 4, p)
        assert torch.equal(noisy_w, mu) != noisy  # NoisyNets off: the mean weights
        sigma_grad = _member(r["grad.stream_in.sigma_w"], 4, p)
        assert (sigma_grad == 0).all() != noisy
        assert (r["sigma"][p] == 0) != noisy  # the noisy_sigma metric: 0 without NoisyNets
        # the mean still learns without NoisyNets
        assert (_member(r["grad.stream_in.mu_w"], 4, p) != 0).any()


def test_a_wrong_number_of_switches_is_refused():
    with pytest.raises(ValueError, match="3 noisy switches for a population of 2"):
        _net(member_seeds(0, 2), [True, True], [True, True, False])


# -- the learner: each arm's members equal a run of that arm alone --------------------------------


def _assert_arms_equal_single_arm_runs(base, arms_cfg, iterations: int):
    arms = expand_arms(base, arms_cfg)
    together = prefilled_learner(base, arms)
    S, A = base.trainer.population, len(arms)
    assert together.P == A * S and together.layout.arms == tuple(a.name for a in arms)
    alone = [prefilled_learner(a.config) for a in arms]
    for a, run in zip(arms, alone):
        assert run.P == S and run.layout.arms == ("default",) and run.arms[0].config == a.config
    for _ in range(iterations):
        together.iteration()
        for run in alone:
            run.iteration()
    state = together.state_tensors()
    assert int(together.updates) == iterations and iterations > base.trainer.target_update  # target copies happened
    for a, run in enumerate(alone):
        ref = run.state_tensors()
        assert set(ref) == set(state)
        for s in range(S):
            m = a * S + s
            for k, v in state.items():
                assert bits_equal(member_part(k, v, A * S, m), member_part(k, ref[k], S, s)), (arms[a].name, s, k)
            assert bits_equal(together.online.noisy_sigma()[m], run.online.noisy_sigma()[s])
    # the arms do differ from each other at one seed (so the comparison above can fail)
    params = state["online.params"]
    for a in range(1, A):
        assert not torch.equal(params[0], params[a * S]), arms[a].name
    return together, alone


def test_factorial_arms_are_bit_identical_to_single_arm_runs():
    """gems.g10.mode {measure, wire} x model.spectral_norm {on, off}: 4 arms x 2 seeds in one
    learner; after collection and 9 iterations (two hard target copies), every state tensor of
    every member (parameters, spectral-norm state, noise buffers, Adam moments, replay,
    environments, metric accumulators) equals the same seed of a run of its arm alone."""
    base = tiny_config("trainer.population=2")
    spec = ArmsConfig.model_validate({"factors": {"gems.g10.mode": ["measure", "wire"], "model.spectral_norm": [True, False]}})
    together, _ = _assert_arms_equal_single_arm_runs(base, spec, iterations=9)
    assert together.spectral_norm == [True, True, False, False, True, True, False, False]


def test_listed_arms_with_noisy_lr_off_and_weights_are_bit_identical_to_single_arm_runs():
    """NoisyNets off (epsilon-greedy), another learning rate, a gem off in one arm and wired in
    another (with a head: G12's predictor), another wire weight."""
    base = tiny_config("trainer.population=2", "trainer.epsilon_decay_iterations=50")
    spec = ArmsConfig.model_validate(
        {
            "list": [
                {"name": "control"},
                {"name": "eps-greedy", "model.noisy": False, "trainer.lr": 3e-3, "gems.g12.mode": "off"},
                {"name": "wired", "gems.g12.mode": "wire", "gems.g12.weight": 0.3, "gems.g6.mode": "wire", "gems.g6.weight": 0.05},
            ]
        }
    )
    together, alone = _assert_arms_equal_single_arm_runs(base, spec, iterations=9)
    assert together.noisy == [True, True, False, False, True, True] and together.lr[2] == 3e-3
    rows = dict(zip(together.acc_rows, together.acc))
    assert torch.isnan(rows["g12"][2:4]).all() and torch.isfinite(rows["g12"][[0, 1, 4, 5]]).all()
    # the G12 head of the arm with G12 off never trains (exactly zero gradient keeps it at init)
    off = alone[1]
    head = off.online_flat.columns(off.online.heads["g12"])
    fresh = prefilled_learner(expand_arms(base, spec)[1].config)
    assert torch.equal(off.online_flat.data[:, head], fresh.online_flat.data[:, head])


def test_members_without_noisynets_explore_epsilon_greedily_and_the_others_act_greedily():
    base = tiny_config("trainer.population=2", "trainer.epsilon_start=1.0", "trainer.epsilon_end=1.0")
    spec = ArmsConfig.model_validate({"factors": {"model.noisy": [True, False]}})
    learner = prefilled_learner(base, expand_arms(base, spec))
    draws = learner.rng.draw(learner.plan)
    obs = learner.env.observe()
    w = learner.online.weights("train")
    actions = learner.act(obs, w, draws)
    with torch.no_grad():
        greedy = learner.online.expected_q(learner.online(obs, w).logits).argmax(-1)
    random = draws.integers("eps_action", learner.A).view(greedy.shape)
    assert torch.equal(actions[:2], greedy[:2])  # NoisyNets: greedy on the noisy net
    assert torch.equal(actions[2:], random[2:])  # epsilon = 1: always the random action


def test_the_default_run_is_one_arm_with_the_old_member_seeds():
    learner = prefilled_learner(tiny_config())
    assert learner.P == 3 and learner.layout.arms == ("default",) and learner.layout.seeds_per_arm == 3
    assert learner.seeds == member_seeds(0, 3) and [a.name for a in learner.arms] == ["default"]
    assert learner.path_of_member == ([0, 1, 2] if learner.cfg.data.synthetic.paths == "per_seed" else [0, 0, 0])


def test_member_blocks_keep_every_matmul_per_arm_and_each_block_equals_its_arm_alone():
    """With member blocks (several arms) each layer's matmuls run once per arm, and the blocks
    reach the gem heads' layers too. What the blocks promise is the arms invariant: each block
    of members equals, bit for bit, a network of that block's members alone (same shapes). It
    does not promise that a blocked matmul equals one batched matmul over every member: on CPU
    that depends on the BLAS kernel the machine picks (AVX-512 rounds the two differently)."""
    seeds = member_seeds(3, 2) * 2
    obs = torch.randn(4, 7, OBS, generator=torch.Generator().manual_seed(2))
    sn, noisy = [True, False, True, False], [True, True, False, False]
    plain = _net(seeds, sn, noisy)
    assert all(layer.chunk is None for layer in plain.weight_layers().values())
    blocked = BranchingC51(plain.cfg, OBS, K, A, seeds, _heads(), spectral_norm=sn, noisy=noisy, member_block=2)
    assert {name: layer.chunk for name, layer in blocked.weight_layers().items()}["adv_out"] == 2 * K
    assert blocked.weights("eval")["g12.pred_in"].chunk == 2  # eval: no power-iteration step
    together = _run_net(blocked, seeds, obs)
    for b in range(2):
        rows = slice(2 * b, 2 * b + 2)
        alone = _run_net(_net(seeds[rows], sn[rows], noisy[rows]), seeds[rows], obs[rows])
        for k, v in alone.items():
            for p in range(2):
                assert torch.equal(_member(together[k], 4, 2 * b + p), _member(v, 2, p)), (b, p, k)
    with pytest.raises(ValueError, match="do not divide"):
        BranchingC51(plain.cfg, OBS, K, A, seeds, _heads(), member_block=3)


def test_a_config_with_arms_builds_the_arms_x_seeds_learner():
    """`arms:` in the config (here from overrides) is what the learner expands; its interface
    (P, layout, arms) is what the trainer reports from."""
    learner = prefilled_learner(tiny_config("trainer.population=2", "arms.factors.model.noisy=[true,false]", "arms.factors.trainer.lr=[0.001,0.003]"))
    assert learner.P == 8 and learner.layout.seeds_per_arm == 2
    assert [learner.layout.arm_of(m) for m in (0, 2, 4, 6)] == [a.name for a in learner.arms]
    assert learner.arms[3].name == "model.noisy=false,trainer.lr=0.003"
    assert learner.seeds == member_seeds(0, 2) * 4
    assert learner.lr == [0.001, 0.001, 0.003, 0.003, 0.001, 0.001, 0.003, 0.003]
    assert [(rows.start, rows.stop, lr) for rows, lr in learner.optim.blocks] == [(0, 2, 0.001), (2, 4, 0.003), (4, 6, 0.001), (6, 8, 0.003)]
    assert all(layer.chunk is not None for layer in learner.online.weight_layers().values())
    learner.iteration()
    assert torch.isfinite(learner.acc).any()


def test_the_cpu_blas_path_is_pinned_unless_the_user_chose_one():
    """The invariant above holds on AVX-512 machines because MKL runs one code path, and ATen's
    kernels one vector width (tune_gems/contracts/cpu_environment.py); a user's own MKL_CBWR and
    ATEN_CPU_CAPABILITY are kept, and a CPU without AVX2 keeps ATen's own choice."""
    from tune_gems.contracts.cpu_environment import (
        CPU_BLAS_PATH, CPU_BLAS_PATH_ENV, CPU_KERNEL_WIDTH, CPU_KERNEL_WIDTH_ENV, cpu_has_avx2, pin_cpu_code_path,
    )

    env: dict[str, str] = {}
    assert pin_cpu_code_path(env, has_avx2=lambda: True) == CPU_BLAS_PATH
    assert env == {CPU_BLAS_PATH_ENV: CPU_BLAS_PATH, CPU_KERNEL_WIDTH_ENV: CPU_KERNEL_WIDTH}
    env = {CPU_BLAS_PATH_ENV: "COMPATIBLE", CPU_KERNEL_WIDTH_ENV: "default"}
    assert pin_cpu_code_path(env, has_avx2=lambda: True) == "COMPATIBLE" and env[CPU_KERNEL_WIDTH_ENV] == "default"
    env = {}
    pin_cpu_code_path(env, has_avx2=lambda: False)
    assert CPU_KERNEL_WIDTH_ENV not in env
    assert cpu_has_avx2(lambda: "processor : 0\nflags : fpu sse2 avx avx2 fma\n")
    assert not cpu_has_avx2(lambda: "processor : 0\nflags : fpu sse2 avx avx2_fake\n")
    assert not cpu_has_avx2(lambda: (_ for _ in ()).throw(OSError("unreadable")))


def test_atens_kernel_width_follows_the_pin_set_after_torch_is_imported():
    """The CLI pins the width after its imports (torch among them in a trial's worker) but before
    any tensor work: torch must read the variable at its first kernel, not at import. Checked in a
    fresh process whose environment lacks the variable."""
    import subprocess
    import sys

    from tune_gems.contracts.cpu_environment import CPU_KERNEL_WIDTH_ENV, cpu_has_avx2

    if not cpu_has_avx2():
        pytest.skip("not an x86 CPU with AVX2: the width is left to ATen")
    script = (
        "import torch\n"
        "from tune_gems.contracts.cpu_environment import pin_cpu_code_path\n"
        "pin_cpu_code_path()\n"
        "print(torch.backends.cpu.get_cpu_capability())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != CPU_KERNEL_WIDTH_ENV}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "AVX2"


def test_an_aa_arm_differs_only_in_its_replay_draws_and_equals_its_run_alone():
    """Issue 21's A/A arm: the control with `trainer.replay_stream=1` samples other replay
    batches (so it trains differently: the learner's own null spread) and is, like any arm,
    bit-identical to a run of it alone; the control's members keep their draws bit for bit."""
    base = tiny_config("trainer.population=2")
    spec = ArmsConfig.model_validate({"list": [{"name": "control"}, {"name": "aa", "trainer.replay_stream": 1}]})
    together, alone = _assert_arms_equal_single_arm_runs(base, spec, iterations=9)
    assert set(together.replay_streams) == {1} and together.replay_streams[1].tolist() == [False, False, True, True]
    assert not alone[0].replay_streams  # the control alone has no nuisance stream: its draws as before
