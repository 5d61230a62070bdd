"""The NoisyNet noise on Triton (tune_gems.ops.triton_layers `noise_factors`) on the GPU: from a net's uniforms
straight into every noisy layer's factors, bit for bit the torch path's (tune_gems.rng.box_muller
and `resample_noise`: the same float32 operations, the CUDA math library's logf and cosf on both
sides), at train_step.py's widths with NoisyNets on and off among the members; and the learner's
own draws (`_fresh_draws`) give both nets the same factors on either path.

Run on the GPU machine: `pytest -m gpu tests/gpu/test_triton_noise_gpu.py -q` (skipped without
CUDA); `bash benchmarks/gpu_session.sh triton` runs it.
"""

from __future__ import annotations

import pytest
import torch

from tune_gems.config.load import load_config
from tune_gems.model.network import BranchingC51
from tune_gems.rng import box_muller

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
pytest.importorskip("triton")


def _net(kernel: str, seeds: list[int], noisy: list[bool]) -> BranchingC51:
    cfg = load_config(None, ["model.hidden=256", "model.stream_hidden=64", f"model.layer_kernel={kernel}"]).model
    return BranchingC51(cfg, 33, 2, 3, seeds, noisy=noisy).cuda()


def _factors(net: BranchingC51) -> list[torch.Tensor]:
    return [t for layer in net.noisy_layers() for t in (layer.f_in, layer.f_out)]


def test_noise_factors_equal_the_torch_path_bit_for_bit():
    seeds = list(range(64))
    noisy = [s % 5 != 0 for s in seeds]
    ref, tri = _net("torch", seeds, noisy), _net("triton", seeds, noisy)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(3):
        u = torch.rand(64, 2 * ref.noise_size, device="cuda", generator=gen).clamp_(2.0**-25, 1 - 2.0**-24)
        ref.resample_noise(box_muller(u))
        tri.resample_noise_from_uniforms(u)
        for a, b in zip(_factors(ref), _factors(tri)):
            assert torch.equal(a, b), f"{(a != b).sum().item()} of {a.numel()} factors differ"


def test_the_learners_draws_give_the_same_noise_on_both_paths():
    from tune_gems.ops import resolve_backend
    from tune_gems.trainer.learner import Learner
    from tune_gems.trainer.run_setup import prepare_market

    learners = []
    for kernel in ("torch", "triton"):
        cfg = load_config(None, ["device=cuda", "trainer.population=8", "data.synthetic.n=2000", f"model.layer_kernel={kernel}"])
        dev = torch.device("cuda")
        learners.append(Learner(cfg, prepare_market(cfg, dev), dev, resolve_backend("reference", dev)))
    for learner in learners:
        learner._fresh_draws()
    for net in ("online", "target"):
        a, b = (_factors(getattr(learner, net)) for learner in learners)
        for x, y in zip(a, b):
            assert torch.equal(x, y), net
