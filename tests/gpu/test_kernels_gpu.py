"""The CUDA kernels against the float64 reference, and their graph-safety and determinism.

Run on a machine with CUDA (skipped elsewhere): `pytest -m gpu tests/gpu -q`. The first test
builds the extension (minutes on a fresh node; cached afterwards).

What is checked, per op and for several (P, B, K, A, D, atoms) incl. B=1, B=37, B=256, P=1,
P=64, P=4096, K=3/4, atoms=1024/2048 (rows too wide for shared memory in float64) and masked nd:
- values and gradients equal the plain-torch reference computed in float64 on CPU
  (float64 kernels to 1e-10, float32 kernels to 1e-4, relative to each tensor's magnitude);
- every output element is written: the caching allocator is filled with NaN first;
- two runs are bitwise identical; a CUDA-graph capture replayed twice gives the eager bits;
- no host sync (torch.cuda.set_sync_debug_mode("error"));
- opcheck passes on CUDA; members never mix; the first members' (rows') outputs do not depend
  on how many follow (the arms invariant);
- capture and replay also work from a Python worker thread (how Ray Tune runs trainables).
"""

from __future__ import annotations

import threading

import pytest
import torch

from tune_gems.ops import reference
from tune_gems.ops import double_dqn, resolve_backend
from tune_gems.ops.build import loaded_extension
from tune_gems.ops.reference_grads import (
    c51_loss_grad,
    c51_loss_residual,
    g10_temporal_grads,
    g12_predictive_grad,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

OPS = torch.ops.tune_gems
V_MIN, V_MAX = -10.0, 10.0
GAMMA_N = 0.97
DONE_FRACTION = 0.3
# (P, B, K, A, D, atoms)
SHAPES = [
    (1, 1, 2, 3, 4, 51),
    (1, 37, 2, 3, 64, 51),
    (64, 256, 2, 3, 64, 51),
    (3, 37, 3, 2, 33, 11),
    (2, 256, 4, 3, 5, 101),
    (1, 4, 2, 3, 8, 1024),
    (4096, 8, 2, 3, 4, 5),
    (2, 3, 4, 3, 4, 1024),  # float64: a C51 loss sample too wide to stage (in-place path)
    (1, 3, 2, 3, 4, 2048),  # float64: C51 target rows too wide to stage (in-place path)
]
DTYPES = [torch.float32, torch.float64]
TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-10}
OP_NAMES = ["g6", "g10", "g12", "c51_project", "c51_loss", "c51_target"]
# Relative gap between the best and second-best expected Q below which a float kernel and the
# float64 reference may pick different actions (such (n,k) pairs are not compared).
ARGMAX_MARGIN = {torch.float32: 1e-4, torch.float64: 1e-9}
WARMUP_RUNS = 2
# Blocks that poison_allocator fills with NaN: whole 2 MiB small-pool segments (two 1 MiB
# blocks each) and large-pool blocks that later large outputs are split from.
SMALL_POISON_BYTES = 1 << 20
SMALL_POISON_BLOCKS = 16
LARGE_POISON_BYTES = (32 << 20, 32 << 20, 512 << 20)


def shape_id(shape):
    return "P{}_B{}_K{}_A{}_D{}_atoms{}".format(*shape)


@pytest.fixture(scope="module")
def device():
    dev = torch.device("cuda", torch.cuda.current_device())
    ops = resolve_backend("cuda", dev)  # builds the extension; a failure fails the tests
    assert ops.name == "cuda"
    assert loaded_extension(dev) is not None
    return dev


def poison_allocator(device):
    """Fill the caching allocator's free memory with NaN, so an unwritten output shows."""
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    float_bytes = torch.tensor([], dtype=torch.float32).element_size()
    held = [
        torch.full((SMALL_POISON_BYTES // float_bytes,), float("nan"), device=device)
        for _ in range(SMALL_POISON_BLOCKS)
    ]
    held += [torch.full((n // float_bytes,), float("nan"), device=device) for n in LARGE_POISON_BYTES]
    torch.cuda.synchronize(device)
    del held


def make_inputs(shape, seed):
    """Inputs of every op and upstream gradients, float64 on CPU (the reference's precision)."""
    P, B, K, A, D, atoms = shape
    gen = torch.Generator().manual_seed(seed)
    N = P * B * K

    def randn(*size, scale=1.0):
        return torch.randn(*size, generator=gen, dtype=torch.float64) * scale

    return {
        "f": randn(P, K, B, D) * 2 + 0.5,
        "q_t": randn(P, B, K, A),
        "q_tp1": randn(P, B, K, A),
        "pred": randn(P, B, D),
        "target": randn(P, B, D),
        "nd": (torch.rand(P, B, generator=gen, dtype=torch.float64) > DONE_FRACTION).double(),
        "p": torch.softmax(randn(N, atoms, scale=2.0), dim=-1),
        "r": randn(N, scale=4.0),
        "g": GAMMA_N * (torch.rand(N, generator=gen, dtype=torch.float64) > DONE_FRACTION).double(),
        "logits": randn(P, B, K, atoms, scale=2.0),
        "m": torch.softmax(randn(P, B, K, atoms, scale=2.0), dim=-1),
        "online_n": randn(P * B, K, A, atoms, scale=2.0),
        "target_n": randn(P * B, K, A, atoms, scale=2.0),
        "support": torch.linspace(V_MIN, V_MAX, atoms, dtype=torch.float64),
        "grad_per_sample": randn(P, B),
        "grad_value": randn(P),
    }


def to_device(inputs, dtype, device):
    return {k: v.to(device=device, dtype=dtype) for k, v in inputs.items()}


def rounded_to(inputs, dtype):
    """The float64 CPU inputs the reference sees: exactly the values the kernel gets."""
    return {k: v.to(dtype).to(torch.float64) for k, v in inputs.items()}


def run_op(name, x, fn_set):
    """Forward of op `name` on inputs x with fn_set (the custom ops or the reference).

    Returns (outputs list, differentiable inputs list, upstream gradients list, extra
    non-differentiable outputs list).
    """
    if name == "g6":
        value = fn_set["g6"](x["f"])
        return [value], [x["f"]], [x["grad_value"]], []
    if name == "g10":
        ps, value = fn_set["g10"](x["q_t"], x["q_tp1"], x["nd"])
        return [ps, value], [x["q_t"], x["q_tp1"]], [x["grad_per_sample"], x["grad_value"]], []
    if name == "g12":
        ps, value = fn_set["g12"](x["pred"], x["target"], x["nd"])
        return [ps, value], [x["pred"]], [x["grad_per_sample"], x["grad_value"]], []
    if name == "c51_project":
        m = fn_set["c51_project"](x["p"], x["r"], x["g"], V_MIN, V_MAX)
        return [], [], [], [m]
    if name == "c51_loss":
        ps, value, residual = fn_set["c51_loss"](x["logits"], x["m"])
        return [ps, value], [x["logits"]], [x["grad_per_sample"], x["grad_value"]], [residual]
    if name == "c51_target":
        p_next = fn_set["c51_target"](x["online_n"], x["target_n"], x["support"])
        return [], [], [], [p_next]
    raise ValueError(name)


def _reference_c51_loss(logits, m):
    """The reference loss with the residual the op saves for its backward."""
    return (*reference.c51_loss(logits, m), c51_loss_residual(logits.detach(), m))


CUSTOM = {
    "g6": OPS.g6_branch_indep,
    "g10": OPS.g10_temporal,
    "g12": OPS.g12_predictive,
    "c51_project": OPS.c51_project,
    "c51_loss": OPS.c51_loss,
    "c51_target": OPS.c51_target,
}
REFERENCE = {
    "g6": lambda f: reference.g6_branch_indep(f)[1],
    "g10": reference.g10_temporal,
    "g12": reference.g12_predictive,
    "c51_project": reference.c51_project,
    "c51_loss": _reference_c51_loss,
    "c51_target": double_dqn.c51_target,
}
DIFFERENTIABLE = {
    "g6": ["f"], "g10": ["q_t", "q_tp1"], "g12": ["pred"], "c51_project": [], "c51_loss": ["logits"],
    "c51_target": [],
}


def forward_backward(name, x, fn_set):
    """Outputs followed by the gradients of sum_o <upstream_o, output_o> wrt the op's inputs."""
    for key in DIFFERENTIABLE[name]:
        x[key].requires_grad_(True)
    outputs, wrt, upstream, extras = run_op(name, x, fn_set)
    grads = list(torch.autograd.grad(outputs, wrt, upstream)) if wrt else []
    return [o.detach() for o in outputs + extras] + grads


def decisive_pairs(x64, dtype):
    """[N,K] mask of the (n,k) pairs whose best action is clear in `dtype`: the relative gap
    between the best and second-best expected Q of the online logits exceeds ARGMAX_MARGIN."""
    q = (torch.softmax(x64["online_n"], dim=-1) * x64["support"]).sum(-1)  # [N,K,A]
    if q.shape[-1] < 2:
        return torch.ones(q.shape[:-1], dtype=torch.bool)
    top = q.topk(2, dim=-1).values
    scale = q.abs().amax().clamp_min(1e-30)
    return (top[..., 0] - top[..., 1]) > ARGMAX_MARGIN[dtype] * scale


def assert_close_to_reference(got, want, dtype, what):
    tol = TOLERANCE[dtype]
    got = got.detach().to("cpu", torch.float64)
    want = want.detach().to("cpu", torch.float64)
    assert got.shape == want.shape, what
    assert torch.isfinite(got).all(), f"{what}: non-finite element (unwritten output?)"
    scale = max(want.abs().max().item(), 1e-30) if want.numel() else 1.0
    torch.testing.assert_close(got, want, rtol=tol, atol=tol * scale, msg=lambda m: f"{what}: {m}")


def assert_bitwise_equal(a, b, what):
    assert a.shape == b.shape and a.dtype == b.dtype, what
    as_int = {torch.float32: torch.int32, torch.float64: torch.int64}[a.dtype]
    assert torch.equal(a.contiguous().view(as_int), b.contiguous().view(as_int)), f"{what}: bits differ"


# ------------------------------------------------------------------ correctness


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("name", OP_NAMES)
def test_kernel_matches_float64_reference(device, name, shape, dtype):
    base = make_inputs(shape, seed=100 * OP_NAMES.index(name) + SHAPES.index(shape))
    x64 = rounded_to(base, dtype)
    want = forward_backward(name, x64, REFERENCE)
    poison_allocator(device)
    got = forward_backward(name, to_device(base, dtype, device), CUSTOM)
    assert len(got) == len(want)
    for index, (g, w) in enumerate(zip(got, want)):
        assert g.device.type == device.type and g.dtype == dtype
        assert torch.isfinite(g).all(), f"{name} output {index}: non-finite (unwritten output?)"
        if name == "c51_target":  # a near-tie may pick another action in float32
            keep = decisive_pairs(x64, dtype)
            assert keep.float().mean() > 0.9
            g, w = g.cpu()[keep], w[keep]
        assert_close_to_reference(g, w, dtype, f"{name} output {index}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES[:4], ids=shape_id)
def test_backward_ops_without_per_sample_gradient(device, shape, dtype):
    x64 = rounded_to(make_inputs(shape, seed=11), dtype)
    x = to_device(x64, dtype, device)
    gv, gv64 = x["grad_value"], x64["grad_value"]
    poison_allocator(device)
    cases = [
        (OPS.g10_temporal_backward(None, gv, x["q_t"], x["q_tp1"], x["nd"]),
         g10_temporal_grads(None, gv64, x64["q_t"], x64["q_tp1"], x64["nd"])),
        ([OPS.g12_predictive_backward(None, gv, x["pred"], x["target"], x["nd"])],
         [g12_predictive_grad(None, gv64, x64["pred"], x64["target"], x64["nd"])]),
        ([OPS.c51_loss_backward(None, gv, OPS.c51_loss(x["logits"], x["m"])[2])],
         [c51_loss_grad(None, gv64, x64["logits"], x64["m"])]),
    ]
    for got, want in cases:
        for g, w in zip(got, want):
            assert_close_to_reference(g, w, dtype, "backward without grad_per_sample")


@pytest.mark.parametrize("name", OP_NAMES)
def test_members_never_mix(device, name):
    shape = (5, 37, 2, 3, 16, 51)
    base = make_inputs(shape, seed=3)
    changed = {k: v.clone() for k, v in base.items()}
    keys = ("f", "q_t", "q_tp1", "pred", "target", "logits", "m", "grad_per_sample", "grad_value",
            "online_n", "target_n")
    for key in keys:
        changed[key][-1] = changed[key][-1] * 3 + 1
    a = forward_backward(name, to_device(base, torch.float32, device), CUSTOM)
    b = forward_backward(name, to_device(changed, torch.float32, device), CUSTOM)
    for index, (x, y) in enumerate(zip(a, b)):
        if name == "c51_project":
            continue  # rows of a flattening, not members; the row test below covers it
        # c51_target: rows n = (p,b) of a flattening; only the last row changed
        assert_bitwise_equal(x[:-1], y[:-1], f"{name} output {index}, members (rows) 0..P-2")
    if name == "c51_project":
        rows = shape[0] * shape[1] * shape[2]
        x = to_device(base, torch.float32, device)
        y = to_device(base, torch.float32, device)
        y["r"][-1] += 1.0
        y["p"][-1] = y["p"][-1].flip(0)
        mx = OPS.c51_project(x["p"], x["r"], x["g"], V_MIN, V_MAX)
        my = OPS.c51_project(y["p"], y["r"], y["g"], V_MIN, V_MAX)
        assert mx.shape[0] == rows
        assert_bitwise_equal(mx[:-1], my[:-1], "c51_project rows 0..N-2")


# Inputs whose leading dim is rows of a flattening rather than members: rows per member.
ROWS_PER_MEMBER = {"p": lambda B, K: B * K, "r": lambda B, K: B * K, "g": lambda B, K: B * K,
                   "online_n": lambda B, K: B, "target_n": lambda B, K: B}


def first_members(inputs, members, B, K):
    """The inputs of the first `members` members (rows of flattened inputs alike)."""
    out = {}
    for key, value in inputs.items():
        if key == "support":
            out[key] = value
        elif key in ROWS_PER_MEMBER:
            out[key] = value[: members * ROWS_PER_MEMBER[key](B, K)]
        else:
            out[key] = value[:members]
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("B", [37, 256])
@pytest.mark.parametrize("name", ["c51_project", "c51_loss", "c51_target"])
def test_first_members_do_not_depend_on_population(device, name, B, dtype):
    """The arms invariant: a member's (row's) outputs and gradients are the same bits whether
    more members follow or not (B=37 runs the loss in one kernel, B=256 in two)."""
    K, few, many = 2, 3, 11
    base = make_inputs((many, B, K, 3, 8, 51), seed=19)
    big = forward_backward(name, to_device(base, dtype, device), CUSTOM)
    small = forward_backward(name, to_device(first_members(base, few, B, K), dtype, device), CUSTOM)
    assert len(big) == len(small)
    for index, (a, b) in enumerate(zip(big, small)):
        assert a.shape[0] > b.shape[0]
        assert_bitwise_equal(a[: b.shape[0]], b, f"{name} output {index}, first {few} members")


# ------------------------------------------------------------------ determinism and graphs


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", OP_NAMES)
def test_two_runs_are_bitwise_identical(device, name, dtype):
    base = make_inputs((64, 256, 2, 3, 64, 51), seed=5)
    poison_allocator(device)
    first = forward_backward(name, to_device(base, dtype, device), CUSTOM)
    first = [t.clone() for t in first]
    poison_allocator(device)
    second = forward_backward(name, to_device(base, dtype, device), CUSTOM)
    for index, (a, b) in enumerate(zip(first, second)):
        assert torch.isfinite(a).all()
        assert_bitwise_equal(a, b, f"{name} output {index}")


def capture_and_replay(name, x):
    """Eager outputs, then two replays of a captured forward+backward; returns three lists."""
    for key in DIFFERENTIABLE[name]:
        x[key].requires_grad_(True)

    def step():
        outputs, wrt, upstream, extras = run_op(name, x, CUSTOM)
        grads = list(torch.autograd.grad(outputs, wrt, upstream)) if wrt else []
        return [o.detach() for o in outputs + extras] + grads

    eager = [t.clone() for t in step()]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP_RUNS):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_outputs = step()
    graph.replay()
    first = [t.clone() for t in static_outputs]
    graph.replay()
    second = [t.clone() for t in static_outputs]
    torch.cuda.synchronize()
    return eager, first, second


def check_replays(name, eager, first, second):
    assert len(eager) == len(first) == len(second)
    for index, (e, a, b) in enumerate(zip(eager, first, second)):
        assert torch.isfinite(a).all()
        assert_bitwise_equal(a, b, f"{name} replay 1 vs 2, output {index}")
        assert_bitwise_equal(a, e, f"{name} replay vs eager, output {index}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", OP_NAMES)
def test_cuda_graph_replay_is_bitwise_eager(device, name, dtype):
    base = make_inputs((8, 37, 2, 3, 64, 51), seed=6)
    check_replays(name, *capture_and_replay(name, to_device(base, dtype, device)))


def test_capture_and_replay_in_worker_thread(device):
    """Ray Tune runs a trainable in a worker thread: capture and replay must work there."""
    results, errors = {}, []

    def work():
        try:
            torch.cuda.set_device(device)
            base = make_inputs((4, 37, 2, 3, 16, 51), seed=7)
            for name in OP_NAMES:
                results[name] = capture_and_replay(name, to_device(base, torch.float32, device))
        except BaseException as error:  # noqa: BLE001 - reported in the main thread
            errors.append(error)

    worker = threading.Thread(target=work, name="tune-gems-trainable")
    worker.start()
    worker.join()
    if errors:
        raise errors[0]
    assert set(results) == set(OP_NAMES)
    for name, runs in results.items():
        check_replays(name, *runs)


@pytest.mark.parametrize("name", OP_NAMES)
def test_no_host_sync(device, name):
    base = make_inputs((8, 37, 2, 3, 64, 51), seed=8)
    warm = to_device(base, torch.float32, device)
    forward_backward(name, warm, CUSTOM)  # first-call initialisation happens outside the check
    x = to_device(base, torch.float32, device)
    for key in DIFFERENTIABLE[name]:
        x[key].requires_grad_(True)
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        outputs, wrt, upstream, _ = run_op(name, x, CUSTOM)
        if wrt:
            torch.autograd.grad(outputs, wrt, upstream)
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    torch.cuda.synchronize()


# ------------------------------------------------------------------ registration on CUDA


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck_on_cuda(device, dtype):
    x = to_device(make_inputs((3, 37, 2, 3, 6, 11), seed=9), dtype, device)
    for key in ("f", "q_t", "q_tp1", "pred", "logits"):
        x[key].requires_grad_(True)
    gps, gv = x["grad_per_sample"], x["grad_value"]
    residual = OPS.c51_loss(x["logits"], x["m"])[2]
    cases = [
        (OPS.g6_branch_indep, (x["f"],)),
        (OPS.g10_temporal, (x["q_t"], x["q_tp1"], x["nd"])),
        (OPS.g12_predictive, (x["pred"], x["target"], x["nd"])),
        (OPS.c51_project, (x["p"], x["r"], x["g"], V_MIN, V_MAX)),
        (OPS.c51_loss, (x["logits"], x["m"])),
        (OPS.g6_branch_indep_backward, (gv, x["f"].detach())),
        (OPS.g10_temporal_backward, (gps, gv, x["q_t"].detach(), x["q_tp1"].detach(), x["nd"])),
        (OPS.g10_temporal_backward, (None, gv, x["q_t"].detach(), x["q_tp1"].detach(), x["nd"])),
        (OPS.g12_predictive_backward, (gps, gv, x["pred"].detach(), x["target"], x["nd"])),
        (OPS.c51_loss_backward, (gps, gv, residual)),
        (OPS.c51_loss_backward, (None, gv, residual)),
        (OPS.c51_target, (x["online_n"], x["target_n"], x["support"])),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args)


def test_gem_ops_cuda_backend_matches_reference_backend(device):
    cuda_ops = resolve_backend("cuda", device)
    ref_ops = resolve_backend("reference", device)
    assert (cuda_ops.name, ref_ops.name) == ("cuda", "reference")
    x = to_device(make_inputs((2, 37, 2, 3, 8, 51), seed=10), torch.float64, device)
    none, value = cuda_ops.g6_branch_indep(x["f"])
    assert none is None
    assert_close_to_reference(value, ref_ops.g6_branch_indep(x["f"])[1], torch.float64, "g6")
    pairs = [
        (cuda_ops.g10_temporal(x["q_t"], x["q_tp1"], x["nd"]), ref_ops.g10_temporal(x["q_t"], x["q_tp1"], x["nd"])),
        (cuda_ops.g12_predictive(x["pred"], x["target"], x["nd"]), ref_ops.g12_predictive(x["pred"], x["target"], x["nd"])),
        (cuda_ops.c51_loss(x["logits"], x["m"]), ref_ops.c51_loss(x["logits"], x["m"])),
    ]
    for got, want in pairs:
        for g, w in zip(got, want):
            assert_close_to_reference(g, w, torch.float64, "GemOps")
    assert_close_to_reference(
        cuda_ops.c51_project(x["p"], x["r"], x["g"], V_MIN, V_MAX),
        ref_ops.c51_project(x["p"], x["r"], x["g"], V_MIN, V_MAX),
        torch.float64,
        "c51_project",
    )
    # GemOps.c51_target takes the learner's [P,B,K,A,atoms] logits
    P, B = 2, 37
    online = x["online_n"].view(P, B, *x["online_n"].shape[1:])
    target = x["target_n"].view(P, B, *x["target_n"].shape[1:])
    keep = decisive_pairs({k: v.cpu() for k, v in x.items()}, torch.float64).view(P, B, -1)
    got = cuda_ops.c51_target(online, target, x["support"])
    want = ref_ops.c51_target(online, target, x["support"])
    assert got.shape == want.shape == (P, B, online.shape[2], online.shape[-1])
    assert_close_to_reference(got.cpu()[keep], want.cpu()[keep], torch.float64, "c51_target")


def test_cuda_op_without_extension_runs_reference_math(device, monkeypatch):
    """A CUDA tensor through a tune_gems op still works when no extension is loaded."""
    from tune_gems.ops import custom_ops

    base = make_inputs((2, 37, 2, 3, 8, 51), seed=12)
    with_kernels = forward_backward("g10", to_device(base, torch.float64, device), CUSTOM)
    monkeypatch.setattr(custom_ops, "loaded_extension", lambda _device: None)
    without = forward_backward("g10", to_device(base, torch.float64, device), CUSTOM)
    for index, (a, b) in enumerate(zip(with_kernels, without)):
        assert_close_to_reference(a, b, torch.float64, f"fallback output {index}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_g6_is_scale_free_on_cuda_as_in_the_reference(device, dtype):
    """Issue 21: the standardisation floor is relative to each branch's mean feature variance, so
    shrinking (or growing) a branch's features leaves G6 unchanged (while its variances stay far
    above G6_EPS_FLOOR / G6_EPS_REL = 1e-9); a multi-tile D (70: three column tiles) with
    branches at scales 1e-2 and 1e2."""
    x = make_inputs((3, 37, 2, 3, 70, 11), seed=21)
    f = x["f"].clone()
    f[:, 0] *= 1e-2
    f[:, 1] *= 1e2
    want = reference.g6_branch_indep(f.double())[1]
    got = OPS.g6_branch_indep(f.to(device, dtype))
    assert_close_to_reference(got, want, dtype, "g6 scale-free")
    unscaled = OPS.g6_branch_indep(x["f"].to(device, dtype))
    torch.testing.assert_close(got, unscaled, rtol=max(TOLERANCE[dtype] * 10, 1e-7), atol=0.0)
