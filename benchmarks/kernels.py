"""Forward+backward time of the tune_gems CUDA custom ops against the plain-torch reference.

For each op and population size P, both implementations run side by side in one process on
the same inputs, timed with CUDA events (warm-up, then many repetitions, median):
- eager: one Python call per step, so the time includes Python and dispatcher overhead
  (what an uncaptured learner pays);
- graph: the step captured once in a CUDA graph and replayed (pure GPU time, what the
  graph-captured trainer pays).
The ratio is reference / cuda (above 1: the kernels are faster). c51_target and c51_project have
no backward (targets carry no gradient) and are timed forward only. The "all" row runs every op
in one step, the C51 ones chained as in the learner (target -> projection -> loss).
dueling_c51 (the fused dueling-C51 head, issue 22) is timed at the learner's online pass: value
and advantage logits of N = 2B rows, the taken action's log-probabilities for B of them, against
its plain-torch reference under autograd (the unfused path: combine, softmax, expected Q,
gather, log-softmax); it is not part of "all".

    python benchmarks/kernels.py [--out benchmarks/results/kernels.json] [--reps 200]

Writes a JSON file with the machine, versions, the command line and every row.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import shlex
import statistics
import sys
from pathlib import Path
from typing import Callable

import torch

from tune_gems.ops import GemOps, resolve_backend
from tune_gems.ops import dueling_head

POPULATIONS = (1, 8, 64, 256)
BATCH = 256
BRANCHES = 2
SUB_ACTIONS = 3
ATOMS = 51
FEATURES = 64
V_MIN, V_MAX = -10.0, 10.0
GAMMA_N = 0.97
DONE_FRACTION = 0.1
WARMUP = 20
REPS = 200
SEED = 0
DTYPES = {"float32": torch.float32, "float64": torch.float64}
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "kernels.json"
OP_NAMES = ("g6_branch_indep", "g10_temporal", "g12_predictive", "c51_target", "c51_project", "c51_loss", "dueling_c51", "all")
FORWARD_ONLY = ("c51_target", "c51_project")

Step = Callable[[], list[torch.Tensor]]


def make_inputs(P: int, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Static inputs of every op at population P (leaves that need a gradient require one)."""
    gen = torch.Generator(device=device).manual_seed(SEED)
    B, K, A, D, atoms = BATCH, BRANCHES, SUB_ACTIONS, FEATURES, ATOMS
    N = P * B * K

    def randn(*size):
        return torch.randn(*size, generator=gen, device=device, dtype=dtype)

    def rand(*size):
        return torch.rand(*size, generator=gen, device=device, dtype=dtype)

    x = {
        "f": randn(P, K, B, D),
        "q_t": randn(P, B, K, A),
        "q_tp1": randn(P, B, K, A),
        "pred": randn(P, B, D),
        "target": randn(P, B, D),
        "nd": (rand(P, B) > DONE_FRACTION).to(dtype),
        "p": torch.softmax(randn(N, atoms), dim=-1),
        "r": randn(N),
        "g": GAMMA_N * (rand(N) > DONE_FRACTION).to(dtype),
        "logits": randn(P, B, K, atoms),
        "m": torch.softmax(randn(P, B, K, atoms), dim=-1),
        "online_n": randn(P, B, K, A, atoms),  # the learner's [P,B,K,A,atoms] logits at s_{t+n}
        "target_n": randn(P, B, K, A, atoms),
        "support": torch.linspace(V_MIN, V_MAX, atoms, device=device, dtype=dtype),
        "ones": torch.ones(P, device=device, dtype=dtype),
        "value": randn(P, 2 * B, atoms),  # the online pass over [s_t, s_{t+1}]
        "adv": randn(P, K, 2 * B, A, atoms),
        "action": torch.randint(A, (P, B, K), generator=gen, device=device),
    }
    for key in ("f", "q_t", "q_tp1", "pred", "logits", "value", "adv"):
        x[key].requires_grad_(True)
    return x


def make_step(op: str, ops: GemOps, x: dict[str, torch.Tensor]) -> Step:
    """One forward+backward of `op` (forward only for FORWARD_ONLY ops) with backend `ops`."""

    def values() -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
        outs, wrt = [], []
        if op in ("g6_branch_indep", "all"):
            outs.append(ops.g6_branch_indep(x["f"])[1])
            wrt.append(x["f"])
        if op in ("g10_temporal", "all"):
            outs.append(ops.g10_temporal(x["q_t"], x["q_tp1"], x["nd"])[1])
            wrt += [x["q_t"], x["q_tp1"]]
        if op in ("g12_predictive", "all"):
            outs.append(ops.g12_predictive(x["pred"], x["target"], x["nd"])[1])
            wrt.append(x["pred"])
        m = None
        p_next = None
        if op in ("c51_target", "all"):
            with torch.no_grad():
                p_next = ops.c51_target(x["online_n"], x["target_n"], x["support"])
        if op in ("c51_project", "all"):
            # "all" projects the double-DQN target, as a learner does.
            p = x["p"] if p_next is None else p_next.reshape(-1, ATOMS)
            with torch.no_grad():
                m = ops.c51_project(p, x["r"], x["g"], V_MIN, V_MAX)
        if op in ("c51_loss", "all"):
            # "all" feeds the projection into the loss, as a learner does.
            target = x["m"] if m is None else m.view_as(x["m"])
            outs.append(ops.c51_loss(x["logits"], target)[1])
            wrt.append(x["logits"])
        if op == "dueling_c51":
            head = torch.ops.tune_gems.dueling_c51 if ops.fused else dueling_head.dueling_c51
            q, log_probs = head(x["value"], x["adv"], x["support"], x["action"])
            outs += [q.sum(dim=(1, 2, 3)), log_probs.sum(dim=(1, 2, 3))]
            wrt += [x["value"], x["adv"]]
        return outs, wrt, [t for t in (p_next, m) if t is not None]

    def step() -> list[torch.Tensor]:
        outs, wrt, extra = values()
        grads = list(torch.autograd.grad(outs, wrt, [x["ones"]] * len(outs))) if outs else []
        return [o.detach() for o in outs] + extra + grads

    return step


def median_event_us(run: Callable[[], object], reps: int) -> float:
    """Median over reps of the GPU time between events recorded around run()."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends):
        start.record()
        run()
        end.record()
    torch.cuda.synchronize()
    return 1000.0 * statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def time_eager(step: Step, warmup: int, reps: int) -> float:
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    return median_event_us(step, reps)


def time_graph(step: Step, warmup: int, reps: int) -> float:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(max(warmup, 1)):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(warmup):
        graph.replay()
    torch.cuda.synchronize()
    timing = median_event_us(graph.replay, reps)
    del graph
    return timing


def max_abs_difference(a: Step, b: Step) -> float:
    """Largest |difference| over all outputs and gradients of two backends' steps."""
    outs_a, outs_b = a(), b()
    return max((x.double() - y.double()).abs().max().item() for x, y in zip(outs_a, outs_b))


def measure(op: str, P: int, cuda_ops: GemOps, ref_ops: GemOps, device, dtype, warmup, reps) -> list[dict]:
    x = make_inputs(P, device, dtype)
    steps = {"cuda": make_step(op, cuda_ops, x), "reference": make_step(op, ref_ops, x)}
    diff = max_abs_difference(steps["cuda"], steps["reference"])
    rows = []
    for mode, timer in (("eager", time_eager), ("graph", time_graph)):
        row = {"op": op, "P": P, "B": BATCH, "mode": mode, "max_abs_diff": diff,
               "backward": op not in FORWARD_ONLY}
        for name, step in steps.items():
            try:
                row[f"{name}_us"] = timer(step, warmup, reps)
            except Exception as error:  # noqa: BLE001 - recorded, the other rows still run
                row[f"{name}_us"] = None
                row[f"{name}_error"] = " ".join(str(error).split())[:200]
        if row.get("cuda_us") and row.get("reference_us"):
            row["speedup"] = row["reference_us"] / row["cuda_us"]
        rows.append(row)
    return rows


def machine_info(device: torch.device) -> dict:
    props = torch.cuda.get_device_properties(device)
    return {
        "gpu": torch.cuda.get_device_name(device),
        "capability": f"{props.major}.{props.minor}",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
    }


def format_table(rows: list[dict]) -> str:
    header = f"{'op':<20} {'P':>3} {'mode':<6} {'cuda us':>10} {'ref us':>10} {'ref/cuda':>9} {'max|diff|':>10}"
    lines = [header, "-" * len(header)]
    for row in rows:
        cuda = f"{row['cuda_us']:.1f}" if row.get("cuda_us") else "error"
        ref = f"{row['reference_us']:.1f}" if row.get("reference_us") else "error"
        ratio = f"{row['speedup']:.2f}x" if row.get("speedup") else "-"
        op = row["op"] + ("" if row["backward"] else " (fwd)")
        lines.append(
            f"{op:<20} {row['P']:>3} {row['mode']:<6} {cuda:>10} {ref:>10} {ratio:>9} {row['max_abs_diff']:>10.2e}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON result file")
    parser.add_argument("--reps", type=int, default=REPS, help="timed repetitions per measurement")
    parser.add_argument("--warmup", type=int, default=WARMUP, help="untimed repetitions first")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--populations", type=int, nargs="+", default=list(POPULATIONS))
    parser.add_argument("--ops", nargs="+", choices=OP_NAMES, default=list(OP_NAMES))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/kernels.py needs a CUDA device", file=sys.stderr)
        return 2
    device = torch.device("cuda", torch.cuda.current_device())
    dtype = DTYPES[args.dtype]
    cuda_ops = resolve_backend("cuda", device)
    ref_ops = resolve_backend("reference", device)
    rows = []
    for P in args.populations:
        for op in args.ops:
            rows.extend(measure(op, P, cuda_ops, ref_ops, device, dtype, args.warmup, args.reps))
    table = format_table(rows)
    print(table)
    result = {
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(device),
        "settings": {
            "dtype": args.dtype, "B": BATCH, "K": BRANCHES, "A": SUB_ACTIONS, "D": FEATURES,
            "atoms": ATOMS, "populations": args.populations, "warmup": args.warmup,
            "reps": args.reps, "statistic": "median of CUDA-event times per step",
        },
        "rows": rows,
        "table": table.splitlines(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
