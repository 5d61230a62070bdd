"""The NoisyNet noise on Triton (tune_gems.ops.triton_layers `noise_factors`, `model.layer_kernel: triton`) on the
CPU through Triton's interpreter: from a net's uniforms straight into every noisy layer's noise
factors, against the torch path (tune_gems.rng.box_muller, then `resample_noise`).

Where the math allows the factors are the torch path's exactly: the same elements, zeros for
members without NoisyNets, each factor in its place of f_in / f_out. The values go through log
and cos, which the interpreter takes from numpy and torch's CPU kernels from their own library:
they differ in the last place of some elements, so each f is compared through eps = f |f| within
16 float32 units of roundoff of Box-Muller's radius (|eps| <= r, and r's log and cos each round
once). On CUDA both use the CUDA math library and are compared bit for bit
(tests/gpu/test_triton_noise_gpu.py).
"""

from __future__ import annotations

import pytest
import torch

from learner_fixtures import tiny_config
from test_triton_layers import U32, triton_interpreter  # noqa: F401  (the module's interpreter fixture)
from tune_gems.model.network import BranchingC51
from tune_gems.rng import box_muller

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0 to a scalar:DeprecationWarning")


def _nets(seeds: list[int], noisy: list[bool]) -> tuple[BranchingC51, BranchingC51]:
    """The same network (odd widths, 3 branches) on the torch path and on the triton path."""
    cfg = tiny_config("model.hidden=13", "model.stream_hidden=7", "model.atoms=5").model
    nets = []
    for kernel in ("torch", "triton"):
        net = BranchingC51(cfg.model_copy(update={"layer_kernel": kernel}), 9, 3, 2, seeds, noisy=noisy)
        nets.append(net)
    return nets[0], nets[1]


def _uniforms(net: BranchingC51, seeds: list[int]) -> torch.Tensor:
    """[P, 2 x noise_size] uniforms in (0, 1), each member's row from its own seed."""
    rows = [torch.rand(2 * net.noise_size, generator=torch.Generator().manual_seed(s)) for s in seeds]
    return torch.stack(rows).clamp(2.0**-25, 1 - 2.0**-24)


def _factors(net: BranchingC51) -> list[torch.Tensor]:
    return [t.reshape(net.P, -1) for layer in net.noisy_layers() for t in (layer.f_in, layer.f_out)]


def test_noise_factors_match_the_torch_path():
    seeds, noisy = [3, 4, 5, 6], [True, False, True, True]
    ref, tri = _nets(seeds, noisy)
    u = _uniforms(ref, seeds)
    ref.resample_noise(box_muller(u))
    tri.resample_noise_from_uniforms(u)
    n = ref.noise_size
    radius = torch.sqrt(-2.0 * torch.log(u[:, :n].double())).max().item()
    for a, b in zip(_factors(ref), _factors(tri)):
        assert torch.equal(a == 0, b == 0) and torch.equal(a[1], b[1])  # the member without noise: zeros
        eps_a, eps_b = (a * a.abs()).double(), (b * b.abs()).double()
        assert (eps_a - eps_b).abs().max().item() <= 16 * U32 * radius
        assert (a != 0).any()


def test_a_member_alone_gets_the_factors_it_gets_inside_a_population():
    seeds, noisy = [7, 8, 9], [True, True, False]
    _, tri = _nets(seeds, noisy)
    tri.resample_noise_from_uniforms(_uniforms(tri, seeds))
    for m in range(3):
        _, alone = _nets([seeds[m]], [noisy[m]])
        alone.resample_noise_from_uniforms(_uniforms(alone, [seeds[m]]))
        for ours, theirs in zip(_factors(tri), _factors(alone)):
            assert torch.equal(ours[m], theirs[0])
