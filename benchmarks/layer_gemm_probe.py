"""The Triton layer kernels against torch's batched matmul, layer shape by layer shape, in launch
variants of the same kernels, with what each variant compiled to.

For the P=64 iteration of benchmarks/train_step.py and the moonshot trial's (benchmarks/moonshot.yaml),
every layer product one training iteration launches is recorded from a real learner (its layer,
kind, rows, inputs, outputs, ReLU and how often it runs), then timed on fresh operands, each op
of it (forward, input gradient, weight gradient) through the real launch code
(tune_gems.ops.triton_layers.forward, input_grad, weight_grads) under each variant, and against
torch's `baddbmm` / `bmm` at the same precision (the torch path's cuBLAS products). A variant is
a launch policy (tile, warps, pipeline stages, grid order: `Tiles`) and a parameter layout:
"unaligned" (the flat matrix without alignment gaps, W stored [in, out], as before), "aligned"
(each parameter at a multiple of PARAMETER_ALIGN columns, tune_gems.model.flat.column_layout) or
"aligned-t" (aligned, W stored [out, in]: the layout of the Triton path, the forward's B operand
K-major, as tf32 wgmma wants it). Times are CUDA
events around a CUDA graph of `--reps` calls (the iteration runs as a graph: no launch overhead),
the median of `--rounds` replays; TF/s = 2 G N K O / time. Each launched kernel is described
(benchmarks/triton_inspect.py: dot instruction and precision, registers, spills, wgmma
serialisation, copy widths), so no variant runs "ieee" or spilled without it showing.

    python benchmarks/layer_gemm_probe.py [--configs p64,moonshot] [--precisions tf32,bf16]
        [--variants before,new,...] [--budget 240] [--out layer_gemm_probe.json]
    python benchmarks/layer_gemm_probe.py --smoke          # CPU, Triton's interpreter, tiny shapes
    python benchmarks/layer_gemm_probe.py --compile-only   # CPU: every variant compiled for sm_90

`--smoke` runs the same recording and launch code on Triton's CPU interpreter at a tiny config and
checks every variant's values against the float64 products; `--compile-only` compiles every
variant of every recorded product for sm_90 on the CPU (no GPU: the kernels are stubbed while
the learner records) and prints the inspection table. `--budget` bounds the run: variants are
timed in their listed order (the torch products, "before", "new" and "default" first) and what is left when
the budget runs out is marked skipped. The table and JSON go to `--out` (default
$OUT/layer_gemm_probe.json when $OUT is set).
"""

from __future__ import annotations

import os
import sys

if "--smoke" in sys.argv:  # Triton reads it when the kernels are defined, i.e. at import
    os.environ["TRITON_INTERPRET"] = "1"

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from dataclasses import asdict, dataclass, replace  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_step  # noqa: E402  (the benchmark's configs: the same iteration)

from tune_gems.config.load import load_config  # noqa: E402
from tune_gems.model.flat import column_layout  # noqa: E402
from tune_gems.model.layers import NoisyPopLinear  # noqa: E402
from tune_gems.ops import triton_layer_kernels as kernels  # noqa: E402
from tune_gems.ops import triton_layers as tl_layers  # noqa: E402
from tune_gems.ops.triton_layers import Tiles, _fit  # noqa: E402
from tune_gems.trainer.trainer import Trainer  # noqa: E402

OPS = ("fwd", "dx", "dw", "sn")
"""The forward, the input and weight gradients, and spectral norm's power iteration and sigma
(a spectral-norm layer's `spectral_scale`, timed once per layer)."""
LAUNCHED = ("_rows_kernel", "_weight_grad_kernel", "_sigma_grad_kernel", "_spectral_kernel")
SMOKE_CONFIG = [
    "trainer.population=2", "trainer.batch_size=8", "trainer.n_envs=2", "trainer.replay_capacity=64",
    "trainer.learning_starts=8", "env.window=8", "env.episode_length=32", "model.hidden=16", "model.stream_hidden=8",
    "model.atoms=11", "model.predictor_hidden=16", "data.synthetic.n=900", "device=cpu",
]  # fmt: skip
SHAPE_NEUTRAL = ["trainer.replay_capacity=4096", "trainer.learning_starts=64", "kernels=reference"]
"""Overrides that change no layer product's shape (the replay's size and its prefill, the gems'
plain-torch ops: no extension build), so the recording learner starts in seconds."""
H100_SHARED = 232448
"""Bytes of shared memory a program may use on sm_90 (a variant asking more cannot launch)."""


# -- variants: launch policies of the real kernels, and parameter layouts -----------------------------


def fixed(rows: int, cols: int, inner: int, warps: int, stages: int):
    """A policy of one tile (capped by the product's shape, as `tiles` caps its own)."""

    def policy(r: int, i: int, c: int) -> Tiles:
        return Tiles(_fit(r, rows), _fit(c, cols), _fit(i, inner), warps, stages)

    return policy


@dataclass(frozen=True)
class Variant:
    name: str
    layout: str  # unaligned | aligned | aligned-t
    policy: object  # (rows, inner, cols) -> Tiles; None: the kernels' own, per op
    precisions: tuple[str, ...] = ("tf32",)

    def tiles(self, op: str):
        """The policy of `op` (fwd, dx, dw)."""
        if self.policy is not None:
            return self.policy
        return tl_layers.input_grad_tiles if op == "dx" else tl_layers.tiles


BEFORE = fixed(64, 64, 32, 4, 3)
"""The kernels' tiles before this probe: 64 x 64 x 32, 4 warps, 3 stages (on the unaligned layout; the grid's
member-fastest order and the possibly empty K-loop it also had are gone from the kernels)."""
VARIANTS = [
    Variant("before", "unaligned", BEFORE, ("tf32", "bf16")),
    Variant("new", "aligned", tl_layers.input_grad_tiles, ("tf32", "bf16")),
    Variant("default", "aligned-t", None, ("tf32", "bf16")),
    Variant("64x64w4s3", "aligned-t", fixed(64, 64, 32, 4, 3)),
    Variant("128x128w8s4", "aligned-t", fixed(128, 128, 32, 8, 4)),
    Variant("128x256w8s3", "aligned-t", fixed(128, 256, 32, 8, 3)),
    Variant("128x64w4s4", "aligned-t", fixed(128, 64, 32, 4, 4)),
    Variant("64x128w4s4", "aligned-t", fixed(64, 128, 32, 4, 4)),
]
"""In the order they are timed (the budget cuts from the end). "before": the kernels before the
probe; "new": the probe's first default (W [in, out], aligned, tiles of up to 128 x 128 with 8
warps, groups on the grid's slow axis: tl_layers.input_grad_tiles for every op); "default": the
kernels as the Triton path runs them (W stored [out, in], tl_layers.tiles for the forward and
dW, input_grad_tiles for dx); then fixed tiles of the Hopper recipe on that layout, one policy
for every op, for the per-product table that chooses the tiles."""


# -- recording the products of one iteration ---------------------------------------------------------


@dataclass(frozen=True)
class Product:
    """One layer product of the iteration at one row count; `fwd`, `dx`, `dw`: how often each of
    its ops runs per iteration (the backward ones where the product had autograd)."""

    config: str
    layer: str
    kind: str  # plain | spectral | noisy
    P: int
    reps: int
    N: int
    K: int
    O: int
    relu: bool
    x_strides: tuple  # the input's strides as the learner passes it (a view may be strided)
    sizes: tuple  # per-member sizes of every parameter of the flat matrix, in order
    roles: tuple  # (role, index into sizes) of this layer's parameters
    fwd: int = 0  # launches of each op per iteration
    dx: int = 0
    dw: int = 0
    sn: int = 0  # spectral_scale calls on this layer's weight (counted on its product with the most rows)

    @property
    def G(self) -> int:
        return self.P * self.reps

    def flops(self, op: str = "fwd") -> float:
        """A product's multiply-adds x 2; spectral norm's three matrix-vector products."""
        return 2.0 * self.G * self.K * self.O * (3 if op == "sn" else self.N)

    def key(self) -> tuple:
        return (self.config, self.layer, self.N, self.relu)


def _kind(lw) -> str:
    return "noisy" if lw.noisy else "spectral" if lw.scaled else "plain"


def record_products(config: str, cfg, stub: bool) -> list[Product]:
    """The layer products of one iteration of `cfg`'s learner (after a short prefill), from the
    learner's own launch calls; `stub`: the kernels do not run (shapes only, on the CPU)."""
    with _stubbed_kernels(stub):
        learner = Trainer(cfg, log=None).learner
    flat = learner.online_flat
    names = {}
    for net in (learner.online, learner.target):
        for name, layer in net.weight_layers().items():
            for role in ("weight", "mu_w"):
                if hasattr(layer, role):
                    names[id(getattr(layer, role))] = (name, layer)
    index = {}
    for flat_ in (learner.online_flat, learner.target_flat):
        index.update({id(p): i for i, p in enumerate(flat_.params)})
    found: dict[tuple, Product] = {}
    real_rows, real_grads = tl_layers._rows_product, tl_layers.weight_grads

    def note(lw, x, relu, op: str):
        name, layer = names[id(lw.weight)]
        roles = tuple((r, index[id(getattr(layer, r))]) for r in ("weight", "bias", "mu_w", "mu_b", "sigma_w", "sigma_b")
                      if isinstance(getattr(layer, r, None), torch.nn.Parameter))  # fmt: skip
        P = lw.weight.shape[0]
        K, O = lw.shape
        p = Product(config, name, _kind(lw), P, lw.reps, x.shape[1], K, O, relu, tuple(x.stride()), tuple(flat.sizes), roles)
        p = found.get(p.key(), p)  # a backward op joins its forward's product (same layer, rows, ReLU)
        found[p.key()] = replace(p, **{op: getattr(p, op) + 1})

    def rows(a, y, lw, backward, relu, dot, policy=tl_layers.tiles):
        note(lw, a, relu, "dx" if backward else "fwd")
        return real_rows(a, y, lw, backward, relu, dot, policy)

    def grads(x, dy, y, lw, relu, dot, direct, policy=tl_layers.tiles):
        note(lw, x, relu, "dw")
        return real_grads(x, dy, y, lw, relu, dot, direct, policy)

    spectral: dict = {}
    real_spectral = tl_layers.spectral_scale  # the layers call it through the strategy (TritonProducts)

    def scale(weight, *args, **kwargs):
        spectral[id(weight)] = spectral.get(id(weight), 0) + 1
        return real_spectral(weight, *args, **kwargs)

    with _stubbed_kernels(stub):
        learner.reset_envs()
        for _ in range(learner.replay.min_fill() // cfg.trainer.n_envs + 1):
            learner.collect()
        tl_layers._rows_product, tl_layers.weight_grads, tl_layers.TritonProducts.spectral_scale = rows, grads, staticmethod(scale)
        try:
            learner.iteration()
        finally:
            tl_layers._rows_product, tl_layers.weight_grads = real_rows, real_grads
            tl_layers.TritonProducts.spectral_scale = staticmethod(real_spectral)
    for weight_id, calls in spectral.items():
        name = names[weight_id][0]
        widest = max((p for p in found.values() if p.layer == name), key=lambda p: p.N)
        found[widest.key()] = replace(widest, sn=widest.sn + calls)
    return sorted(found.values(), key=lambda p: (-p.flops() * (p.fwd + p.dx + p.dw), p.layer))


@contextlib.contextmanager
def _stubbed_kernels(stub: bool):
    """With `stub`, every Triton kernel of the layers only records nothing (the CPU records shapes
    at the real config without running the interpreter)."""
    if not stub:
        yield
        return
    names = [n for n in dir(kernels) if n.endswith("_kernel")]
    saved = {n: getattr(kernels, n) for n in names}
    interpreted = kernels.INTERPRETED

    class Stub:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: None

    try:
        for n in names:
            setattr(kernels, n, Stub())
        kernels.INTERPRETED = True  # the CPU tensors pass the device check
        yield
    finally:
        for n, fn in saved.items():
            setattr(kernels, n, fn)
        kernels.INTERPRETED = interpreted


def configs(names: list[str], device: str, precision: str) -> dict:
    out = {}
    for name in names:
        if name == "p64":
            out[name] = load_config(None, [*[o for o in train_step.BASE if not o.startswith("device=")], *train_step.GEMS["measure"],
                                           f"device={device}", "trainer.population=64", "model.layer_kernel=triton",
                                           f"trainer.precision={precision}", "trainer.graph=off", *SHAPE_NEUTRAL])  # fmt: skip
        elif name == "moonshot":
            cfg = train_step.moonshot_config(precision, False, "reference", device=device, layer_kernel="triton")
            out[name] = cfg.model_copy(update={"trainer": cfg.trainer.model_copy(update={"replay_capacity": 4096, "learning_starts": 64})})
        elif name == "smoke":
            out[name] = load_config(None, [*SMOKE_CONFIG, "model.layer_kernel=triton"])
        else:
            raise SystemExit(f"--configs: unknown config {name!r} (p64, moonshot)")
    return out


# -- operands in a layout ------------------------------------------------------------------------------


class Operands:
    """Fresh operands of one product in one parameter layout: the layer's parameters as views of a
    flat matrix laid out as the learner lays it out (`column_layout`), their gradient slots in a
    matrix of the same layout, noise factors, spectral scale, inputs and upstream gradients."""

    def __init__(self, p: Product, layout: str, device: str, seed: int = 0):
        gen = torch.Generator(device=device).manual_seed(seed)
        align = 1 if layout == "unaligned" else tl_layers.PARAMETER_ALIGN
        offsets, width = column_layout(p.sizes, align)
        P, reps, K, O, G = p.P, p.reps, p.K, p.O, p.G

        def randn(*shape):
            return torch.randn(*shape, generator=gen, device=device)

        self.data = randn(P, width) / K**0.5
        self.grad = torch.zeros(P, width, device=device)
        params = {}
        for role, i in p.roles:
            shape = (P, reps, K, O) if role in ("weight", "mu_w", "sigma_w") else (P, reps, 1, O)
            views = []
            for m in (self.data, self.grad):
                cols = m[:, offsets[i] : offsets[i] + p.sizes[i]]
                if layout == "aligned-t" and shape[2] == K:
                    views.append(cols.view(P, reps, O, K).transpose(-1, -2))  # W stored [out, in]
                else:
                    views.append(cols.view(shape))
            params[role] = views
        for view, slot in params.values():
            view.grad_slot = slot
        if p.kind == "noisy":
            self.lw = tl_layers.LayerWeights(params["mu_w"][0], params["mu_b"][0], reps, params["sigma_w"][0], params["sigma_b"][0],
                                             NoisyPopLinear.scale_noise(randn(P, reps, K, 1)), NoisyPopLinear.scale_noise(randn(P, reps, 1, O)))  # fmt: skip
        elif p.kind == "spectral":
            s = 0.5 + torch.rand(G, generator=gen, device=device)
            self.lw = tl_layers.LayerWeights(params["weight"][0], params["bias"][0], reps, scale=torch.stack([s, -s * s], 1),
                                             sn_u=randn(G, O), sn_v=randn(G, K))  # fmt: skip
        else:
            self.lw = tl_layers.LayerWeights(params["weight"][0], params["bias"][0], reps)
        span = 1 + sum((n - 1) * s for n, s in zip((G, p.N, K), p.x_strides))
        self.x = torch.as_strided(randn(span), (G, p.N, K), p.x_strides)
        self.dy = randn(G, p.N, O)
        self.y = randn(G, p.N, O)  # the forward's output: its sign is the ReLU's mask

    def effective(self, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(W_eff [G, K, O] contiguous, b_eff [G, 1, O], s [G, 1, 1]): what the torch path
        materialises, in `dtype`."""
        lw = self.lw
        G = self.x.shape[0]
        K, O = lw.shape
        w, b = lw.weight.to(dtype), lw.bias.to(dtype)
        if lw.noisy:
            w = w + lw.weight_sigma.to(dtype) * (lw.f_in.to(dtype) * lw.f_out.to(dtype))
            b = b + lw.bias_sigma.to(dtype) * lw.f_out.to(dtype)
        s = lw.scale[:, :1].to(dtype).view(G, 1, 1) if lw.scaled else torch.ones(G, 1, 1, dtype=dtype, device=w.device)
        return w.reshape(G, K, O).contiguous(), b.reshape(G, 1, O), s


def triton_call(op: str, ops: Operands, relu: bool, dot: str, policy):
    lw = ops.lw
    if op == "sn":  # the train weights' call: one power iteration, then sigma
        on = torch.ones(ops.x.shape[0], dtype=torch.bool, device=ops.x.device)
        return lambda: tl_layers.spectral_scale(lw.weight, lw.reps, lw.sn_u, lw.sn_v, on, True)
    if op == "fwd":
        return lambda: tl_layers.forward(ops.x, lw, relu, dot, policy)
    if op == "dx":
        return lambda: tl_layers.input_grad(ops.dy, ops.y, lw, relu, dot, policy)
    return lambda: tl_layers.weight_grads(ops.x, ops.dy, ops.y, lw, relu, dot, True, policy)


def torch_call(op: str, ops: Operands, precision: str):
    """The torch path's product of `op` (cuBLAS): baddbmm on the effective weight, the input
    gradient and the weight gradient as bmm with transposed views, in bf16 on bf16 copies."""
    if op == "sn":  # tune_gems.model.layers.PopLinear's power iteration and sigma (run outside autocast)
        w = ops.lw.weight.reshape(ops.x.shape[0], *ops.lw.shape)
        u, v = ops.lw.sn_u.clone(), ops.lw.sn_v.clone()

        def power_iteration():
            v.copy_(torch.nn.functional.normalize(torch.bmm(w, u.unsqueeze(-1)).squeeze(-1), dim=-1, eps=tl_layers.NORM_EPS))
            u.copy_(torch.nn.functional.normalize(torch.bmm(v.unsqueeze(1), w).squeeze(1), dim=-1, eps=tl_layers.NORM_EPS))
            return (v * torch.bmm(w, u.unsqueeze(-1)).squeeze(-1)).sum(-1)

        return power_iteration
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    w, b, _ = ops.effective()
    x, dy, w, b = (t.to(dtype) for t in (ops.x, ops.dy, w, b))
    if op == "fwd":
        return lambda: torch.baddbmm(b, x, w)
    if op == "dx":
        return lambda: torch.bmm(dy, w.transpose(1, 2))
    return lambda: torch.bmm(x.transpose(1, 2), dy)


@contextlib.contextmanager
def precision_context(precision: str):
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest" if precision == "fp32" else "high")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


DOT = {"tf32": "tf32", "bf16": "bf16", "fp32": "ieee"}


# -- timing and inspection ---------------------------------------------------------------------------


def time_us(call, reps: int, rounds: int) -> float:
    """Median over `rounds` replays of a CUDA graph of `reps` calls, per call (us); on the CPU
    one call's wall time (the smoke run: the number means nothing there)."""
    if not torch.cuda.is_available():
        t0 = time.perf_counter()
        call()
        return (time.perf_counter() - t0) * 1e6
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()  # compiles, outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            call()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / reps)
    del graph
    return statistics.median(times)


class KernelLog:
    """The compiled kernels each launch returns (the JIT's CompiledKernel), while active."""

    def __init__(self):
        self.kernels: list = []
        self._saved = {}

    def __enter__(self):
        for name in LAUNCHED:
            fn = getattr(kernels, name)
            self._saved[name] = fn
            setattr(kernels, name, _Logged(fn, self.kernels))
        return self

    def __exit__(self, *exc):
        for name, fn in self._saved.items():
            setattr(kernels, name, fn)
        return False


class _Logged:
    def __init__(self, fn, sink):
        self.fn, self.sink = fn, sink

    def __getitem__(self, grid):
        launch = self.fn[grid]

        def run(*args, **kwargs):
            compiled = launch(*args, **kwargs)
            if compiled is not None:
                self.sink.append(compiled)
            return compiled

        return run


def describe_all(compiled: dict, threads: int) -> dict:
    """hash -> description of each compiled kernel (ptxas runs once per kernel, in threads)."""
    from concurrent.futures import ThreadPoolExecutor

    from triton_inspect import describe

    def one(item):
        h, k = item
        try:
            return h, {"kernel": k.name, **describe(k)}
        except Exception as e:  # an inspection failure must not cost the timings
            return h, {"kernel": k.name, "dot": "?", "regs": -1, "spills": -1, "wgmma_serialized": False, "copies": {}, "shared": 0,
                       "error": f"{type(e).__name__}: {e}"}  # fmt: skip

    with ThreadPoolExecutor(max(1, threads)) as pool:
        return dict(pool.map(one, compiled.items()))


@contextlib.contextmanager
def compiled_only():
    """Launches of the layer kernels only compile them (JITFunction.warmup), for a compile pass."""
    saved = {n: getattr(kernels, n) for n in LAUNCHED}

    class Warm:
        def __init__(self, fn):
            self.fn = fn

        def __getitem__(self, grid):
            return lambda *args, **kwargs: self.fn.warmup(*args, grid=grid, **kwargs)

    try:
        for n, fn in saved.items():
            setattr(kernels, n, Warm(fn))
        yield
    finally:
        for n, fn in saved.items():
            setattr(kernels, n, fn)


def precompile(jobs, products, device: str, processes: int, deadline: float) -> None:
    """Compile every kernel the timing will launch, in `processes` worker processes at once (each
    compiles its jobs' kernels into Triton's cache on disk, where this process's launches find
    them), so the budget goes to timing, not to compiling one kernel after another; a worker's
    crash costs only its compiles. Whatever is not compiled a minute before the deadline is left
    to compile at its first launch."""
    import multiprocessing

    tasks = [(variant.name, prec, products, device) for _, variant, prec in jobs if variant is not None]
    pool = multiprocessing.get_context("spawn").Pool(min(processes, len(tasks)))
    try:
        pool.map_async(_compile_job, tasks, chunksize=1).get(timeout=max(1.0, deadline - 60.0 - time.monotonic()))
    finally:
        pool.terminate()


def _compile_job(task) -> None:
    """One variant x precision's kernels, compiled (a worker of `precompile`)."""
    name, prec, products, device = task
    variant = next(v for v in VARIANTS if v.name == name)
    with compiled_only(), precision_context(prec):
        for p in products:
            ops = Operands(p, variant.layout, device)
            for op in (o for o in OPS if getattr(p, o)):
                try:
                    triton_call(op, ops, p.relu, DOT[prec], variant.tiles(op))()
                except Exception:  # the timing pass reports it
                    pass


# -- the float64 check of the smoke run -------------------------------------------------------------


def reference(op: str, ops: Operands, relu: bool) -> list[torch.Tensor]:
    """The op's outputs in float64 from the same operands."""
    if op == "sn":  # the scale (1/sigma, -1/sigma^2) after one power iteration from the state the call started from
        w = ops.lw.weight.double().reshape(ops.x.shape[0], *ops.lw.shape)
        u, v = ops.sn_start
        v = torch.nn.functional.normalize(torch.bmm(w, u.unsqueeze(-1)).squeeze(-1), dim=-1, eps=tl_layers.NORM_EPS)
        u = torch.nn.functional.normalize(torch.bmm(v.unsqueeze(1), w).squeeze(1), dim=-1, eps=tl_layers.NORM_EPS)
        sigma = (v * torch.bmm(w, u.unsqueeze(-1)).squeeze(-1)).sum(-1)
        return [torch.stack([1 / sigma, -1 / sigma**2], 1)]
    w, b, s = ops.effective(torch.float64)
    x, dy, y = ops.x.double(), ops.dy.double(), ops.y.double()
    lw = ops.lw
    if op == "fwd":
        pre = torch.baddbmm(b, x, w) if not lw.scaled else x @ w * s + b
        return [pre.clamp_min(0.0) if relu else pre]
    d = dy * (y > 0) if relu else dy
    if op == "dx":
        return [d @ w.transpose(1, 2) * s]
    g = x.transpose(1, 2) @ d  # [G, K, O]
    G, K, O = g.shape
    P, reps = lw.weight.shape[:2]
    db = d.sum(1, keepdim=True)
    if lw.noisy:
        fifo = (lw.f_in.double() * lw.f_out.double()).reshape(G, K, O)
        return [g, g * fifo, db, db * lw.f_out.double().reshape(G, 1, O)]
    dw = g * s
    if lw.scaled:
        raw = lw.weight.double().reshape(G, K, O)
        inner = (g * raw).sum(dim=(1, 2)).view(G, 1, 1)
        dw = dw + inner * lw.scale[:, 1].double().view(G, 1, 1) * (lw.sn_v.double()[:, :, None] * lw.sn_u.double()[:, None, :])
    return [dw, db]


def check_values(op: str, ops: Operands, relu: bool, got, what: str) -> float:
    """The largest error of `got` relative to the reference's scale (fails above 1e-3: tf32's
    operand rounding is 2^-11 of each term)."""
    want = reference(op, ops, relu)
    got = [got] if isinstance(got, torch.Tensor) else [t for t in got if t is not None]
    worst = 0.0
    for g, r in zip(got, want):
        scale = r.abs().max().item() + 1e-12
        worst = max(worst, (g.double().reshape(r.shape) - r).abs().max().item() / scale)
    if worst > 1e-3:
        raise AssertionError(f"{what}: values differ from the float64 products by {worst:.2e} of their scale")
    return worst


# -- the run -----------------------------------------------------------------------------------------


def run_probe(products: list[Product], variants: list[Variant], precisions: list[str], args, device: str, t0: float) -> list[dict]:
    rows = []
    deadline = t0 + args.budget - 20.0  # the inspection and the tables after the timing
    jobs = [("torch", None, prec) for prec in precisions]
    jobs += [("triton", v, prec) for v in variants for prec in precisions if prec in v.precisions]
    if device == "cuda" and args.compile_processes > 1:
        started = time.monotonic()
        try:
            precompile(jobs, products, device, args.compile_processes, deadline)
            print(f"compiled the variants in {time.monotonic() - started:.1f} s ({args.compile_processes} processes)", flush=True)
        except Exception as e:  # then each kernel compiles at its first launch
            print(f"the compile pass stopped ({type(e).__name__}: {e}); the rest compiles at first launch", flush=True)
    compiled: dict = {}
    cache: dict = {}
    for kind, variant, prec in jobs:
        layout = "unaligned" if variant is None else variant.layout
        for p in products:
            ops_key = (p.key(), layout)
            if ops_key not in cache:
                cache.clear()  # one product's operands at a time (they are large at P = 192)
                cache[ops_key] = Operands(p, layout, device)
            ops = cache[ops_key]
            for op in OPS:
                if getattr(p, op) == 0:
                    continue
                if op == "sn" and (prec != precisions[0] or (variant is not None and variant.name != "default")):
                    continue  # one kernel, no launch options, no dot: timed once
                row = {"config": p.config, "layer": p.layer, "kind": p.kind, "op": op, "N": p.N, "K": p.K, "O": p.O, "G": p.G,
                       "relu": p.relu, "per_iteration": getattr(p, op), "precision": prec,
                       "variant": "torch" if variant is None else variant.name, "layout": layout}  # fmt: skip
                if time.monotonic() > deadline:
                    rows.append({**row, "skipped": "budget"})
                    continue
                try:
                    with precision_context(prec):
                        if variant is None:
                            call = torch_call(op, ops, prec)
                            row["us"] = time_us(call, args.reps, args.rounds)
                        else:
                            call = triton_call(op, ops, p.relu, DOT[prec], variant.tiles(op))
                            if op == "sn" and ops.lw.sn_u is not None:
                                ops.sn_start = (ops.lw.sn_u.double().clone(), ops.lw.sn_v.double().clone())
                            with KernelLog() as log:
                                out = call()
                            if args.smoke:
                                row["max_rel_error"] = check_values(op, ops, p.relu, out, f"{p.layer} {op} {variant.name} {prec}")
                            row["kernels"] = [k.hash for k in log.kernels]
                            compiled.update({k.hash: k for k in log.kernels})
                            if op != "sn":
                                t = variant.tiles(op)(*((p.N, p.K, p.O) if op == "fwd" else (p.N, p.O, p.K) if op == "dx" else (p.K, p.N, p.O)))
                                row["tiles"] = asdict(t)
                            row["us"] = time_us(call, args.reps, args.rounds)
                    row["tflops"] = round(p.flops(op) / row["us"] / 1e6, 2)
                    row["us"] = round(row["us"], 2)
                except Exception as e:  # a variant that cannot launch (shared memory) is a result, not the end
                    if args.smoke:
                        raise
                    row["failed"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
                rows.append(row)
    described = describe_all(compiled, args.compile_processes)
    for r in rows:
        r["kernels"] = [described[h] for h in r.get("kernels", [])]
    return rows


def print_tables(rows: list[dict], variants: list[str], precisions: list[str]) -> dict:
    """Per product and op: TF/s of torch and of each variant; per config: the iteration's GEMM
    time (each op x its count per iteration) per variant, and its ratio to torch's."""
    summary = {}
    for prec in precisions:
        names = ["torch", *[v for v in variants if any(r["variant"] == v and r["precision"] == prec for r in rows)]]
        print(f"\n== {prec}: TF/s per product and op (sn: spectral norm's us per call; n: calls per iteration) ==")
        print(f"{'config':9s} {'layer':14s} {'op':3s} {'N x K x O':>14s} {'G':>5s} {'n':>2s} " + " ".join(f"{n[:12]:>12s}" for n in names))
        table: dict = {}
        for r in rows:
            if r["precision"] == prec:
                table.setdefault((r["config"], r["layer"], r["N"], r["op"]), {})[r["variant"]] = r
        totals: dict = {}
        for (config, layer, N, op), by in table.items():
            any_row = next(iter(by.values()))
            cells = []
            for n in names:
                r = by.get(n)
                counted = op != "sn"  # the totals are the products'; spectral norm's line stands alone
                if r is None or "tflops" not in r:
                    cells.append("skip" if r is not None and "skipped" in r else "fail" if r is not None else "-")
                    if counted:
                        totals.setdefault((config, n), [0.0, True])[1] = False
                    continue
                cells.append(f"{r['tflops']:.1f}" if counted else f"{r['us']:.0f}us")
                if counted:
                    t = totals.setdefault((config, n), [0.0, True])
                    t[0] += r["us"] * r["per_iteration"]
            shape = f"{N}x{any_row['K']}x{any_row['O']}"
            print(f"{config:9s} {layer:14s} {op:3s} {shape:>14s} {any_row['G']:>5d} {any_row['per_iteration']:>2d} " + " ".join(f"{c:>12s}" for c in cells))
        for config in sorted({c for c, _ in totals}):
            ref = totals.get((config, "torch"), [0.0, False])
            line = []
            for n in names:
                us, complete = totals.get((config, n), [0.0, False])
                ratio = f" ({us / ref[0]:.2f}x)" if ref[1] and complete and ref[0] else ""
                line.append(f"{n}={us:.0f}{ratio}" if complete else f"{n}=incomplete")
                summary[f"{config}.{prec}.{n}_us"] = round(us, 1) if complete else None
            print(f"{config} {prec} GEMM us per iteration: " + ", ".join(line))
    return summary


def print_kernels(rows: list[dict]) -> None:
    """Each distinct compiled kernel of each variant: what it compiled to, and where it runs."""
    kernels_seen: dict = {}
    for r in rows:
        for k in r.get("kernels", []):
            kernels_seen.setdefault((r["variant"], r["precision"], k["kernel"], k["dot"], k["regs"], k["spills"], k["wgmma_serialized"],
                                     json.dumps(k["copies"]), k["shared"]), set()).add(f"{r['layer']}.{r['op']}")  # fmt: skip
    print("\n== compiled kernels: variant precision kernel dot regs spills serialized copies(bytes:count) shared ==")
    for (v, prec, name, dot, regs, spills, ser, copies, shared), where in sorted(kernels_seen.items()):
        print(f"{v:15s} {prec:5s} {name:20s} {dot:12s} regs {regs:3d} spills {spills:4d} serialized {int(ser)} copies {copies} "
              f"shared {shared}{' (too much)' if shared > H100_SHARED else ''}  [{', '.join(sorted(where))}]")  # fmt: skip


def compile_only(products: list[Product], variants: list[Variant], precisions: list[str]) -> list[dict]:
    """Every variant's kernels for every product, compiled for sm_90 on this machine."""
    from triton_inspect import compile_for_h100, describe

    rows, seen = [], {}
    for v in variants:
        for prec in (p for p in precisions if p in v.precisions):
            for p in products:
                ops = Operands(p, v.layout, "cpu")
                for op in (o for o in OPS if getattr(p, o)):
                    launches = []

                    class Recorder:
                        def __init__(self, fn):
                            self.fn = fn

                        def __getitem__(self, grid):
                            return lambda *a, **k: launches.append((self.fn, a, k))

                    saved = {n: getattr(kernels, n) for n in LAUNCHED}
                    try:
                        for n in LAUNCHED:
                            setattr(kernels, n, Recorder(saved[n]))
                        kernels.INTERPRETED = True
                        triton_call(op, ops, p.relu, DOT[prec], v.tiles(op))()
                    finally:
                        for n, fn in saved.items():
                            setattr(kernels, n, fn)
                        kernels.INTERPRETED = False
                    for fn, a, k in launches:
                        key = (fn.__name__, tuple(sorted(k.items())), tuple(_alignment(x) for x in a))
                        if key not in seen:
                            seen[key] = {"kernel": fn.__name__, **describe(compile_for_h100(fn, a, k))}
                        d = seen[key]
                        rows.append({"variant": v.name, "precision": prec, "config": p.config, "layer": p.layer, "op": op,
                                     "N": p.N, "K": p.K, "O": p.O, "kernels": [d]})  # fmt: skip
    return rows


def _alignment(a) -> object:
    if isinstance(a, torch.Tensor):
        return (a.dtype, a.data_ptr() % 16 == 0)
    if isinstance(a, int) and not isinstance(a, bool):
        return (a == 1, a % 16 == 0)
    return a


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="p64,moonshot")
    ap.add_argument("--precisions", default="tf32,bf16")
    ap.add_argument("--variants", default=",".join(v.name for v in VARIANTS))
    ap.add_argument("--budget", type=float, default=240.0, help="seconds for the whole probe (recording, compiles, timing, inspection)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--compile-processes", type=int, default=min(14, os.cpu_count() or 1), help="1: compile at first launch")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None)
    ap.add_argument("--smoke", action="store_true", help="CPU, Triton's interpreter, a tiny config: values against float64")
    ap.add_argument("--compile-only", action="store_true", help="CPU: compile every variant for sm_90 and print what it is")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    wanted = args.variants.split(",")
    unknown = [n for n in wanted if n not in {v.name for v in VARIANTS}]
    if unknown:
        print(f"--variants: unknown {unknown} (known: {[v.name for v in VARIANTS]})", file=sys.stderr)
        return 2
    variants = [v for v in VARIANTS if v.name in wanted]
    precisions = args.precisions.split(",")
    if args.smoke:
        names, device, precisions = ["smoke"], "cpu", ["tf32"]
    else:
        names, device = args.configs.split(","), "cpu" if args.compile_only else "cuda"
        if device == "cuda" and not torch.cuda.is_available():
            print("the probe times on CUDA (--smoke and --compile-only run on the CPU)", file=sys.stderr)
            return 2
    products = []
    for name, cfg in configs(names, device, precisions[0]).items():
        products += record_products(name, cfg, stub=args.compile_only)
    print(f"recorded {len(products)} layer products in {time.monotonic() - t0:.1f} s:")
    for p in products:
        print(f"  {p.config:9s} {p.layer:14s} {p.kind:8s} G={p.G:<5d} N={p.N:<4d} K={p.K:<4d} O={p.O:<4d} relu={int(p.relu)} "
              f"per iteration: fwd {p.fwd} dx {p.dx} dw {p.dw}; x strides {p.x_strides}")  # fmt: skip
    if args.compile_only:
        rows, summary = compile_only(products, variants, precisions), {}
        print_kernels(rows)
    else:
        rows = run_probe(products, variants, precisions, args, device, t0)
        summary = print_tables(rows, [v.name for v in variants], precisions)
        print_kernels(rows)
        if args.smoke:
            worst = max(r.get("max_rel_error", 0.0) for r in rows)
            print(f"smoke: {sum('max_rel_error' in r for r in rows)} launches of {len(variants)} variants against float64, worst {worst:.2e}")
    out = args.out or (os.path.join(os.environ["OUT"], "layer_gemm_probe.json") if os.environ.get("OUT") else None)
    if out:
        payload = {
            "command": " ".join(sys.argv),
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
            "torch": torch.__version__,
            "seconds": round(time.monotonic() - t0, 1),
            "products": [asdict(p) for p in products],
            "summary": summary,
            "rows": rows,
        }
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(payload, indent=1, default=str))
        print(f"wrote {out}")
    print(f"probe: {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
