"""tf32 and bf16 put the torch path's matrix products on tensor cores; fp32 stays off them (the Triton
path's dots are checked where they compile: tests/test_triton_compile.py).

One eager iteration of the train_step benchmark's shape at P=64 is profiled with shapes; every
matrix product (mm, bmm, baddbmm, addmm, forward and backward) that is not matrix-vector or an
outer product (the spectral norm's power iteration and sigma; memory-bound, fp32 by design) must launch no SIMT GEMM kernel
under tf32 / bf16, and no TF32 kernel under fp32 (fp32 must stay exact for comparisons).

Run on the GPU machine: `pytest -m gpu tests/gpu/test_tensor_cores_gpu.py -q`.
"""

from __future__ import annotations

import pytest
import torch

from tune_gems.config.load import load_config
from tune_gems.trainer.trainer import Trainer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

SHAPE = [  # benchmarks/train_step.py's BASE at P=64
    "device=cuda", "kernels=cuda", "trainer.population=64", "trainer.batch_size=256", "trainer.n_envs=16",
    "trainer.replay_capacity=8192", "trainer.learning_starts=512", "model.hidden=256", "model.stream_hidden=64",
    "data.synthetic.n=4000", "trainer.graph=off", "model.layer_kernel=torch",
    "gems.g6.mode=measure", "gems.g10.mode=measure", "gems.g12.mode=measure",
]  # fmt: skip
MATMULS = ("aten::mm", "aten::bmm", "aten::baddbmm", "aten::addmm")


def _kernels(event) -> list[str]:
    names = [k.name for k in event.kernels]
    for child in event.cpu_children:
        names += _kernels(child)
    return names


def _is_matrix_vector(shapes: list) -> bool:
    """A matrix-vector or outer product (m, n or k = 1): memory-bound, not a GEMM for tensor cores."""
    mats = [s for s in shapes if isinstance(s, (list, tuple)) and len(s) >= 2][-2:]
    return len(mats) < 2 or 1 in (mats[0][-2], mats[0][-1], mats[1][-1])


def product_kernels(precision: str) -> list[tuple[str, list, str]]:
    """(op, input shapes, kernel) of every matrix-matrix product of one eager iteration."""
    from torch.profiler import ProfilerActivity, profile

    trainer = Trainer(load_config(None, [*SHAPE, f"trainer.precision={precision}"]), log=None)
    trainer._prefill()
    for _ in range(2):
        trainer.learner.iteration()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        trainer.learner.iteration()
        torch.cuda.synchronize()
    out = []
    for e in prof.events():
        if e.name in MATMULS and not _is_matrix_vector(e.input_shapes):
            out += [(e.name, e.input_shapes, k) for k in _kernels(e)]
    return out


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_reduced_precisions_use_tensor_cores(precision):
    found = product_kernels(precision)
    assert len(found) >= 20, f"only {len(found)} product kernels seen"  # forward + both backward per layer
    simt = sorted({f"{op} {shapes} -> {k[:80]}" for op, shapes, k in found if "simt" in k.lower()})
    assert not simt, f"{precision}: {len(simt)} products on SIMT kernels:\n" + "\n".join(simt)


def test_fp32_stays_off_tf32():
    found = product_kernels("fp32")
    assert found
    tf32 = sorted({k for _, _, k in found if "tf32" in k.lower()})
    assert not tf32, tf32
