"""Sweep specs, storage URIs, trial resources and memory estimates that must be refused before
Ray starts (in-process, fast)."""

from __future__ import annotations

import pytest

from sweep_fixtures import SMOKE, TINY_SWEEP
from tune_gems.config.load import load_config
from tune_gems.contracts.errors import ConfigError, ResourceError, StorageError
from tune_gems.design.resources import GIB, MemoryEstimate, check_fits, estimate_memory
from tune_gems.sweep import preflight
from tune_gems.sweep.spec_load import load_spec
from tune_gems.sweep.storage import check_storage


def _spec(*extra: str):
    return load_spec(SMOKE, [*TINY_SWEEP, *extra])


@pytest.mark.parametrize(
    "override,fragment",
    [
        ("search.params={data.synthetic.edge: {type: float, low: 0.1, high: 0.9}}", "data.synthetic.edge cannot be searched"),
        ("search.params={data.splits: {type: categorical, choices: [a, b]}}", "data.splits cannot be searched"),
        ("search.params={trainer.lr: {type: float, low: 1.0e-4, high: .inf}}", "search.params.trainer.lr.high"),
        ("search.params={trainer.lr: {type: float, low: -.inf, high: 1.0}}", "search.params.trainer.lr.low"),
        ("search.params={trainer.lr: {type: float, low: .nan, high: 1.0}}", "search.params.trainer.lr.low"),
        ("search.params={trainer.batch_size: {type: int, low: 8.5, high: 32}}", "whole-number bounds"),
        ("search.params={trainer.batch_size: {type: int, low: 8, high: 1.0e+300}}", "whole-number bounds"),
        ("search.params={trainer.lr: {type: categorical, choices: [0.001, .nan]}}", "finite"),
        ("search.params={trainer.lr: {type: categorical, choices: [0.001, 0.001]}}", "repeat"),
        ("search.params={trainer.lr: {type: categorical, choices: [[0.001]]}}", "choices must be numbers"),
        ("search.params={trainer.batch_size: {type: int, low: 8, high: 100000000000}}", "search.params.trainer.batch_size"),
        ("scheduler={type: asha, grace_period: 5}", "scheduler.grace_period"),
        ("scheduler={type: asha, grace_period: 2}", "scheduler.grace_period"),  # == epochs: stops nothing
        ("resources.cpu=.inf", "resources.cpu"),
        ("resources.gpu=.nan", "resources.gpu"),
        ("resources.wait_for_nodes_s=-1", "resources.wait_for_nodes_s"),
    ],
)
def test_a_bad_spec_is_one_named_error(override, fragment):
    with pytest.raises((ConfigError, ResourceError)) as e:
        spec = _spec(override)
        preflight.check_memory(spec, "spec.yaml")
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_asha_with_searched_epochs_is_refused():
    with pytest.raises(ConfigError, match="trainer.epochs cannot be searched"):
        _spec("config.trainer.epochs=6", "scheduler={type: asha, grace_period: 2}",
              "search.params={trainer.epochs: {type: int, low: 3, high: 6}}")


def test_a_good_asha_spec_passes():
    assert _spec("config.trainer.epochs=6", "scheduler={type: asha, grace_period: 2}").scheduler.type == "asha"


@pytest.mark.parametrize(
    "uri,fragment",
    [
        ("foo://bucket/x", "unknown scheme 'foo'"),
        ("http://example.com/x", "unknown scheme 'http'"),
        ("file:///proc/tune-gems", "cannot be reached or written"),
        ("file://{tmp}/f", "is a file"),
        ("file://{tmp}/f/sub", "cannot be reached or written"),
    ],
)
def test_a_bad_storage_uri_is_one_named_error(uri, fragment, tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(StorageError) as e:
        check_storage(uri.format(tmp=tmp_path))
    assert fragment in str(e.value) and str(e.value).startswith("--storage: ") and "\n" not in str(e.value)


def test_a_good_file_uri_passes_and_leaves_nothing(tmp_path):
    check_storage(f"file://{tmp_path}/store")
    assert not (tmp_path / "store").exists() and list(tmp_path.iterdir()) == []


def test_trial_resources_no_node_can_hold_are_refused_or_waited_for(monkeypatch, capsys):
    import ray

    nodes = [{"Alive": True, "Resources": {"CPU": 2.0}}]
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    preflight.check_trial_resources(1.0, 0.0, 0)  # fits
    with pytest.raises(ResourceError, match=r"resources.gpu: one trial asks 1 CPU and 1 GPU.*largest: 2 CPU, 0 GPU"):
        preflight.check_trial_resources(1.0, 1.0, 0)
    with pytest.raises(ResourceError, match="resources.cpu"):
        preflight.check_trial_resources(4.0, 0.0, 0)
    monkeypatch.setattr(preflight, "NODE_POLL_S", 0.01)
    with pytest.raises(ResourceError, match="none came within resources.wait_for_nodes_s=0.05s"):
        preflight.check_trial_resources(1.0, 1.0, 0.05)
    assert "warning" in capsys.readouterr().out

    calls = []

    def autoscaled():  # a GPU node appears on the third look
        calls.append(1)
        return nodes + ([{"Alive": True, "Resources": {"CPU": 8.0, "GPU": 1.0}}] if len(calls) >= 3 else [])

    monkeypatch.setattr(ray, "nodes", autoscaled)
    preflight.check_trial_resources(1.0, 1.0, 5.0)
    assert len(calls) >= 3


def test_memory_estimate_names_numbers_and_the_key_to_lower():
    cfg = load_config(None, ["trainer.population=64", "trainer.replay_capacity=50000000"])
    est = estimate_memory(cfg)
    assert est.replay > est.params and est.replay > est.activations
    with pytest.raises(ResourceError) as e:
        check_fits(est, host=8 * GIB, device=None)
    msg = str(e.value)
    assert msg.startswith("trainer.replay_capacity: ") and "64 member(s)" in msg and "8.0 GiB is available" in msg
    assert "lower trainer.replay_capacity (or trainer.population)" in msg


def test_memory_estimate_scales_with_members_and_checks_the_gpu():
    cfg = load_config(None, ["trainer.population=4"])
    one, eight = estimate_memory(cfg, members=1, on_cuda=True), estimate_memory(cfg, members=8, on_cuda=True)
    assert eight.device > 7 * one.device and eight.host == eight.series  # on CUDA the host holds the series only
    check_fits(eight, host=64 * GIB, device=80 * GIB)
    with pytest.raises(ResourceError, match="GPU memory"):
        check_fits(eight, host=64 * GIB, device=eight.device // 2)
    assert isinstance(one, MemoryEstimate)


def test_the_default_run_fits_a_small_machine():
    est = estimate_memory(load_config(None, []))
    assert est.host < 1 * GIB  # the embedded default run must never be refused on a laptop


NESTED_AND_DOTTED = [
    ("trainer:\n  lr: 0.001\ntrainer.lr: 0.002\n", [], "trainer.lr"),
    ("arms:\n  factors:\n    gems.g12.mode: [measure, wire]\n    gems: {g12: {mode: [wire, measure]}}\n", [],
     "arms.factors.gems.g12.mode"),
    ("arms:\n  factors:\n    gems.g12.mode: [measure, wire]\n", ["arms.factors.gems.g12.mode=[wire]"], "arms.factors.gems.g12.mode"),
    ("arms:\n  list:\n    - {name: a, gems.g12.mode: wire, gems: {g12: {mode: measure}}}\n    - {name: b}\n", [],
     "arms.list[0].gems.g12.mode"),
]


@pytest.mark.parametrize("text,overrides,key", NESTED_AND_DOTTED)
def test_a_key_given_nested_and_dotted_is_refused_naming_it(text, overrides, key, tmp_path):
    """Issue 39 item 5: one key in two forms (in a file, or across a file and an override) kept
    whichever flattened last, the nested one: now one line naming the file and the key."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(path, overrides)
    assert str(e.value).startswith(f"{path}: {key}: given twice, once nested and once dotted"), str(e.value)


def test_one_form_of_a_key_is_kept_as_before():
    from tune_gems.config.dotted import DuplicateKeyError, check_one_form, flatten

    assert flatten({"a": {"b": 1}, "c.d": 2}) == {"a.b": 1, "c.d": 2}
    check_one_form({"arms": {"list": [{"name": "a", "gems.g12.mode": "wire"}, {"name": "b"}]}})
    with pytest.raises(DuplicateKeyError, match="^a.b.c: given twice"):
        flatten({"a.b": {"c": 1}, "a": {"b.c": 2}})
    assert issubclass(DuplicateKeyError, ValueError)  # inside a pydantic validator: reported at its field
    cfg = load_config(None, ["arms.factors={gems.g12.mode: [measure, wire]}"])
    assert cfg.arms.factors == {"gems.g12.mode": ["measure", "wire"]}
