"""CPU checks of the tune_gems:: custom ops and of the backend selector.

On CPU the ops run the plain-torch reference (forward) and closed-form gradients (backward),
so these tests pin the registration (opcheck: schema, fake, autograd, AOT dispatch), the
closed-form gradients (gradcheck in float64 and agreement with torch.autograd on the
reference) and resolve_backend's semantics. The CUDA kernels are checked in tests/gpu.
"""

from __future__ import annotations

import pytest
import torch

from tune_gems.contracts.errors import ConfigError, KernelBuildError
from tune_gems.ops import reference
from tune_gems.ops import KERNEL_CHOICES, GemOps, reference_ops, resolve_backend
from tune_gems.ops.custom_ops import C51_PROJECT_NO_GRAD, C51_TARGET_NO_GRAD
from tune_gems.ops.reference_grads import c51_loss_grad, c51_loss_residual

OPS = torch.ops.tune_gems

# (P, B, K, A, D, atoms): a tiny case, B not a multiple of 32, more branches than the default.
SHAPES = [
    (1, 5, 2, 3, 4, 7),
    (3, 37, 2, 3, 6, 11),
    (2, 9, 3, 2, 5, 5),
]
DTYPES = [torch.float32, torch.float64]
V_MIN, V_MAX = -10.0, 10.0


def make_inputs(shape, dtype, seed=0, requires_grad=False):
    """Fresh random inputs for every op at one shape; nd masks out about a third of samples."""
    P, B, K, A, D, atoms = shape
    gen = torch.Generator().manual_seed(seed)

    def randn(*size, scale=1.0):
        t = (torch.randn(*size, generator=gen, dtype=torch.float64) * scale).to(dtype)
        return t.requires_grad_(requires_grad)

    nd = (torch.rand(P, B, generator=gen) > 0.33).to(dtype)
    N = P * B * K
    probs = torch.softmax(torch.randn(N, atoms, generator=gen, dtype=torch.float64), -1).to(dtype)
    m = torch.softmax(torch.randn(P, B, K, atoms, generator=gen, dtype=torch.float64), -1).to(dtype)
    return {
        "f": randn(P, K, B, D),
        "q_t": randn(P, B, K, A),
        "q_tp1": randn(P, B, K, A),
        "pred": randn(P, B, D),
        "target": randn(P, B, D).detach(),
        "nd": nd,
        "p": probs,
        "r": (torch.randn(N, generator=gen, dtype=torch.float64) * 3).to(dtype),
        "g": (0.97 * (torch.rand(N, generator=gen) > 0.2)).to(dtype),
        "logits": randn(P, B, K, atoms, scale=2.0),
        "m": m,
        "online_n": randn(P * B, K, A, atoms, scale=2.0).detach(),
        "target_n": randn(P * B, K, A, atoms, scale=2.0).detach(),
        "support": torch.linspace(V_MIN, V_MAX, atoms, dtype=dtype),
        "grad_per_sample": torch.randn(P, B, generator=gen, dtype=torch.float64).to(dtype),
        "grad_value": torch.randn(P, generator=gen, dtype=torch.float64).to(dtype),
    }


def forward_cases(x):
    """(op, args) of every forward op on inputs x."""
    return [
        (OPS.g6_branch_indep, (x["f"],)),
        (OPS.g10_temporal, (x["q_t"], x["q_tp1"], x["nd"])),
        (OPS.g12_predictive, (x["pred"], x["target"], x["nd"])),
        (OPS.c51_project, (x["p"], x["r"], x["g"], V_MIN, V_MAX)),
        (OPS.c51_loss, (x["logits"], x["m"])),
        (OPS.c51_target, (x["online_n"], x["target_n"], x["support"])),
    ]


NO_GRAD_OPS = (OPS.c51_project, OPS.c51_target)


def backward_cases(x):
    """(op, args) of every backward op, with and without the optional per-sample gradient."""
    gps, gv = x["grad_per_sample"], x["grad_value"]
    cases = [(OPS.g6_branch_indep_backward, (gv, x["f"]))]
    for upstream in (gps, None):
        cases += [
            (OPS.g10_temporal_backward, (upstream, gv, x["q_t"], x["q_tp1"], x["nd"])),
            (OPS.g12_predictive_backward, (upstream, gv, x["pred"], x["target"], x["nd"])),
            (OPS.c51_loss_backward, (upstream, gv, c51_loss_residual(x["logits"].detach(), x["m"]))),
        ]
    return cases


def case_id(shape):
    return "P{}_B{}_K{}_A{}_D{}_atoms{}".format(*shape)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=case_id)
def test_opcheck_forward_ops(shape, dtype):
    x = make_inputs(shape, dtype, requires_grad=True)
    for op, args in forward_cases(x):
        if op in NO_GRAD_OPS:
            args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
        torch.library.opcheck(op, args)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=case_id)
def test_opcheck_backward_ops(shape, dtype):
    x = make_inputs(shape, dtype)
    for op, args in backward_cases(x):
        torch.library.opcheck(op, args)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=case_id)
def test_forward_equals_reference(shape, dtype):
    x = make_inputs(shape, dtype)
    assert torch.equal(OPS.g6_branch_indep(x["f"]), reference.g6_branch_indep(x["f"])[1])
    for got, want in [
        (OPS.g10_temporal(x["q_t"], x["q_tp1"], x["nd"]), reference.g10_temporal(x["q_t"], x["q_tp1"], x["nd"])),
        (OPS.g12_predictive(x["pred"], x["target"], x["nd"]), reference.g12_predictive(x["pred"], x["target"], x["nd"])),
        (OPS.c51_loss(x["logits"], x["m"])[:2], reference.c51_loss(x["logits"], x["m"])),
    ]:
        assert len(got) == 2
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert torch.equal(OPS.c51_loss(x["logits"], x["m"])[2], c51_loss_residual(x["logits"], x["m"]))
    m = OPS.c51_project(x["p"], x["r"], x["g"], V_MIN, V_MAX)
    assert torch.equal(m, reference.c51_project(x["p"], x["r"], x["g"], V_MIN, V_MAX))


def _reference_grads(fn, inputs, outputs_weights):
    """torch.autograd gradients of sum_o <weight_o, output_o> of the reference fn."""
    outputs = [o for o in fn(*inputs) if o is not None]
    loss = sum((o * w).sum() for o, w in zip(outputs, outputs_weights))
    wrt = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    return torch.autograd.grad(loss, wrt)


def _op_grads(fn, inputs, outputs_weights):
    outputs = fn(*inputs)
    outputs = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
    loss = sum((o * w).sum() for o, w in zip(outputs, outputs_weights))
    wrt = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    return torch.autograd.grad(loss, wrt)


@pytest.mark.parametrize("shape", SHAPES, ids=case_id)
def test_closed_form_grads_equal_autograd_of_reference(shape):
    x = make_inputs(shape, torch.float64, seed=1, requires_grad=True)
    gps, gv = x["grad_per_sample"], x["grad_value"]
    cases = [
        (OPS.g6_branch_indep, lambda f: reference.g6_branch_indep(f), (x["f"],), [gv], [gv]),
        (OPS.g10_temporal, reference.g10_temporal, (x["q_t"], x["q_tp1"], x["nd"]), [gps, gv], [gps, gv]),
        (OPS.g12_predictive, reference.g12_predictive, (x["pred"], x["target"], x["nd"]), [gps, gv], [gps, gv]),
        (OPS.c51_loss, reference.c51_loss, (x["logits"], x["m"]), [gps, gv], [gps, gv]),
    ]
    for op, ref_fn, inputs, op_weights, ref_weights in cases:
        got = _op_grads(op, inputs, op_weights)
        want = _reference_grads(ref_fn, inputs, ref_weights)
        assert len(got) == len(want)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape", SHAPES, ids=case_id)
def test_gradcheck_custom_ops_float64(shape):
    x = make_inputs(shape, torch.float64, seed=2, requires_grad=True)
    # Full Jacobians on the smallest shape; random projections (fast mode) on larger ones.
    fast = shape != SHAPES[0]
    for op, args in forward_cases(x):
        if op in NO_GRAD_OPS:
            continue  # not differentiable by design
        assert torch.autograd.gradcheck(op, args, fast_mode=fast)


def test_g6_single_branch_is_zero_with_zero_gradient():
    f = torch.randn(2, 1, 6, 3, dtype=torch.float64, requires_grad=True)
    value = OPS.g6_branch_indep(f)
    assert torch.equal(value, torch.zeros(2, dtype=torch.float64))
    (grad,) = torch.autograd.grad(value.sum(), f)
    assert torch.equal(grad, torch.zeros_like(f))


def test_unused_per_sample_output_gives_value_only_gradient():
    x = make_inputs(SHAPES[1], torch.float64, seed=3, requires_grad=True)
    _, value = OPS.g10_temporal(x["q_t"], x["q_tp1"], x["nd"])
    got = torch.autograd.grad(value.sum(), [x["q_t"], x["q_tp1"]])
    _, ref_value = reference.g10_temporal(x["q_t"], x["q_tp1"], x["nd"])
    want = torch.autograd.grad(ref_value.sum(), [x["q_t"], x["q_tp1"]])
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_targets_get_no_gradient():
    x = make_inputs(SHAPES[0], torch.float64)
    target = x["target"].clone().requires_grad_(True)
    m = x["m"].clone().requires_grad_(True)
    pred = x["pred"].clone().requires_grad_(True)
    logits = x["logits"].clone().requires_grad_(True)
    _, v12 = OPS.g12_predictive(pred, target, x["nd"])
    _, vc, _ = OPS.c51_loss(logits, m)
    grads = torch.autograd.grad((v12 + vc).sum(), [pred, target, logits, m], allow_unused=True)
    assert grads[0] is not None and grads[2] is not None
    assert grads[1] is None and grads[3] is None


def test_c51_project_backward_raises_clearly():
    x = make_inputs(SHAPES[0], torch.float64)
    p = x["p"].clone().requires_grad_(True)
    m = OPS.c51_project(p, x["r"], x["g"], V_MIN, V_MAX)
    with pytest.raises(RuntimeError, match="has no gradient"):
        m.sum().backward()
    assert "no_grad" in C51_PROJECT_NO_GRAD


def test_member_outputs_do_not_depend_on_other_members():
    shape = SHAPES[1]
    x = make_inputs(shape, torch.float64, seed=4)
    y = make_inputs(shape, torch.float64, seed=4)
    for key in ("f", "q_t", "pred", "logits"):
        y[key][-1] += 1.0
    for (op, args_x), (_, args_y) in zip(forward_cases(x), forward_cases(y)):
        if op in NO_GRAD_OPS:
            continue  # rows, not members (test_c51_target_rows_are_independent)
        out_x, out_y = op(*args_x), op(*args_y)
        out_x = [out_x] if isinstance(out_x, torch.Tensor) else out_x
        out_y = [out_y] if isinstance(out_y, torch.Tensor) else out_y
        for a, b in zip(out_x, out_y):
            assert torch.equal(a[:-1], b[:-1])


# ------------------------------------------------------------------ resolve_backend


def test_reference_backend_is_the_reference():
    ops = resolve_backend("reference", torch.device("cpu"))
    assert isinstance(ops, GemOps) and not ops.fused
    assert ops.name == "reference" and ops.c51_loss is reference.c51_loss
    x = make_inputs(SHAPES[0], torch.float64)
    assert ops.g6_branch_indep(x["f"])[0] is None
    assert torch.equal(ops.g10_temporal(x["q_t"], x["q_tp1"], x["nd"])[1],
                       reference.g10_temporal(x["q_t"], x["q_tp1"], x["nd"])[1])


def test_cuda_backend_on_cpu_raises_one_line():
    with pytest.raises(KernelBuildError) as error:
        resolve_backend("cuda", torch.device("cpu"))
    message = str(error.value)
    assert message and "\n" not in message and "cuda" in message.lower()


def test_unknown_backend_is_a_config_error():
    with pytest.raises(ConfigError, match="kernels"):
        resolve_backend("triton", "cpu")
    assert KERNEL_CHOICES == ("auto", "cuda", "reference")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_auto_backend_on_cpu_uses_custom_ops_with_reference_math(dtype):
    ops = resolve_backend("auto", "cpu")
    assert ops.fused and ops.name == "reference"
    x = make_inputs(SHAPES[1], dtype, seed=5)
    ref = reference_ops()
    none, value = ops.g6_branch_indep(x["f"])
    assert none is None and torch.equal(value, ref.g6_branch_indep(x["f"])[1])
    pairs = [
        (ops.g10_temporal(x["q_t"], x["q_tp1"], x["nd"]), ref.g10_temporal(x["q_t"], x["q_tp1"], x["nd"])),
        (ops.g12_predictive(x["pred"], x["target"], x["nd"]), ref.g12_predictive(x["pred"], x["target"], x["nd"])),
        (ops.c51_loss(x["logits"], x["m"]), ref.c51_loss(x["logits"], x["m"])),
    ]
    for got, want in pairs:
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert torch.equal(
        ops.c51_project(x["p"], x["r"], x["g"], V_MIN, V_MAX),
        ref.c51_project(x["p"], x["r"], x["g"], V_MIN, V_MAX),
    )


def test_auto_backend_casts_mask_to_input_dtype():
    ops = resolve_backend("auto", "cpu")
    x = make_inputs(SHAPES[0], torch.float64)
    per_sample, value = ops.g10_temporal(x["q_t"], x["q_tp1"], x["nd"].float())
    assert per_sample.dtype == torch.float64 and value.dtype == torch.float64


def test_auto_backend_falls_back_with_one_warning(monkeypatch):
    """kernels=auto on a CUDA device whose build fails: reference ops, one warning per process."""
    import warnings

    from tune_gems.ops import backend

    message = f"simulated build failure {id(monkeypatch)}"

    def failing_build(device):
        raise KernelBuildError(message)

    monkeypatch.setattr(backend, "load_extension", failing_build)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = resolve_backend("auto", torch.device("cuda", 0))
        second = resolve_backend("auto", torch.device("cuda", 0))
    assert not first.fused and not second.fused
    assert first.name == second.name == "reference"
    relevant = [w for w in caught if message in str(w.message)]
    assert len(relevant) == 1 and "\n" not in str(relevant[0].message)


def test_build_key_and_folders(monkeypatch, tmp_path):
    from tune_gems.ops import build

    key_90 = build.build_key("90")
    assert key_90 == build.build_key("90") and key_90 != build.build_key("80")
    assert len(key_90) == build.BUILD_KEY_LENGTH
    assert (build.kernels_dir() / build.BINDING_SOURCE).is_file()
    monkeypatch.setenv(build.EXTENSIONS_DIR_ENV, str(tmp_path / "ext"))
    assert build.extensions_root() == tmp_path / "ext"
    monkeypatch.setenv(build.KERNELS_DIR_ENV, str(tmp_path))
    assert build.kernels_dir() == tmp_path.resolve()
    with pytest.raises(KernelBuildError, match="not found"):
        build.build_key("90")


# ------------------------------------------------------------------ C51 loss: saved residual


@pytest.mark.parametrize("shape", SHAPES, ids=case_id)
def test_c51_loss_gradient_from_residual_equals_former_closed_form(shape):
    """The backward scales the saved residual: the same bits as recomputing the softmax."""
    x = make_inputs(shape, torch.float32, seed=13, requires_grad=True)
    gps, gv = x["grad_per_sample"], x["grad_value"]
    per_sample, value, residual = OPS.c51_loss(x["logits"], x["m"])
    assert not residual.requires_grad
    got = torch.autograd.grad([per_sample, value], x["logits"], [gps, gv])[0]
    assert torch.equal(got, c51_loss_grad(gps, gv, x["logits"].detach(), x["m"]))


def test_c51_loss_per_sample_only_gradient_gets_zero_value_gradient():
    x = make_inputs(SHAPES[1], torch.float64, seed=14, requires_grad=True)
    gps = x["grad_per_sample"]
    per_sample, _, _ = OPS.c51_loss(x["logits"], x["m"])
    got = torch.autograd.grad(per_sample, x["logits"], gps)[0]
    want = torch.autograd.grad(reference.c51_loss(x["logits"], x["m"])[0], x["logits"], gps)[0]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)


def test_c51_loss_residual_output_carries_no_gradient():
    x = make_inputs(SHAPES[0], torch.float64, requires_grad=True)
    _, value, residual = OPS.c51_loss(x["logits"], x["m"])
    assert not residual.requires_grad and value.requires_grad


# ------------------------------------------------------------------ C51 double-DQN target


def learner_double_dqn(logits_n, target_logits_n, support):
    """The learner's former inline double-DQN target (tune_gems/trainer/learner.py `_learn`),
    with expected_q = (softmax(logits.float()) * support).sum(-1) as in the network."""
    P, B, K, _, atoms = logits_n.shape
    expected_q = (torch.softmax(logits_n.float(), dim=-1) * support).sum(-1)
    a_star = expected_q.argmax(dim=-1)
    p_next = torch.softmax(target_logits_n.float(), dim=-1)
    return p_next.gather(3, a_star[..., None, None].expand(P, B, K, 1, atoms)).squeeze(3)


def learner_like_logits(P, B, K, A, atoms, seed):
    """Online logits at s_{t+n} and target logits there, sliced as the learner slices them
    (non-contiguous views of [P,3B,...] and [P,2B,...] network outputs)."""
    gen = torch.Generator().manual_seed(seed)
    online = torch.randn(P, 3 * B, K, A, atoms, generator=gen) * 2
    target = torch.randn(P, 2 * B, K, A, atoms, generator=gen) * 2
    return online[:, 2 * B :], target[:, B:]


@pytest.mark.parametrize("shape", SHAPES, ids=case_id)
@pytest.mark.parametrize("backend", ["auto", "reference"])
def test_c51_target_equals_learner_expressions_bitwise(shape, backend):
    P, B, K, A, _, atoms = shape
    logits_n, target_logits_n = learner_like_logits(P, B, K, A, atoms, seed=15)
    support = torch.linspace(V_MIN, V_MAX, atoms)
    ops = resolve_backend(backend, "cpu")
    got = ops.c51_target(logits_n, target_logits_n, support)
    want = learner_double_dqn(logits_n, target_logits_n, support)
    assert got.shape == (P, B, K, atoms) and got.dtype == torch.float32
    assert torch.equal(got, want)


def test_c51_target_casts_target_logits_to_the_online_dtype():
    """The learner's target network may return bf16 logits: they are cast, as .float() did."""
    P, B, K, A, atoms = 2, 5, 2, 3, 11
    logits_n, target_logits_n = learner_like_logits(P, B, K, A, atoms, seed=16)
    target_bf16 = target_logits_n.to(torch.bfloat16)
    support = torch.linspace(V_MIN, V_MAX, atoms)
    want = learner_double_dqn(logits_n, target_bf16, support)
    for backend in ("auto", "reference"):
        assert torch.equal(resolve_backend(backend, "cpu").c51_target(logits_n, target_bf16, support), want)


def test_c51_target_ties_pick_the_first_action():
    N, K, A, atoms = 3, 2, 4, 7
    support = torch.linspace(V_MIN, V_MAX, atoms, dtype=torch.float64)
    low = -torch.arange(atoms, dtype=torch.float64)  # mass on low atoms: small Q
    high = torch.arange(atoms, dtype=torch.float64)  # mass on high atoms: large Q
    online = low.repeat(N, K, A, 1)
    online[:, 0, 1] = high  # branch 0: actions 1 and 3 tie at the maximum
    online[:, 0, 3] = high
    # branch 1: all actions equal -> action 0
    target = torch.randn(N, K, A, atoms, dtype=torch.float64, generator=torch.Generator().manual_seed(17))
    got = OPS.c51_target(online, target, support)
    softmax = torch.softmax(target, dim=-1)
    assert torch.equal(got[:, 0], softmax[:, 0, 1])
    assert torch.equal(got[:, 1], softmax[:, 1, 0])


def test_c51_target_rows_are_independent():
    """Row n's output depends on row n only (the arms invariant: more rows, same first rows)."""
    x = make_inputs(SHAPES[1], torch.float64, seed=18)
    full = OPS.c51_target(x["online_n"], x["target_n"], x["support"])
    head = OPS.c51_target(x["online_n"][:-3].contiguous(), x["target_n"][:-3].contiguous(), x["support"])
    assert torch.equal(full[:-3], head)


def test_c51_target_backward_raises_clearly():
    x = make_inputs(SHAPES[0], torch.float64)
    online = x["online_n"].clone().requires_grad_(True)
    p_next = OPS.c51_target(online, x["target_n"], x["support"])
    with pytest.raises(RuntimeError, match="has no gradient"):
        p_next.sum().backward()
    assert "no_grad" in C51_TARGET_NO_GRAD
