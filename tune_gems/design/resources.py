"""Will a run fit? A generous memory estimate from the config's shapes, checked before allocating
(else it fails minutes later), so only sizes far from the machine's are refused."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tune_gems.config.schema import Config
from tune_gems.contracts.errors import ResourceError
from tune_gems.design.arms import run_arms

FLOAT = 4
INDEX = 8
PARAM_COPIES = 7
"""Online, target, gradient, two Adam moments, and the noisy weights of both nets (an upper bound)."""
ACTIVATION_COPIES = 6
"""Saved forward outputs, their gradients, and the target net's forward, with slack."""
SERIES_COPIES = 16
"""float64 copies of the price series on the host while it is loaded, split and featurised."""
REPLAY_SLACK = 1.5
"""Margin on the replay's own bytes (index tensors built when sampling, allocator rounding)."""
HEADROOM = 0.9
"""Fraction of the available memory a run may plan to use."""
BRANCHES = 2
"""Action branches of the trading environment (direction, size)."""
GIB = 1024**3


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes by component; `host` and `device` are the totals on each side."""

    members: int
    on_cuda: bool
    replay: int
    params: int
    activations: int
    series: int
    market: int = 0
    series_key: str = "data.synthetic.n"
    """The key that sets the series' length: `data.synthetic.n`, or the largest price file's key."""

    @property
    def device(self) -> int:
        return self.replay + self.params + self.activations + self.market

    @property
    def host(self) -> int:
        return self.series + (0 if self.on_cuda else self.device)

    def parts(self) -> dict[str, int]:
        return {"replay": self.replay, "parameters+optimizer": self.params, "activations": self.activations,
                "market": self.market, "price series": self.series}


def replay_transition_bytes(branches: int = BRANCHES) -> int:
    """Bytes of one stored transition (time, position, actions, reward, two flags), with slack."""
    return int((INDEX + FLOAT + branches * INDEX + FLOAT + 2) * REPLAY_SLACK)


def _linear(a: int, b: int, reps: int = 1) -> int:
    return reps * (a * b + b)


def param_count(cfg: Config) -> int:
    """Trainable numbers of one member's network (NoisyNet layers count mu and sigma)."""
    mc = cfg.model
    obs = cfg.env.window + 1
    K, A = BRANCHES, len(cfg.env.directions)
    H, Hs, atoms = mc.hidden, mc.stream_hidden, mc.atoms
    dims = [obs] + [H] * mc.trunk_layers
    trunk = sum(_linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
    streams = _linear(H, (1 + K) * Hs) + _linear(Hs, atoms) + _linear(Hs, A * atoms, reps=K)
    if mc.noisy:
        streams *= 2
    predictor = _linear(H + K * A, mc.predictor_hidden) + _linear(mc.predictor_hidden, H)
    return trunk + streams + predictor


def default_members(cfg: Config) -> int:
    """Members a run of `cfg` trains: histories x folds x arms x population (`arms.run_arms`)."""
    return run_arms(cfg).members


def estimate_memory(cfg: Config, members: int | None = None, on_cuda: bool = False) -> MemoryEstimate:
    """Bytes by component for `members` members (default `default_members(cfg)`)."""
    P = int(members if members is not None else default_members(cfg))
    tc, mc = cfg.trainer, cfg.model
    obs = cfg.env.window + 1
    K, A = BRANCHES, len(cfg.env.directions)
    replay = P * tc.replay_capacity * replay_transition_bytes(K)
    params = P * param_count(cfg) * FLOAT * PARAM_COPIES
    rows = tc.batch_size * (1 + tc.n_step) + tc.n_envs  # online batch, targets, acting
    per_row = (
        obs
        + mc.hidden * mc.trunk_layers
        + (1 + K) * mc.stream_hidden
        + (1 + K * A) * mc.atoms * 3  # value and advantage logits, softmax, log-softmax
        + mc.predictor_hidden
        + mc.hidden
    )
    projection = tc.batch_size * K * mc.atoms * mc.atoms  # C51 target projection, worst case
    series_len, series_key = _series_length(cfg)
    evaluation = 2 * series_len * FLOAT  # returns and positions per member over a segment
    activations = P * ((rows * per_row + projection) * FLOAT * ACTIVATION_COPIES + evaluation)
    paths = len(cfg.data.price_histories) if cfg.data.source != "synthetic" else 1
    series = series_len * 8 * SERIES_COPIES * paths
    market = 2 * cfg.data.folds.k * paths * series_len * FLOAT  # features and next-step returns per (fold, history)
    return MemoryEstimate(P, on_cuda, int(replay), int(params), int(activations), int(series), int(market), series_key)


def _series_length(cfg: Config) -> tuple[int, str]:
    """(rows of one path, the key that sets them): synthetic length, or a bound from the largest file."""
    data = cfg.data
    if data.source == "synthetic":
        return data.synthetic.n, "data.synthetic.n"
    sizes = [(1, "data.path")]
    for i, spec in enumerate(data.price_histories):
        key = f"data.histories.{i}.path" if data.histories and data.histories[i].path else "data.path"
        try:
            sizes.append((Path(spec.path or "").stat().st_size // 4, key))
        except OSError:
            continue
    return max(sizes, key=lambda s: s[0])


def host_available() -> int | None:
    """Bytes the process may still use: MemAvailable, capped by a cgroup limit when set."""
    avail = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            limit = Path(limit_file).read_text().strip()
            if limit != "max" and int(limit) < (1 << 60):
                room = int(limit) - int(Path(usage_file).read_text().strip())
                avail = room if avail is None else min(avail, room)
            break
        except (OSError, ValueError):
            continue
    if avail is None and hasattr(os, "sysconf"):
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError):
            pass
    return avail


def device_available(device: Any) -> int | None:
    """Free bytes of a CUDA device (None for the CPU, or when it cannot be asked)."""
    if getattr(device, "type", str(device)) != "cuda":
        return None
    import torch

    try:
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    except Exception:  # noqa: BLE001 - a device that cannot be asked is not checked
        return None


_KEYS = {"replay": "trainer.replay_capacity", "parameters+optimizer": "model.hidden",
    "activations": "trainer.batch_size", "market": "data.folds.k"}


def _key(est: MemoryEstimate, part: str) -> str:
    return est.series_key if part == "price series" else _KEYS[part]


def _advice(est: MemoryEstimate, parts: dict[str, int]) -> str:
    biggest = max(parts, key=parts.get)
    key = _key(est, biggest)
    if key != "data.synthetic.n" and biggest == "price series":
        return f"give a shorter price file at {key} (the series is read whole, its size bounds its rows)"
    if biggest == "activations" and est.activations and est.members > 1:
        key = "trainer.batch_size or model.atoms"
    members = "trainer.population" if est.members > 1 else None
    return f"lower {key}" + (f" (or {members})" if members and biggest not in ("price series", "market") else "")


def _fmt(n: int) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB / 10 else f"{n / 1024**2:.0f} MiB"


def check_fits(est: MemoryEstimate, host: int | None, device: int | None, where: str = "") -> None:
    """ResourceError naming the numbers and the key to lower past `HEADROOM` of what is available."""
    checks = []
    if host is not None:
        checks.append(("host memory", est.host, host, est.parts() if not est.on_cuda else {"price series": est.series}))
    if device is not None and est.on_cuda:
        checks.append(("GPU memory", est.device, device, {k: v for k, v in est.parts().items() if k != "price series"}))
    for what, need, have, parts in checks:
        if need > HEADROOM * have:
            shown = ", ".join(f"{k} {_fmt(v)}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1]) if v)
            raise ResourceError(
                f"{_key(est, max(parts, key=parts.get))}: {where}the run needs about {_fmt(need)} of {what} for "
                f"{est.members} member(s) ({shown}) but {_fmt(have)} is available; {_advice(est, parts)}"
            )


def check_training_fits(cfg: Config, members: int | None = None, device: Any = None, where: str = "",
        gpu_trial: bool = False) -> MemoryEstimate:
    """The estimate for `cfg` against the host and CUDA device (found without initialising CUDA);
    `gpu_trial` estimates a sweep trial as CUDA."""
    if device is not None:
        on_cuda = getattr(device, "type", str(device)) == "cuda"
    else:
        import torch

        on_cuda = gpu_trial or cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
        device = torch.device("cuda", torch.cuda.current_device()) if on_cuda and torch.cuda.is_available() else None
    est = estimate_memory(cfg, members, on_cuda=on_cuda)
    check_fits(est, host_available(), device_available(device) if on_cuda else None, where)
    return est
