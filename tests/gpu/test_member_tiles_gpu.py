"""No member blocks on the GPU (issue 33, item 3): a member's bits do not depend on how many
members share its arm, with the CUDA kernels, the graph, and the learner's member tiles and
fixed-order reductions (tune_gems.model.layers, tune_gems.model.member_reduce).

Run on the GPU machine: `pytest -m gpu tests/gpu/test_member_tiles_gpu.py -q` (skipped without
CUDA); `bash benchmarks/floor_device.sh` runs it (with the default cuBLAS workspace and with
CUBLAS_WORKSPACE_CONFIG=:0:0).

The learner tests are parametrised over the member tile: the library's MEMBER_TILE and one call
over all members (None). The issue's failure was two seed blocks of 8 seeds against one trial of
16 (the moonshot's three arms): the first claim below. The second is the same invariant at sizes
that straddle the thresholds where torch's reductions change their lanes (9 against 18
members) and leave a padded tile. Every state tensor of every member is compared (parameters,
Adam moments, spectral-norm state, replay, environments) and the accumulator's rows but the
nulls: the gems' nulls are torch reductions in tune_gems.trainer.member_gems, run per (fold,
arm) block, outside this change; the tests print whether they agree too.

The tests of the host-scheduled target copy: through the captured graph, the copy between
replays equals the lerp it replaced (inside the graph) bit for bit, across a recapture and a
state reload in the middle of a target period.
"""

from __future__ import annotations

import pytest
import torch

from test_arms_gpu import _Run, _same
from tune_gems.config.load import load_config
from tune_gems.design.arms import ArmsConfig, expand_arms
from tune_gems.model import layers

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

MOONSHOT = [  # benchmarks/moonshot.yaml's shapes (hidden 128, batch 128, 16 envs), a smaller replay
    "device=cuda",
    "kernels=cuda",
    "trainer.batch_size=128",
    "trainer.n_envs=16",
    "trainer.replay_capacity=4096",
    "trainer.learning_starts=256",
    "trainer.target_update=8",
    "data.synthetic.n=2000",
    "gems.g6.mode=measure",
    "gems.g10.mode=measure",
    "gems.g12.mode=measure",
]
ARMS = ArmsConfig.model_validate({"list": [
    {"name": "measured"},
    {"name": "g10-wired", "gems.g10.mode": "wire", "gems.g10.weight": 0.1},
    {"name": "g12-wired", "gems.g12.mode": "wire", "gems.g12.weight": 0.1},
]})  # fmt: skip
ITERATIONS = 20  # two hard target copies, and four iterations past the last
TILES = sorted({layers.MEMBER_TILE, None}, key=lambda t: -1 if t is None else t)


@pytest.fixture(params=TILES, ids=lambda t: f"tile{t}")
def member_tile(request, monkeypatch):
    monkeypatch.setattr(layers, "MEMBER_TILE", request.param)
    return request.param


# -- the two mechanisms alone -----------------------------------------------------------------------

POPULATIONS = (1, 2, 3, 8, 9, 16, 18, 24, 48, 192)


def _checked(P: int) -> list[int]:
    return sorted({m for m in (0, 5, P - 1) if m < P})


@pytest.mark.parametrize("n", [11, 33, 128, 256, 2304, 65536, 219594])
def test_fixed_order_sums_do_not_depend_on_the_number_of_rows_on_gpu(n):
    """member 0's, 5's and the last row's fixed-order sum (and norm) over n elements equal that
    row's alone, at every row count; torch's own sum is printed for comparison."""
    from tune_gems.model.member_reduce import fixed_order_sum, member_norm

    x = torch.randn(max(POPULATIONS), n + 3, device="cuda")[:, 3:]  # strided rows, as a column slice
    alone = {m: (fixed_order_sum(x[m : m + 1].clone(), 1), member_norm(x[m : m + 1].clone(), 1)) for m in (0, 5, 191)}
    torch_alone = {m: x[m : m + 1].clone().sum(1) for m in (0, 5, 191)}
    torch_differs = []
    for P in POPULATIONS:
        sums, norms, plain = fixed_order_sum(x[:P], 1), member_norm(x[:P], 1), x[:P].sum(1)
        for m in _checked(P):
            ref = alone.get(m) or (fixed_order_sum(x[m : m + 1].clone(), 1), member_norm(x[m : m + 1].clone(), 1))
            assert torch.equal(sums[m : m + 1], ref[0]) and torch.equal(norms[m : m + 1], ref[1]), (P, m)
            if m in torch_alone and not torch.equal(plain[m : m + 1], torch_alone[m]):
                torch_differs.append(P)
    print(f"n={n}: torch's own sum differs from the row alone at P in {sorted(set(torch_differs))}")


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_a_layers_products_do_not_depend_on_the_population_on_gpu(precision):
    """One PopLinear's forward and both backward products in member tiles of the library's
    MEMBER_TILE (None: one call): member 0's, 5's and the last one's output and gradients equal
    that member's alone, at every population."""
    from tune_gems.model.layers import Affine, PopLinear
    from tune_gems.trainer.learner import _Float32MatmulPrecision as _Precision

    tile = layers.MEMBER_TILE
    gen = torch.Generator(device="cuda").manual_seed(0)
    n = max(POPULATIONS)
    x, w, b = (torch.randn(*s, generator=gen, device="cuda") for s in ((n, 256, 128), (n, 128, 128), (n, 1, 128)))
    up = torch.randn(n, 256, 128, generator=gen, device="cuda")

    def run(rows: slice):
        xs, ws, bs = (t[rows].clone().requires_grad_() for t in (x, w, b))
        if precision == "bf16":
            ctx = torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False)
        else:
            ctx = _Precision("high")
        with ctx:
            y = PopLinear.apply(xs, Affine(ws, bs, tile))
        with _Precision("high" if precision == "tf32" else "highest"):
            grads = torch.autograd.grad((y.float() * up[rows]).sum(), (xs, ws, bs))
        return (y.detach(), *grads)

    alone = {}
    for P in POPULATIONS:
        out = run(slice(0, P))
        for m in _checked(P):
            if m not in alone:
                alone[m] = run(slice(m, m + 1))
            for name, got, ref in zip(("y", "dx", "dw", "db"), out, alone[m]):
                assert torch.equal(got[m : m + 1], ref), (precision, tile, P, m, name)


# -- the learner --------------------------------------------------------------------------------------


def _run(seeds: int, first: int = 0, *extra: str) -> _Run:
    cfg = load_config(None, [*MOONSHOT, f"trainer.population={seeds}", f"first_seed_index={first}", *extra])
    return _Run(cfg, expand_arms(cfg, ARMS))


def _null_rows(run: _Run) -> list[int]:
    return [i for i, name in enumerate(run.learner.acc_rows) if name.endswith("_null")]


def _differences(run: _Run, members: list[int], ref: _Run, ref_members: list[int]) -> tuple[list[str], bool]:
    """(state tensors that differ for some member pair, whether the null rows agree)."""
    nulls = _null_rows(run)
    keep = [i for i in range(len(run.learner.acc_rows)) if i not in nulls]
    out, nulls_agree = [], True
    for key in run.learner.state_tensors():
        for p, q in zip(members, ref_members):
            a, b = run.member(key, p), ref.member(key, q)
            if key == "metrics.acc":
                nulls_agree &= _same(a[nulls], b[nulls])
                a, b = a[keep], b[keep]
            if not _same(a, b):
                diff = (a.double() - b.double()).abs().nan_to_num(nan=float("inf")).max().item() if a.is_floating_point() else "int"
                out.append(f"{key}[member {p} vs {q}] max|diff|={diff}")
                break
    return out, nulls_agree


def _lockstep(run: _Run, refs: list[tuple[_Run, list[int], list[int]]]) -> None:
    """Step every run ITERATIONS times through its graph, comparing the members after
    collection and after every iteration; fail naming the iteration and the tensors."""
    everyone = [run, *(ref for ref, _, _ in refs)]
    nulls_agree = True
    for i in range(ITERATIONS + 1):
        for r in everyone if i else ():
            r.step()
        torch.cuda.synchronize()
        for ref, mine, theirs in refs:
            bad, agree = _differences(run, mine, ref, theirs)
            nulls_agree &= agree
            assert not bad, f"after {i} iterations (0: after collection): " + "; ".join(bad[:6])
    assert run.runner.captured and int(run.learner.updates) == ITERATIONS
    print(f"gem nulls agree as well: {nulls_agree}")


def _members(arms: int, seeds: int, slots: range) -> list[int]:
    return [a * seeds + s for a in range(arms) for s in slots]


def test_seed_blocks_pooled_equal_one_trial_of_all_their_seeds_bit_for_bit(member_tile):
    """The moonshot's 3 arms: seed blocks 0-7 and 8-15 (two trials of population 8, first seed
    index 0 and 8) against one trial of the 16 seeds: every member of each block equals the
    same arm and seed index of the one trial, through 20 graph replays."""
    trial = _run(16)
    blocks = [_run(8, 0), _run(8, 8)]
    refs = [(block, _members(3, 16, range(8 * b, 8 * b + 8)), _members(3, 8, range(8))) for b, block in enumerate(blocks)]
    _lockstep(trial, refs)
    params = trial.learner.online_flat.data
    assert not torch.equal(params[0], params[16]) and not torch.equal(params[0], params[1])  # arms and seeds differ


def test_an_arm_of_s_seeds_equals_its_first_s_seeds_of_a_run_with_2s(member_tile):
    """S = 3 against 2S = 6 per arm (9 against 18 members: torch's reductions would give each
    output other lanes on the two sides of 16 outputs, and a tile of 16 is padded in both)."""
    large, small = _run(6), _run(3)
    _lockstep(large, [(small, _members(3, 6, range(3)), _members(3, 3, range(3)))])


def test_the_evaluation_of_a_seed_block_equals_the_one_trials(member_tile):
    """The validation segment's statistics (greedy, noise-free, its own captured graphs) after
    10 training iterations: block 8-15's members equal the one trial's seed indices 8-15."""
    from tune_gems.trainer.trainer import Trainer
    from tune_gems.trainer.eval_window import EVAL_SEGMENT

    def trained(seeds: int, first: int) -> Trainer:
        cfg = load_config(None, [*MOONSHOT, f"trainer.population={seeds}", f"first_seed_index={first}",
                                 "arms.list=[{name: measured}, {name: g10-wired, gems.g10.mode: wire, gems.g10.weight: 0.1}, "
                                 "{name: g12-wired, gems.g12.mode: wire, gems.g12.weight: 0.1}]"])  # fmt: skip
        t = Trainer(cfg, log=None)
        t._prefill()
        for _ in range(10):
            t.runner()
        return t

    trial, block = trained(16, 0), trained(8, 8)
    mine, theirs = trial.evaluator.evaluate(EVAL_SEGMENT), block.evaluator.evaluate(EVAL_SEGMENT)
    rows, ref = _members(3, 16, range(8, 16)), _members(3, 8, range(8))
    for stat, values in mine[0].items():
        assert _same(torch.as_tensor(values)[rows], torch.as_tensor(theirs[0][stat])[ref]), stat
    assert _same(mine[1][rows], theirs[1][ref]) and _same(mine[2][rows], theirs[2][ref])  # returns, positions


# -- the host-scheduled hard target update through the graph ----------------------------------------


def _lerp_in_graph(run: _Run) -> None:
    """The old path: the lerp of every target pair by the device weight (updates %
    target_update == 0), inside the captured iteration."""
    from tune_gems.trainer.graph import StepRunner

    learner = run.learner

    def step() -> None:
        learner.iteration.device()
        with torch.no_grad():
            w = (learner.updates % learner.cfg.trainer.target_update == 0).float()
            for t, o, _ in learner._target_pairs:
                t.lerp_(o, w)

    run.runner = StepRunner(step, learner.state_tensors, use_graph=True)


def test_the_copy_between_replays_equals_the_lerp_inside_the_graph_across_a_recapture_and_a_reload():
    cfg_extra = ("model.spectral_norm=true",)
    new, old = _run(2, 0, *cfg_extra), _run(2, 0, *cfg_extra)
    _lerp_in_graph(old)
    everyone = list(range(new.learner.P))

    def compare(i: int) -> None:
        torch.cuda.synchronize()
        bad, _ = _differences(new, everyone, old, everyone)
        assert not bad, f"after {i} iterations: " + "; ".join(bad[:6])

    for i in range(1, 14):  # 13: five before the next copy
        new.step()
        old.step()
        compare(i)
    new.runner.invalidate()  # recapture: the host re-reads the update count
    for i in range(14, 18):
        new.step()
        old.step()
        compare(i)
    # a reload mid-period (as a checkpoint load does): the state copied into a fresh learner
    fresh = _run(2, 0, *cfg_extra)
    with torch.no_grad():
        mine = fresh.learner.state_tensors()
        for k, v in new.learner.state_tensors().items():
            mine[k].copy_(v)
    new = fresh
    for i in range(18, 3 * new.learner.cfg.trainer.target_update + 3):
        new.step()
        old.step()
        compare(i)
    assert not torch.equal(new.learner.target_flat.data, new.learner.online_flat.data)  # two iterations past the last copy
