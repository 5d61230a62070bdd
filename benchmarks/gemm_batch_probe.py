"""Does a member's product or reduction depend on how many members share the call? (issue 33, item 3)

On the GPU a member's bits change with the number of seeds that share its arm: cuBLAS picks
its batched-GEMM algorithm from the batch count, and torch's reductions pick their split from
the number of outputs. This probe is the record of which products and reductions depend on P,
and of what the cuBLAS-side remedies tried so far buy. It measures, for every batched matrix
product one training iteration of the learner runs (forward, backward dgrad / wgrad, the
spectral norm's power iteration and sigma: recorded from a real learner, with each operand's
strides, the member stride included), and for the learner's per-member reductions, whether
member 0's, member 5's and the last member's result at P members is bitwise that member's
result alone (P = 1, its operands in a fresh allocation of the same layout), for P in PS, under
each variant:

  default                the environment as given (gpu_session.sh exports CUBLAS_WORKSPACE_CONFIG=:4096:8)
  cublaslt               torch.backends.cuda.preferred_blas_library("cublaslt")
  tileG                  member tiles: calls of exactly G members, the last padded with zero
                         members (`member_tiled` below), G in TILES
  no-workspace           CUBLAS_WORKSPACE_CONFIG=:0:0 (no split-K workspace; read when CUDA
                         starts, so it runs in a process of its own), and no-workspace+cublaslt

and each per-member reduction with torch's own op (what the learner runs). The library runs
neither tiles nor a special cuBLAS setting: it keeps each arm's members in member blocks
(tune_gems.model.layers), which gives the arms invariant, not a seed's bits across seed counts;
member tiles and fixed-order reductions were tried in the library and taken out
(benchmarks/RESULTS.md, 2026-12-01). A variant whose call fails (cuBLASLt finds no workspace
under :0:0 on torch 2.11) is recorded with its error for that product. Products run at tf32
(float32 operands, matmul precision "high") and bf16 (bfloat16 operands, what autocast hands
cuBLAS), at batch 128 (the moonshot's) and 256 (train_step.py's), hidden 256. Time per call:
the median of three CUDA-event timings of TIME_REPS calls, at P in TIMED_PS.

    python benchmarks/gemm_batch_probe.py [--out DIR] [--budget 85]

Prints a table (variant x precision x batch: products P-invariant of all, products whose call
failed, one iteration's products' time at P = 64 and 192), the products and reductions that
depend on P, and the fastest variant P-invariant everywhere, if any, with what adopting it
would take; writes DIR/gemm_batch_probe.json (DIR: --out, else $OUT, else benchmarks/results).
Exit status 0 whatever it finds (a P-dependence is a finding); 2 without CUDA. `--smoke` runs
the same logic on the CPU at a tiny shape: its findings are the CPU BLAS's, not the GPU's (one:
a batch of one member takes another path for the power iteration's matrix-vector product, so
P = 1 is not a larger run's bits there).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

PS = (1, 2, 3, 4, 8, 16, 64, 192, 256)
TIMED_PS = (64, 192)
TILES = (8, 16, 32)
BATCHES = (128, 256)
PRECISIONS = ("tf32", "bf16")
CHECKED_MEMBERS = (0, 5)
"""Members compared with themselves alone, besides the last one of each P."""
IN_PROCESS = ("default", "cublaslt", *(f"tile{g}" for g in TILES))
OWN_PROCESS = ("no-workspace", "no-workspace+cublaslt")
NO_WORKSPACE = {"CUBLAS_WORKSPACE_CONFIG": ":0:0"}
FIRST_WORKER_SHARE = 0.7
"""Share of the time left after recording that the first (larger) worker may take."""
TIME_REPS = 5
RECORDED_P = 2
"""Members of the recorded learner: with two, each operand's member stride is the one it has
at any P (a layout only P = 1 shows, such as a gradient viewed across branches, is a copy at
P > 1)."""
SMOKE = {
    "overrides": ["model.hidden=32", "model.stream_hidden=8", "model.atoms=11", "model.predictor_hidden=16",
                  "trainer.n_envs=2", "trainer.replay_capacity=512", "trainer.learning_starts=32", "env.window=8",
                  "env.episode_length=32", "data.synthetic.n=900"],
    "batches": (16,), "ps": (1, 2, 3, 6), "timed_ps": (6,), "tiles": (4,),
}  # fmt: skip
"""--smoke: the CPU dry run's shapes (every code path of the probe, no finding)."""


# -- what the learner runs (recorded on the CPU, in the parent process) ----------------------------


def learner_shapes(batch: int, extra: list[str]) -> dict:
    """The matrix products of one eager iteration at P = RECORDED_P (train_step.py's
    configuration at this batch, gems measured, spectral norm on, custom ops: the network's and
    heads' products only; one arm: one call over both members), each operand's shape and strides,
    and the shapes of the learner's per-member reductions."""
    import matmul_floor
    import train_step
    from tune_gems.config.load import load_config
    from tune_gems.trainer.trainer import Trainer

    overrides = [o for o in [*train_step.BASE, *train_step.GEMS["measure"]] if not o.startswith(("device=", "trainer.batch_size="))]
    cfg = load_config(None, [*overrides, *extra, "device=cpu", "kernels=auto", f"trainer.population={RECORDED_P}",
                             "trainer.graph=off", f"trainer.batch_size={batch}", "model.spectral_norm=true"])  # fmt: skip
    t = Trainer(cfg, log=None)
    t._prefill()
    learner = t.learner
    learner.iteration()  # the first iteration fixes the frozen columns
    seen, products = set(), []
    for p in matmul_floor.record_products(learner):
        key = (p.op, p.operands, p.phase)
        if key not in seen and p.op in ("bmm", "baddbmm"):
            seen.add(key)
            products.append({"op": p.op, "phase": p.phase, "per_member": p.operands[0].shape[0] // RECORDED_P,
                             "shapes": [list(o.shape) for o in p.operands], "strides": [list(o.stride) for o in p.operands]})  # fmt: skip
    width = learner.online_flat.data.shape[1]
    return {
        "batch": batch, "products": products, "flat_width": width, "K": learner.K, "A": learner.A, "rows": 2 * batch,
        "clip_groups": [[g.start or 0, width if g.stop is None else g.stop] for g in learner.optim.clip_groups],
        "spectral_norm": [[m.in_f, m.out_f] for m in learner.online.trunk],
        "layers": {name: [m.reps, m.out_f] for name, m in learner.online.weight_layers().items()},
    }  # fmt: skip


def reduction_cases(shapes: dict) -> list[tuple[str, list[int], tuple[int, ...], str, int]]:
    """(name, per-member shape, reduced dims of the member-first tensor, kind, groups per member)."""
    B, K, A, N, width = shapes["batch"], shapes["K"], shapes["A"], shapes["rows"], shapes["flat_width"]
    cases = [(f"clip norm [{b - a} of {width} columns]", [width], (1,), f"norm:{a}:{b}", 1) for a, b in shapes["clip_groups"]]
    cases += [(f"q_mean [{B},{K},{A}]", [B, K, A], (1, 2, 3), "mean", 1), (f"loss [{B}]", [B], (1,), "sum", 1)]
    for i, (fin, fout) in enumerate(shapes["spectral_norm"]):
        cases.append((f"trunk{i} sigma [{fin}]", [fin], (1,), "sum", 1))
        cases += [(f"trunk{i} power-iteration norm [{n}]", [n], (1,), "norm", 1) for n in sorted({fin, fout})]
        cases.append((f"trunk{i} sigma gradient [{fin},{fout}]", [fin, fout], (1, 2), "sum", 1))
    for name, (reps, out) in shapes["layers"].items():
        cases.append((f"{name} bias gradient [{N},{out}] over rows", [N, out], (1,), "sum", reps))
    return cases


# -- a worker: one process, one environment ---------------------------------------------------------


def _operand(shape: list[int], stride: list[int], groups: int, dtype: torch.dtype, device: str, gen: torch.Generator) -> torch.Tensor:
    """A random operand of `groups` groups laid out with the recorded strides (the member
    stride included, so a member's address and alignment are those it has in the learner)."""
    shape = [groups, *shape[1:]]
    span = 1 + sum((size - 1) * st for size, st in zip(shape, stride) if size > 0)
    return torch.randn(span, generator=gen, device=device, dtype=torch.float32).to(dtype).as_strided(shape, stride)


def _fresh(view: torch.Tensor) -> torch.Tensor:
    """A member's operand as a run of that member alone holds it: a new allocation with the
    view's strides (gaps included) and values."""
    return torch.empty_strided(view.shape, view.stride(), dtype=view.dtype, device=view.device).copy_(view)


def member_tiled(op, tile: int | None, *tensors: torch.Tensor) -> torch.Tensor:
    """op over the leading group axis in calls of exactly `tile` groups, the last call's groups
    padded with zeros (its padding dropped from the result); one call when `tile` is None. Group
    g is always at place g % tile of call g // tile, so cuBLAS sees one batch count whatever the
    number of groups: the tileG variants."""
    if tile is None:
        return op(*tensors)
    outs = []
    for parts in zip(*(t.split(tile) for t in tensors)):
        short = tile - parts[0].shape[0]
        if short:
            parts = [torch.cat([p, p.new_zeros((short, *p.shape[1:]))]) for p in parts]
        out = op(*parts)
        outs.append(out[: tile - short] if short else out)
    return outs[0] if len(outs) == 1 else torch.cat(outs)


def _call(op: str, tile: int | None, operands: list[torch.Tensor]) -> torch.Tensor:
    return member_tiled(torch.baddbmm if op == "baddbmm" else torch.bmm, tile, *operands)


def _median_us(fn, device: str) -> float:
    """Median microseconds per call over three rounds of TIME_REPS calls (CUDA events, as
    train_step.median_us; the host clock for --smoke)."""
    if device == "cuda":
        import train_step

        return train_step.median_us(fn, 1, TIME_REPS, 3)
    fn()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(TIME_REPS):
            fn()
        times.append((time.perf_counter() - start) * 1e6 / TIME_REPS)
    return statistics.median(times)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


def _sweep(run, alone, per: int, plan: dict) -> dict:
    """Whether every checked member of run(P) equals alone(member), for P in the plan's ps (the
    P where one differs, max |diff|), and the time per call at its timed_ps."""
    refs: dict[int, torch.Tensor] = {}
    bad, worst = [], 0.0
    for P in plan["ps"]:
        out = run(P)
        members = sorted({m for m in (*CHECKED_MEMBERS, P - 1) if m < P})
        for m in members:
            if m not in refs:
                refs[m] = alone(m)
            mine = out[m * per : (m + 1) * per]
            if not _same(mine, refs[m]):
                worst = max(worst, (mine.double() - refs[m].double()).abs().nan_to_num(nan=float("inf")).max().item())
                if P not in bad:
                    bad.append(P)
    us = {str(P): round(_median_us(lambda P=P: run(P), plan["device"]), 2) for P in plan["timed_ps"]}
    return {"invariant": not bad, "differs_at": bad, "max_diff": worst, "us": us}


def _variant_tile(variant: str) -> int | None:
    base = variant.removeprefix("no-workspace").removeprefix("+")
    return int(base.removeprefix("tile")) if base.startswith("tile") else None


def _blas(library: str, device: str) -> None:
    if device == "cuda":
        torch.backends.cuda.preferred_blas_library(library)


def probe_products(shapes: dict, variants: list[str], precision: str, plan: dict) -> dict[str, list[dict]]:
    """variant -> one row per recorded product: P-invariance and time per call."""
    device = plan["device"]
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    gen = torch.Generator(device=device).manual_seed(0)
    out: dict[str, list[dict]] = {v: [] for v in variants}
    for prod in shapes["products"]:
        per = prod["per_member"]  # groups per member (1, or the branches)
        big = [_operand(sh, st, per * max(plan["ps"]), dtype, device, gen) for sh, st in zip(prod["shapes"], prod["strides"])]
        m, n, k = prod["shapes"][-2][1], prod["shapes"][-1][2], prod["shapes"][-2][2]
        label = f"{prod['op']} {prod['phase']} b{per} m{m} n{n} k{k}"
        for variant in variants:
            tile = _variant_tile(variant)
            _blas("cublaslt" if variant.endswith("cublaslt") else "cublas", device)
            try:
                row = _sweep(lambda P, t=tile: _call(prod["op"], t, [x[: P * per] for x in big]),
                             lambda mem, t=tile: _call(prod["op"], t, [_fresh(x[mem * per : (mem + 1) * per]) for x in big]),
                             per, plan)  # fmt: skip
            except RuntimeError as err:  # this variant cannot run this product (e.g. cuBLASLt without a workspace)
                row = failed_row(err)
            finally:
                _blas("cublas", device)
            out[variant].append({"product": label, **row})
        del big
    return out


def failed_row(err: Exception) -> dict:
    """A product a variant could not run: not invariant, no time, the error's first line."""
    return {"invariant": False, "differs_at": [], "max_diff": None, "us": {}, "error": str(err).strip().splitlines()[0][:200]}


def _reduce(x: torch.Tensor, kind: str, dims: tuple[int, ...]) -> torch.Tensor:
    """One per-member reduction, as the learner runs it (torch's own op)."""
    if kind == "norm":
        return torch.linalg.vector_norm(x, dim=dims)
    return x.mean(dim=dims) if kind == "mean" else x.sum(dim=dims)


def probe_reductions(shapes: dict, plan: dict) -> list[dict]:
    gen = torch.Generator(device=plan["device"]).manual_seed(1)
    rows = []
    for name, shape, dims, kind, per in reduction_cases(shapes):
        big = torch.randn([per * max(plan["ps"]), *shape], generator=gen, device=plan["device"])
        if kind.startswith("norm:"):
            a, b = (int(x) for x in kind.split(":")[1:])
            big, kind = big[:, a:b], "norm"  # a column slice of the flat gradient matrix
        row = _sweep(lambda P, k=kind: _reduce(big[: P * per], k, dims),
                     lambda m, k=kind: _reduce(_fresh(big[m * per : (m + 1) * per]), k, dims), per, plan)  # fmt: skip
        rows.append({"reduction": name, **row})
        del big
    return rows


def worker(shapes_path: Path, variants: list[str], out_path: Path, reductions: bool) -> None:
    """Every pass of the plan, most wanted first (tf32 and the reductions, then bf16), the
    results rewritten after each pass: a worker stopped at its time limit keeps what it did."""
    recorded = json.loads(shapes_path.read_text())
    plan = recorded["plan"]
    result: dict = {"variants": {}, "reductions": {}, "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG")}
    passes = [(s, p) for p in PRECISIONS for s in recorded["shapes"]]
    if reductions:
        passes[1:1] = [(s, "reductions") for s in recorded["shapes"]]
    for shapes, what in passes:
        if what == "reductions":
            result["reductions"][str(shapes["batch"])] = probe_reductions(shapes, plan)
        else:
            torch.set_float32_matmul_precision("high" if what == "tf32" else "highest")
            for variant, rows in probe_products(shapes, variants, what, plan).items():
                result["variants"][f"{variant}|{what}|{shapes['batch']}"] = rows
            torch.set_float32_matmul_precision("highest")
        partial = out_path.with_suffix(".partial")
        partial.write_text(json.dumps(result))
        partial.replace(out_path)


# -- the parent: record, run the workers, report -----------------------------------------------------


def summarise(variants: dict, timed_ps: tuple[int, ...]) -> list[dict]:
    """One row per (variant, precision, batch): products P-invariant, products whose call
    failed, and one iteration's products' time at each timed P (each distinct product once: a
    lower bound of the iteration's GEMM time; None when a product failed)."""
    table = []
    for key, rows in variants.items():
        variant, precision, batch = key.split("|")
        failed = sum("error" in r for r in rows)
        times = {f"gemm_us_P{P}": None if failed else round(sum(r["us"][str(P)] for r in rows), 1) for P in timed_ps}
        table.append({"variant": variant, "precision": precision, "batch": int(batch),
                      "invariant": sum(r["invariant"] for r in rows), "products": len(rows), "failed": failed, **times})  # fmt: skip
    return table


def recommend(table: list[dict], timed_ps: tuple[int, ...]) -> str:
    """The fastest variant whose every product is P-invariant (at the last timed P, summed over
    precisions and batches), and what adopting it would take in the learner."""
    by_variant: dict[str, list[dict]] = {}
    for row in table:
        by_variant.setdefault(row["variant"], []).append(row)
    clean = {v: rows for v, rows in by_variant.items() if all(r["invariant"] == r["products"] for r in rows)}
    if not clean:
        return "no variant is P-invariant for every product (the list above names them)"
    cost = {v: sum(r[f"gemm_us_P{timed_ps[-1]}"] for r in rows) for v, rows in clean.items()}
    best = min(cost, key=cost.get)
    one_call = "one call over all members (no member blocks)"
    setting = {
        "default": one_call,
        "cublaslt": f"{one_call} with preferred_blas_library('cublaslt') in every training process",
        "no-workspace": f"{one_call} with CUBLAS_WORKSPACE_CONFIG=:0:0 in every training process",
        "no-workspace+cublaslt": f"{one_call} with CUBLAS_WORKSPACE_CONFIG=:0:0 and cublaslt",
    }.get(best, f"member tiles of {best.removeprefix('tile')} members in every batched matmul")
    return f"{best}, {cost[best]:.0f} us summed at P={timed_ps[-1]}: {setting} (tune_gems/model/layers.py)"


def _us(value: float | None, width: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.1f}"


def report(merged: dict, plan: dict) -> tuple[list[dict], str]:
    """Print the tables; (summary table, recommendation)."""
    timed = tuple(plan["timed_ps"])
    table = summarise(merged["variants"], timed)
    print(f"\n{'variant':24} {'prec':5} {'batch':>5} {'P-invariant':>12} {'failed':>6} " + " ".join(f"{'gemm us P=' + str(P):>14}" for P in timed))
    for r in table:
        print(f"{r['variant']:24} {r['precision']:5} {r['batch']:>5} {r['invariant']:>5} of {r['products']:<4} {r['failed']:>6} "
              + " ".join(_us(r[f"gemm_us_P{P}"], 14) for P in timed))  # fmt: skip
    print("\nproducts that depend on P (variant precision batch: product: the P where a member differs, max |diff|):")
    shown = 0
    for key, rows in merged["variants"].items():
        for r in rows:
            if not r["invariant"] and "error" not in r:
                shown += 1
                if shown <= 40:
                    print(f"  {key.replace('|', ' ')}: {r['product']}: P={r['differs_at']} {r['max_diff']:.3g}")
    print(f"  ({shown} in all)" if shown else "  none")
    errors = {(key.split("|")[0], r["error"]) for key, rows in merged["variants"].items() for r in rows if "error" in r}
    for variant, error in sorted(errors):
        print(f"  {variant}: some products failed to run: {error}")
    print(f"\n{'reduction (batch)':62} {'P-invariant':16} " + " ".join(f"{'us P=' + str(P):>9}" for P in timed))
    for batch, rows in merged["reductions"].items():
        for r in rows:
            verdict = "yes" if r["invariant"] else f"no {r['differs_at']}"
            print(f"{r['reduction'] + ' (' + batch + ')':62} {verdict:16} " + " ".join(f"{r['us'][str(P)]:>9.1f}" for P in timed))
    return table, recommend(table, timed) if table else "not measured (no worker finished a pass)"


def _spawn(args: list[str], env_extra: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, **env_extra, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, __file__, *args], env=env, timeout=timeout, capture_output=True, text=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="folder for gemm_batch_probe.json (default $OUT, else benchmarks/results)")
    ap.add_argument("--budget", type=float, default=None, help="seconds the probe may take, its workers sharing what recording leaves (default 85; --smoke 600)")
    ap.add_argument("--smoke", action="store_true", help="the probe's logic on the CPU at a tiny shape (no findings)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--shapes", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--part", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--reductions", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker is not None:
        worker(a.shapes, a.worker.split(","), a.part, a.reductions)
        return 0
    if not a.smoke and not torch.cuda.is_available():
        print("gemm_batch_probe needs CUDA (--smoke runs its logic on the CPU)", file=sys.stderr)
        return 2
    out_dir = a.out or Path(os.environ.get("OUT") or HERE / "results")
    out_dir.mkdir(parents=True, exist_ok=True)
    budget = a.budget if a.budget is not None else 600.0 if a.smoke else 85.0
    t0 = time.time()
    plan = {"device": "cpu", **{k: SMOKE[k] for k in ("ps", "timed_ps")}} if a.smoke else {"device": "cuda", "ps": PS, "timed_ps": TIMED_PS}
    batches, extra = (SMOKE["batches"], SMOKE["overrides"]) if a.smoke else (BATCHES, [])
    tiles = SMOKE["tiles"] if a.smoke else TILES
    shapes_path = out_dir / "gemm_batch_probe_shapes.json"
    shapes_path.write_text(json.dumps({"plan": plan, "shapes": [learner_shapes(b, extra) for b in batches]}))
    print(f"recorded the products and reductions of one iteration at batch {batches} in {time.time() - t0:.1f} s", flush=True)
    in_process = ["default", *([] if a.smoke else ["cublaslt"]), *(f"tile{g}" for g in tiles)]
    jobs = [(in_process, {}, True, FIRST_WORKER_SHARE)] + ([] if a.smoke else [(list(OWN_PROCESS), NO_WORKSPACE, False, 1.0)])
    merged: dict = {"variants": {}, "reductions": {}, "workers": []}
    for i, (variants, env, reductions, share) in enumerate(jobs):
        part = out_dir / f"gemm_batch_probe_part{i}.json"
        args = ["--worker", ",".join(variants), "--shapes", str(shapes_path), "--part", str(part), *(["--reductions"] if reductions else [])]
        started = time.time()
        timeout = max(5.0, (budget - (started - t0)) * share)
        try:
            done = _spawn(args, env, timeout)
            status = "done" if done.returncode == 0 else f"failed (status {done.returncode}): {done.stderr[-2000:]}"
        except subprocess.TimeoutExpired:
            status = f"stopped at its {timeout:.0f} s limit (what it finished is kept)"
        if not part.exists():
            print(f"worker {variants} {status}; no results", flush=True)
            continue
        got = json.loads(part.read_text())
        part.unlink()
        merged["variants"].update(got["variants"])
        merged["reductions"].update(got["reductions"])
        merged["workers"].append({"variants": variants, "env": env or None, "cublas_workspace_config": got["cublas_workspace_config"],
                                  "status": status, "seconds": round(time.time() - started, 1)})  # fmt: skip
        print(f"worker {variants} (CUBLAS_WORKSPACE_CONFIG={got['cublas_workspace_config']}): {status}, {time.time() - started:.1f} s", flush=True)
    shapes_path.unlink()
    table, advice = report(merged, plan)
    print(f"\nrecommendation: {advice}")
    merged.update({
        "benchmark": "gemm_batch_probe", "smoke": a.smoke,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name() if plan["device"] == "cuda" else "cpu",
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "command": "python " + " ".join(shlex.quote(x) for x in sys.argv),
        "plan": plan, "members_checked": "0, 5 and the last, each against itself alone", "table": table,
        "recommendation": advice, "seconds": round(time.time() - t0, 1),
    })  # fmt: skip
    out = out_dir / "gemm_batch_probe.json"
    out.write_text(json.dumps(merged, indent=1))
    print(f"wrote {out} ({time.time() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
