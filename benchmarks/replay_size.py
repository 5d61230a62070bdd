"""Replay and checkpoint size: window replay (before) against compact replay (after).

Computed from the state tensors' shapes and dtypes, not measured on a GPU: a checkpoint is the
learner's `state_tensors()` pickled (tune_gems.trainer.checkpoint), so its size is the sum of
those tensors' bytes plus a few kilobytes of metadata (checked: a P=3, 1,000-transition run's
checkpoint shrank by 810,048 bytes against the 810,000 this arithmetic predicts).

- after: `ReplayBuffer(...).state_tensors()` built on the `meta` device (shapes, no memory);
- before: the previous layout (full observation and next-observation windows, int64 actions),
  as it was in tune_gems/trainer/replay.py before compact storage;
- the rest of the checkpoint: a real `Learner` at the same shape with a tiny replay
  (parameters, target, Adam moments, env, RNG and counters).

Default shape: issue 15's `measure_gems` run, P = 64, replay 50,000 per member, 16 envs,
window 32, 2 branches.

    python benchmarks/replay_size.py [--population 64] [--capacity 50000] [--out benchmarks/results/replay_size.json]
    python benchmarks/replay_size.py --time-sample [--population 1]   # on CUDA: graphed sample() time

`--time-sample` also times one `sample()` of batch 128 as a replayed CUDA graph, compact
against the window layout (the old sampling code, kept below as `WindowSample`), at the shape.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from tune_gems.config.load import load_config
from tune_gems.ops import resolve_backend
from tune_gems.trainer.replay import ReplayBuffer
from tune_gems.trainer.run_setup import prepare_market
from tune_gems.trainer.learner import Learner

TINY_CAPACITY = 64  # replay of the Learner built only for its non-replay state


def window_replay_layout(population: int, capacity: int, obs_dim: int, branches: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """The state tensors of the replay before compact storage: name -> (shape, dtype)."""
    P, C = population, capacity
    return {
        "obs": ((P, C, obs_dim), torch.float32),
        "next_obs": ((P, C, obs_dim), torch.float32),
        "action": ((P, C, branches), torch.int64),
        "reward": ((P, C), torch.float32),
        "end": ((P, C), torch.bool),
        "terminal": ((P, C), torch.bool),
        "ptr": ((), torch.int64),
        "size": ((), torch.int64),
    }


def layout_bytes(layout: dict[str, tuple[tuple[int, ...], torch.dtype]]) -> int:
    return sum(math.prod(shape) * torch.empty((), dtype=dtype).element_size() for shape, dtype in layout.values())


def tensors_bytes(tensors: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


def compact_replay_layout(population: int, capacity: int, obs_dim: int, branches: int, n_envs: int, n_step: int):
    buf = ReplayBuffer(population, capacity, obs_dim, branches, n_envs, n_step, 0.99, device="meta")
    return {k: (tuple(v.shape), v.dtype) for k, v in buf.state_tensors().items()}


def other_state_bytes(population: int, n_envs: int, overrides: list[str]) -> tuple[int, dict]:
    """Bytes of everything in a checkpoint but the replay, from a real Learner on the CPU."""
    cfg = load_config(
        None,
        [
            f"trainer.population={population}",
            f"trainer.n_envs={n_envs}",
            f"trainer.replay_capacity={TINY_CAPACITY}",
            f"trainer.learning_starts={TINY_CAPACITY}",
            *overrides,
        ],
    )
    dev = torch.device("cpu")
    learner = Learner(cfg, prepare_market(cfg, dev), dev, resolve_backend("reference", dev))
    state = learner.state_tensors()
    rest = {k: v for k, v in state.items() if not k.startswith("replay.")}
    return tensors_bytes(rest), cfg.to_dict()


class WindowSample:
    """The window replay's sampling (before compact storage), for timing only: random windows
    stand in for the stored observations; the ring bookkeeping is the compact buffer's."""

    def __init__(self, compact: ReplayBuffer, obs_dim: int):
        P, C = compact.t.shape
        dev = compact.t.device
        self.c = compact
        self.obs = torch.randn(P, C, obs_dim, device=dev)
        self.next_obs = torch.randn(P, C, obs_dim, device=dev)
        self.action = compact.action.long()

    def sample(self, u: torch.Tensor):
        from tune_gems.rng import to_integers

        c, (P, C), n = self.c, self.c.t.shape, self.c.n_step
        B = u.shape[1]
        j = to_integers(u, c.size - c._steps[-1])
        slots = (((c.ptr - c.size) % C + j).unsqueeze(-1) + c._steps) % C
        flat = slots.view(P, -1)
        r = c.reward.gather(1, flat).view(P, B, n)
        end = c.end.gather(1, flat).view(P, B, n).float()
        cols = [torch.ones_like(end[..., 0])]
        for k in range(1, n):
            cols.append(cols[-1] * (1.0 - end[..., k - 1]))
        alive = torch.stack(cols, dim=-1)
        ret = (alive * c._gamma_pow[:n] * r).sum(-1)
        m = alive.sum(-1).to(torch.int64)
        last = slots.gather(2, (m - 1).unsqueeze(-1)).squeeze(-1)
        first = slots[..., 0]
        term = c.terminal.gather(1, last).float()
        D = self.obs.shape[-1]
        return (
            self.obs.gather(1, first.unsqueeze(-1).expand(-1, -1, D)),
            self.action.gather(1, first.unsqueeze(-1).expand(-1, -1, self.action.shape[-1])),
            ret,
            c._gamma_pow[m] * (1.0 - term),
            self.next_obs.gather(1, last.unsqueeze(-1).expand(-1, -1, D)),
            1.0 - term,
        )


def graphed_us(fn, reps: int = 200) -> float:
    """Microseconds per replay of `fn` captured as one CUDA graph (median of 5 rounds)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            graph.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / reps * 1000)
    return sorted(times)[2]


def time_sample(population: int, capacity: int, n_envs: int, batch: int = 128) -> dict:
    """Graphed sample() time, compact against window layout, on a buffer filled by random play."""
    from tune_gems.config.schema import EnvConfig
    from tune_gems.data.segments import split_bounds
    from tune_gems.data.series import synthetic_prices
    from tune_gems.market.env import VecTradingEnv
    from tune_gems.market.features import Market

    cfg = EnvConfig()
    prices = synthetic_prices(6000, 7)
    market = Market(prices, split_bounds(prices, [0.7, 0.15, 0.15], min_len=cfg.window + 2), cfg.window, "cuda")
    env = VecTradingEnv(market, cfg, population, n_envs)
    buf = ReplayBuffer(population, capacity, market.obs_dim, 2, n_envs, 3, 0.99, "cuda", source=env)
    gen = torch.Generator(device="cuda").manual_seed(0)
    env.reset(torch.rand(population, n_envs, device="cuda", generator=gen))
    for _ in range(capacity // n_envs):
        action = torch.randint(0, env.actions.sub_actions, (population, n_envs, 2), device="cuda", generator=gen)
        buf.add(env.step(action, torch.rand(population, n_envs, device="cuda", generator=gen)))
    u = torch.rand(population, batch, device="cuda", generator=gen)
    window = WindowSample(buf, market.obs_dim)

    def compact():
        b = buf.sample(u)
        return b.obs, b.succ_obs, b.next_obs  # the copies the current learner reads

    return {
        "device": torch.cuda.get_device_name(),
        "population": population,
        "batch": batch,
        "compact_sample_us": graphed_us(compact),
        "compact_stacked_sample_us": graphed_us(lambda: buf.sample(u).stacked_obs),
        "window_sample_us": graphed_us(lambda: window.sample(u)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--population", type=int, default=64)
    ap.add_argument("--capacity", type=int, default=50_000, help="replay transitions per member")
    ap.add_argument("--n-envs", type=int, default=16)
    ap.add_argument("--override", action="append", default=[], help="extra config override (key=value)")
    ap.add_argument("--out", default="benchmarks/results/replay_size.json")
    ap.add_argument("--time-sample", action="store_true", help="also time sample() on CUDA (graphed)")
    args = ap.parse_args()

    rest, cfg = other_state_bytes(args.population, args.n_envs, args.override)
    window, branches, n_step = cfg["env"]["window"], 2, cfg["trainer"]["n_step"]
    obs_dim = window + 1
    P, C = args.population, args.capacity
    before = window_replay_layout(P, C, obs_dim, branches)
    after = compact_replay_layout(P, C, obs_dim, branches, args.n_envs, n_step)
    rows = []
    for name, layout in (("before (windows)", before), ("after (compact)", after)):
        replay = layout_bytes(layout)
        ring = replay - 16  # ptr and size: two int64 scalars
        rows.append(
            {
                "layout": name,
                "fields": {k: [list(s), str(d).replace("torch.", "")] for k, (s, d) in layout.items()},
                "bytes_per_transition": ring / (P * C),
                "replay_bytes": replay,
                "checkpoint_bytes": replay + rest,
            }
        )
    result = {
        "shape": {"population": P, "replay_per_member": C, "n_envs": args.n_envs, "window": window, "branches": branches},
        "non_replay_state_bytes": rest,
        "rows": rows,
        "ratio_bytes_per_transition": rows[0]["bytes_per_transition"] / rows[1]["bytes_per_transition"],
        "ratio_checkpoint": rows[0]["checkpoint_bytes"] / rows[1]["checkpoint_bytes"],
        "method": "sum of state-tensor bytes (shapes and dtypes); checkpoint = replay + the rest of Learner.state_tensors()",
    }
    print(f"shape: P={P}, replay {C:,}/member, {args.n_envs} envs, window {window}, {branches} branches")
    print(f"{'layout':<18} {'B/transition':>12} {'replay MB':>10} {'checkpoint MB':>14}")
    for r in rows:
        print(f"{r['layout']:<18} {r['bytes_per_transition']:>12.1f} {r['replay_bytes'] / 1e6:>10.1f} {r['checkpoint_bytes'] / 1e6:>14.1f}")
    print(f"non-replay state (params, target, Adam, env, RNG): {rest / 1e6:.1f} MB")
    print(f"smaller by: {result['ratio_bytes_per_transition']:.1f}x per transition, {result['ratio_checkpoint']:.2f}x per checkpoint")
    if args.time_sample:
        timing = time_sample(P, C, args.n_envs)
        result["sample_timing"] = timing
        print(
            f"graphed sample() on {timing['device']}, P={P}, B={timing['batch']}: compact {timing['compact_sample_us']:.1f} us "
            f"(stacked only {timing['compact_stacked_sample_us']:.1f} us), window layout {timing['window_sample_us']:.1f} us"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
