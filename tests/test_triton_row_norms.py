"""The triton path's per-member gradient norms and means (tune_gems.ops.triton_layers.row_norms,
row_means), on
Triton's CPU interpreter: the float64 norm within float32 rounding, and a row's bits the same
alone as inside any number of rows (what lets a member's gradient clip, and its reported
grad_norm and q_mean, not depend on the member count: tests/gpu/test_triton_learner_gpu.py's seed-block
tests check it through the learner on the GPU)."""

from __future__ import annotations

import pytest
import torch

from test_triton_layers import triton_interpreter  # noqa: F401  (the module's interpreter fixture)

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0 to a scalar:DeprecationWarning")


def _gradient(rows: int, cols: int) -> torch.Tensor:
    """A flat gradient's shape: rows of `cols + 7` columns, of which the test takes columns 3..3+cols
    (a clip group's slice: contiguous within a row, rows strided), with magnitudes spread over
    six decades so the order of the sum matters to the last bit."""
    g = torch.Generator().manual_seed(rows * 1000 + cols)
    full = torch.randn(rows, cols + 7, generator=g) * torch.logspace(-3, 3, cols + 7)[torch.randperm(cols + 7, generator=g)]
    return full[:, 3 : 3 + cols]


@pytest.mark.parametrize("cols", [1, 1000, 2500])
def test_row_norms_equal_the_float64_norm_within_float32_rounding(triton_interpreter, cols):
    rows = _gradient(5, cols)
    got = triton_interpreter.row_norms(rows)
    want = torch.linalg.vector_norm(rows.double(), dim=1)
    torch.testing.assert_close(got.double(), want, rtol=cols * 2.0**-24 + 2.0**-23, atol=0.0)


@pytest.mark.parametrize("cols", [1, 1000, 2500])
def test_row_means_equal_the_float64_mean_within_float32_rounding(triton_interpreter, cols):
    rows = _gradient(5, cols)
    got = triton_interpreter.row_means(rows).double()
    want = rows.double().mean(dim=1)
    assert ((got - want).abs() <= (cols + 2) * 2.0**-24 * rows.double().abs().mean(dim=1)).all()


@pytest.mark.parametrize("reduction", ["row_norms", "row_means"])
def test_a_row_alone_has_the_bits_it_has_inside_any_number_of_rows(triton_interpreter, reduction):
    reduce = getattr(triton_interpreter, reduction)
    rows = _gradient(9, 2500)
    together = reduce(rows)
    for r in range(9):
        assert torch.equal(reduce(rows[r : r + 1]), together[r : r + 1]), r
    assert torch.equal(reduce(rows[3:7]), together[3:7])
    assert torch.equal(reduce(rows.flip(0).contiguous()).flip(0), together)


def test_a_matrix_it_cannot_read_row_by_row_is_refused(triton_interpreter):
    with pytest.raises(ValueError, match="contiguous rows"):
        triton_interpreter.row_norms(_gradient(4, 10).t())
    with pytest.raises(ValueError, match="float32"):
        triton_interpreter.row_norms(_gradient(4, 10).double())
