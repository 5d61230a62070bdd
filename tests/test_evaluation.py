"""tune_gems.market.evaluation against an independent float64 computation written here.

The reference (`_reference`) follows empyrical's formulas with explicit loops: the net return
step by step from the previous position, Sharpe as mean / std(ddof=1) * sqrt(ppy), beta from
`np.polyfit` (least squares, not the covariance formula the module uses), the drawdown from a
running peak, and the break-even cost from a root finder (`scipy.optimize.brentq` on the mean
net return as a function of cost), not from the closed form.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.optimize import brentq

from tune_gems.stats import metrics
from tune_gems.market.evaluation import (
    BASELINES,
    EVAL_STATS,
    baseline_positions,
    baseline_stats,
    evaluation_stats,
    member_rows,
    momentum_signal,
    net_returns,
    position_changes,
    read_back,
    segment_asset_returns,
)

PPY = 252.0
COST = 5e-4


# --- the independent reference ------------------------------------------------------------------


def _ref_sharpe(r: np.ndarray, ppy: float) -> float:
    if len(r) < 2 or np.ptp(r) == 0:
        return 0.0
    sd = np.std(r, ddof=1)
    return 0.0 if sd == 0 else float(np.mean(r) / sd * math.sqrt(ppy))


def _ref_net(pos: np.ndarray, a: np.ndarray, cost: float, init: float = 0.0) -> np.ndarray:
    out = np.empty(len(pos))
    prev = init
    for t in range(len(pos)):
        out[t] = pos[t] * a[t] - cost * abs(pos[t] - prev)
        prev = pos[t]
    return out


def _ref_row(pos, a, cost, ppy, init=0.0) -> dict[str, float]:
    pos = np.asarray(pos, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    T = len(pos)
    net = _ref_net(pos, a, cost, init)
    changes = [abs(pos[t] - (pos[t - 1] if t else init)) for t in range(T)]
    turnover = float(np.mean(changes))
    if T >= 2 and np.ptp(a) > 0:
        beta = float(np.polyfit(a, net, 1)[0])
    else:
        beta = 0.0
    resid = net - beta * a
    if T >= 2 and np.std(resid, ddof=1) <= 1e-10 * np.std(net, ddof=1):
        alpha = 0.0  # a pure multiple of the asset: the residual is rounding noise
    else:
        alpha = _ref_sharpe(resid, ppy)
    equity, peak, mdd = 1.0, 1.0, 0.0
    for r in net:
        equity *= 1.0 + r
        peak = max(peak, equity)
        mdd = max(mdd, 1.0 - equity / peak)
    gross_mean = float(np.mean(pos * a))
    if turnover > 0:
        mean_at = lambda c: float(np.mean(_ref_net(pos, a, c, init)))  # noqa: E731
        breakeven = brentq(mean_at, -1.0, 1.0, xtol=1e-15, rtol=1e-13) * 1e4
    else:
        breakeven = math.inf if gross_mean > 0 else math.nan
    return {
        "sharpe": _ref_sharpe(net, ppy),
        "beta": beta,
        "alpha_sharpe": alpha,
        "turnover": turnover,
        "max_drawdown": mdd,
        "sharpe_cost0": _ref_sharpe(_ref_net(pos, a, 0.0, init), ppy),
        "sharpe_cost1": _ref_sharpe(net, ppy),
        "sharpe_cost2": _ref_sharpe(_ref_net(pos, a, 2 * cost, init), ppy),
        "breakeven_cost_bps": breakeven,
    }


def _reference(pos, a, cost, ppy, init=0.0) -> dict[str, np.ndarray]:
    pos = np.asarray(pos, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    a2 = np.broadcast_to(a, pos.shape)
    rows = [_ref_row(pos[p], a2[p], cost, ppy, init) for p in range(pos.shape[0])]
    return {k: np.array([r[k] for r in rows]) for k in EVAL_STATS}


def _random_case(P: int, T: int, seed: int, per_member_asset: bool = False):
    rng = np.random.default_rng(seed)
    levels = np.array([-1.0, -2 / 3, -1 / 3, 0.0, 1 / 3, 2 / 3, 1.0])
    # persistent positions (a policy holds for a while), some members long-biased
    pos = np.empty((P, T))
    for p in range(P):
        bias = rng.uniform(-0.5, 0.5)
        cur = 0.0
        for t in range(T):
            if rng.random() < 0.3:
                cur = np.clip(rng.choice(levels) + bias, -1, 1)
                cur = levels[np.argmin(np.abs(levels - cur))]
            pos[p, t] = cur
    shape = (P, T) if per_member_asset else (T,)
    a = rng.normal(3e-4, 0.01, size=shape)
    return pos, a


def _assert_matches(got: dict, ref: dict, rtol: float, atol: float) -> None:
    assert list(got) == list(EVAL_STATS)
    for k in EVAL_STATS:
        g = got[k].detach().cpu().double().numpy() if isinstance(got[k], torch.Tensor) else got[k]
        np.testing.assert_allclose(g, ref[k], rtol=rtol, atol=atol, err_msg=k, equal_nan=True)


# --- against the reference ------------------------------------------------------------------------


@pytest.mark.parametrize("P,T,seed", [(1, 2, 0), (3, 17, 1), (8, 250, 2), (5, 1000, 3)])
def test_stats_match_the_reference_float64(P, T, seed):
    pos, a = _random_case(P, T, seed)
    got = evaluation_stats(torch.tensor(pos), torch.tensor(a), COST, PPY)
    ref = _reference(pos, a, COST, PPY)
    _assert_matches(got, ref, rtol=1e-9, atol=1e-11)
    assert all(v.dtype == torch.float64 and v.shape == (P,) for v in got.values())


def test_per_member_asset_paths_match_the_reference():
    pos, a = _random_case(6, 300, 4, per_member_asset=True)
    got = evaluation_stats(torch.tensor(pos), torch.tensor(a), 1e-3, 365.0)
    _assert_matches(got, _reference(pos, a, 1e-3, 365.0), rtol=1e-9, atol=1e-11)


def test_float32_inputs_and_float32_arithmetic_stay_within_tolerance():
    """The env hands float32 positions and returns. Computed in float64 (the default) the stats
    equal the float64 reference on the float32 values; computed in float32 they stay within
    1e-3 relative (Sharpe-like ratios of ~1000-step sums)."""
    pos, a = _random_case(8, 500, 5)
    pos32, a32 = torch.tensor(pos, dtype=torch.float32), torch.tensor(a, dtype=torch.float32)
    ref = _reference(pos32.double().numpy(), a32.double().numpy(), COST, PPY)
    _assert_matches(evaluation_stats(pos32, a32, COST, PPY), ref, rtol=1e-9, atol=1e-11)
    got32 = evaluation_stats(pos32, a32, COST, PPY, dtype=torch.float32)
    assert all(v.dtype == torch.float32 for v in got32.values())
    _assert_matches(got32, ref, rtol=1e-3, atol=1e-4)


def test_nonzero_initial_position_is_the_first_previous_position():
    pos, a = _random_case(4, 60, 6)
    got = evaluation_stats(torch.tensor(pos), torch.tensor(a), COST, PPY, initial_position=1.0)
    _assert_matches(got, _reference(pos, a, COST, PPY, init=1.0), rtol=1e-9, atol=1e-11)


def test_sharpe_drawdown_turnover_agree_with_tune_gems_metrics():
    pos, a = _random_case(5, 400, 7)
    got = read_back(evaluation_stats(torch.tensor(pos), torch.tensor(a), COST, PPY))
    net = net_returns(torch.tensor(pos), torch.tensor(a), COST).numpy()
    np.testing.assert_allclose(got["sharpe"], metrics.sharpe(net, PPY), rtol=1e-12)
    np.testing.assert_allclose(got["max_drawdown"], metrics.max_drawdown(net), rtol=1e-12)
    np.testing.assert_allclose(got["turnover"], metrics.turnover(pos), rtol=1e-12)


# --- hand-checked values -----------------------------------------------------------------------


def test_hand_computed_two_member_case():
    # member 0: long, long, flat, short; member 1: short throughout
    pos = torch.tensor([[1.0, 1.0, 0.0, -1.0], [-1.0, -1.0, -1.0, -1.0]])
    a = torch.tensor([0.02, -0.01, 0.03, -0.02])
    c = 0.001
    s = read_back(evaluation_stats(pos, a, c, 1.0))
    # member 0 changes: 1, 0, 1, 1 -> turnover 3/4; net: .02-.001, -.01, 0-.001, .02-.001
    net0 = np.array([0.019, -0.01, -0.001, 0.019])
    assert s["turnover"][0] == pytest.approx(0.75)
    assert s["sharpe"][0] == pytest.approx(net0.mean() / net0.std(ddof=1))
    # gross mean = (.02 - .01 + 0 + .02) / 4 = .0075; break-even = .0075 / .75 = 0.01 = 100 bp
    assert s["breakeven_cost_bps"][0] == pytest.approx(100.0)
    # member 1: net = -a with one entry cost: beta of (-a - c e0) on a; turnover 1/4
    assert s["turnover"][1] == pytest.approx(0.25)
    gross_mean1 = -a.double().mean().item()  # -0.005: loses before costs
    assert s["breakeven_cost_bps"][1] == pytest.approx(1e4 * gross_mean1 / 0.25)  # -200 bp
    # drawdown of member 0: equity 1.019, 1.00881, 1.007801..., peak 1.019
    eq = np.cumprod(1 + net0)
    assert s["max_drawdown"][0] == pytest.approx(1 - eq[2] / eq[0])


def test_pure_beta_strategy_has_alpha_sharpe_zero_and_beta_equal_to_its_leverage():
    """pos = 0.5 throughout, entered before the segment (no entry cost): r = 0.5 a exactly."""
    _, a = _random_case(1, 300, 8)
    pos = torch.full((1, 300), 0.5)
    s = read_back(evaluation_stats(pos, torch.tensor(a), COST, PPY, initial_position=0.5))
    assert s["beta"][0] == pytest.approx(0.5, rel=1e-12)
    assert s["alpha_sharpe"][0] == 0.0
    assert s["sharpe"][0] == pytest.approx(_ref_sharpe(a, PPY), rel=1e-12)
    assert s["turnover"][0] == 0.0 and s["breakeven_cost_bps"][0] == math.inf  # gross mean > 0


def test_alpha_sharpe_removes_market_exposure_but_keeps_skill():
    """A member that is long all the time (beta 1) on a rising asset has a high Sharpe and ~0
    alpha Sharpe; a member that times the asset's sign has a high alpha Sharpe."""
    rng = np.random.default_rng(9)
    T = 2000
    a = rng.normal(1e-3, 0.01, T)
    long_only = np.ones(T)
    timing = np.where(rng.random(T) < 0.6, np.sign(a), -np.sign(a))  # right 60% of the time
    s = read_back(evaluation_stats(torch.tensor(np.stack([long_only, timing])), torch.tensor(a), 0.0, PPY, initial_position=1.0))
    assert s["sharpe"][0] > 1.0 and s["alpha_sharpe"][0] == 0.0
    assert abs(s["beta"][1]) < 0.1 and s["alpha_sharpe"][1] > 1.5  # expected ~2.5, SE ~0.35


# --- edge cases --------------------------------------------------------------------------------


def test_flat_member_is_all_zero_with_nan_breakeven():
    s = read_back(evaluation_stats(torch.zeros(2, 50), torch.randn(50) * 0.01, COST, PPY))
    for k in ("sharpe", "beta", "alpha_sharpe", "turnover", "max_drawdown", "sharpe_cost0", "sharpe_cost2"):
        assert np.all(s[k] == 0.0), k
    assert np.all(np.isnan(s["breakeven_cost_bps"]))


def test_constant_asset_returns_give_beta_zero_and_alpha_equal_to_sharpe():
    pos, _ = _random_case(4, 80, 10)
    a = np.full(80, 0.001)
    got = read_back(evaluation_stats(torch.tensor(pos), torch.tensor(a), COST, PPY))
    assert np.all(got["beta"] == 0.0)
    np.testing.assert_allclose(got["alpha_sharpe"], got["sharpe"], rtol=1e-12)
    _assert_matches(got, _reference(pos, a, COST, PPY), rtol=1e-9, atol=1e-11)


def test_constant_net_returns_give_sharpe_zero():
    # held long from before the segment, constant asset return, no trades: r_t constant
    s = read_back(evaluation_stats(torch.ones(1, 30), torch.full((30,), 0.002), COST, PPY, initial_position=1.0))
    assert s["sharpe"][0] == 0.0 and s["alpha_sharpe"][0] == 0.0 and s["max_drawdown"][0] == 0.0
    assert s["breakeven_cost_bps"][0] == math.inf


def test_zero_turnover_with_loss_before_costs_is_nan_breakeven():
    s = read_back(evaluation_stats(torch.ones(1, 30), torch.full((30,), -0.002), COST, PPY, initial_position=1.0))
    assert math.isnan(s["breakeven_cost_bps"][0])
    assert s["max_drawdown"][0] == pytest.approx(1 - 0.998**30)


def test_single_step_segment_has_zero_sharpes():
    s = read_back(evaluation_stats(torch.ones(3, 1), torch.tensor([0.01]), COST, PPY))
    for k in ("sharpe", "alpha_sharpe", "sharpe_cost0", "sharpe_cost1", "sharpe_cost2", "beta"):
        assert np.all(s[k] == 0.0), k
    assert np.all(s["turnover"] == 1.0)
    assert s["breakeven_cost_bps"][0] == pytest.approx(100.0)  # 0.01 gross / 1.0 turnover


def test_cost_columns_are_ordered_and_breakeven_is_where_sharpe_crosses_zero():
    pos, a = _random_case(6, 400, 11)
    s = read_back(evaluation_stats(torch.tensor(pos), torch.tensor(a), COST, PPY))
    assert np.all(s["sharpe_cost0"] >= s["sharpe_cost1"]) and np.all(s["sharpe_cost1"] >= s["sharpe_cost2"])
    np.testing.assert_array_equal(s["sharpe"], s["sharpe_cost1"])
    for p in range(6):
        be = s["breakeven_cost_bps"][p] / 1e4
        at = read_back(evaluation_stats(torch.tensor(pos[p : p + 1]), torch.tensor(a), be, PPY))
        assert abs(at["sharpe"][0]) < 1e-9


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="positions"):
        evaluation_stats(torch.zeros(5), torch.zeros(5), COST, PPY)
    with pytest.raises(ValueError, match="positions"):
        evaluation_stats(torch.zeros(2, 0), torch.zeros(0), COST, PPY)
    with pytest.raises(ValueError, match="asset_returns"):
        evaluation_stats(torch.zeros(2, 5), torch.zeros(4), COST, PPY)
    with pytest.raises(ValueError, match="asset_returns"):
        evaluation_stats(torch.zeros(2, 5), torch.zeros(3, 5), COST, PPY)


def test_helpers_name_columns_like_the_contract():
    s = read_back(evaluation_stats(torch.zeros(2, 5), torch.zeros(5), COST, PPY))
    rows = member_rows(s, "val")
    assert len(rows) == 2 and list(rows[0]) == [f"val_{k}" for k in EVAL_STATS]
    assert torch.equal(position_changes(torch.tensor([[1.0, -1.0]])), torch.tensor([[1.0, 2.0]]))


# --- the env's own accounting ------------------------------------------------------------------


def test_recomputed_net_returns_equal_the_segment_evaluators_returns():
    """evaluation_stats recomputes r_t from the recorded positions and the segment's asset
    returns; that must be the SegmentEvaluator's reward definition, first step included."""
    from tune_gems.config.schema import EnvConfig
    from tune_gems.data.segments import split_bounds
    from tune_gems.data.series import synthetic_prices
    from tune_gems.market.actions import ActionMap
    from tune_gems.market.features import Market
    from env_fixtures import evaluate_segment

    W = 6
    prices = synthetic_prices(400, seed=3)
    market = Market(prices, split_bounds(prices, [0.6, 0.2, 0.2], min_len=W + 2), W)
    actions = ActionMap(EnvConfig(), "cpu")
    g = torch.Generator().manual_seed(0)

    def policy(obs):  # random but fixed actions per call: a policy that trades a lot
        return torch.randint(0, 3, (*obs.shape[:-1], 2), generator=g)

    rets, positions = evaluate_segment(market, actions, COST, policy, 4, "val")
    asset = segment_asset_returns(market, "val")
    assert asset.shape == (rets.shape[1],)
    mine = net_returns(positions, asset, COST)
    np.testing.assert_allclose(mine.numpy(), rets.double().numpy(), rtol=1e-6, atol=1e-9)
    s = read_back(evaluation_stats(positions, asset, COST, PPY))
    np.testing.assert_allclose(s["sharpe"], metrics.sharpe(rets, PPY).numpy(), rtol=1e-4)


# --- baselines ---------------------------------------------------------------------------------


def _series(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    r = rng.normal(2e-4, 0.01, n)
    r[-1] = 0.0  # Market.ret_next: no return after the last price
    return r


def test_momentum_signal_is_pandas_ewm_of_past_returns():
    r = _series(300, 12)
    sig = momentum_signal(r, span=10)
    realised = pd.Series(r[:-1])  # realised[s-1] = return known from time s on
    ewm = realised.ewm(span=10, adjust=False).mean().to_numpy()
    assert sig[0] == 0.0
    np.testing.assert_allclose(sig[1:], ewm, rtol=1e-12, atol=1e-15)


def test_momentum_has_no_look_ahead():
    """The momentum position at decision t is unchanged by any return realised after t."""
    r = _series(400, 13)
    lo, hi = 200, 380
    base = baseline_positions(r, (lo, hi), 5)["momentum"]
    for k in (lo, lo + 1, 250, hi - 2):  # change ret_next[k] = the return from k to k+1
        changed = r.copy()
        changed[k:] *= 3.0
        changed[k] = -10.0 * base[k + 1 - lo]  # a large return against decision k+1's position
        pos = baseline_positions(changed, (lo, hi), 5)["momentum"]
        upto = k - lo + 1  # decisions lo..k use only ret_next[:t] with t <= k: untouched
        np.testing.assert_array_equal(pos[:upto], base[:upto])
        assert not np.array_equal(pos[upto:], base[upto:])  # later decisions do see the change


def test_momentum_position_is_the_sign_of_the_ewma_of_returns_up_to_t():
    r = _series(200, 14)
    lo, hi = 50, 150
    pos = baseline_positions(r, (lo, hi), 8)["momentum"]
    for t in range(lo, hi):
        m = pd.Series(r[:t]).ewm(span=8, adjust=False).mean().iloc[-1]  # returns realised by t
        assert pos[t - lo] == np.sign(m)


def test_baseline_stats_match_the_reference_for_each_baseline_and_path():
    x = np.stack([_series(600, 15), _series(600, 16)])
    segs = {"val": (300, 450), "test": (450, 599)}
    table = baseline_stats(x, segs, COST, PPY, momentum_span=12)
    assert list(table.columns) == ["segment", "baseline", "path", "momentum_span", *EVAL_STATS]
    assert len(table) == 2 * len(BASELINES) * 2
    for seg, (lo, hi) in segs.items():
        for s in range(2):
            a = x[s, lo:hi]
            sig = pd.Series(x[s, :-1]).ewm(span=12, adjust=False).mean().to_numpy()
            expect = {
                "flat": np.zeros(hi - lo),
                "buy_and_hold": np.ones(hi - lo),
                "momentum": np.sign(sig[lo - 1 : hi - 1]),
            }
            for name, pos in expect.items():
                row = table[(table.segment == seg) & (table.baseline == name) & (table.path == s)].iloc[0]
                ref = _ref_row(pos, a, COST, PPY)
                for k in EVAL_STATS:
                    np.testing.assert_allclose(row[k], ref[k], rtol=1e-9, atol=1e-11, err_msg=f"{seg} {name} {k}")


def test_buy_and_hold_pays_the_entry_cost_once_and_flat_is_zero():
    r = _series(500, 17)
    table = baseline_stats(r, {"val": (100, 400)}, COST, PPY).set_index("baseline")
    assert table.loc["buy_and_hold", "turnover"] == pytest.approx(1 / 300)
    assert table.loc["buy_and_hold", "beta"] == pytest.approx(1.0, abs=1e-3)
    assert table.loc["buy_and_hold", "sharpe_cost0"] == pytest.approx(_ref_sharpe(r[100:400], PPY))
    assert table.loc["flat", "sharpe"] == 0.0 and math.isnan(table.loc["flat", "breakeven_cost_bps"])


def test_baselines_refuse_a_segment_outside_the_series():
    with pytest.raises(ValueError, match="segment"):
        baseline_positions(np.zeros(10), (5, 11))
    with pytest.raises(ValueError, match="span"):
        momentum_signal(np.zeros(10), span=0.5)


# --- CUDA: graph capture ---------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_stats_capture_in_a_cuda_graph_and_match_eager():
    pos, a = _random_case(16, 700, 18)
    pos_d = torch.tensor(pos, dtype=torch.float32, device="cuda")
    a_d = torch.tensor(a, dtype=torch.float32, device="cuda")
    eager = evaluation_stats(pos_d, a_d, COST, PPY)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        evaluation_stats(pos_d, a_d, COST, PPY)  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = evaluation_stats(pos_d, a_d, COST, PPY)
    pos_d.copy_(torch.tensor(pos[::-1].copy(), dtype=torch.float32))  # new inputs, same buffers
    graph.replay()
    torch.cuda.synchronize()
    ref = _reference(pos_d.double().cpu().numpy(), a_d.double().cpu().numpy(), COST, PPY)
    _assert_matches(captured, ref, rtol=1e-9, atol=1e-11)
    assert all(v.device.type == "cuda" for v in eager.values())


def test_stat_names_agree_with_tune_gems_metrics():
    """One contract: if tune_gems.stats.metrics lists the evaluation names, they are these, in order."""
    assert tuple(getattr(metrics, "EVAL_STATS", EVAL_STATS)) == EVAL_STATS


def test_segment_asset_returns_gives_each_member_its_own_path():
    """With per-seed paths every member is scored against the market it traded, not path 0's."""
    from tune_gems.data.segments import split_bounds
    from tune_gems.data.series import synthetic_prices
    from tune_gems.market.features import Market

    W = 6
    paths = [synthetic_prices(400, seed=s) for s in (3, 4)]
    market = Market(paths, split_bounds(paths[0], [0.6, 0.2, 0.2], min_len=W + 2), W)
    r = market.ranges["val"]
    per_member = segment_asset_returns(market, "val", [1, 0, 1])
    assert per_member.shape == (3, r.hi - r.lo)
    assert torch.equal(per_member[0], market.returns_next[1, r.lo : r.hi])
    assert torch.equal(per_member[1], market.returns_next[0, r.lo : r.hi])
    assert not torch.equal(per_member[0], per_member[1])
    one = Market(paths[0], split_bounds(paths[0], [0.6, 0.2, 0.2], min_len=W + 2), W)
    assert segment_asset_returns(one, "val", [0, 0]).shape == (r.hi - r.lo,)  # one path: [T], broadcast


def test_evaluation_with_weights_computed_once_per_pass_equals_weights_recomputed_every_step():
    """The trainer computes the noise-free weights once per evaluation pass (issue 15's cheap
    evaluation): the returns and positions equal, bit for bit, a pass that recomputes them in
    every step; the second pass after more training sees the new weights."""
    from tune_gems.config.load import load_config
    from env_fixtures import evaluate_segment
    from tune_gems.trainer.trainer import Trainer

    cfg = load_config(None, ["trainer.population=3", "trainer.batch_size=16", "trainer.n_envs=4", "trainer.replay_capacity=512",
                             "trainer.learning_starts=64", "data.synthetic.n=1500", "trainer.iterations_per_epoch=5", "trainer.epochs=2"])  # fmt: skip
    t = Trainer(cfg, log=None)
    net = t.learner.online

    def per_step_weights(obs):
        with t.learner.matmul_precision():
            return net.expected_q(net(obs, net.weights("eval")).logits).argmax(-1)

    seen = []
    for _ in range(2):
        t.run_epoch()
        _, returns, positions = t.evaluator.evaluate("val")
        r2, p2 = evaluate_segment(t.market, t.learner.env.actions, cfg.env.cost, per_step_weights, t.learner.P, "val", t.learner.path_of_member)
        assert torch.equal(returns, r2) and torch.equal(positions, p2)
        seen.append(returns)
    assert not torch.equal(seen[0], seen[1])
