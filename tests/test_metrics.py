"""tune_gems.stats.metrics against values computed by hand (the derivations are in the comments)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tune_gems.stats.metrics import max_drawdown, sharpe, sortino, total_return, turnover

R = [0.01, -0.02, 0.03]
# mean = 0.02 / 3 = 2/300 = 0.00666...
# deviations from the mean: 1/300, -8/300, 7/300 -> squares (1 + 64 + 49) / 90000 = 114/90000
# var (ddof=1) = 114/90000 / 2 = 57/90000 -> std = sqrt(57)/300 = 0.025166114784235832
# per-period Sharpe = (2/300) / (sqrt(57)/300) = 2/sqrt(57) = 0.26490647141300877
# annualised (252) = 2 * sqrt(252/57) = 4.205259864302775
R_SHARPE_1 = 0.26490647141300877
R_SHARPE_252 = 4.205259864302775

R2 = [0.02, 0.0, -0.01]
# mean = 1/300; deviations 5/300, -1/300, -4/300 -> squares 42/90000; var = 21/90000
# per-period Sharpe = (1/300) / (sqrt(21)/300) = 1/sqrt(21); annualised = sqrt(252/21) = sqrt(12)
R2_SHARPE_252 = 3.4641016151377544


# --- sharpe ------------------------------------------------------------------------------------


def test_sharpe_hand_computed():
    assert sharpe(R) == pytest.approx(R_SHARPE_252, rel=1e-12)
    assert sharpe(R2) == pytest.approx(R2_SHARPE_252, rel=1e-12)
    assert isinstance(sharpe(R), float)


def test_sharpe_periods_per_year_scaling():
    assert sharpe(R, periods_per_year=1) == pytest.approx(R_SHARPE_1, rel=1e-12)
    # monthly: 2/sqrt(57) * sqrt(12) = 0.9176629354822471
    assert sharpe(R, periods_per_year=12) == pytest.approx(0.9176629354822471, rel=1e-12)


def test_sharpe_is_zero_without_variance():
    assert sharpe([0.0, 0.0, 0.0, 0.0]) == 0.0
    assert sharpe([0.01]) == 0.0  # one period: no std at all
    assert sharpe([]) == 0.0


@pytest.mark.parametrize("value,n", [(0.01, 10), (0.1, 3), (0.001, 252)])
def test_sharpe_is_zero_for_constant_nonzero_returns(value, n):
    assert sharpe([value] * n) == 0.0


# --- sortino -----------------------------------------------------------------------------------


def test_sortino_hand_computed():
    # downside deviation = sqrt(mean(min(r, 0)^2)) = sqrt((0 + 0.0004 + 0) / 3) = 0.02/sqrt(3)
    # mean / dd = (0.02/3) / (0.02/sqrt(3)) = 1/sqrt(3) = 0.5773502691896258
    # annualised: sqrt(252) / sqrt(3) = sqrt(84) = 9.16515138991168
    assert sortino(R, periods_per_year=1) == pytest.approx(0.5773502691896258, rel=1e-12)
    assert sortino(R) == pytest.approx(9.16515138991168, rel=1e-12)
    # [-0.01, -0.03]: mean = -0.02; dd = sqrt((0.0001 + 0.0009) / 2) = sqrt(0.0005) = 0.022360679...
    # ratio = -0.02 / 0.0223606797749979 = -0.894427190999916 (= -2/sqrt(5))
    assert sortino([-0.01, -0.03], periods_per_year=1) == pytest.approx(-0.894427190999916, rel=1e-12)


def test_sortino_is_zero_without_downside():
    assert sortino([0.01, 0.02, 0.0]) == 0.0
    assert sortino([0.0, 0.0]) == 0.0


# --- max_drawdown ------------------------------------------------------------------------------


def test_max_drawdown_hand_computed():
    # equity 1 -> 1.01 -> 0.9898 -> 1.019494; peak 1.01, trough 0.9898: 1 - 0.9898/1.01 = 0.02
    assert max_drawdown(R) == pytest.approx(0.02, rel=1e-12)
    # equity 1 -> 1.1 -> 0.88 -> 0.792 -> 1.188: peak 1.1, trough 0.792: 1 - 0.792/1.1 = 0.28
    assert max_drawdown([0.1, -0.2, -0.1, 0.5]) == pytest.approx(0.28, rel=1e-12)


def test_max_drawdown_counts_a_first_step_loss():
    # the curve starts at 1 before the first return: 1 -> 0.9 -> 0.945, drawdown 0.1
    assert max_drawdown([-0.1, 0.05]) == pytest.approx(0.1, rel=1e-12)
    # 1 -> 0.9 -> 0.81 -> 1.215: drawdown 1 - 0.81 = 0.19
    assert max_drawdown([-0.1, -0.1, 0.5]) == pytest.approx(0.19, rel=1e-12)


def test_max_drawdown_zero_when_never_below_peak():
    assert max_drawdown([0.01, 0.0, 0.02]) == 0.0


# --- total_return ------------------------------------------------------------------------------


def test_total_return_hand_computed():
    # 1.01 * 0.98 * 1.03 - 1 = 0.9898 * 1.03 - 1 = 1.019494 - 1 = 0.019494
    assert total_return(R) == pytest.approx(0.019494, rel=1e-12)
    # 1.5 * 0.5 - 1 = -0.25 (compounded, not summed: the sum would be 0)
    assert total_return([0.5, -0.5]) == pytest.approx(-0.25, rel=1e-12)
    assert total_return([]) == 0.0


# --- turnover ----------------------------------------------------------------------------------


def test_turnover_counts_the_change_from_the_initial_position():
    pos = [1.0, 1.0, -1.0, 0.0]
    # from 0: |1-0| + |1-1| + |-1-1| + |0+1| = 1 + 0 + 2 + 1 = 4 over 4 steps = 1.0
    assert turnover(pos) == pytest.approx(1.0, rel=1e-12)
    # from 1: 0 + 0 + 2 + 1 = 3 over 4 steps = 0.75
    assert turnover(pos, initial_position=1.0) == pytest.approx(0.75, rel=1e-12)
    # from -1: 2 + 0 + 2 + 1 = 5 over 4 steps = 1.25
    assert turnover(pos, initial_position=-1.0) == pytest.approx(1.25, rel=1e-12)
    # fractional sizes: [1/3, 2/3] from 0: 1/3 + 1/3 = 2/3 over 2 steps = 1/3
    assert turnover([1 / 3, 2 / 3]) == pytest.approx(1 / 3, rel=1e-12)
    assert turnover([]) == 0.0


# --- population input: [P,T] arrays and tensors give per-row values ----------------------------

ROWS = [R, R2, [0.0, 0.0, 0.0], [-0.1, 0.05, 0.02]]
FUNCTIONS = [sharpe, sortino, max_drawdown, total_return, turnover]


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_2d_numpy_gives_row_by_row_values(fn):
    out = fn(np.array(ROWS))
    assert isinstance(out, np.ndarray) and out.shape == (len(ROWS),)
    for p, row in enumerate(ROWS):
        assert out[p] == pytest.approx(fn(row), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_2d_torch_gives_row_by_row_values(fn, dtype):
    tensor = torch.tensor(ROWS, dtype=dtype)
    out = fn(tensor)
    assert isinstance(out, torch.Tensor) and out.shape == (len(ROWS),)
    for p in range(len(ROWS)):
        assert out[p].item() == pytest.approx(fn(tensor[p]), rel=1e-12, abs=1e-15)
        assert out[p].item() == pytest.approx(fn(ROWS[p]), rel=1e-5, abs=1e-7)  # float32 inputs round


def test_rows_never_mix():
    base = np.array(ROWS)
    changed = base.copy()
    changed[1] = [0.5, -0.4, 0.3]
    for fn in FUNCTIONS:
        a, b = fn(base), fn(changed)
        keep = [0, 2, 3]
        np.testing.assert_array_equal(a[keep], b[keep])


def test_2d_values_match_hand_computed():
    out = sharpe(np.array([R, R2]))
    np.testing.assert_allclose(out, [R_SHARPE_252, R2_SHARPE_252], rtol=1e-12)
    # R2 drawdown: 1 -> 1.02 -> 1.02 -> 1.0098: 1 - 1.0098/1.02 = 0.01
    np.testing.assert_allclose(max_drawdown(torch.tensor([R, R2], dtype=torch.float64)), [0.02, 0.01], rtol=1e-12)
    # 2-D turnover uses the same initial position for every row: [[1, 1], [0, -1]] from 1:
    # row 0: 0 + 0 = 0 -> 0.0; row 1: 1 + 1 = 2 -> 1.0
    np.testing.assert_allclose(turnover(np.array([[1.0, 1.0], [0.0, -1.0]]), initial_position=1.0), [0.0, 1.0])


def test_periods_per_year_scales_by_square_root_for_populations():
    x = np.array([R, R2])
    np.testing.assert_allclose(sharpe(x, periods_per_year=52), sharpe(x, periods_per_year=1) * math.sqrt(52))
    np.testing.assert_allclose(sortino(x, periods_per_year=52), sortino(x, periods_per_year=1) * math.sqrt(52))


def test_rejects_3d_input():
    with pytest.raises(ValueError, match="1-D or 2-D"):
        sharpe(np.zeros((2, 2, 2)))
