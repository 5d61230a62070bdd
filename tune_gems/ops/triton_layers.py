"""The population layers' products on Triton (`model.layer_kernel: triton`): tiles, launches of
tune_gems.ops.triton_layer_kernels, and one autograd op per product (docs/design.md "Ops and
kernels"). Precision follows torch's settings at each launch, as a torch matmul's would: tf32
unless the float32 matmul precision is "highest", bf16 operands inside bf16 autocast."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from tune_gems import rng
from tune_gems.contracts.errors import ConfigError

try:
    import triton

    from tune_gems.ops import triton_layer_kernels as kernels
except ModuleNotFoundError as e:  # the one dependency only this path has
    if e.name != "triton":
        raise
    raise ConfigError("model.layer_kernel=triton needs the triton package (pip install triton)") from None

TILE = 64
"""Largest tile of the forward's and dW's outputs, 4 warps: faster than 128 x 128 with 8 warps on
nearly every layer shape of P=64 and the moonshot (benchmarks/layer_gemm_probe.py)."""
INPUT_GRAD_TILE = 128
"""Largest tile of the input gradient's output, whose B (W^T) is MN-major: 128 x 128 with 8 warps
ran its larger layers 10-28% faster than 64 x 64 (the same probe)."""
INNER_TILE = 32
"""Largest step of the K-loop (fp32 operands: 16 KB per operand and stage at 128 x 32)."""
STAGES = 3
"""Software-pipeline stages of the K-loop (96 KB of operands at 128 x 128 x 32: two programs
per SM)."""
WIDE_TILE = 128 * 64
"""Tiles of at least this many outputs run 8 warps (two warpgroups), smaller ones 4."""
DOT_MIN = 16
"""tl.dot's smallest operand side: smaller products are padded (masked) up to it."""
VECTOR_TILE = 64
"""Tile of the spectral-norm kernel's matrix-vector passes (no tl.dot there)."""
NORM_EPS = 1e-12
"""normalize(x) = x / max(|x|, eps), the torch path's (tune_gems.model.layers._NORM_EPS)."""
ROW_REDUCE_TILE = 1024
"""Most columns a program of the row-reduction kernel reads per step (its lanes; a shorter row's mean
reads the power of two at or above its length)."""
ADAM_TILE = 1024
"""Columns a program of the clip-and-Adam kernel updates."""
PARAMETER_ALIGN = 32
"""Columns (128 bytes) at which each parameter starts in the flat matrix on this path
(tune_gems.model.flat): every member's weight then starts 16-byte aligned, so its tiles are
copied in 16-byte vectors, not 4-byte ones."""
NUM_WARPS = 4
"""Warps per program of the layer kernels with tiles under WIDE_TILE, and of the others."""


@dataclass(frozen=True)
class Tiles:
    """A product's launch (the groups on the grid's slow axis: triton_layer_kernels)."""

    rows: int
    cols: int
    inner: int
    warps: int = NUM_WARPS
    stages: int = 3


Policy = Callable[[int, int, int], Tiles]
"""(rows, inner, cols) of a per-group product -> its Tiles: a function of the shape alone."""


def _pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()  # the smallest power of two >= n


def _fit(n: int, largest: int, smallest: int = DOT_MIN) -> int:
    """The power of two that covers n, clamped to [smallest, largest]."""
    return max(smallest, min(largest, _pow2(n)))


def tiles(rows: int, inner: int, cols: int) -> Tiles:
    """The launch of a per-group product [rows, inner] @ [inner, cols]: a function of the shape alone,
    never of the number of groups, so a group's bits are the same in a call over any number."""
    return Tiles(_fit(rows, TILE), _fit(cols, TILE), _fit(inner, INNER_TILE), stages=STAGES)


def input_grad_tiles(rows: int, inner: int, cols: int) -> Tiles:
    """`tiles` of the input gradient (INPUT_GRAD_TILE): 8 warps from WIDE_TILE outputs up."""
    r, c = _fit(rows, INPUT_GRAD_TILE), _fit(cols, INPUT_GRAD_TILE)
    return Tiles(r, c, _fit(inner, INNER_TILE), warps=8 if r * c >= WIDE_TILE else NUM_WARPS, stages=STAGES)


@dataclass
class LayerWeights:
    """One layer's operands for one iteration, from which the kernels build the effective weight (raw,
    noise factors, spectral scale). `uses` counts autograd products on them: the gradients go straight
    into the flat matrix only at one."""

    weight: Tensor
    bias: Tensor
    reps: int = 1
    weight_sigma: Tensor | None = None
    bias_sigma: Tensor | None = None
    f_in: Tensor | None = None
    f_out: Tensor | None = None
    scale: Tensor | None = None
    sn_u: Tensor | None = None
    sn_v: Tensor | None = None
    uses: int = 0

    @property
    def products(self) -> "TritonProducts":
        """The strategy tune_gems.model.layers runs a product on."""
        return TRITON

    @property
    def noisy(self) -> bool:
        return self.weight_sigma is not None

    @property
    def scaled(self) -> bool:
        return self.scale is not None

    @property
    def shape(self) -> tuple[int, int]:
        """(in, out) of the layer."""
        return self.weight.shape[-2], self.weight.shape[-1]


def _member_strides(t: Tensor) -> tuple[int, int, int, int]:
    """Strides (member, replica, row, column) of a [P, reps, a, b] tensor, or of [G, a, b] as
    P = G groups of one replica."""
    if t.dim() == 4:
        return t.stride()
    return t.stride(0), 0, t.stride(1), t.stride(2)


def _operand_args(lw: LayerWeights) -> tuple[list, list, list]:
    """Kernel arguments of the weight, the noise factors and the bias (placeholders, never read,
    where the layer has no such operand)."""
    w, b = lw.weight, lw.bias
    sw, sb = _member_strides(w), _member_strides(b)
    weight = [w, lw.weight_sigma if lw.noisy else w, *sw]
    if lw.noisy:
        fi, fo = _member_strides(lw.f_in), _member_strides(lw.f_out)
        noise = [lw.f_in, fi[0], fi[1], fi[2], lw.f_out, fo[0], fo[1], fo[3]]
    else:
        noise = [w, 0, 0, 0, w, 0, 0, 0]
    bias = [b, lw.bias_sigma if lw.noisy else b, sb[0], sb[1], sb[3]]
    return weight, noise, bias


def dot_precision(t: Tensor) -> str:
    """The product's precision under torch's current settings (module docstring)."""
    if t.is_cuda and torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda") == torch.bfloat16:
        return "bf16"
    return "ieee" if torch.get_float32_matmul_precision() == "highest" else "tf32"


def _flags(lw: LayerWeights, relu: bool, dot: str, t: Tiles) -> dict:
    return dict(REPS=lw.reps, NOISY=lw.noisy, SCALED=lw.scaled, RELU=relu, DOT=dot, BM=t.rows, BN=t.cols, BK=t.inner,
                num_warps=t.warps, num_stages=t.stages)  # fmt: skip


def check_runs_on(device_type: str) -> None:
    """Refuse, in one line, the CPU when the kernels are compiled, not interpreted: checked on each
    tensor (`check_device`) and by a sweep before Ray starts."""
    if device_type == "cpu" and not kernels.INTERPRETED:
        raise ConfigError(
            "model.layer_kernel=triton on the CPU runs Triton's interpreter: set TRITON_INTERPRET=1 in the run's "
            "environment (slow, meant for tests), or train on CUDA"
        )


def check_device(t: Tensor) -> None:
    """`check_runs_on` the tensor's device."""
    check_runs_on(t.device.type)


def row_means(rows: Tensor) -> Tensor:
    """The mean of each row of a [R, n] float32 matrix whose rows are contiguous, in an order
    that does not depend on R: the learner's reported q_mean and the built-in nulls on this path."""
    check_device(rows)
    if rows.dim() != 2 or rows.stride(1) != 1 or rows.dtype != torch.float32:
        raise ValueError(f"a row reduction takes a float32 [rows, n] matrix with contiguous rows: got {tuple(rows.shape)} {rows.dtype}")
    out = torch.empty(rows.shape[0], device=rows.device, dtype=torch.float32)
    lanes = _fit(rows.shape[1], ROW_REDUCE_TILE, 32 * NUM_WARPS)  # by the row's length alone
    kernels._row_reduce_kernel[(rows.shape[0], 1)](rows, rows.stride(0), out, out, rows.shape[1], GROUPED=False,
                                                   SQUARE=False, BLOCK=lanes, MEAN=True, num_warps=NUM_WARPS)
    return out


def uniform_block(keys: Tensor, counter: Tensor, index_hash: Tensor) -> Tensor:
    """`tune_gems.rng.CounterRNG.draw`'s block of uniforms [P, n] in one launch, bit for bit (integer hashing,
    then exact float32 steps), where torch launches a few dozen small kernels."""
    check_device(keys)
    out = torch.empty(keys.shape[0], index_hash.shape[0], device=keys.device, dtype=torch.float32)
    kernels._uniform_block_kernel[(keys.shape[0], triton.cdiv(index_hash.shape[0], ROW_REDUCE_TILE))](
        keys, counter, index_hash, out, index_hash.shape[0], GOLDEN=rng.GOLDEN, MUL_A=rng.MUL_A, MUL_B=rng.MUL_B,
        U24=rng.U24, BLOCK=ROW_REDUCE_TILE, num_warps=NUM_WARPS)
    return out


class ClipAdam:
    """The optimizer's step on this path (PopulationAdam's `clip_adam`): one launch of every member's
    clip-group norms, then clip and Adam per element, per run of updated columns. Each member row is
    computed alone: its bits do not depend on the member count or the arms' blocks."""

    def __init__(self, data: Tensor, lrs, clip_groups: list[slice], betas, eps: float, max_norm: float, clip_eps: float):
        check_device(data)
        width = data.shape[1]
        if clip_groups[0].start != 0 or clip_groups[-1].stop != width or any(a.stop != b.start for a, b in zip(clip_groups, clip_groups[1:])):
            raise ValueError(f"the clip groups must be consecutive column ranges covering 0..{width}: got {clip_groups}")
        dev = data.device
        bounds = [c.start for c in clip_groups] + [width]
        self.unit = 4 if all(b % 4 == 0 for b in bounds) else 1  # 16-byte aligned groups: the kernels see it
        self.bounds = torch.tensor([b // self.unit for b in bounds], device=dev)
        self.lr = torch.tensor(lrs, dtype=torch.float32, device=dev)
        self.hyper = torch.tensor([*betas, eps], dtype=torch.float32, device=dev)  # beta1, beta2, eps
        self.max_norm, self.clip_eps = float(max_norm), float(clip_eps)

    def __call__(self, p: Tensor, g: Tensor, m: Tensor, v: Tensor, step: Tensor, kept: list[slice]) -> Tensor:
        """Step the `kept` columns of `p` at the (already advanced) `step`; the pre-clip norms [groups, P]."""
        if not all(t.is_contiguous() for t in (p, g, m, v)):
            raise ValueError("the optimizer's matrices must be contiguous")
        P, groups = p.shape[0], len(self.bounds) - 1
        norms = torch.empty(groups, P, device=p.device, dtype=torch.float32)
        kernels._row_reduce_kernel[(P, groups)](
            g, g.stride(0), self.bounds, norms, 0, GROUPED=True, SQUARE=True, BLOCK=ROW_REDUCE_TILE, UNIT=self.unit,
            num_warps=NUM_WARPS,
        )  # fmt: skip
        corrections = 1 - torch.pow(self.hyper[:2], step)  # float32 powf, as the fused Adam computes it
        for cols in kept:
            n = cols.stop - cols.start
            kernels._clip_adam_kernel[(P, triton.cdiv(n, ADAM_TILE))](
                p, g, m, v, p.stride(0), cols.start, n, norms, self.bounds, P, self.max_norm, self.clip_eps,
                self.lr, corrections, self.hyper, GROUPS=groups, UNIT=self.unit, BLOCK=ADAM_TILE, num_warps=NUM_WARPS,
            )  # fmt: skip
        return norms


def _check(x: Tensor, lw: LayerWeights) -> None:
    check_device(x)
    K, _ = lw.shape
    G = lw.weight.shape[0] * lw.reps if lw.weight.dim() == 4 else lw.weight.shape[0]
    if x.dim() != 3 or x.shape[0] != G or x.shape[2] != K:
        raise ValueError(f"layer input {tuple(x.shape)} does not fit weights {tuple(lw.weight.shape)} (reps {lw.reps})")
    if x.dtype != torch.float32 or lw.weight.dtype != torch.float32:
        raise ValueError(f"the Triton layer kernels take float32 tensors, not {x.dtype} and {lw.weight.dtype}")


def _rows_product(a: Tensor, y: Tensor, lw: LayerWeights, backward: bool, relu: bool, dot: str, policy: Policy) -> Tensor:
    """The kernel over the batch rows: the forward (a = x [G, N, in] -> [G, N, out]) or dx
    (a = dy [G, N, out], with y's strides -> [G, N, in])."""
    G, N, _ = a.shape
    K, O = lw.shape
    cols, inner = (K, O) if backward else (O, K)
    out = torch.empty(G, N, cols, device=a.device, dtype=torch.float32)
    t = policy(N, inner, cols)
    weight, noise, bias = _operand_args(lw)
    kernels._rows_kernel[(triton.cdiv(N, t.rows) * triton.cdiv(cols, t.cols), G)](
        a, y, *a.stride(), *weight, *noise, *bias, lw.scale if lw.scaled else out, out, *out.stride(), N, K, O,
        BACKWARD=backward, **_flags(lw, relu, dot, t),
    )  # fmt: skip
    return out


def forward(x: Tensor, lw: LayerWeights, relu: bool, dot: str, policy: Policy = tiles) -> Tensor:
    """y [G, N, out] = act((x @ W_eff) * s + b_eff) for x [G, N, in]."""
    _check(x, lw)
    return _rows_product(x, x, lw, False, relu, dot, policy)


def input_grad(dy: Tensor, y: Tensor, lw: LayerWeights, relu: bool, dot: str, policy: Policy = input_grad_tiles) -> Tensor:
    """dx [G, N, in] = s * ((dy * relu'(y)) @ W_eff^T); `dy` and `y` contiguous."""
    return _rows_product(dy, y, lw, True, relu, dot, policy)


def _grad_buffer(param: Tensor, direct: bool) -> Tensor:
    """Where a parameter's gradient is written: its slot of the flat gradient matrix when it
    has one and `direct`, else a fresh tensor of its shape."""
    slot = getattr(param, "grad_slot", None)
    if direct and slot is not None:
        return slot
    return torch.empty(param.shape, device=param.device, dtype=param.dtype)


def weight_grads(x: Tensor, dy: Tensor, y: Tensor, lw: LayerWeights, relu: bool, dot: str, direct: bool, policy: Policy = tiles) -> tuple:
    """(dW, dW_sigma, db, db_sigma) of one product (the sigma ones None for a plain layer);
    `dy` and `y` contiguous. With spectral norm, dW includes the term through sigma."""
    G, N, K = x.shape
    O = lw.shape[1]
    t = policy(K, N, O)
    n_tiles = triton.cdiv(K, t.rows) * triton.cdiv(O, t.cols)
    dw = _grad_buffer(lw.weight, direct)
    db = _grad_buffer(lw.bias, direct)
    dws = _grad_buffer(lw.weight_sigma, direct) if lw.noisy else dw
    dbs = _grad_buffer(lw.bias_sigma, direct) if lw.noisy else db
    partials = torch.empty(G, n_tiles, device=x.device, dtype=torch.float32) if lw.scaled else x
    sdw, sdb = _member_strides(dw), _member_strides(db)
    weight, noise, _ = _operand_args(lw)
    kernels._weight_grad_kernel[(n_tiles, G)](
        x, *x.stride(), dy, y, *dy.stride(), weight[0], *weight[2:], *noise,
        lw.scale if lw.scaled else x, partials,
        dw, dws, *sdw, db, dbs, sdb[0], sdb[1], sdb[3], N, K, O, **_flags(lw, relu, dot, t),
    )  # fmt: skip
    if lw.scaled:
        kernels._sigma_grad_kernel[(n_tiles, G)](
            dw, *sdw, partials, lw.scale, lw.sn_u, lw.sn_u.stride(0), lw.sn_v, lw.sn_v.stride(0), K, O, n_tiles,
            REPS=lw.reps, TILES_P2=_pow2(n_tiles), BM=t.rows, BN=t.cols, num_warps=t.warps,
        )  # fmt: skip
    return dw, dws if lw.noisy else None, db, dbs if lw.noisy else None


def spectral_scale(weight: Tensor, reps: int, sn_u: Tensor, sn_v: Tensor, on: Tensor, iterate: bool) -> Tensor:
    """Spectral norm of every group of `weight` [P, reps, in, out], `iterate` advancing `sn_u`, `sn_v`
    in place: scale [G, 2] = (1/sigma, -1/sigma^2) where `on`, (1, 0) elsewhere."""
    check_device(weight)
    G = sn_u.shape[0]
    K, O = weight.shape[-2:]
    if not (sn_u.is_contiguous() and sn_v.is_contiguous()):
        raise ValueError("spectral-norm state vectors must be contiguous")
    scale = torch.empty(G, 2, device=weight.device, dtype=torch.float32)
    kernels._spectral_kernel[(G,)](
        weight, *_member_strides(weight), sn_u, sn_u.stride(0), sn_v, sn_v.stride(0), on, scale, K, O, NORM_EPS,
        REPS=reps, ITERATE=iterate, BI=_fit(K, VECTOR_TILE, 1), BO=_fit(O, VECTOR_TILE, 1), num_warps=NUM_WARPS,
    )  # fmt: skip
    return scale


class _LayerProduct(torch.autograd.Function):
    """act((x @ W_eff) * s + b_eff) with the parameters as differentiable inputs; the noise
    factors, scale and state vectors ride in `lw` (no gradient)."""

    @staticmethod
    def forward(ctx, x, weight, weight_sigma, bias, bias_sigma, lw: LayerWeights, relu: bool, dot: str):
        y = forward(x, lw, relu, dot)
        ctx.save_for_backward(x, y)
        ctx.lw, ctx.relu, ctx.dot = lw, relu, dot
        return y

    @staticmethod
    def backward(ctx, dy):
        x, y = ctx.saved_tensors
        lw, relu = ctx.lw, ctx.relu
        dot = "bf16" if ctx.dot == "bf16" else dot_precision(dy)
        dy = dy.contiguous()
        need = ctx.needs_input_grad
        dx = input_grad(dy, y, lw, relu, dot) if need[0] else None
        dw = dws = db = dbs = None
        if any(need[1:5]):
            dw, dws, db, dbs = weight_grads(x, dy, y, lw, relu, dot, direct=lw.uses == 1)
        return dx, dw, dws, db, dbs, None, None, None


def layer_product(x: Tensor, lw: LayerWeights | tuple[Tensor, Tensor], relu: bool = False) -> Tensor:
    """act((x @ W_eff) * s + b_eff) per group, x [G, N, in] -> [G, N, out]; `lw` may be a materialised
    pair (W, b) (the evaluation's)."""
    if not isinstance(lw, LayerWeights):
        w, b = lw
        lw = LayerWeights(w, b)
    if x.dtype in (torch.bfloat16, torch.float16):  # an input autocast made: the kernels cast per tile themselves
        x = x.float()
    params = (lw.weight, lw.weight_sigma, lw.bias, lw.bias_sigma)
    dot = dot_precision(x)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, *params)):
        lw.uses += 1
        return _LayerProduct.apply(x, *params, lw, relu, dot)
    return forward(x, lw, relu, dot)


# NoisyNet noise: the torch path's Box-Muller and f(eps) (tune_gems.rng.box_muller,
# NoisyPopLinear.resample) in the same order of operations in one pass per layer, so on CUDA,
# where both use the CUDA math library's logf and cosf, the factors equal the torch path's bit
# for bit (tests/gpu/test_triton_noise_gpu.py); the interpreter's numpy log/cos round within a
# few ulp (tests/test_triton_noise.py). Every factor is written by exactly one program.

NOISE_BLOCK = 256
"""Normals per program of the noise kernel."""
TWO_PI_F32 = float(torch.tensor(2.0 * math.pi, dtype=torch.float32))
"""2 pi rounded to float32, as torch's Box-Muller multiplies its float32 uniforms by it."""


def noise_factors(u: Tensor, offset: int, on: Tensor, f_in: Tensor, f_out: Tensor) -> None:
    """Write one layer's f(eps) into `f_in`, `f_out` from the net's uniforms u [P, 2n] (its normals at
    `offset`); members not `on` get zeros."""
    P, reps, K, _ = f_in.shape
    O = f_out.shape[-1]
    size = reps * (K + O)
    check_device(u)
    if u.stride(-1) != 1:
        raise ValueError("the uniforms' rows must be contiguous")
    kernels._noise_factors_kernel[(P, -(-size // NOISE_BLOCK))](
        u, u.stride(0), on,
        f_in, f_in.stride(0), f_in.stride(1), f_in.stride(2),
        f_out, f_out.stride(0), f_out.stride(1), f_out.stride(3),
        offset, u.shape[1] // 2, size, K, O,
        TWO_PI_F=TWO_PI_F32, BLOCK_N=NOISE_BLOCK,
    )  # fmt: skip


class TritonProducts:
    """The layers' products on these kernels, the strategy tune_gems.model.layers.layer_products
    returns: layers hand over raw parameters (`fused`) at aligned columns of the flat matrix."""

    name = "triton"
    fused = True
    flat_layout = dict(align=PARAMETER_ALIGN, transposed=True)
    LayerWeights = LayerWeights
    product = staticmethod(layer_product)
    spectral_scale = staticmethod(spectral_scale)
    row_means = staticmethod(row_means)
    uniform_block = staticmethod(uniform_block)
    clip_adam = ClipAdam

    noise_factors = staticmethod(noise_factors)

    @staticmethod
    def resample_noise(net, draws, stream: str) -> None:
        """Box-Muller and f(eps) in one kernel per noisy layer, from the iteration's uniforms."""
        net.resample_noise_from_uniforms(draws.uniform(stream))


TRITON = TritonProducts()
