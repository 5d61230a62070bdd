"""Training-iteration time: eager vs CUDA graph, and how it scales with the population P.

One run, side by side on one GPU, with the real Trainer (env step, replay insert, sampling,
forward, gems, backward, Adam, target update: one iteration = one graph replay):
- eager vs graphed iteration at P=1 (fp32);
- graphed iteration for P in {1, 4, 16, 64, 256} at each matmul precision (fp32, tf32, bf16);
- gems all `off` vs all `measure` (CUDA kernels, and the reference ops) at P=1 and P=64:
  the cost of measuring;
- seed-steps per second (P members x n_envs environment steps per iteration / time) and peak
  GPU memory per member;
- with `--blocks 12` (or `32,192`), P = 768 as that many arms (blocks of 768/A seeds) at batch 128
  (the histories x folds x arms shapes of the efficient designs), at tf32 and bf16;
- with `--moonshot`, the moonshot trial's own iteration: benchmarks/moonshot.yaml's config as
  it is (3 arms x 64 seeds = 192 members, batch 128, hidden 128, its gems and arms), at tf32
  and bf16, so the benchmark and the trial time the same thing (`--moonshot-only`: only these).

`--layer-kernels torch,triton` times every case once per `model.layer_kernel` (the layers'
products on torch's batched matmuls with member blocks, or on the Triton kernels without them),
side by side in one run, and prints the triton / torch ratio of each case; profiles and the
census follow the same list.

`--profile` profiles one eager iteration at P=1 and P=64 for each of `--profile-precisions`,
counts the launches whose kernel is a SIMT GEMM (no tensor cores), and prints the op census
(`op_census`: calls per iteration of every op the iteration dispatches, the per-op launch
count), per precision. `--census-only` prints the census at P=1 and P=64 for each of
`--profile-precisions` on this machine's device (on the CPU every precision runs fp32, so the
CPU census is one table).

Timing: CUDA events around `reps` iterations after warm-up (the capture happens in the
warm-up), repeated `rounds` times; the median is reported.

    python benchmarks/train_step.py [--out benchmarks/results/train_step.json] [--quick]
        [--populations 1,64,256] [--blocks 12[,192]] [--moonshot | --moonshot-only]
        [--profile [--profile-precisions fp32,tf32,bf16]] [--layer-kernels torch,triton]

Runs against whichever `tune_gems` is first on PYTHONPATH (so an older tree beside this one can
be timed the same way).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import shlex
import statistics
import sys
from pathlib import Path

import torch

from tune_gems.config.load import build_config, load_config
from tune_gems.config.yaml_io import apply_overrides, read_yaml
from tune_gems.trainer.trainer import Trainer

POPULATIONS = (1, 4, 16, 64, 256)
PRECISIONS = ("fp32", "tf32", "bf16")
BASE = [
    "device=cuda",
    "trainer.batch_size=256",
    "trainer.n_envs=16",
    "trainer.replay_capacity=8192",
    "trainer.learning_starts=512",
    "model.hidden=256",
    "model.stream_hidden=64",
    "data.synthetic.n=4000",
]
BLOCKS_P, BLOCKS_BATCH = 768, 128
"""--blocks: the members and batch of the blocked cases (P = arms x seeds per arm)."""
GEMS = {g: [f"gems.{x}.mode={g}" for x in ("g6", "g10", "g12")] for g in ("off", "measure", "wire")}
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "train_step.json"
MOONSHOT = Path(__file__).resolve().parent / "moonshot.yaml"
"""The moonshot sweep; its `config:` is the trial --moonshot times."""
MOONSHOT_RUN = ["trainer.checkpoint_every=0", "trainer.checkpoint_interval_s=0"]
"""What a benchmark run changes in the moonshot's config: nothing that shapes the iteration."""


def moonshot_config(precision: str, graph: bool, kernels: str, device: str = "cuda", layer_kernel: str = "torch"):
    """benchmarks/moonshot.yaml's trial config (3 arms x 64 seeds, batch 128)."""
    tree = read_yaml(MOONSHOT)["config"]
    apply_overrides(tree, [*MOONSHOT_RUN, f"device={device}", f"trainer.precision={precision}",
                           f"trainer.graph={'on' if graph else 'off'}", f"kernels={kernels}",
                           f"model.layer_kernel={layer_kernel}"])  # fmt: skip
    return build_config(tree, str(MOONSHOT))


def median_us(call, warmup: int, reps: int, rounds: int) -> float:
    """Median over `rounds` of the microseconds per call of `reps` calls (CUDA events)."""
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / reps)
    return statistics.median(times)


def capture_graph(step, warmup: int = 3) -> torch.cuda.CUDAGraph:
    """`step` captured in a CUDA graph, after `warmup` eager runs on a side stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def time_iterations(trainer: Trainer, warmup: int, reps: int, rounds: int) -> float:
    """Median microseconds per iteration (graph replay or eager step)."""
    return median_us(trainer.runner, warmup, reps, rounds)


def arms_overrides(arms: int) -> list[str]:
    """`arms` arms that differ in the learning rate only (what differs between arms never
    changes a matmul's shape; one arm: none)."""
    if arms == 1:
        return []
    lrs = ",".join(f"{5e-4 * (1 + i / 1000):.7g}" for i in range(arms))
    return [f"arms.factors.trainer.lr=[{lrs}]"]


def run_case(
    P: int, precision: str, graph: bool, gems: str, kernels: str, warmup: int, reps: int, rounds: int,
    batch: int = 256, blocks: int = 1, moonshot: bool = False, layer_kernel: str = "torch",
) -> dict:
    """One configuration; P is the number of members (blocks x seeds per block, arms being the
    blocks). `moonshot`: benchmarks/moonshot.yaml's own config (P, batch and gems are its)."""
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base_mem = torch.cuda.memory_allocated()
    if moonshot:
        cfg = moonshot_config(precision, graph, kernels, layer_kernel=layer_kernel)
    else:
        cfg = load_config(
            None,
            [*BASE, *GEMS[gems], f"trainer.population={P // blocks}", f"trainer.precision={precision}",
             f"trainer.graph={'on' if graph else 'off'}", f"kernels={kernels}", f"trainer.batch_size={batch}",
             f"model.layer_kernel={layer_kernel}", *arms_overrides(blocks)],
        )
    t = Trainer(cfg, log=None)
    P, batch, blocks = t.learner.P, cfg.trainer.batch_size, len(t.learner.arms)
    t._prefill()
    us = time_iterations(t, warmup, reps if graph else max(reps // 4, 10), rounds)
    peak = torch.cuda.max_memory_allocated() - base_mem
    row = {
        "case": "moonshot" if moonshot else "train_step",
        "P": P,
        "batch": batch,
        "blocks": blocks,
        "precision": precision,
        "mode": "graph" if graph else "eager",
        "gems": gems,
        "kernels": t.ops.name,
        "layer_kernel": layer_kernel,
        "iter_us": round(us, 1),
        "seed_steps_per_s": round(P * cfg.trainer.n_envs / (us * 1e-6)),
        "member_updates_per_s": round(P / (us * 1e-6)),
        "mem_per_member_mb": round(peak / P / 2**20, 2),
    }
    del t
    return row


def profile_iteration(P: int, precision: str, top: int = 15, layer_kernel: str = "torch") -> dict:
    """Kernel-level profile of one eager iteration (the same kernels a replay runs): the number
    of kernel launches and where the GPU time goes, for explaining the graph timings."""
    from torch.profiler import ProfilerActivity, profile

    t = census_trainer(P, precision, "cuda", layer_kernel)
    for _ in range(3):
        t.learner.iteration()
    census = op_census(t.learner)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            t.learner.iteration()
        torch.cuda.synchronize()
    averages = prof.key_averages()
    events = [e for e in averages if e.device_type.name == "CUDA"]
    def dev_time(e):
        return getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)

    def self_dev_time(e):
        return getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)

    # which torch ops launched the kernel time (their own kernels, not their children's)
    ops = sorted((e for e in averages if e.device_type.name == "CPU" and self_dev_time(e) > 0), key=self_dev_time, reverse=True)
    op_rows = [{"op": e.key[:70], "us_per_iter": round(self_dev_time(e) / 5, 1), "calls_per_iter": e.count / 5} for e in ops[:top]]
    kernels = sorted(events, key=dev_time, reverse=True)
    total = sum(dev_time(e) for e in kernels) / 5
    launches = sum(e.count for e in kernels) / 5
    rows = [{"kernel": e.key[:90], "us_per_iter": round(dev_time(e) / 5, 1), "calls_per_iter": e.count / 5} for e in kernels[:top]]
    simt = [e for e in kernels if is_simt_gemm(e.key)]
    simt_launches = sum(e.count for e in simt) / 5
    simt_us = sum(dev_time(e) for e in simt) / 5
    print(f"\nprofile P={P} {precision} layers={layer_kernel}: {launches:.0f} kernel launches, {total:.0f} us of kernel time per iteration; "
          f"SIMT GEMM launches {simt_launches:.0f} ({simt_us:.0f} us)")
    for r in rows:
        print(f"  {r['us_per_iter']:>8.1f} us  x{r['calls_per_iter']:<5.1f} {r['kernel']}")
    print(f"  by the torch op that launched them (P={P}):")
    for r in op_rows:
        print(f"  {r['us_per_iter']:>8.1f} us  x{r['calls_per_iter']:<5.1f} {r['op']}")
    print_census(f"P={P} {precision} layers={layer_kernel}", census)
    del t
    return {"P": P, "precision": precision, "layer_kernel": layer_kernel, "launches_per_iter": launches, "kernel_us_per_iter": round(total, 1),
            "simt_gemm_launches_per_iter": simt_launches, "simt_gemm_us_per_iter": round(simt_us, 1),
            "simt_gemm_kernels": sorted({e.key for e in simt}), "top": rows, "top_ops": op_rows,
            "op_census": census}


NO_KERNEL_OPS = frozenset({
    "view", "_unsafe_view", "as_strided", "unsqueeze", "squeeze", "permute", "expand", "slice", "select", "t",
    "transpose", "split", "split_with_sizes", "alias", "detach", "empty", "empty_strided", "_reshape_alias",
    "unbind", "diagonal", "lift_fresh", "new_empty", "new_empty_strided", "empty_like", "unfold", "narrow",
    "view_as", "set_", "resize_", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_same_size",
})
"""aten ops that only make a view or an uninitialised tensor: no kernel on any device."""


def op_census(learner, iterations: int = 1) -> dict[str, float]:
    """Calls per iteration of every aten (and tune_gems) op one `learner.iteration()` dispatches,
    forward and backward, views left out: on CUDA each is (at least) one kernel launch, on CPU
    the same structure. Counted below autograd (TorchDispatchMode), so it runs on any device and
    names the overload (`aten.where.self`), unlike the profiler's per-op table."""
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode

    counts: Counter = Counter()

    class Census(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket.__name__ not in NO_KERNEL_OPS:
                counts[str(func)] += 1
            return func(*args, **(kwargs or {}))

    with Census():
        for _ in range(iterations):
            learner.iteration()
    return {op: n / iterations for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))}


def census_trainer(P: int | str, precision: str, device: str, layer_kernel: str = "torch") -> Trainer:
    """The profiled configuration (gems measured, eager) on `device`, replay prefilled; P
    "moonshot": benchmarks/moonshot.yaml's trial."""
    kernels = "cuda" if device == "cuda" else "auto"
    if P == "moonshot":
        cfg = moonshot_config(precision, graph=False, kernels=kernels, device=device, layer_kernel=layer_kernel)
    else:
        overrides = [o for o in [*BASE, *GEMS["measure"]] if not o.startswith("device=")]
        cfg = load_config(None, [*overrides, f"device={device}", f"trainer.population={P}", f"trainer.precision={precision}",
                                 "trainer.graph=off", f"kernels={kernels}", f"model.layer_kernel={layer_kernel}"])
    t = Trainer(cfg, log=None)
    t._prefill()
    return t


def print_census(label: str, census: dict[str, float], top: int = 40) -> None:
    """The per-op count table: total, then the `top` ops by calls per iteration."""
    print(f"\nop census {label}: {sum(census.values()):.0f} ops per iteration (dispatcher, views left out)")
    for op, n in list(census.items())[:top]:
        print(f"  {n:>6.1f}  {op}")


def is_simt_gemm(kernel: str) -> bool:
    """A GEMM kernel on the SIMT (CUDA core) path: cutlass / cuBLAS name it `simt`."""
    return "simt" in kernel.lower()


def moonshot_cases(precisions: tuple[str, ...] = ("tf32", "bf16")):
    """The moonshot trial's own iteration (its config sets P, batch and gems)."""
    for prec in precisions:
        yield dict(P=0, precision=prec, graph=True, gems="measure", kernels="cuda", moonshot=True)


def cases(
    quick: bool, populations: tuple[int, ...] = POPULATIONS, blocks: tuple[int, ...] = (), moonshot: bool = False,
    precisions: tuple[str, ...] = PRECISIONS, core: bool = False,
):
    """The timed configurations. `core`: only the graphed, gems-measured rows with the CUDA
    kernels (no eager row, no gems off / wire, no reference ops)."""
    pops = (1, 64) if quick else populations
    if moonshot:
        yield from moonshot_cases(tuple(p for p in ("tf32", "bf16") if p in precisions))
    if not core:
        yield dict(P=1, precision="fp32", graph=False, gems="measure", kernels="cuda")
    for prec in precisions:
        for P in pops:
            yield dict(P=P, precision=prec, graph=True, gems="measure", kernels="cuda")
    for arms in blocks:
        for prec in (p for p in ("tf32", "bf16") if p in precisions):
            yield dict(P=BLOCKS_P, precision=prec, graph=True, gems="measure", kernels="cuda", batch=BLOCKS_BATCH, blocks=arms)
    if core:
        return
    for P in (1, 64):
        for gems in ("off", "wire"):
            yield dict(P=P, precision="fp32", graph=True, gems=gems, kernels="cuda")
        yield dict(P=P, precision="fp32", graph=True, gems="measure", kernels="reference")


def layer_kernel_ratios(rows: list[dict]) -> dict[str, float]:
    """<kernel> / torch iteration time of every case timed with a triton layer kernel and torch's
    (the rows that differ only in `layer_kernel`), keyed `<kernel>_over_torch_<case>_P<P>_<precision>_<gems>`."""
    def key(r):
        return tuple((k, v) for k, v in r.items() if k in ("case", "P", "batch", "blocks", "precision", "mode", "gems", "kernels"))

    torch_rows = {key(r): r for r in rows if r["layer_kernel"] == "torch"}
    out = {}
    for r in rows:
        ref = torch_rows.get(key(r)) if r["layer_kernel"] != "torch" else None
        if ref:
            name = f"{r['layer_kernel'].replace('-', '_')}_over_torch_{r['case']}_P{r['P']}_{r['precision']}_{r['gems']}"
            out[name] = round(r["iter_us"] / ref["iter_us"], 3)
    return out


def write_result(out: Path, rows: list[dict], summary: dict, profiles: list[dict]) -> None:
    """The JSON result so far (rewritten after every case, so a run cut short keeps its rows)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "benchmark": "train_step",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "command": "python " + " ".join(shlex.quote(x) for x in sys.argv),
        "config": BASE,
        "rows": rows,
        "summary": summary,
        "profiles": profiles,
    }, indent=2))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="P in {1, 64} only")
    ap.add_argument("--populations", default=",".join(map(str, POPULATIONS)), help="comma-separated P of the graphed cases")
    ap.add_argument("--blocks", type=lambda v: tuple(int(x) for x in v.split(",")), default=(), metavar="A[,A...]",
                    help="also P=768 as A arms (blocks) of 768/A seeds each, batch 128 (tf32, bf16), e.g. 12 or 32,192")
    ap.add_argument("--moonshot", action="store_true", help="also the moonshot trial's own iteration (benchmarks/moonshot.yaml; tf32, bf16)")
    ap.add_argument("--moonshot-only", action="store_true", help="only the moonshot trial's iteration")
    ap.add_argument("--precisions", default=",".join(PRECISIONS), help="comma-separated precisions of the graphed cases")
    ap.add_argument("--core", action="store_true", help="only the graphed, gems-measured rows with the CUDA kernels")
    ap.add_argument("--profile", action="store_true", help="also profile one eager iteration at P=1 and P=64")
    ap.add_argument("--profile-precisions", default="fp32", help="comma-separated precisions to profile")
    ap.add_argument("--census-only", action="store_true", help="print the op census at P=1 and P=64 on this machine's device and stop")
    ap.add_argument("--census-populations", default="1,64", help="comma-separated P of --census-only (or moonshot: its trial)")
    ap.add_argument("--layer-kernels", default="torch", help="comma-separated model.layer_kernel values, each case timed once per value")
    a = ap.parse_args(argv)
    populations = tuple(int(x) for x in a.populations.split(","))
    profile_precisions = tuple(a.profile_precisions.split(","))
    layer_kernels = tuple(a.layer_kernels.split(","))
    if a.census_only:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        for prec in profile_precisions if device == "cuda" else ("fp32",):  # the CPU runs fp32 whatever the precision
            for P in (x if x == "moonshot" else int(x) for x in a.census_populations.split(",")):
                for lk in layer_kernels:
                    t = census_trainer(P, prec, device, lk)
                    t.learner.iteration()  # the first iteration fixes the frozen columns
                    print_census(f"P={P} {prec} layers={lk} ({device})", op_census(t.learner))
        return 0
    if not torch.cuda.is_available():
        print("train_step benchmark needs CUDA", file=sys.stderr)
        return 2
    rows = []
    precisions = tuple(a.precisions.split(","))
    if a.moonshot_only:
        todo = list(moonshot_cases(tuple(p for p in ("tf32", "bf16") if p in precisions)))
    else:
        todo = list(cases(a.quick, populations, a.blocks, a.moonshot, precisions, a.core))
    todo = [dict(c, layer_kernel=lk) for c in todo for lk in layer_kernels]  # side by side
    print(f"{'config':10} {'mode':6} {'P':>4} {'batch':>5} {'arms':>4} {'prec':5} {'gems':8} {'kernels':9} {'layers':15} {'iter_us':>9} "
          f"{'seed-steps/s':>13} {'MB/member':>9}")  # fmt: skip
    for c in todo:
        r = run_case(**c, warmup=a.warmup, reps=a.reps, rounds=a.rounds)
        rows.append(r)
        write_result(a.out, rows, {}, [])
        print(f"{r['case']:10} {r['mode']:6} {r['P']:>4} {r['batch']:>5} {r['blocks']:>4} {r['precision']:5} "
              f"{r['gems']:8} {r['kernels']:9} {r['layer_kernel']:15} {r['iter_us']:>9.1f} {r['seed_steps_per_s']:>13,} "
              f"{r['mem_per_member_mb']:>9.2f}", flush=True)  # fmt: skip

    def find(**kw):
        kw.setdefault("layer_kernel", layer_kernels[0])  # the figures below: of the first layer kernel listed
        return next((r for r in rows if all(r[k] == v for k, v in kw.items())), None)

    summary = {}
    eager, g1 = find(mode="eager", P=1), find(mode="graph", P=1, precision="fp32", gems="measure", kernels="cuda")
    if eager and g1:
        summary["graph_speedup_P1"] = round(eager["iter_us"] / g1["iter_us"], 2)
    for prec in PRECISIONS:
        p1 = find(mode="graph", P=1, precision=prec, gems="measure", case="train_step")
        p64 = find(mode="graph", P=64, precision=prec, gems="measure", case="train_step")
        if p1 and p64:
            summary[f"P64_over_P1_{prec}"] = round(p64["iter_us"] / p1["iter_us"], 2)
    for P in (1, 64):
        off, meas = find(P=P, gems="off", mode="graph"), find(P=P, gems="measure", precision="fp32", mode="graph", kernels="cuda")
        if off and meas:
            summary[f"measure_over_off_P{P}"] = round(meas["iter_us"] / off["iter_us"], 3)
    for r in rows:
        if r["case"] == "moonshot":
            suffix = "" if r["layer_kernel"] == "torch" else f"_{r['layer_kernel']}"
            summary[f"moonshot_{r['precision']}{suffix}_us"] = r["iter_us"]
    summary.update(layer_kernel_ratios(rows))
    print("\nsummary:", json.dumps(summary))
    profiles = []
    for prec in profile_precisions if a.profile else ():
        for P in (1, 64):
            for lk in layer_kernels:
                profiles.append(profile_iteration(P, prec, layer_kernel=lk))
                write_result(a.out, rows, summary, profiles)
    write_result(a.out, rows, summary, profiles)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
