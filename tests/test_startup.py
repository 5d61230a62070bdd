"""A trial's start-up without what need not be paid per trial (issue 33 item 4), with the bits kept:
no torch._dynamo on the hot path, the built extension loaded directly from its record, the
market cached per data config and seed set, synthetic paths and initial weights built without
per-row / per-member Python work where that keeps every bit, and a reused sweep actor that runs
trial after trial with nothing leaking between them."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from learner_fixtures import TINY, assert_same_run, canon, tiny_config
from sweep_fixtures import ray_address  # noqa: F401 (fixture)
from tune_gems.data import series
from tune_gems.market.market_cache import MarketCache, market_key
from tune_gems.model import layers
from tune_gems.ops import build
from tune_gems.sweep import trainable
from tune_gems.trainer.run_setup import load_run_prices as load_prices, prepare_market
from tune_gems.trainer.epoch_loop import train_epochs
from tune_gems.trainer.trainer import Trainer

REPO = Path(__file__).resolve().parents[1]


# -- no torch._dynamo (nor torch's JIT build machinery) on the hot path ----------------------------


def test_a_trial_on_cpu_imports_neither_dynamo_nor_the_jit_build():
    """A fresh process trains one epoch through the custom ops (forward and backward, gems
    measured and wired, the dry check): torch.library.custom_op's kernel wrapper would import
    torch._dynamo on the first call (seconds); the ops' own registration does not."""
    script = (
        "import sys\n"
        "from tune_gems.config.load import load_config\n"
        "from tune_gems.trainer.trainer import Trainer\n"
        f"cfg = load_config(None, {[*TINY, 'trainer.epochs=1', 'gems.g6.mode=wire', 'gems.g10.mode=wire']!r})\n"
        "t = Trainer(cfg, log=None)\n"
        "assert t.ops.fused, t.ops\n"
        "t.run_epoch()\n"
        "print(sorted(m for m in ('torch._dynamo', 'torch.utils.cpp_extension') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


# -- the built extension, loaded directly --------------------------------------------------------


@pytest.fixture()
def fake_builds(monkeypatch, tmp_path):
    """build._compile with torch's JIT build and the import replaced by recorders: the build
    writes a library file, the import returns a module naming the file it was given."""
    monkeypatch.setenv(build.EXTENSIONS_DIR_ENV, str(tmp_path))
    calls = {"jit": 0, "imports": []}

    def jit_load(name, sources, folder, build_dir, arch):
        calls["jit"] += 1
        (build_dir / f"{name}{build.LIBRARY_SUFFIX}").write_bytes(b"library built %d" % calls["jit"])
        return types.SimpleNamespace(origin="jit")

    def import_library(name, library):
        calls["imports"].append(Path(library))
        if calls.get("import_fails"):
            raise ImportError("undefined symbol")
        return types.SimpleNamespace(origin=str(library))

    monkeypatch.setattr(build, "_jit_load", jit_load)
    monkeypatch.setattr(build, "_import_library", import_library)
    key = build.build_key("90")
    return calls, tmp_path / key, f"{build.EXTENSION_NAME_PREFIX}_{key}"


def test_a_finished_build_is_imported_directly_without_torchs_build(fake_builds):
    calls, build_dir, name = fake_builds
    assert build._compile("90").origin == "jit" and calls["jit"] == 1  # no record yet: torch builds
    record = json.loads((build_dir / build.BUILT_RECORD).read_text())
    library = build_dir / f"{name}{build.LIBRARY_SUFFIX}"
    assert record["key"] == build.build_key("90") and record["library"] == library.name
    assert build.built_library(build_dir, name, record["key"]) == library
    again = build._compile("90")  # a later process: the record matches, no ninja, no compiler probes
    assert calls["jit"] == 1 and again.origin == str(library) and calls["imports"] == [library]


@pytest.mark.parametrize("damage", ["library changed", "library gone", "another key", "record unreadable", "import fails"])
def test_a_record_that_does_not_match_goes_through_torchs_build(fake_builds, damage):
    calls, build_dir, name = fake_builds
    build._compile("90")
    library, record = build_dir / f"{name}{build.LIBRARY_SUFFIX}", build_dir / build.BUILT_RECORD
    if damage == "library changed":
        library.write_bytes(b"half-written")
    elif damage == "library gone":
        library.unlink()
    elif damage == "another key":
        record.write_text(json.dumps({**json.loads(record.read_text()), "key": "0" * build.BUILD_KEY_LENGTH}))
    elif damage == "record unreadable":
        record.write_text("{")
    else:
        calls["import_fails"] = True
    assert build._compile("90").origin == "jit" and calls["jit"] == 2
    assert build.built_library(build_dir, name, build.build_key("90")) == library  # recorded afresh


def test_import_library_imports_a_module_from_its_file(tmp_path):
    path = tmp_path / "some_extension.py"
    path.write_text("ANSWER = 42\n")
    assert build._import_library("some_extension", path).ANSWER == 42
    with pytest.raises(ImportError):
        build._import_library("nothing", tmp_path / "nothing.txt")


# -- the market, cached per data config and seed set ------------------------------------------------


def test_market_key_changes_with_every_input_of_the_market_and_nothing_else():
    cfg = tiny_config()
    prices = load_prices(cfg)
    key = market_key(cfg, "cpu", prices)
    for override in ("data.synthetic.seed=8", "data.synthetic.n=950", "data.synthetic.paths=shared", "data.splits=[0.6,0.2,0.2]",
                     "data.folds.k=2", "env.window=9", "env.episode_length=40", "first_seed_index=1", "trainer.population=4"):
        assert market_key(tiny_config(override), "cpu", prices) != key, override
    assert market_key(cfg, "cpu", prices * 1.01) != key
    assert market_key(cfg, "cpu", None) != key
    for override in ("trainer.lr=0.001", "model.hidden=12", "gems.g6.mode=wire", "seed=5", "trainer.epochs=9", "env.cost=0.001"):
        assert market_key(tiny_config(override), "cpu", prices) == key, override


def _market_tensors(market) -> dict[str, torch.Tensor]:
    return {"features": market.features.clone(), "returns_next": market.returns_next.clone()}


def test_market_cache_builds_once_keeps_the_most_recent_and_refuses_no_room():
    cache, built = MarketCache(limit=2), []

    def build_market(tag):
        return lambda: built.append(tag) or tag

    assert cache.get("a", build_market("a")) == "a" and cache.get("a", build_market("x")) == "a"
    cache.get("b", build_market("b"))
    cache.get("a", build_market("x"))  # a is now the most recent
    cache.get("c", build_market("c"))  # evicts b
    assert built == ["a", "b", "c"] and len(cache) == 2
    assert cache.get("b", build_market("b2")) == "b2"
    with pytest.raises(ValueError, match="limit"):
        MarketCache(limit=0)


def test_a_cached_market_is_read_only_to_training_and_gives_the_bits_of_a_fresh_one():
    """Two trials of one config in one process share the cached market: the second equals a
    run with a market of its own, every epoch and state tensor bit for bit, and training left
    the market's tensors as they were."""
    cfg = tiny_config("trainer.epochs=2", "gems.g10.mode=wire")
    prices = load_prices(cfg)
    cache = MarketCache()
    base = cfg.to_dict()
    first = trainable.trial_trainer({}, base=base, prices=prices, markets=cache)
    before = _market_tensors(first.market)
    train_epochs(first)
    second = trainable.trial_trainer({}, base=base, prices=prices, markets=cache)
    assert second.market is first.market and len(cache) == 1
    train_epochs(second)
    fresh = Trainer(cfg, prices=prices, log=None)
    assert fresh.market is not first.market
    train_epochs(fresh)
    assert_same_run(second, fresh)
    assert_same_run(first, fresh)
    for name, t in _market_tensors(first.market).items():
        assert torch.equal(t, before[name]), name


def test_per_seed_paths_come_from_the_cache_for_the_same_seed_set_only():
    cfg, other = tiny_config("trainer.population=2"), tiny_config("trainer.population=2", "first_seed_index=2")
    prices = load_prices(cfg)
    cache = MarketCache()

    def get(c):
        return cache.get(market_key(c, "cpu", prices), lambda: prepare_market(c, torch.device("cpu"), prices))

    a, b = get(cfg), get(other)
    assert a is not b and get(cfg) is a
    assert not torch.equal(a.features, b.features)  # seed indices 2, 3 have paths of their own


# -- synthetic paths and initial weights: vectorised where the bits stay --------------------------


def _scalar_chain(cumulative, jumps, start, trend_shocks, persistence, scale):
    """The per-row loop the vectorised recursions replaced, verbatim."""
    k = cumulative.shape[0]
    state, trend = np.empty(len(jumps), dtype=np.int64), np.empty(len(jumps))
    s, m = start, 0.0
    for t in range(len(jumps)):
        s = min(int(np.searchsorted(cumulative[s], jumps[t], side="right")), k - 1)
        m = persistence * m + scale * trend_shocks[t]
        state[t], trend[t] = s, m
    return state, trend


@pytest.mark.parametrize("k, persistence, trend_persistence, seed", [(3, 0.98, 0.95, 0), (1, 0.98, 0.95, 1), (4, 0.5, 0.3, 2), (2, 0.999, 0.999, 3)])
def test_regime_chain_and_trend_equal_the_row_by_row_recursion(k, persistence, trend_persistence, seed):
    rng = np.random.default_rng(seed)
    n = 3000
    leave = (1.0 - persistence) / max(k - 1, 1)
    cumulative = np.cumsum(np.where(np.eye(k, dtype=bool), persistence if k > 1 else 1.0, leave), axis=1)
    jumps, shocks = rng.random(n), rng.standard_normal(n)
    scale = np.sqrt(1.0 - trend_persistence**2)
    want_state, want_trend = _scalar_chain(cumulative, jumps, k - 1, shocks, trend_persistence, scale)
    assert np.array_equal(series._regime_chain(cumulative, jumps[None], np.array([k - 1]))[0], want_state)
    assert np.array_equal(series._ar1(shocks[None], trend_persistence, scale)[0], want_trend)  # bit for bit
    if k > 1:
        assert len(np.unique(want_state)) > 1  # the chain moves: the comparison means something


def test_many_paths_walk_their_chains_and_trends_together_bit_for_bit():
    """The [P, n] forms (one loop over rows for every path) equal each path's own recursion."""
    rng = np.random.default_rng(5)
    k, n, P = 3, 2000, 6
    cumulative = np.cumsum(np.where(np.eye(k, dtype=bool), 0.98, 0.01), axis=1)
    jumps, shocks, starts = rng.random((P, n)), rng.standard_normal((P, n)), rng.integers(k, size=P)
    states, trends = series._regime_chain(cumulative, jumps, starts), series._ar1(shocks, 0.95, 0.3)
    for p in range(P):
        want_state, want_trend = _scalar_chain(cumulative, jumps[p], int(starts[p]), shocks[p], 0.95, 0.3)
        assert np.array_equal(states[p], want_state) and np.array_equal(trends[p], want_trend), p


def _reference_path(n: int, seed: int, edge: float, edge_periods=None) -> np.ndarray:
    """A synthetic path as the tree before the paths were built together made it: one path,
    its regime chain and trend row by row (`_scalar_chain`), its own business-day index."""
    regimes = series.DEFAULT_REGIMES
    edge_of_row = edge if edge_periods is None else series._edge_of_row(n, edge_periods)
    rng = np.random.default_rng(seed)
    vol, drift = (np.asarray(col, dtype=np.float64) for col in zip(*regimes))
    k = len(vol)
    cumulative = np.cumsum(np.where(np.eye(k, dtype=bool), 0.98, (1.0 - 0.98) / (k - 1)), axis=1)
    jumps, shocks, noise = rng.random(n), rng.standard_normal(n), rng.standard_normal(n)
    state, trend = _scalar_chain(cumulative, jumps, int(rng.integers(k)), shocks, 0.95, np.sqrt(1.0 - 0.95**2))
    share = edge_of_row * 0.2
    returns = drift[state] * edge_of_row + vol[state] * (np.sqrt(share) * trend + np.sqrt(1.0 - share) * noise)
    returns[0] = 0.0
    return 100.0 * np.cumprod(1.0 + np.maximum(returns, -0.5))


PATHS_BEFORE = {
    (): "ca85d011575736f738e03968ebee8db7ae6179c7583be51cdc5334f62753e9bb",
    ("data.synthetic.edge_periods=[[0,0.8],[0.5,0.0]]",): "08235c3331bd5a348bb63ef39883354c5f8d5e1a2d377ede4bf03b05ebfd6d23",
}
"""sha256 of the float64 bytes of `load_paths(tiny_config("trainer.population=4", *key).data, 4,
first_seed_index=2)`, stacked, as the tree before the paths were built together (main at
1527c6b) computed them."""


@pytest.mark.parametrize("overrides", list(PATHS_BEFORE))
def test_paths_built_together_have_the_bits_of_paths_built_one_by_one_and_the_market_too(overrides):
    import hashlib

    from tune_gems.market.features import Market

    cfg = tiny_config("trainer.population=4", "first_seed_index=2", *overrides)
    syn = cfg.data.synthetic
    paths = series.load_paths(cfg.data, 4, first_seed_index=2)
    assert hashlib.sha256(np.stack([p.to_numpy() for p in paths]).tobytes()).hexdigest() == PATHS_BEFORE[overrides]
    index = pd.bdate_range(start="2000-01-03", periods=syn.n)
    for path, seed in zip(paths, series.path_seeds(syn, 4, 2)):
        assert np.array_equal(path.to_numpy(), _reference_path(syn.n, seed, syn.edge, syn.edge_periods)), seed
        assert path.index is paths[0].index and path.index.equals(index) and path.index.freq == index.freq  # one index, built once
    market = prepare_market(cfg, torch.device("cpu"))
    reference = [pd.Series(_reference_path(syn.n, s, syn.edge, syn.edge_periods), index=index) for s in series.path_seeds(syn, 4, 2)]
    want = Market(reference, market.bounds, cfg.env.window, fold_ids=market.fold_ids)
    for name, tensor in _market_tensors(market).items():
        assert torch.equal(tensor, getattr(want, name)), name


def _stacked_uniform(gens, reps, shape, bound):
    """The member-by-member draws and out-of-place arithmetic the in-place version replaced."""
    out = [torch.rand((reps, *shape), generator=g, dtype=torch.float64) for g in gens]
    return ((torch.stack(out) * 2 - 1) * bound).float()


def test_initial_draws_equal_member_by_member_draws_and_leave_the_generators_alike():
    seeds = [3, 11, 12345]

    def gens():
        return [torch.Generator().manual_seed(s) for s in seeds]

    a, b = gens(), gens()
    for shape, bound in (((5, 7), 0.3), ((1, 7), 0.3), ((64, 153), 0.125)):
        assert torch.equal(layers._uniform(a, 2, shape, bound), _stacked_uniform(b, 2, shape, bound))
        assert torch.equal(layers._normal(a, 1, shape), torch.stack([torch.randn((1, *shape), generator=g, dtype=torch.float64) for g in b]).float())
    assert all(torch.equal(x.get_state(), y.get_state()) for x, y in zip(a, b))


def test_the_target_net_as_a_copy_equals_one_built_from_the_seeds():
    """The learner copies the online net for its target instead of drawing the weights again:
    every parameter and buffer (persistent or not) and every switch equal a second build."""
    from tune_gems.gems.registry import run_gems
    from tune_gems.model.network import BranchingC51

    cfg = tiny_config()
    heads = {g.name: g.head for g in run_gems([]) if g.head is not None}
    kw = dict(heads=heads, spectral_norm=[True, False, True], noisy=[False, True, True], member_block=None)
    online = BranchingC51(cfg.model, 9, 2, 3, [5, 6, 7], **kw)
    copied, built = copy.deepcopy(online), BranchingC51(cfg.model, 9, 2, 3, [5, 6, 7], **kw)
    for (na, a), (nb, b) in zip([*copied.named_parameters(), *copied.named_buffers()], [*built.named_parameters(), *built.named_buffers()]):
        assert na == nb and torch.equal(a, b), na
    for (_, a), (_, b) in zip(copied.weight_layers().items(), built.weight_layers().items()):
        assert vars(a).get("sn_common") == vars(b).get("sn_common") and vars(a).get("noise_common") == vars(b).get("noise_common")


# -- a reused actor: trial after trial in one process ------------------------------------------------


@pytest.mark.slow
def test_a_reused_actor_runs_equal_trials_to_the_same_bits(tmp_path, ray_address):
    """Three trials of one config with common seeds, one at a time: Tune runs them in one actor
    (one worker process), and every member row of every epoch is the same in all three, the
    cold trial and the two that found the process, its market and its frozen heap warm."""
    from tune_gems.sweep.driver import run_sweep

    from tune_gems.config.yaml_io import apply_overrides

    spec = tmp_path / "reuse.yaml"
    config = apply_overrides({}, [*TINY, "trainer.epochs=2", "gems.g10.mode=wire"])
    spec.write_text(json.dumps({"num_samples": 3, "max_concurrent_trials": 1, "seeds": "common", "config": config,
                                "objective": {"metric": "val_sharpe_mean", "mode": "max"}, "resources": {"cpu": 1}}))
    out = run_sweep(spec, storage=str(tmp_path / "exp"), name="reuse")
    rows = [json.loads(line) for f in sorted((tmp_path / "exp" / "reuse").glob("*/result.json")) for line in f.read_text().splitlines()]
    assert len({r["trial_id"] for r in rows}) == 3 and len({r["pid"] for r in rows}) == 1, {(r["trial_id"], r["pid"]) for r in rows}
    members = out.members.drop(columns=[c for c in ("trial_id", "experiment") if c in out.members])
    per_trial = [canon(g.drop(columns="trial_id").to_dict("records")) for _, g in out.members.groupby("trial_id")]
    assert len(per_trial) == 3 and len(set(per_trial)) == 1 and len(members) == 3 * 2 * 3
    assert isinstance(out.trials, pd.DataFrame) and set(out.trials["status"]) == {"TERMINATED"}
