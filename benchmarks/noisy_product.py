"""NoisyNet layers: materialised noisy weights against factorised matmuls (issue 15, deliver 4).

    python benchmarks/noisy_product.py [--population 64] [--rows 384] [--out FILE.json]

A factorised-Gaussian NoisyNet layer computes y = x (mu + sigma * f_in f_out^T) + b. Two ways:
- materialised (what tune_gems.model.layers.NoisyPopLinear does): build the noisy weights
  W = mu + sigma * (f_in f_out^T) once per iteration (weight-sized elementwise passes), then
  one batched matmul x @ W;
- factorised: never build W: y = x @ mu + ((x * f_in^T) @ sigma) * f_out^T, two batched
  matmuls and row-sized elementwise work.
The factorised form trades weight-sized memory passes for a second matmul over all N rows, so
which wins depends on N (rows per forward: 3 x batch for the learner's online net, n_envs for
acting). Timed as captured CUDA graphs of forward + backward (the learner's use), for the
three NoisyNet layers of the default network (stream_in 128 -> 192, value_out 64 -> 51,
adv_out 2 x 64 -> 153), at the rows of each forward of an iteration.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_step  # noqa: E402 (a sibling script: its graph capture)

LAYERS = {"stream_in": (1, 128, 192), "value_out": (1, 64, 51), "adv_out": (2, 64, 153)}


def _materialised(x, mu, sigma, f_in, f_out, b):
    w = torch.addcmul(mu, sigma, f_in * f_out)
    return torch.baddbmm(b, x, w)


def _factorised(x, mu, sigma, f_in, f_out, b):
    return torch.baddbmm(b, x, mu) + torch.bmm(x * f_in.transpose(1, 2), sigma) * f_out


def _tensors(G, N, i, o, dev, grad: bool):
    g = torch.Generator(device=dev).manual_seed(0)

    def r(*s):
        return torch.randn(*s, device=dev, generator=g)

    mu, sigma = r(G, i, o).requires_grad_(grad), (r(G, i, o) * 0.05).requires_grad_(grad)
    return r(G, N, i).requires_grad_(grad), mu, sigma, r(G, i, 1), r(G, 1, o), r(G, 1, o).requires_grad_(grad)


def _time(fn, args, backward: bool, reps: int = 50) -> float:
    def step():
        y = fn(*args)
        if backward:
            torch.autograd.grad(y.square().sum(), [a for a in args if a.requires_grad])

    graph = train_step.capture_graph(step)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--population", type=int, default=64)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--envs", type=int, default=16)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("noisy_product.py times CUDA graphs: run it on the GPU machine")
    dev = torch.device("cuda")
    P = args.population
    uses = {"learn (online, 3B rows, fwd+bwd)": (3 * args.batch, True), "target (2B rows, fwd)": (2 * args.batch, False),
            "act (n_envs rows, fwd)": (args.envs, False)}  # fmt: skip
    rows, totals = [], {}
    print(f"{'use':34s} {'layer':10s} {'materialised us':>16s} {'factorised us':>14s} {'mat/fact':>8s}")
    for use, (N, backward) in uses.items():
        for name, (reps, i, o) in LAYERS.items():
            t = _tensors(P * reps, N, i, o, dev, backward)
            # both forms compute the same function (to rounding): check before timing
            with torch.no_grad():
                d = (_materialised(*t) - _factorised(*t)).abs().max().item()
            tm, tf = _time(_materialised, t, backward), _time(_factorised, t, backward)
            rows.append({"use": use, "layer": name, "rows": N, "materialised_us": tm, "factorised_us": tf, "max_diff": d})
            totals.setdefault(use, [0.0, 0.0])
            totals[use][0] += tm
            totals[use][1] += tf
            print(f"{use:34s} {name:10s} {tm:16.1f} {tf:14.1f} {tm / tf:8.2f}")
    for use, (tm, tf) in totals.items():
        print(f"{use:34s} {'all three':10s} {tm:16.1f} {tf:14.1f} {tm / tf:8.2f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"command": " ".join(sys.argv), "machine": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "population": P, "rows": rows, "totals_us": totals}, f, indent=1)  # fmt: skip


if __name__ == "__main__":
    main()
