"""The matmul floor of a training iteration (issue 22, item 5): the iteration's matrix products
alone, at the iteration's own shapes and layouts, timed in one CUDA graph.

How the products are found, not assumed: one eager iteration of the real learner (the
train_step benchmark's configuration) runs under a TorchDispatchMode that records every matrix
product it dispatches (mm, bmm, baddbmm, addmm; the backward's too: autograd's device threads
inherit the mode), with each operand's shape and strides. Matrix-vector products (the spectral
norm's power iteration, m or n = 1) are counted apart and left out of the floor: they are
memory-bound and no matmul precision changes them; so are the outer products (k = 1) of the
spectral norm's sigma in the backward. The floor is then those products on fresh
random operands laid out with the recorded strides (a transposed operand stays transposed),
captured once in a CUDA graph and replayed:

  fp32: float32 operands, float32 matmul precision "highest" (no tensor cores);
  tf32: float32 operands, precision "high" (TF32 tensor cores where cuBLAS takes them);
  bf16: the operands cast to bfloat16 (what autocast hands cuBLAS).

pad8 rows (tf32 and bf16): the same products with every matrix dimension rounded up to a multiple
of 8 and contiguous operands: what padding atoms (51), sub-actions x atoms (153), the
observation (33) and the predictor input (262) to aligned widths would buy, since cuBLAS's
tensor-core kernels want 16-byte-aligned leading dimensions.

P=768 as 12 blocks: with several arms (or folds) every matmul of a layer runs once per block of
members with a single-arm run's shapes (tune_gems.model.layers, member blocks), so its floor is
the P=64 products at batch 128 replayed 12 times in the graph.

Each configuration's iteration time (`--train-step`, the JSON of benchmarks/train_step.py,
rows matched on P, precision, batch and blocks) is printed as a multiple of its floor.

    python benchmarks/matmul_floor.py [--train-step train_step.json] [--out matmul_floor.json]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import shlex
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_step  # noqa: E402 (a sibling script: its configuration is the floor's)

MATMUL_OPS = ("mm", "bmm", "baddbmm", "addmm")
PRECISIONS = ("fp32", "tf32", "bf16", "tf32-pad8", "bf16-pad8")
FLOAT32_PRECISION = {"fp32": "highest", "tf32": "high", "bf16": "highest", "tf32-pad8": "high", "bf16-pad8": "highest"}
ALIGN = 8
"""Elements a pad8 row rounds each matrix dimension up to (16 bytes of bf16)."""
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "matmul_floor.json"


@dataclass(frozen=True)
class Operand:
    shape: tuple[int, ...]
    stride: tuple[int, ...]


@dataclass(frozen=True)
class Product:
    """One recorded matrix product: the aten op and its tensor operands (the bias first for
    baddbmm / addmm, as aten takes them)."""

    op: str
    operands: tuple[Operand, ...]

    @property
    def mnk(self) -> tuple[int, int, int, int]:
        """(batch, m, n, k) of the product."""
        a, b = self.operands[-2].shape, self.operands[-1].shape
        batch = a[0] if len(a) == 3 else 1
        return batch, a[-2], b[-1], a[-1]

    @property
    def flops(self) -> int:
        batch, m, n, k = self.mnk
        return 2 * batch * m * n * k

    @property
    def is_matrix_vector(self) -> bool:
        """A matrix-vector or outer product (m, n or k = 1): memory-bound, no GEMM."""
        _, m, n, k = self.mnk
        return 1 in (m, n, k)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def padded(product: Product, align: int = ALIGN) -> Product:
    """The product with its matrix dimensions (the last two; a broadcast 1 stays 1) rounded up to
    a multiple of `align`, on contiguous operands."""

    def pad(o: Operand) -> Operand:
        shape = list(o.shape)
        for i in range(max(len(shape) - 2, 0), len(shape)):
            if shape[i] > 1:
                shape[i] = -(-shape[i] // align) * align
        return Operand(tuple(shape), contiguous_strides(tuple(shape)))

    return Product(product.op, tuple(pad(o) for o in product.operands))


class MatmulRecorder(TorchDispatchMode):
    """Records every matrix product dispatched while it is active (forward and backward)."""

    def __init__(self):
        super().__init__()
        self.products: list[Product] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else ""
        if name in MATMUL_OPS:
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            self.products.append(Product(name, tuple(Operand(tuple(t.shape), tuple(t.stride())) for t in tensors)))
        return func(*args, **kwargs)


def record_products(learner) -> list[Product]:
    """The matrix products of one eager iteration of `learner` (state advances by one step)."""
    recorder = MatmulRecorder()
    with recorder:
        learner.iteration()
    if learner.device.type == "cuda":
        torch.cuda.synchronize()
    return recorder.products


def strided_random(operand: Operand, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    """A fresh random tensor with the recorded shape and strides (a transposed or broadcast
    operand keeps its layout)."""
    span = 1 + sum((s - 1) * st for s, st in zip(operand.shape, operand.stride) if s > 0)
    base = torch.randn(span, generator=gen, device=device, dtype=torch.float32).to(dtype)
    return base.as_strided(operand.shape, operand.stride)


def build_step(products: list[Product], dtype: torch.dtype, device: torch.device, repeat: int = 1):
    """A function running `products` (each `repeat` times, on its own operands) into
    preallocated outputs: the body of the graph that the floor times."""
    gen = torch.Generator(device=device).manual_seed(0)
    calls = []
    for _ in range(repeat):
        for p in products:
            ops = [strided_random(o, dtype, device, gen) for o in p.operands]
            fn = getattr(torch, p.op)
            calls.append((fn, ops))

    def step():
        return [fn(*ops) for fn, ops in calls]

    return step


def time_graph(step, float32_precision: str, warmup: int, reps: int, rounds: int) -> float:
    """Median microseconds per replay of `step` captured (at this float32 matmul precision) in
    one CUDA graph."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(float32_precision)
    try:
        graph = train_step.capture_graph(step)
    finally:
        torch.set_float32_matmul_precision(previous)
    return train_step.median_us(graph.replay, warmup, reps, rounds)


def learner_for(P: int, batch: int, device: str):
    """A prefilled learner of the train_step configuration at population P and this batch."""
    from tune_gems.config.load import load_config
    from tune_gems.trainer.trainer import Trainer

    overrides = [*train_step.BASE, *train_step.GEMS["measure"], f"trainer.population={P}", "trainer.graph=off"]
    overrides = [o for o in overrides if not o.startswith(("device=", "trainer.batch_size="))]
    overrides += [f"device={device}", f"trainer.batch_size={batch}", f"kernels={'cuda' if device == 'cuda' else 'reference'}"]
    trainer = Trainer(load_config(None, overrides), log=None)
    trainer._prefill()
    return trainer.learner


def summarise(products: list[Product]) -> dict:
    """Counts of what the floor times (and leaves out)."""
    kept = [p for p in products if not p.is_matrix_vector]
    return {
        "products": len(kept),
        "matrix_vector_left_out": len(products) - len(kept),
        "gflop": round(sum(p.flops for p in kept) / 1e9, 3),
        "by_op": dict(Counter(p.op for p in kept)),
        "shapes": sorted({f"{p.op} b{p.mnk[0]} m{p.mnk[1]} n{p.mnk[2]} k{p.mnk[3]}" for p in kept}),
    }


CASES = (  # (label, P recorded, batch, blocks)
    ("P=1", 1, 256, 1),
    ("P=64", 64, 256, 1),
    ("P=256", 256, 256, 1),
    ("P=768 as 12x64", 64, 128, 12),
)


def tflops(gflop: float, us: float) -> float:
    """Achieved TFLOP/s of `gflop` GFLOP done in `us` microseconds (GFLOP/us is PFLOP/s)."""
    return gflop / us * 1e3


def iteration_us(train_rows: list[dict], P: int, precision: str, batch: int, blocks: int) -> float | None:
    """The graphed, gems-measured iteration time of a train_step row matching the case."""
    for r in train_rows:
        if (r.get("mode") == "graph" and r.get("gems") == "measure" and r["precision"] == precision
                and r["P"] == P * blocks and r.get("batch", 256) == batch and r.get("blocks", 1) == blocks):
            return r["iter_us"]
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--train-step", type=Path, default=None, help="train_step.py JSON for the iteration times")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("matmul_floor needs CUDA", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    train_rows = json.loads(a.train_step.read_text())["rows"] if a.train_step and a.train_step.exists() else []
    rows, recorded = [], {}
    print(f"{'case':16} {'prec':9} {'products':>8} {'GFLOP':>7} {'floor_us':>9} {'TFLOP/s':>8} {'iter_us':>9} {'iter/floor':>10}")
    for label, P, batch, blocks in CASES:
        if (P, batch) not in recorded:
            learner = learner_for(P, batch, "cuda")
            recorded[(P, batch)] = record_products(learner)
            del learner
            torch.cuda.empty_cache()
        products = [p for p in recorded[(P, batch)] if not p.is_matrix_vector]
        info = summarise(recorded[(P, batch)])
        for prec in PRECISIONS:
            dtype = torch.bfloat16 if prec.startswith("bf16") else torch.float32
            timed = [padded(p) for p in products] if prec.endswith("pad8") else products
            step = build_step(timed, dtype, device, repeat=blocks)
            us = time_graph(step, FLOAT32_PRECISION[prec], a.warmup, a.reps, a.rounds)
            del step
            it = iteration_us(train_rows, P, prec.removesuffix("-pad8"), batch, blocks)
            gflop = info["gflop"] * blocks
            row = {"case": label, "P": P * blocks, "batch": batch, "blocks": blocks, "precision": prec,
                   "products": info["products"] * blocks, "gflop": round(gflop, 3), "floor_us": round(us, 1),
                   "tflops": round(tflops(gflop, us), 1), "iter_us": it,
                   "iter_over_floor": round(it / us, 2) if it else None}  # fmt: skip
            rows.append(row)
            ratio = f"{row['iter_over_floor']:>10.2f}" if it else f"{'-':>10}"
            iter_text = f"{it:>9.1f}" if it else f"{'-':>9}"
            print(f"{label:16} {prec:9} {row['products']:>8} {gflop:>7.2f} {us:>9.1f} {row['tflops']:>8.1f} {iter_text} {ratio}", flush=True)
        torch.cuda.empty_cache()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({
        "benchmark": "matmul_floor",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "command": "python " + " ".join(shlex.quote(x) for x in sys.argv),
        "config": train_step.BASE,
        "recorded": {f"P={P} batch={b}": summarise(v) for (P, b), v in recorded.items()},
        "rows": rows,
    }, indent=2))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
