"""One training iteration of the population DQN, with all state in preallocated tensors.

`Learner.iteration()` is the unit that the trainer runs eagerly on CPU and captures as one CUDA
graph on GPU: advance the RNG counter, resample NoisyNet noise, step every environment, insert
into replay, sample, forward, gems, backward, per-member clipped Adam step, target update,
metric accumulation. Nothing in it reads a value back to the host or branches on one.
"""

from __future__ import annotations

import contextlib
import math

import torch
from torch import Tensor

from tune_gems.config import Config
from tune_gems.env import Market, VecTradingEnv
from tune_gems.gems import GemSet
from tune_gems.model.flat import FlatParameters
from tune_gems.model.network import BranchingC51
from tune_gems.optim import PopulationAdam
from tune_gems.replay import ReplayBuffer
from tune_gems.rng import CounterRNG, DrawPlan, Draws, member_seeds


# Rows of the per-member metric accumulator, summed every iteration, read once per epoch.
ACC_ROWS = ("loss", "q_mean", "grad_norm", "g6", "g10", "g12", "nonfinite")


class Learner:
    def __init__(self, cfg: Config, market: Market, device: torch.device, ops, seeds: list[int] | None = None):
        """`seeds` overrides the member seeds derived from cfg.seed (one per member)."""
        tc, mc = cfg.trainer, cfg.model
        self.cfg, self.device, self.ops = cfg, device, ops
        self.P = P = tc.population
        self.seeds = list(seeds) if seeds is not None else member_seeds(cfg.seed, P)
        if len(self.seeds) != P:
            raise ValueError(f"{len(self.seeds)} seeds for a population of {P}")
        self.rng = CounterRNG(self.seeds, device)
        self.env = VecTradingEnv(market, cfg.env, P, tc.n_envs)
        K, A = self.env.actions.branches, self.env.actions.sub_actions
        self.K, self.A = K, A
        self.online = BranchingC51(mc, market.obs_dim, K, A, self.seeds).to(device)
        self.target = BranchingC51(mc, market.obs_dim, K, A, self.seeds).to(device)
        self.target.load_state_dict(self.online.state_dict())
        self.online_flat = FlatParameters(self.online, P)
        self.target_flat = FlatParameters(self.target, P, with_grad=False)
        self.replay = ReplayBuffer(P, tc.replay_capacity, market.obs_dim, K, tc.n_envs, tc.n_step, tc.gamma, device)
        E, noise = tc.n_envs, self.online.noise_size
        # one block of uniforms per iteration and member; each consumer reads its own slice
        self.plan = DrawPlan(
            {
                "noise_online": 2 * noise,  # Box-Muller: two uniforms per normal
                "noise_target": 2 * noise,
                "env_starts": E,
                "replay": tc.batch_size,
                "eps_coin": 0 if mc.noisy else E,
                "eps_action": 0 if mc.noisy else E * K,
            },
            device,
        )
        self.optim = PopulationAdam(self.online_flat, tc.lr, tc.adam_eps, tc.grad_clip)
        self.gems = GemSet(cfg.gems)
        self.acc = torch.zeros(len(ACC_ROWS), P, device=device)
        self.updates = torch.zeros((), dtype=torch.int64, device=device)
        self.collect_steps = torch.zeros((), dtype=torch.int64, device=device)
        self._target_pairs = self._pair_target_tensors()

    # -- state -------------------------------------------------------------------------------
    def state_tensors(self) -> dict[str, Tensor]:
        """Every tensor that evolves during training: what a checkpoint holds and what the graph
        capture snapshots around its warm-up."""
        state: dict[str, Tensor] = {"online.params": self.online_flat.data}
        state.update({f"online.{k}": v for k, v in self.online.named_buffers()})
        state["target.params"] = self.target_flat.data
        state.update({f"target.{k}": v for k, v in self.target.named_buffers()})
        state.update({f"optim.{k}": v for k, v in self.optim.state_tensors().items()})
        state.update({f"replay.{k}": v for k, v in self.replay.state_tensors().items()})
        state.update({f"env.{k}": v for k, v in self.env.state_tensors().items()})
        state.update({"rng.counter": self.rng.counter, "counters.updates": self.updates})
        state.update({"counters.collect_steps": self.collect_steps, "metrics.acc": self.acc})
        return state

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
        return _Float32MatmulPrecision("high")

    # -- acting ------------------------------------------------------------------------------
    def _epsilon(self) -> Tensor:
        tc = self.cfg.trainer
        frac = (self.collect_steps.float() / tc.epsilon_decay_iterations).clamp(max=1.0)
        return tc.epsilon_start + (tc.epsilon_end - tc.epsilon_start) * frac

    def act(self, obs: Tensor, weights, draws: Draws) -> Tensor:
        """Actions [P,E,K]: greedy on the noisy online net, or epsilon-greedy without NoisyNets."""
        with torch.no_grad(), self.matmul_precision():
            q = self.online.expected_q(self.online(obs, weights).logits)
        greedy = q.argmax(dim=-1)
        if self.cfg.model.noisy:
            return greedy
        coin = draws.uniform("eps_coin").unsqueeze(-1)  # [P,E,1]
        rand = draws.integers("eps_action", self.A).view(greedy.shape)
        return torch.where(coin < self._epsilon(), rand, greedy)

    def _fresh_draws(self) -> Draws:
        """Advance the RNG, draw the iteration's numbers, install fresh NoisyNet noise."""
        self.rng.advance()
        draws = self.rng.draw(self.plan)
        if self.cfg.model.noisy:
            self.online.resample_noise(draws.normal("noise_online"))
            self.target.resample_noise(draws.normal("noise_target"))
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
    def iteration(self) -> None:
        draws = self._fresh_draws()
        weights = self.online.weights("train")
        self._step_envs(weights, draws)
        self._learn(weights, draws)

    def _learn(self, weights, draws: Draws) -> None:
        tc, mc, ops, gems = self.cfg.trainer, self.cfg.model, self.ops, self.gems
        P, B, K, A = self.P, tc.batch_size, self.K, self.A
        b = self.replay.sample(draws.uniform("replay"))
        with self.matmul_precision():
            if gems.wired("g10"):
                both = self.online(torch.cat([b.obs, b.next_obs], dim=1), weights)
                logits_t, logits_tp1 = both.logits[:, :B], both.logits[:, B:]
                h_t, adv_t = both.h[:, :B], both.adv_features[:, :, :B]
            else:
                out_t = self.online(b.obs, weights)
                logits_t, h_t, adv_t = out_t.logits, out_t.h, out_t.adv_features
                with torch.no_grad():
                    logits_tp1 = self.online(b.next_obs, weights).logits
            with torch.no_grad():
                tgt = self.target(b.next_obs, self.target.weights("target"))
        logits_t, logits_tp1 = logits_t.float(), logits_tp1.float()

        q_tp1 = self.online.expected_q(logits_tp1)  # carries grad only when G10 is wired
        with torch.no_grad():
            a_star = q_tp1.argmax(dim=-1)  # double DQN: online selects, target evaluates
            p_next = torch.softmax(tgt.logits.float(), dim=-1)
            p_next = p_next.gather(3, a_star[..., None, None].expand(P, B, K, 1, mc.atoms)).squeeze(3)
            r = b.reward.unsqueeze(-1).expand(P, B, K).reshape(-1)
            g = b.discount.unsqueeze(-1).expand(P, B, K).reshape(-1)
            m = ops.c51_project(p_next.reshape(-1, mc.atoms), r, g, mc.v_min, mc.v_max).view(P, B, K, mc.atoms)

        taken = logits_t.gather(3, b.action[..., None, None].expand(P, B, K, 1, mc.atoms)).squeeze(3)
        _, c51 = ops.c51_loss(taken, m)

        q_t = self.online.expected_q(logits_t)
        values = {
            "g6": gems.evaluate("g6", ops.g6_branch_indep, adv_t.float()),
            "g10": gems.evaluate("g10", ops.g10_temporal, q_t, q_tp1, b.not_done),
            "g12": self._g12(weights, h_t, b, tgt.h),
        }
        per_member = c51
        extra = gems.loss_term(values)
        if extra is not None:
            per_member = per_member + extra
        grads = torch.autograd.grad(per_member.sum(), self.online_flat.params, allow_unused=True)
        self.online_flat.gather_grads(grads)
        grad_norm = self.optim.step()
        with torch.no_grad():
            self.updates.add_(1)
            self._update_target()
            self._accumulate(c51, per_member, q_t, grad_norm, values)

    def _g12(self, weights, h_t: Tensor, b, target_h: Tensor) -> Tensor | None:
        if not self.gems.active("g12"):
            return None
        grad = self.gems.wired("g12")
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()), self.matmul_precision():
            pred = self.online.predict_next_latent(h_t if grad else h_t.detach(), b.action, weights)
        return self.gems.evaluate("g12", self.ops.g12_predictive, pred.float(), target_h.float().detach(), b.not_done)

    def _update_target(self) -> None:
        tc = self.cfg.trainer
        if tc.tau > 0:
            w_param, w_copy = tc.tau, 1.0
        else:
            w_param = (self.updates % tc.target_update == 0).float()  # 1.0 exactly when due
            w_copy = w_param
        for t, o, follows_tau in self._target_pairs:
            t.lerp_(o, w_param if follows_tau else w_copy)

    def _accumulate(self, c51: Tensor, total: Tensor, q_t: Tensor, grad_norm: Tensor, values: dict) -> None:
        rows = [c51.detach(), q_t.detach().mean(dim=(1, 2, 3)), grad_norm]
        nan = torch.full_like(c51, math.nan)
        rows += [values[n].detach() if values[n] is not None else nan for n in ("g6", "g10", "g12")]
        rows.append((~(torch.isfinite(total) & torch.isfinite(grad_norm))).float())
        self.acc.add_(torch.stack(rows))


class _Float32MatmulPrecision:
    """Sets torch's float32 matmul precision for the duration of a block, then restores it."""

    def __init__(self, precision: str):
        self.precision, self.previous = precision, None

    def __enter__(self):
        self.previous = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision(self.precision)

    def __exit__(self, *exc):
        torch.set_float32_matmul_precision(self.previous)
        return False
