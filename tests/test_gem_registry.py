"""The gem registry: built-ins registered through it, everything gem-shaped derived from it
(config model, metric columns, accumulator rows, HEALTH_DIAG order, label, manifest), plug-ins
known only to the runs that list them, and definitions refused in one line."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from learner_fixtures import tiny_config
from tune_gems.stats import metrics
from tune_gems.config.schema import Config
from tune_gems.config.load import load_config
from tune_gems.contracts.errors import ConfigError
from tune_gems.gems import Gem, GemInputs, builtin_gems, manifest, register, registered, run_gems
from tune_gems.config.arms_section import DEFAULT_ARM
from tune_gems.design.arms import MemberLayout
from tune_gems.trainer.member_gems import MemberGems

_ids = itertools.count()


def plugin(tmp_path, monkeypatch, body: str) -> str:
    """A fresh plug-in module (unique name: the registry lives for the whole test process)."""
    name = f"h11_plugin_{next(_ids)}"
    (tmp_path / f"{name}.py").write_text("from tune_gems.gems import Gem, register\n" + body)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


MEAN_Q = "register(Gem(name='{n}', metric='{n}_value', description='d', reference=lambda x: x.q_t.mean((1, 2, 3))))\n"


def test_builtins_come_from_the_registry():
    assert [g.name for g in builtin_gems()] == ["g6", "g10", "g12"]
    assert metrics.gem_metrics() == ("g6_branch_indep", "g10_temporal", "g12_predictive")
    assert [e.name for e in manifest()] == ["g6", "g10", "g12"]
    assert Config().gem_names() == ("g6", "g10", "g12")
    assert all(g.fused is not None for g in builtin_gems()) and registered()[:3] == builtin_gems()


def test_plugin_gem_exists_only_in_runs_that_list_it(tmp_path, monkeypatch):
    mod = plugin(tmp_path, monkeypatch, MEAN_Q.format(n="alpha"))
    cfg = load_config(None, [f"plugins=[{mod}]", "gems.alpha.mode=wire", "gems.alpha.weight=0.25"])
    assert cfg.gem_names() == ("g6", "g10", "g12", "alpha") and isinstance(cfg, Config)
    assert cfg.gem("alpha").mode == "wire" and cfg.gem("alpha").weight == 0.25
    assert cfg.label().startswith("g6=measure g10=measure g12=measure alpha=wire sn=")
    assert list(cfg.to_dict()["gems"]) == ["g6", "g10", "g12", "alpha"]
    gems = ("g6_branch_indep", "g10_temporal", "g12_predictive", "alpha_value")
    first = metrics.epoch_metrics(cfg.plugins).index("g6_branch_indep")
    assert metrics.epoch_metrics(cfg.plugins)[first : first + 16] == (
        *gems, *(f"{g}_rel" for g in gems), *(f"{g}_null" for g in gems), *(f"{g}_excess" for g in gems)
    )
    assert metrics.member_metrics(cfg.plugins)[-2] == "alpha_value_excess"
    # a run without the plug-in knows nothing of it, in the same process
    plain = load_config(None, [])
    assert plain.gem_names() == ("g6", "g10", "g12") and metrics.epoch_metrics(plain.plugins) == metrics.EPOCH_METRICS
    with pytest.raises(ConfigError, match=r"^config: gems\.alpha: unknown key$"):
        load_config(None, ["gems.alpha.mode=wire"])
    with pytest.raises(ConfigError, match=r"^config: gems\.alpha\.mode: Input should be"):
        load_config(None, [f"plugins=[{mod}]", "gems.alpha.mode=sometimes"])
    # the config round-trips through its dict (checkpoints, trial configs)
    from tune_gems.config.load import build_config

    assert build_config(cfg.to_dict()) == cfg


def test_plugin_runs_in_the_learner_accumulator_health_and_columns(tmp_path, monkeypatch):
    mod = plugin(tmp_path, monkeypatch, MEAN_Q.format(n="beta"))
    from tune_gems.trainer.trainer import Trainer

    lines: list[str] = []
    t = Trainer(tiny_config(f"plugins=[{mod}]", "trainer.epochs=1"), log=lines.append)
    assert t.learner.acc_rows == (
        "loss", "q_mean", "grad_norm", "g6", "g10", "g12", "beta", "g6_null", "g10_null", "g12_null", "beta_null", "nonfinite"
    )  # fmt: skip
    r = t.run_epoch()
    assert tuple(r.metrics) == metrics.epoch_metrics(t.cfg.plugins)
    assert math.isclose(r.metrics["beta_value"], r.metrics["q_mean"], rel_tol=1e-5)  # mean Q, as defined
    assert math.isnan(r.metrics["beta_value_null"]) and math.isnan(r.metrics["beta_value_excess"])  # no null
    assert lines[0].endswith("g12_predictive=" + lines[0].split("g12_predictive=")[1].split()[0] + f" beta_value={r.metrics['beta_value']:.4f}]")


def test_definitions_are_refused_in_one_line(tmp_path, monkeypatch):
    ref = lambda x: x.q_t.mean((1, 2, 3))  # noqa: E731
    for bad, match in [
        (Gem(name="G7", metric="g7_x", description="d", reference=ref), "gem name 'G7'"),
        (Gem(name="g7", metric="loss", description="d", reference=ref), "reserved"),
        (Gem(name="g7", metric="g7_rel", description="d", reference=ref), "reserved"),
        (Gem(name="g7", metric="g7_x", description="two\nlines", reference=ref), "one line"),
        (Gem(name="g7", metric="g7_x", description="d", reference=None), "reference must be a function"),
        (Gem(name="g12", metric="g7_x", description="d", reference=ref), "clashes with the built-in gem g12"),
    ]:
        with pytest.raises(ConfigError, match=match) as e:
            register(bad)
        assert "\n" not in str(e.value)
    first = plugin(tmp_path, monkeypatch, MEAN_Q.format(n="gamma"))
    second = plugin(tmp_path, monkeypatch, MEAN_Q.format(n="gamma"))
    load_config(None, [f"plugins=[{first}]"])
    with pytest.raises(ConfigError, match=rf"plugins: {second}: .*clashes with gem 'gamma' of {first}"):
        load_config(None, [f"plugins=[{second}]"])
    with pytest.raises(ConfigError, match="plugins: expected a list"):
        load_config(None, ["plugins=7"])


def test_fused_and_reference_agree_on_cpu():
    """On CPU a gem's fused op runs the reference math: the same value to the bit."""
    gen = torch.Generator().manual_seed(3)
    P, B, K, A, H, D = 2, 9, 2, 3, 5, 4
    from tune_gems.model.heads import HeadContext, LatentPredictor

    head = LatentPredictor(HeadContext([torch.Generator().manual_seed(s) for s in range(P)], tiny_config().model, H, K, A))
    weights = {n: m.weights("eval") for n, m in head.named_children()}
    x = GemInputs(
        q_t=torch.randn(P, B, K, A, generator=gen), q_tp1=torch.randn(P, B, K, A, generator=gen),
        h_t=torch.randn(P, B, H, generator=gen), h_tp1=torch.randn(P, B, H, generator=gen),
        adv_features=torch.randn(P, K, B, D, generator=gen), action=torch.randint(A, (P, B, K), generator=gen),
        reward=torch.randn(P, B, generator=gen), not_done=(torch.rand(P, B, generator=gen) > 0.2).float(),
        head=lambda h, a: head(h, a, weights=weights),
    )  # fmt: skip
    for gem in builtin_gems():
        ref, fused = gem.reference(x), gem.fused(x)
        assert ref.shape == (P,) and torch.equal(ref, fused), gem.name


def test_member_gems_follow_registry_order_and_modes():
    cfg = tiny_config("gems.g10.mode=wire", "gems.g12.mode=off")
    s = MemberGems([cfg.gems], MemberLayout((DEFAULT_ARM,), cfg.trainer.population), "cpu", cfg.plugins)
    assert s.names == ("g6", "g10", "g12")
    assert [s.computed(n) for n in s.names] == [True, True, False] and s.any_wired("g10") and not s.any_wired("g6")
    assert [g.name for g in run_gems(cfg.plugins)] == list(s.names)


def _g6_inputs(f: torch.Tensor) -> GemInputs:
    z = torch.zeros(f.shape[0], f.shape[2])
    return GemInputs(q_t=z, q_tp1=z, h_t=z, h_tp1=z, adv_features=f, action=z, reward=z, not_done=z)


@pytest.mark.parametrize("B", [16, 32, 64, 128])
def test_g6_null_matches_simulated_independence(B):
    """G6's null is its expectation for independent branches: simulated independent features
    (Gaussian and ReLU'd, some dead columns) average to the null within Monte-Carlo error, and
    dependent branches sit well above it."""
    from tune_gems.builtin_gems import g6_null, g6_reference

    gen = torch.Generator().manual_seed(B)
    reps, K, D = 400, 2, 6
    f = torch.randn(reps, K, B, D, generator=gen, dtype=torch.float64)
    f[:, :, :, :2] = f[:, :, :, :2].relu() * torch.linspace(0.01, 3.0, reps, dtype=torch.float64).view(-1, 1, 1, 1)
    f[:, 1, :, 5] = 0.0  # a dead feature: contributes nothing, and the null knows it
    x = _g6_inputs(f)
    value, null = g6_reference(x), g6_null(x)  # one member per replication
    mean, se = value.mean(), value.std() / math.sqrt(reps)
    assert abs(mean - null.mean()) < 4 * se, (float(mean), float(null.mean()), float(se))
    assert abs(float(null.max()) - (5 / 6) * (6 / 6) / (B - 1)) < 0.01 / (B - 1)  # mean_i s ~ 5/6 and 1
    # planted dependence: branch 1 copies branch 0 plus noise
    f_dep = f.clone()
    f_dep[:, 1] = f[:, 0] + 0.5 * torch.randn(reps, B, D, generator=gen, dtype=torch.float64)
    assert (g6_reference(_g6_inputs(f_dep)) - g6_null(_g6_inputs(f_dep))).mean() > 10 * se


def test_g12_null_is_the_better_trivial_predictor():
    from tune_gems.builtin_gems import g12_null

    P, B, H = 2, 5, 3
    h_t = torch.ones(P, B, H)
    h_tp1 = torch.stack([torch.full((B, H), 1.5), torch.full((B, H), 0.2)])  # member 0: persistence wins
    nd = torch.ones(P, B)
    nd[1, 0] = 0.0  # masked samples count as zero error (sum over b / B, as G12 itself)
    z = torch.zeros(P, B, 2, 2)
    x = GemInputs(q_t=z, q_tp1=z, h_t=h_t, h_tp1=h_tp1, adv_features=z, action=z, reward=nd, not_done=nd)
    torch.testing.assert_close(g12_null(x), torch.tensor([0.25, 0.04 * 4 / 5]))
