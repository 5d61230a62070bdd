"""The learner with `model.layer_kernel: triton` on the CPU, through Triton's interpreter: a short
run at tiny shapes stays within tf32-level tolerance of the torch path (the CPU's and the
oracle), with every gem wired (G12's head then runs twice with autograd in an iteration, so its
gradients take the summed path, not the direct write into the flat matrix)."""

from __future__ import annotations

import pytest
import torch

from learner_fixtures import all_wired, tiny_config
from test_triton_layers import triton_interpreter  # noqa: F401  (the module's interpreter fixture)
from tune_gems.contracts.errors import CheckpointError
from tune_gems.model.layers import resolve_layer_kernel
from tune_gems.ops import resolve_backend
from tune_gems.trainer.learner import FLAT_STATE, Learner
from tune_gems.trainer.run_setup import prepare_market
from tune_gems.trainer.trainer import Trainer

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0 to a scalar:DeprecationWarning")

TF32 = 2.0**-11
"""tf32's unit roundoff: the tolerance the issue allows between the two paths."""
ITERATIONS = 3
SMALL = ["trainer.population=2", "trainer.batch_size=8", "trainer.n_envs=4", "trainer.learning_starts=16", "trainer.replay_capacity=64"]


def _learner(kernel: str) -> Learner:
    cfg = tiny_config(*SMALL, *all_wired(), f"model.layer_kernel={kernel}")
    dev = torch.device("cpu")
    learner = Learner(cfg, prepare_market(cfg, dev), dev, resolve_backend("reference", dev))
    learner.reset_envs()
    for _ in range(cfg.trainer.learning_starts // cfg.trainer.n_envs):
        learner.collect()
    return learner


def test_a_short_run_on_triton_stays_within_tf32_tolerance_of_the_torch_path():
    """After each iteration: every parameter within ITERATIONS x lr x 2^-11 of the torch path's
    (each Adam step is about lr in size, and may differ by tf32's relative rounding of it), the
    accumulated loss, q_mean and gradient norm within 2^-11 relative, and the replay and
    environments (driven by the actions both nets chose) equal."""
    torch_run, triton_run = _learner("torch"), _learner("triton")
    assert triton_run.online.trunk[0].products.name == "triton" and torch_run.online.trunk[0].products.name == "torch"
    lr = torch_run.cfg.trainer.lr
    for i in range(1, ITERATIONS + 1):
        torch_run.iteration()
        triton_run.iteration()
        a, b = torch_run.online_flat.data, triton_run.online_flat.unpack(triton_run.online_flat.data)  # the triton path's has aligned columns
        assert (a - b).abs().max().item() <= i * lr * TF32, f"parameters after {i} iterations"
        for row in ("loss", "q_mean", "grad_norm"):
            k = torch_run.acc_rows.index(row)
            x, y = torch_run.acc[k], triton_run.acc[k]
            assert ((x - y).abs() <= TF32 * x.abs()).all(), f"{row} after {i} iterations: {x.tolist()} vs {y.tolist()}"
    ours, theirs = torch_run.state_tensors(), triton_run.state_tensors()
    for key in ours:
        if key.startswith(("replay.", "env.")):
            assert torch.equal(ours[key], theirs[key]), key
    flat = triton_run.online_flat
    gaps = torch.ones(flat.data.shape[1], dtype=torch.bool)
    for n, o in zip(flat.sizes, flat.offsets):
        gaps[o : o + n] = False
    assert flat.padded and gaps.any()
    for key in FLAT_STATE:  # the alignment gaps stay zero: no gradient reaches them, so Adam never moves them
        assert not theirs[key][:, gaps].any(), key


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_checkpoints_flat_matrices_are_laid_out_anew_on_load(version):
    """The flat matrices of an older checkpoint of the triton path, version 1's without alignment
    gaps and with the weights [in, out], version 2's with the gaps and the weights [in, out], are
    laid out as this path lays them out (aligned, the weights [out, in]), so a run resumes from it."""
    learner = _learner("triton")
    learner.iteration()
    state = {k: v.clone() for k, v in learner.state_tensors().items()}
    flat = learner.online_flat
    plain = {k: flat.unpack(v) if k in FLAT_STATE else v for k, v in state.items()}
    older = plain if version == 1 else {k: _in_out_aligned(flat, v) if k in FLAT_STATE else v for k, v in plain.items()}
    assert older["online.params"].shape[1] == (sum(flat.sizes) if version == 1 else flat.data.shape[1])
    assert not torch.equal(older["online.params"], state["online.params"])
    loaded = learner.from_checkpoint(older, version)
    assert loaded.keys() == state.keys()
    for k, v in state.items():
        assert torch.equal(loaded[k], v), k
    assert learner.from_checkpoint(state, 3) is state


def _in_out_aligned(flat, plain):
    """A plain [P, columns] matrix in version 2's layout: aligned columns, the weights [in, out]."""
    out = plain.new_zeros(plain.shape[0], flat.data.shape[1])
    start = 0
    for n, o in zip(flat.sizes, flat.offsets):
        out[:, o : o + n] = plain[:, start : start + n]
        start += n
    return out


def test_auto_takes_triton_on_cuda_and_torch_on_the_cpu():
    assert resolve_layer_kernel("auto", torch.device("cpu")) == "torch"
    assert resolve_layer_kernel("auto", torch.device("cuda")) == "triton"  # the triton package is installed here
    assert resolve_layer_kernel("torch", torch.device("cuda")) == "torch"
    assert tiny_config().model.layer_kernel == "auto"


def test_a_checkpoint_resumes_only_on_the_layer_kernel_that_wrote_it(tmp_path):
    """The two paths lay the flat parameters out differently (aligned columns, W stored [out, in]), and
    auto picks by device: a checkpoint names its path, and another path's run refuses it in one line."""
    trainer = Trainer(tiny_config(*SMALL), log=None)
    trainer.save_checkpoint(tmp_path / "ck.pt")
    payload = torch.load(tmp_path / "ck.pt", weights_only=True)
    assert payload["meta"]["layer_kernel"] == "torch"
    payload["meta"]["layer_kernel"] = "triton"  # as a CUDA run under auto writes it
    torch.save(payload, tmp_path / "gpu.pt")
    trainer.load_checkpoint(tmp_path / "ck.pt")
    with pytest.raises(CheckpointError, match=r"gpu\.pt: written with model\.layer_kernel=triton, this run's is torch .*set model\.layer_kernel=triton"):
        trainer.load_checkpoint(tmp_path / "gpu.pt")


def test_the_nulls_by_fixed_order_row_means_are_each_members_own_and_agree_with_the_torch_nulls():
    """With the Triton path's row means, MemberGems evaluates each built-in null once over every member
    of a two-arm run: each member's value has the bits of that member alone, and the float64 torch nulls
    (evaluated per block) agree within float32 precision."""
    from tune_gems.builtin_gems import G6, G10, G12
    from tune_gems.config.schema import GemsConfig
    from tune_gems.design.arms import MemberLayout
    from tune_gems.gems import GemInputs
    from tune_gems.ops.triton_layers import row_means
    from tune_gems.trainer.member_gems import MemberGems, member_rows

    P, B, K, A, H, D = 6, 16, 3, 4, 8, 5
    gen = torch.Generator().manual_seed(11)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    x = GemInputs(q_t=randn(P, B, K, A), q_tp1=randn(P, B, K, A), h_t=randn(P, B, H).relu(), h_tp1=randn(P, B, H).relu(),
                  adv_features=randn(P, K, B, D) * torch.linspace(0.0, 2.0, D, dtype=torch.float64),  # a dead feature
                  action=torch.randint(A, (P, B, K), generator=gen), reward=randn(P, B),
                  not_done=(torch.rand(P, B, generator=gen) > 0.2).double())  # fmt: skip
    gems = [GemsConfig.model_validate({n: {"mode": "measure"} for n in ("g6", "g10", "g12")})] * 2
    layout = MemberLayout(("a", "b"), P // 2)
    assert G6.null_by_row_means and G10.null_by_row_means and G12.null_by_row_means
    fixed = MemberGems(gems, layout, "cpu", row_means=row_means).nulls(x)
    plain = MemberGems(gems, layout, "cpu").nulls(x)
    for name, gem in fixed.items():
        assert gem.dtype == torch.float32, name  # the fixed-order path (the torch nulls keep float64)
        alone = MemberGems([gems[0]], MemberLayout(("a",), 1), "cpu", row_means=row_means)
        members = torch.cat([alone.nulls(member_rows(x, slice(m, m + 1)))[name] for m in range(P)])
        assert torch.equal(gem, members), name
        torch.testing.assert_close(gem.double(), plain[name], rtol=2e-6, atol=0.0, msg=name)
