"""One training iteration of the population DQN, with all state in preallocated tensors, run eagerly
on CPU and captured as one CUDA graph on GPU; nothing reads back to the host or branches on a
value, apart from the hard target update (`tune_gems.trainer.graph.SplitStep`). What differs
between arms enters as per-member constants, never as graph structure, random numbers or initial
weights, so each arm equals a run of it alone bit for bit (docs/design.md "Arms")."""

from __future__ import annotations

import contextlib
import copy
import functools

import torch
from torch import Tensor

from tune_gems.data import series as data_mod
from tune_gems.design.arms import Arm, RunArms, run_arms
from tune_gems.config.schema import Config
from tune_gems.market.env import VecTradingEnv
from tune_gems.market.features import Market
from tune_gems.gems import GemInputs
from tune_gems.ops.reference import c51_cross_entropy
from tune_gems.model.member_select import uniform
from tune_gems.gems.registry import run_gems
from tune_gems.model.flat import FlatParameters
from tune_gems.model.layers import resolve_layer_kernel
from tune_gems.model.network import BranchingC51
from tune_gems.trainer.graph import SplitStep
from tune_gems.trainer.optim import PopulationAdam
from tune_gems.trainer.replay import ReplayBuffer
from tune_gems.rng import CounterRNG, DrawPlan, Draws
from tune_gems.trainer.member_gems import MemberGems


ACC_HEAD = ("loss", "q_mean", "grad_norm")
ACC_TAIL = ("nonfinite",)
"""Rows of the per-member metric accumulator around the gems' values and nulls (`Learner.acc_rows`);
`grad_norm` is the shared network's (gem heads are clipped apart)."""
REPLAY_STREAM_BASE = 1 << 20
"""Counter-RNG stream of replay nuisance stream s is REPLAY_STREAM_BASE + s (stream 0 is the draw plan)."""


class Learner:
    def __init__(self, cfg: Config, market: Market, device: torch.device, ops, seeds: list[int] | None = None,
                 arms: RunArms | list[Arm] | None = None):
        """`seeds` overrides the member seeds from cfg.seed; `arms` the run's record
        (`tune_gems.design.arms.run_arms`) or its arms."""
        tc, mc = cfg.trainer, cfg.model
        mc = mc.model_copy(update={"layer_kernel": resolve_layer_kernel(mc.layer_kernel, device)})
        self.cfg, self.device, self.ops = cfg, device, ops
        # walk-forward folds (data.folds): fold-major blocks of arms x seeds, one per fold the market holds
        self.run_arms = run_arms(cfg, arms).with_folds(market.n_folds)
        self.arms, self.layout = list(self.run_arms.arms), self.run_arms.layout
        self.P = P = self.layout.members
        self.seeds = list(seeds) if seeds is not None else self.layout.member_seeds(cfg.seed)
        if len(self.seeds) != P:
            raise ValueError(f"{len(self.seeds)} seeds for a population of {P}")
        per_member = self.layout.per_member
        self.spectral_norm = per_member([a.config.model.spectral_norm for a in self.arms])
        self.noisy = per_member([a.config.model.noisy for a in self.arms])
        self.lr = per_member([a.config.trainer.lr for a in self.arms])
        streams = per_member([a.config.trainer.replay_stream for a in self.arms])
        # an A/A arm (trainer.replay_stream != 0): its replay batches come from an independent
        # counter stream of the member's own key; every other member keeps its draws bit for bit
        self.replay_streams = {s: torch.tensor([v == s for v in streams], device=device)
                               for s in sorted(set(streams) - {0})}
        self.noisy_on = torch.tensor(self.noisy, device=device)  # [P]; off: epsilon-greedy
        self.noisy_common = uniform(self.noisy)  # the mask as a host fact when all agree
        self.rng = CounterRNG(self.seeds, device)
        # the market path each member trains and evaluates on (data.synthetic.paths): by seed index,
        # or its price history (data.histories); its fold (the market's fold index, data.folds): by member block
        self.path_of_member = data_mod.path_of_member(cfg.data, [self.layout.seed_slot(m) for m in range(P)],
                                                      [self.layout.history_index(m) for m in range(P)])
        self.fold_of_member = [self.layout.fold_index(m) for m in range(P)]
        self.env = VecTradingEnv(market, cfg.env, P, tc.n_envs, self.path_of_member, self.fold_of_member)
        K, A = self.env.actions.branches, self.env.actions.sub_actions
        self.K, self.A = K, A
        heads = {g.name: g.head for g in run_gems(cfg.plugins) if g.head is not None}
        # several arms or folds: every matmul runs per block, with a single-arm run's shapes (layers.py)
        member_block = tc.population if len(self.layout.blocks) > 1 else None
        switches = {"spectral_norm": self.spectral_norm, "noisy": self.noisy, "member_block": member_block}
        self.online = BranchingC51(mc, market.obs_dim, K, A, self.seeds, heads, **switches).to(device)
        self.target = copy.deepcopy(self.online)  # the online net's weights and state, not drawn a second time
        self.products = products = self.online.products  # the layers' products: torch's, or fused kernels
        self.online_flat = FlatParameters(self.online, P, **products.flat_layout)
        self.target_flat = FlatParameters(self.target, P, with_grad=False, **products.flat_layout)
        self.replay = ReplayBuffer(P, tc.replay_capacity, market.obs_dim, K, tc.n_envs, tc.n_step, tc.gamma, device, source=self.env)
        E, noise = tc.n_envs, self.online.noise_size
        # one block of uniforms per iteration and member; each consumer reads its own slice.
        # Every slice is reserved whatever the member's switches (noise for members without
        # NoisyNets, exploration for members with them), so a member's draws never depend on
        # them; the exploration slices come last, so the noise slices keep their offsets (a NoisyNets
        # run's draws do not depend on them).
        self.plan = DrawPlan({"noise_online": 2 * noise, "noise_target": 2 * noise,  # Box-Muller: two uniforms a normal
                              "env_starts": E, "replay": tc.batch_size, "eps_coin": E, "eps_action": E * K}, device,
                             kernel=products.uniform_block)
        # gem heads are clipped on their own: a measured head never changes the shared clip
        heads = [self.online_flat.columns(h) for h in self.online.heads.values()]
        shared = slice(0, min((h.start for h in heads), default=self.online_flat.data.shape[1]))
        ends = [shared, *heads]
        if any(a.stop != b.start for a, b in zip(ends, heads)) or ends[-1].stop != self.online_flat.data.shape[1]:
            raise ValueError("gem heads must follow the shared network in the flat parameter matrix")
        self.optim = PopulationAdam(self.online_flat, self.lr, tc.adam_eps, tc.grad_clip, clip_groups=[shared, *heads],
                                    blocks=self.layout.blocks, clip_adam=products.clip_adam)  # fused: norms P-invariant
        self.member_gems = MemberGems([a.config.gems for a in self.arms], self.layout, device, cfg.plugins, fused=ops.fused,
                                       row_means=products.row_means)
        names = self.member_gems.names
        self.acc_rows = (*ACC_HEAD, *names, *(f"{n}_null" for n in names), *ACC_TAIL)
        self.acc = torch.zeros(len(self.acc_rows), P, device=device)
        self.updates = torch.zeros((), dtype=torch.int64, device=device)
        self.collect_steps = torch.zeros((), dtype=torch.int64, device=device)
        self._target_pairs = self._pair_target_tensors()
        self.member_gems.check(self._sample_gem_inputs(), self.online.bound_heads(self.online.weights("eval")))

    def _sample_gem_inputs(self) -> GemInputs:
        """Random inputs of the iteration's shapes for the gems' dry evaluation (a private
        generator: the run's random numbers and state are untouched)."""
        tc, mc = self.cfg.trainer, self.cfg.model
        P, B, K, A, H, D = self.P, tc.batch_size, self.K, self.A, mc.hidden, mc.stream_hidden
        gen = torch.Generator().manual_seed(0)

        def randn(*shape: int) -> Tensor:
            return torch.randn(*shape, generator=gen).to(self.device)

        return GemInputs(
            q_t=randn(P, B, K, A), q_tp1=randn(P, B, K, A),
            h_t=randn(P, B, H).relu(), h_tp1=randn(P, B, H).relu(), adv_features=randn(P, K, B, D).relu(),
            action=torch.randint(A, (P, B, K), generator=gen).to(self.device),
            reward=randn(P, B), not_done=torch.ones(P, B, device=self.device),
        )  # fmt: skip

    # -- state -------------------------------------------------------------------------------
    def state_tensors(self) -> dict[str, Tensor]:
        """Every tensor that evolves during training: what a checkpoint holds and what the graph
        capture snapshots around its warm-up."""
        state: dict[str, Tensor] = {"online.params": self.online_flat.data}
        state.update({f"online.{k}": v for k, v in _state_buffers(self.online)})
        state["target.params"] = self.target_flat.data
        state.update({f"target.{k}": v for k, v in _state_buffers(self.target)})
        state.update({f"optim.{k}": v for k, v in self.optim.state_tensors().items()})
        state.update({f"replay.{k}": v for k, v in self.replay.state_tensors().items()})
        state.update({f"env.{k}": v for k, v in self.env.state_tensors().items()})
        state.update({"rng.counter": self.rng.counter, "counters.updates": self.updates})
        state.update({"counters.collect_steps": self.collect_steps, "metrics.acc": self.acc})
        return state

    def from_checkpoint(self, state: dict[str, Tensor], version: int) -> dict[str, Tensor]:
        """A checkpoint's state in this learner's layout: versions 1 and 2's flat matrices are laid out anew."""
        flat = self.online_flat
        if version >= 3 or flat.plain:
            return state
        width = sum(flat.sizes) if version == 1 else flat.data.shape[1]

        def plain(t: Tensor) -> Tensor:  # version 2's: each parameter as it is, at aligned columns
            return t if version == 1 else torch.cat([t[:, o : o + n] for n, o in zip(flat.sizes, flat.offsets)], dim=1)

        return {k: flat.pack(plain(t)) if k in FLAT_STATE and t.dim() == 2 and t.shape[1] == width else t for k, t in state.items()}

    def _pair_target_tensors(self) -> list[tuple[Tensor, Tensor, bool]]:
        """(target, online, follows_tau): all parameters as one flat pair, and the
        spectral-norm buffers; noise buffers are not copied (each net draws its own noise)."""
        pairs = [(self.target_flat.data, self.online_flat.data, True)]
        online = dict(self.online.named_buffers())
        for name, t in self.target.named_buffers():
            if name.endswith(("sn_u", "sn_v")):
                pairs.append((t, online[name], False))
        return pairs

    # -- precision ---------------------------------------------------------------------------
    def matmul_precision(self):
        """Context for the network's matmuls: tf32 / bf16 on CUDA when configured, else fp32."""
        prec = self.cfg.trainer.precision
        if self.device.type != "cuda" or prec == "fp32":
            return contextlib.nullcontext()
        if prec == "bf16":
            # no weight-cast cache: cached casts would outlive a CUDA graph capture
            return torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False)
        return _float32_matmul_precision("high")

    def backward_matmul_precision(self):
        """tf32 for the backward when configured on CUDA: the precision is read at each launch (bf16's casts
        are already in the autograd graph)."""
        if self.device.type == "cuda" and self.cfg.trainer.precision == "tf32":
            return _float32_matmul_precision("high")
        return contextlib.nullcontext()

    # -- acting ------------------------------------------------------------------------------
    def _epsilon(self) -> Tensor:
        tc = self.cfg.trainer
        frac = (self.collect_steps.float() / tc.epsilon_decay_iterations).clamp(max=1.0)
        return tc.epsilon_start + (tc.epsilon_end - tc.epsilon_start) * frac

    def act(self, obs: Tensor, weights, draws: Draws) -> Tensor:
        """Actions [P,E,K]: greedy on the noisy online net for members with NoisyNets,
        epsilon-greedy for members without."""
        with torch.no_grad(), self.matmul_precision():
            q = self.online.expected_q(self.online(obs, weights).logits)
        greedy = q.argmax(dim=-1)
        if self.noisy_common is True:  # no member explores epsilon-greedily (member_select)
            return greedy
        coin = draws.uniform("eps_coin").unsqueeze(-1)  # [P,E,1]
        rand = draws.integers("eps_action", self.A).view(greedy.shape)
        explore = coin < self._epsilon()
        if self.noisy_common is None:
            explore = explore & ~self.noisy_on.view(-1, 1, 1)
        return torch.where(explore, rand, greedy)

    def _fresh_draws(self) -> Draws:
        """Advance the RNG, draw the iteration's numbers, install fresh NoisyNet noise (zero
        noise for members without NoisyNets, tune_gems.model.layers)."""
        self.rng.advance()
        draws = self.rng.draw(self.plan)
        for net, name in ((self.online, "noise_online"), (self.target, "noise_target")):
            self.products.resample_noise(net, draws, name)
        return draws

    def reset_envs(self) -> None:
        """Start every environment at a fresh offset (before the first collection)."""
        self.rng.advance()
        self.env.reset(self.rng.draw(self.plan).uniform("env_starts"))

    def _step_envs(self, weights, draws: Draws) -> None:
        with torch.no_grad():
            action = self.act(self.env.observe(), weights, draws)
            self.replay.add(self.env.step(action, draws.uniform("env_starts")))
            self.collect_steps.add_(1)

    def collect(self) -> None:
        """One environment step for every env of every member, into replay (no learning)."""
        with torch.no_grad():
            draws = self._fresh_draws()
            self._step_envs(self.online.weights("train"), draws)

    # -- one iteration -----------------------------------------------------------------------
    @functools.cached_property
    def iteration(self) -> SplitStep:
        """One iteration: the capturable `_iteration_on_device` and the host-scheduled `_after_iteration`."""
        return SplitStep(self._iteration_on_device, self._after_iteration, lambda: self.updates)

    def _iteration_on_device(self) -> None:
        draws = self._fresh_draws()
        weights = self.online.weights("train")
        self._step_envs(weights, draws)
        self._learn(weights, draws)

    def gem_inputs(self, b, weights) -> tuple[GemInputs, Tensor, Tensor, Tensor]:
        """One forward: (gem inputs, taken log-probabilities at s_t, online and target logits at s_{t+n}).
        Autograd over [s_t, s_{t+1}] (a wired gem may flow through q_tp1), none over s_{t+n}, the same
        split in every run (another per arm would change its matmul shapes, hence its bits)."""
        B = self.cfg.trainer.batch_size
        stacked = b.stacked_obs  # [P,3B,obs_dim] = cat[s_t, s_{t+1}, s_{t+n}]
        with self.matmul_precision():
            out = self.online(stacked[:, : 2 * B], weights, logits=False)  # [s_t, s_{t+1}]
            with torch.no_grad():
                nstep = self.online(stacked[:, 2 * B :], weights)  # s_{t+n}
                tgt = self.target(stacked[:, B:], self.target.weights("target"))  # [s_{t+1}, s_{t+n}]
        q, log_probs_t = self.ops.dueling_c51(out.value.float(), out.adv.float(), self.online.support, b.action)
        inputs = GemInputs(q_t=q[:, :B], q_tp1=q[:, B:], h_t=out.h[:, :B], h_tp1=tgt.h[:, :B],
                           adv_features=out.adv_features[:, :, :B].float(), action=b.action, reward=b.reward,
                           not_done=b.succ_not_done)
        return inputs, log_probs_t, nstep.logits.float(), tgt.logits[:, B:]

    def _learn(self, weights, draws: Draws) -> None:
        tc, mc, ops, gems = self.cfg.trainer, self.cfg.model, self.ops, self.member_gems
        P, B, K = self.P, tc.batch_size, self.K
        b = self.replay.sample(self._replay_uniforms(draws))
        x, log_probs_t, logits_n, target_logits_n = self.gem_inputs(b, weights)

        with torch.no_grad():
            # double DQN: the online net selects a*, the target net evaluates it -> [P,B,K,atoms]
            p_next = ops.c51_target(logits_n, target_logits_n, self.online.support)
            r = b.reward.unsqueeze(-1).expand(P, B, K).reshape(-1)
            g = b.discount.unsqueeze(-1).expand(P, B, K).reshape(-1)
            m = ops.c51_project(p_next.reshape(-1, mc.atoms), r, g, mc.v_min, mc.v_max).view(P, B, K, mc.atoms)

        _, c51 = c51_cross_entropy(log_probs_t, m)

        heads = self._heads(weights)
        values = gems.evaluate_all(x, heads)
        nulls = gems.nulls(x)
        per_member = c51
        extra = gems.loss_term(values)
        if extra is not None:
            per_member = per_member + extra
        total = per_member.sum()
        head_loss = gems.head_loss(values, gems.wired_head_values(x, heads))  # heads: their own objective, own rate
        if head_loss is not None:
            total = total + head_loss.sum()
        with self.backward_matmul_precision():
            grads = torch.autograd.grad(total, self.online_flat.params, allow_unused=True)
        self.online_flat.gather_grads(grads)
        # parameters no gradient reaches (fixed by the run's structure, known from the first,
        # eager iteration, before any capture): no Adam update for them
        self.optim.freeze_columns([self.online_flat.columns_of(p) for p, g in zip(self.online_flat.params, grads) if g is None])
        norms = self.optim.step_groups()  # [groups, P]: the shared network first, then each head
        with torch.no_grad():
            self.updates.add_(1)
            if tc.tau > 0:
                self._blend_target()
            # x - x == 0 exactly where x is finite (inf - inf and NaN are NaN): two launches, isfinite's five
            finite = (per_member - per_member == 0) & (norms - norms == 0).all(dim=0)
            if head_loss is not None:
                finite = finite & (head_loss - head_loss == 0)
            self._accumulate(c51, finite, x.q_t, norms[0], values, nulls)

    def _replay_uniforms(self, draws: Draws) -> Tensor:
        """The replay uniforms [P, batch]; a nuisance stream's members read stream REPLAY_STREAM_BASE + s of
        their own key."""
        u = draws.uniform("replay")
        for stream, members in self.replay_streams.items():
            alt = self.rng.uniform(REPLAY_STREAM_BASE + stream, (u.shape[1],))
            u = torch.where(members[:, None], alt, u)
        return u

    def _heads(self, weights) -> dict:
        """The gems' own parameters bound to this iteration's weights, run at the network's matmul precision."""

        def at_precision(fn):
            def call(*args):
                with self.matmul_precision():
                    return fn(*args)

            return call

        return {name: at_precision(fn) for name, fn in self.online.bound_heads(weights).items()}

    def _blend_target(self) -> None:
        """Polyak update (trainer.tau > 0), inside the captured iteration: the parameters move
        tau of the way to the online network's, the spectral-norm state is copied (lerp by 1)."""
        tau = self.cfg.trainer.tau
        for t, o, follows_tau in self._target_pairs:
            t.lerp_(o, tau if follows_tau else 1.0)

    def _after_iteration(self, updates: int) -> None:
        """The hard target update when due: a plain copy, the bits of a lerp by a 0/1 weight, without a pass
        over every parameter each iteration."""
        tc = self.cfg.trainer
        if tc.tau > 0 or updates % tc.target_update:
            return
        with torch.no_grad():
            for t, o, _ in self._target_pairs:
                t.copy_(o)

    def _accumulate(self, c51: Tensor, finite: Tensor, q_t: Tensor, grad_norm: Tensor, values: dict, nulls: dict) -> None:
        mg = self.member_gems
        if self.products.row_means is not None:  # one call over every member: its rows are reduced each alone
            q_mean = self.products.row_means(q_t.detach().flatten(1).float())
        else:
            q_mean = torch.cat([q_t[rows].detach().mean(dim=(1, 2, 3)) for rows in mg.blocks])  # per arm (see nulls)
        rows = [c51.detach(), q_mean, grad_norm]
        # gem values and nulls: NaN for members with the gem off
        rows += [mg.reported(n, values[n], c51) for n in mg.names]
        rows += [mg.reported(n, nulls[n], c51) for n in mg.names]
        rows.append((~finite).float())
        self.acc.add_(torch.stack(rows))


FLAT_STATE = ("online.params", "target.params", "optim.exp_avg", "optim.exp_avg_sq")
"""State tensors laid out as the flat parameter matrix [P, columns]."""


def _state_buffers(net: torch.nn.Module) -> list[tuple[str, Tensor]]:
    """A network's buffers that are training state (not the constant per-member switch masks,
    which are non-persistent buffers)."""
    keep = set(net.state_dict())
    return [(k, v) for k, v in net.named_buffers() if k in keep]


@contextlib.contextmanager
def _float32_matmul_precision(precision: str):
    """Sets torch's float32 matmul precision for the duration of a block, then restores it."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)

