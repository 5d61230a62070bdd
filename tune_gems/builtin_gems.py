"""The three built-in gems, registered like any plug-in, above `ops` and `model.heads` and imported
by name on first use (`registry._ensure_builtins`); math in ops/reference.py, nulls in docs/gems.md
"Nulls". Torch is imported on first evaluation, so validating a config does not import it."""

from __future__ import annotations

from tune_gems.gems.inputs import GemInputs
from tune_gems.gems.registry import BUILTIN_ORIGIN, Gem, register


def _ref():
    from tune_gems.ops import reference

    return reference


def _fused(op: str):
    """The op's call through its `tune_gems::` custom op (its row of the op table)."""
    from tune_gems.ops.custom_ops import OP_TABLE

    return OP_TABLE[op].fused


# -- G6 branch independence -------------------------------------------------------------------


def g6_reference(x: GemInputs):
    return _ref().g6_branch_indep(x.adv_features)[1]


def g6_fused(x: GemInputs):
    return _fused("g6_branch_indep")(x.adv_features)[1]


def _means(x: GemInputs, t):
    """t's mean over its last axis, row by row through the backend's fixed-order `row_means`."""
    return x.row_means(t.float().reshape(-1, t.shape[-1]).contiguous()).view(t.shape[:-1])


def g6_null(x: GemInputs):
    import torch

    f = x.adv_features
    P, K, B, _ = f.shape
    if K < 2:
        return f.new_zeros(P)
    if x.row_means is None:
        var = f.var(dim=2, unbiased=False, keepdim=True)  # [P,K,1,D]
        shrink = (var / (var + _ref().g6_eps(var))).mean(dim=(2, 3))  # [P,K]
    else:  # the same statistic, every mean a fixed-order row mean (two-pass variance)
        columns = f.float().transpose(2, 3)  # [P,K,D,B]
        deviation = columns - _means(x, columns).unsqueeze(-1)
        var = _means(x, deviation * deviation)  # [P,K,D]
        eps = _ref().G6_EPS_REL * _means(x, var).unsqueeze(-1) + _ref().G6_EPS_FLOOR
        shrink = _means(x, var / (var + eps))
    iu, ju = torch.triu_indices(K, K, offset=1, device=f.device)
    pairs = shrink[:, iu] * shrink[:, ju]
    return (pairs.mean(dim=1) if x.row_means is None else _means(x, pairs)) / (B - 1)


def _masked_mean_squares(x: GemInputs, reference, a, b, nd):
    """The value of `reference` (`g10_temporal`, `g12_predictive`: the masked mean over the batch of the
    mean squared a - b), or with `x.row_means` the same means in fixed order."""
    if x.row_means is None:
        return reference(a, b, nd)[1]
    d = (a.float() - b.float()).flatten(2)
    return _means(x, nd.float() * _means(x, d * d))


# -- G10 temporal consistency -----------------------------------------------------------------


def g10_reference(x: GemInputs):
    return _ref().g10_temporal(x.q_t, x.q_tp1, x.not_done)[1]


def g10_fused(x: GemInputs):
    return _fused("g10_temporal")(x.q_t, x.q_tp1, x.not_done)[1]


def g10_null(x: GemInputs):
    """G10 on permuted successors: sample i's Q(s_t) against sample i-1's Q(s_{t+1}) (cyclic within a
    member's batch), masked by that successor's not-done, so the null sums as many terms as the value."""
    return _masked_mean_squares(x, _ref().g10_temporal, x.q_t, x.q_tp1.roll(1, dims=1), x.not_done.roll(1, dims=1))


# -- G12 predictive coding --------------------------------------------------------------------


def _g12(x: GemInputs, g12_predictive):
    pred = x.head(x.h_t, x.action)
    return g12_predictive(pred.float(), x.h_tp1.float().detach(), x.not_done)[1]


def g12_reference(x: GemInputs):
    return _g12(x, _ref().g12_predictive)


def g12_fused(x: GemInputs):
    return _g12(x, _fused("g12_predictive"))


def g12_null(x: GemInputs):
    import torch

    h_t, target = x.h_t.float().detach(), x.h_tp1.float().detach()
    predictive = _ref().g12_predictive
    persistence = _masked_mean_squares(x, predictive, h_t, target, x.not_done)
    return torch.minimum(persistence, _masked_mean_squares(x, predictive, torch.zeros_like(target), target, x.not_done))


def g12_predictor(ctx):
    from tune_gems.model.heads import LatentPredictor

    return LatentPredictor(ctx)


G6 = register(Gem(
    name="g6", metric="g6_branch_indep", origin=BUILTIN_ORIGIN, reference=g6_reference, fused=g6_fused, null=g6_null,
    null_by_row_means=True,
    description="branch independence: mean squared cross-correlation of the action branches' advantage features"))
G10 = register(Gem(
    name="g10", metric="g10_temporal", origin=BUILTIN_ORIGIN, reference=g10_reference, fused=g10_fused,
    null=g10_null, null_by_row_means=True,
    description="temporal consistency: mean squared change of expected Q from s_t to s_{t+1}"))
G12 = register(Gem(
    name="g12", metric="g12_predictive", origin=BUILTIN_ORIGIN, reference=g12_reference, fused=g12_fused,
    null=g12_null, null_by_row_means=True, head=g12_predictor,
    description="predictive coding: error of a predictor of the target latent h_{t+1} from h_t and the action"))
