"""The analysis's statistics against well-kept libraries on the same inputs (issue 23).

- Holm: `inference.holm` is statsmodels' `multipletests(method="holm")`; the vectorised
  `holm_batch` of the calibration must give the same numbers.
- The exact signed-rank test of `inference.rank_test` gives scipy.stats.wilcoxon's exact p-values,
  two-sided and one-sided.
- The stationary bootstrap (`market_noise.stationary_bootstrap_indices`) builds the same index
  paths as arch's sampler from the same random draws. The tune-gems generator is kept: it draws
  every resample at once, in a fixed order, so each published interval keeps its numbers;
  arch's `StationaryBootstrap` draws in another order (every interval would change by Monte
  Carlo noise) and one resample per call.
- The Politis-White mean block length (`market_noise.optimal_mean_block`) agrees with arch's
  `optimal_block_length` on clearly dependent series. It is kept, not swapped: arch starts the
  search for the last significant lag one lag early (its run of K_N insignificant lags may
  include the lag it returns), takes M >= 2 even without a significant lag and does not clip at
  1, so on white noise and on negatively dependent series it picks blocks of ~2-3 where the
  paper's rule (and the calibrated interval, tests/test_market_noise.py) uses 1.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as st
from arch.bootstrap import optimal_block_length
from arch.bootstrap._samplers_python import stationary_bootstrap_sample_python
from statsmodels.stats.multitest import multipletests

from tune_gems.stats.inference import holm, holm_batch, rank_test
from tune_gems.analysis.verdicts.market_noise import optimal_mean_block, stationary_bootstrap_indices


def _ar1(rng: np.random.Generator, n: int, phi: float) -> np.ndarray:
    e = rng.normal(size=n)
    x = np.zeros(n)
    for t in range(1, n):
        x[t] = phi * x[t - 1] + e[t]
    return x


def test_holm_is_statsmodels_and_holm_batch_agrees():
    rng = np.random.default_rng(0)
    p = rng.uniform(0.0, 0.2, (20, 5))
    p[:, 2] = p[:, 1]  # ties
    expected = np.array([multipletests(row, method="holm")[1] for row in p])
    np.testing.assert_array_equal(holm_batch(p), expected)
    np.testing.assert_array_equal(holm(p), expected)
    with_nan = np.array([0.01, np.nan, 0.04, 0.03])
    np.testing.assert_array_equal(holm(with_nan)[[0, 2, 3]], multipletests(with_nan[[0, 2, 3]], method="holm")[1])
    assert np.isnan(holm(with_nan)[1]) and np.isnan(holm(np.array([np.nan]))).all()
    # holm_batch leaves NaN out of each row's family too (rows of mixed NaN patterns)
    mixed = rng.uniform(0.0, 0.2, (8, 4))  # few rows: each statsmodels call runs a gc.collect()
    mixed[rng.random(mixed.shape) < 0.3] = np.nan
    mixed[0] = np.nan
    np.testing.assert_array_equal(holm_batch(mixed), holm(mixed))


@pytest.mark.parametrize("n", [1, 3, 6, 10, 16, 25])
def test_the_exact_signed_rank_test_is_scipys_wilcoxon(n):
    rng = np.random.default_rng(n)
    d = rng.normal(0.4, 1.0, (40, n))
    r = rank_test(d)
    for i, row in enumerate(d):
        for key, alternative in (("p", "two-sided"), ("p_greater", "greater"), ("p_less", "less")):
            expected = st.wilcoxon(row, method="exact", alternative=alternative).pvalue
            assert getattr(r, key)[i] == pytest.approx(expected, rel=1e-12, abs=1e-15), (key, row)


@pytest.mark.parametrize("mean_block", [1.0, 2.5, 12.0])
def test_stationary_bootstrap_indices_are_arch_s_from_the_same_draws(mean_block):
    n_steps, n_boot = 60, 30
    ours = stationary_bootstrap_indices(n_steps, mean_block, n_boot, np.random.default_rng(7))
    rng = np.random.default_rng(7)  # the draws of stationary_bootstrap_indices, in its order
    starts = rng.integers(0, n_steps, size=(n_boot, n_steps))
    u = rng.random((n_boot, n_steps))
    theirs = np.stack([stationary_bootstrap_sample_python(s.copy(), row, 1.0 / mean_block) for s, row in zip(starts, u)])
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("n, phi", [(1000, 0.5), (500, 0.8), (2000, 0.7)])
def test_the_block_length_agrees_with_arch_on_dependent_series(n, phi):
    rng = np.random.default_rng(int(phi * 10) + n)
    for _ in range(5):
        x = _ar1(rng, n, phi)
        arch_b = float(optimal_block_length(x)["stationary"].iloc[0])
        assert optimal_mean_block(x) == pytest.approx(arch_b, rel=0.2)


def test_the_block_length_departs_from_arch_where_the_paper_says_one():
    """White noise: the paper's rule finds no significant lag and gives 1 in most series;
    arch's forced M >= 2 gives more."""
    rng = np.random.default_rng(3)
    ours, theirs = [], []
    for _ in range(20):
        x = rng.normal(size=500)
        ours.append(optimal_mean_block(x))
        theirs.append(float(optimal_block_length(x)["stationary"].iloc[0]))
    assert np.median(ours) == 1.0 and np.median(theirs) > 1.0


def test_the_filelock_lock_excludes_and_is_excluded_by_the_flock_it_replaced(tmp_path):
    """The one-writer lock is now filelock's; it must exclude (and be excluded by) the raw
    `fcntl.flock` on the same file that OutputLock held before, so a run of the previous version
    and one of this version never write one folder together."""
    import fcntl
    import os
    import subprocess
    import sys

    from tune_gems.contracts.errors import OutputInUseError
    from tune_gems.contracts.output_lock import LOCK_FILE, OutputLock

    fd = os.open(tmp_path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the previous OutputLock.acquire
        with pytest.raises(OutputInUseError, match="is being written by"):
            OutputLock(tmp_path).acquire()
        fcntl.flock(fd, fcntl.LOCK_UN)
        with OutputLock(tmp_path):
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            OutputLock(tmp_path).check_free()  # the holder itself may look at its own folder
            probe = subprocess.run(  # another process may not: it is told who holds it
                [sys.executable, "-c", "import sys; from tune_gems.contracts.output_lock import OutputLock; "
                 "OutputLock(sys.argv[1]).check_free()", str(tmp_path)],
                capture_output=True, text=True, timeout=120)
            assert probe.returncode != 0 and "OutputInUseError" in probe.stderr
            assert f"pid {os.getpid()}" in probe.stderr
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released with the context
    finally:
        os.close(fd)
    assert (tmp_path / LOCK_FILE).is_file()
