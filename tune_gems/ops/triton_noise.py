"""NoisyNet noise on Triton (`model.layer_kernel: triton`): from the iteration's
uniforms straight into a layer's noise factors, one launch per noisy layer.

The torch path (tune_gems.trainer.learner `_fresh_draws`, tune_gems.rng.box_muller,
tune_gems.model.layers.NoisyPopLinear.resample) computes, per member p and normal j of a net's
n normals, eps_j = sqrt(-2 log u_j) * cos(2 pi u_{n+j}) from the net's 2n uniforms, then
f(eps) = sign(eps) sqrt(|eps|), zero for a member without NoisyNets, and copies each layer's
slice into its f_in [P, reps, in, 1] and f_out [P, reps, 1, out]. The kernel
(tune_gems.ops.triton_layer_kernels `_noise_factors_kernel`) does the same
operations in the same order in one pass per layer (float32 throughout, 2 pi rounded to float32
as torch's scalar multiplication rounds it, IEEE square roots), so on CUDA, where both use the
CUDA math library's logf and cosf, its factors are meant to equal the torch path's bit for bit
(tests/gpu/test_triton_noise_gpu.py checks it); on the CPU the interpreter's numpy log and cos
round differently from torch's, within a few units in the last place
(tests/test_triton_noise.py). Every factor is written by exactly one program.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tune_gems.ops.triton_layers import check_device, kernels

BLOCK = 256
"""Normals per program."""
TWO_PI = 2.0 * math.pi




def noise_factors(u: Tensor, offset: int, on: Tensor, f_in: Tensor, f_out: Tensor) -> None:
    """Write f(eps) of one layer into `f_in` [P, reps, in, 1] and `f_out` [P, reps, 1, out]
    from a net's uniforms u [P, 2n] (the layer's normals are the net's offset .. offset +
    reps x (in + out)); `on` [P]: the members with NoisyNets (the others get zeros)."""
    P, reps, K, _ = f_in.shape
    O = f_out.shape[-1]
    size = reps * (K + O)
    check_device(u)
    if u.stride(-1) != 1:
        raise ValueError("the uniforms' rows must be contiguous")
    kernels._noise_factors_kernel[(P, -(-size // BLOCK))](
        u, u.stride(0), on,
        f_in, f_in.stride(0), f_in.stride(1), f_in.stride(2),
        f_out, f_out.stride(0), f_out.stride(1), f_out.stride(3),
        offset, u.shape[1] // 2, size, K, O,
        TWO_PI_F=float(torch.tensor(TWO_PI, dtype=torch.float32)), BLOCK_N=BLOCK,
    )  # fmt: skip
