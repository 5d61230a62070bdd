"""The matmul floor of a training iteration (issue 22, item 5): the iteration's matrix products
alone, at the iteration's own shapes and layouts, timed in one CUDA graph.

How the products are found, not assumed: one eager iteration of the real learner (the
train_step benchmark's configuration, or the moonshot trial's) runs under a TorchDispatchMode
that records every matrix product it dispatches (mm, bmm, baddbmm, addmm; the backward's too:
autograd's device threads inherit the mode), with each operand's shape, strides and dtype, at
the precision of the row: products are recorded once from a float32 learner (fp32 and tf32
rows) and once from a bf16 one (autocast's operands), so each precision's floor is its own
iteration's products in their own dtypes. Matrix-vector products (the spectral
norm's power iteration, m or n = 1) are counted apart and left out of the floor: they are
memory-bound and no matmul precision changes them; so are the outer products (k = 1) of the
spectral norm's sigma in the backward. The floor is then those products on fresh
random operands laid out with the recorded strides (a transposed operand stays transposed),
captured once in a CUDA graph and replayed:

  fp32: float32 operands, float32 matmul precision "highest" (no tensor cores);
  tf32: float32 operands, precision "high" (TF32 tensor cores where cuBLAS takes them);
  bf16: the bf16 learner's products in their recorded dtypes (what autocast hands cuBLAS).

pad8 rows (tf32 and bf16): the same products with every matrix dimension rounded up to a multiple
of 8 and contiguous operands: what padding atoms (51), sub-actions x atoms (153), the
observation (33) and the predictor input (262) to aligned widths would buy, since cuBLAS's
tensor-core kernels want 16-byte-aligned leading dimensions.

Member blocks (tune_gems.model.layers): with several arms (or folds) a learner runs every
matmul of a layer once per arm's block of members, so the recorded products are those calls (P
= 768 as 12 arms of 64 is recorded at P = 768: each product 12 times at the shapes of P = 64;
the moonshot trial, 3 arms x 64 at batch 128, from benchmarks/moonshot.yaml's own config).

Each configuration's iteration time (`--train-step`, the JSON of benchmarks/train_step.py,
rows matched on P, precision, batch and arms, and the moonshot case on its own) is printed as
a multiple of its floor.

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
    baddbmm / addmm, as aten takes them), their dtype, and whether autograd's backward ran it."""

    op: str
    operands: tuple[Operand, ...]
    dtype: str = "float32"
    phase: str = "forward"

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

    return Product(product.op, tuple(pad(o) for o in product.operands), product.dtype, product.phase)


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
            phase = "backward" if torch._C._current_graph_task_id() != -1 else "forward"
            operands = tuple(Operand(tuple(t.shape), tuple(t.stride())) for t in tensors)
            self.products.append(Product(name, operands, str(tensors[-1].dtype).removeprefix("torch."), phase))
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


def build_step(products: list[Product], dtype: torch.dtype | None, device: torch.device, repeat: int = 1):
    """A function running `products` (each `repeat` times, on its own operands; in `dtype`, or
    each in its recorded dtype when None): the body of the graph that the floor times."""
    gen = torch.Generator(device=device).manual_seed(0)
    calls = []
    for _ in range(repeat):
        for p in products:
            ops = [strided_random(o, dtype or getattr(torch, p.dtype), device, gen) for o in p.operands]
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


def learner_for(P: int, batch: int, device: str, arms: int = 1, precision: str = "tf32", moonshot: bool = False):
    """A prefilled learner of the train_step configuration (P members as `arms` arms of P /
    arms seeds, this batch, this precision), or of the moonshot trial's (its own P and batch)."""
    from tune_gems.config.load import load_config
    from tune_gems.trainer.trainer import Trainer

    kernels = "cuda" if device == "cuda" else "reference"
    if moonshot:
        cfg = train_step.moonshot_config(precision, graph=False, kernels=kernels)
    else:
        overrides = [*train_step.BASE, *train_step.GEMS["measure"], f"trainer.population={P // arms}", "trainer.graph=off"]
        overrides = [o for o in overrides if not o.startswith(("device=", "trainer.batch_size="))]
        overrides += [f"device={device}", f"trainer.batch_size={batch}", f"kernels={kernels}", f"trainer.precision={precision}",
                      *train_step.arms_overrides(arms)]  # fmt: skip
        cfg = load_config(None, overrides)
    trainer = Trainer(cfg, log=None)
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


CASES = (  # (label, seeds per arm, batch, arms, the moonshot trial's config)
    ("P=1", 1, 256, 1, False),
    ("P=64", 64, 256, 1, False),
    ("P=256", 256, 256, 1, False),
    ("moonshot 3x64", 64, 128, 3, True),
    ("P=768 as 12x64", 64, 128, 12, False),
)
RECORDED_AS = {"fp32": "tf32", "tf32": "tf32", "bf16": "bf16", "tf32-pad8": "tf32", "bf16-pad8": "bf16"}
"""The learner precision whose products a row times (fp32 and tf32 dispatch the same products)."""


def tflops(gflop: float, us: float) -> float:
    """Achieved TFLOP/s of `gflop` GFLOP done in `us` microseconds (GFLOP/us is PFLOP/s)."""
    return gflop / us * 1e3


def iteration_us(train_rows: list[dict], P: int, precision: str, batch: int, blocks: int, case: str | None = None) -> float | None:
    """The graphed, gems-measured iteration time of a train_step row matching the case (P seeds
    per arm, `blocks` arms; `case`: train_step's row kind, "moonshot" or "train_step")."""
    for r in train_rows:
        if (r.get("mode") == "graph" and r.get("gems") == "measure" and r["precision"] == precision
                and r["P"] == P * blocks and r.get("batch", 256) == batch and r.get("blocks", 1) == blocks
                and (case is None or r.get("case", "train_step") == case)):
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
    for label, seeds, batch, arms, moonshot in CASES:
        P = seeds * arms
        for prec in PRECISIONS:
            key = (label, RECORDED_AS[prec])
            if key not in recorded:
                learner = learner_for(P, batch, "cuda", arms=arms, precision=RECORDED_AS[prec], moonshot=moonshot)
                recorded[key] = record_products(learner)
                del learner
                torch.cuda.empty_cache()
            products = [p for p in recorded[key] if not p.is_matrix_vector]
            info = summarise(recorded[key])
            timed = [padded(p) for p in products] if prec.endswith("pad8") else products
            step = build_step(timed, torch.float32 if RECORDED_AS[prec] == "tf32" else None, device)
            us = time_graph(step, FLOAT32_PRECISION[prec], a.warmup, a.reps, a.rounds)
            del step
            it = iteration_us(train_rows, seeds, prec.removesuffix("-pad8"), batch, arms, "moonshot" if moonshot else None)
            row = {"case": label, "P": P, "batch": batch, "blocks": arms, "precision": prec,
                   "products": info["products"], "gflop": info["gflop"], "floor_us": round(us, 1),
                   "tflops": round(tflops(info["gflop"], us), 1), "iter_us": it,
                   "iter_over_floor": round(it / us, 2) if it else None}  # fmt: skip
            rows.append(row)
            ratio = f"{row['iter_over_floor']:>10.2f}" if it else f"{'-':>10}"
            iter_text = f"{it:>9.1f}" if it else f"{'-':>9}"
            print(f"{label:16} {prec:9} {row['products']:>8} {info['gflop']:>7.2f} {us:>9.1f} {row['tflops']:>8.1f} {iter_text} {ratio}", flush=True)
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
        "recorded": {f"{label} ({prec} learner)": summarise(v) for (label, prec), v in recorded.items()},
        "rows": rows,
    }, indent=2))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
