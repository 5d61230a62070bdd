"""A property-based fuzz of the parsers a user's text goes through (issue 32): the YAML loader,
`key=value` overrides, the config and the sweep spec. Every generated input must be refused in
one printable line (a TuneGemsError whose message has no line break or control character) or
accepted with the result checked here: the YAML loader agrees with PyYAML's own safe loader,
an override sets exactly the value it names, an accepted config or spec holds the values given.
Anything else (a traceback, a hang) fails.

Hypothesis runs with a fixed seed (`derandomize`), a bounded number of examples and a deadline
per example, so the suite's time stays bounded and a failure reproduces.
"""

from __future__ import annotations

import math
import string
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from sweep_fixtures import SMOKE, TINY_SWEEP  # noqa: E402
from test_hostile_matrix import leaves  # noqa: E402
from tune_gems.config.load import build_config, load_config  # noqa: E402
from tune_gems.config.yaml_io import (
    MAX_YAML_NODES, apply_overrides, dump_yaml, parse_override, read_yaml, safe_load_yaml,
)  # noqa: E402
from tune_gems.contracts.errors import TuneGemsError, control_characters  # noqa: E402

FUZZ = settings(max_examples=200, deadline=timedelta(seconds=30), derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
"""Fixed seed (derandomize), bounded examples, a deadline per example."""
FUZZ_SLOW = settings(FUZZ, max_examples=60)
"""For the sweep spec, whose validation builds several configs per example."""

CONFIG_KEYS = sorted(k for k, *_ in leaves() if k != "plugins")
"""Every config leaf but `plugins` (its values are modules to import: fuzzing them would run
whatever standard module a generated name happens to be)."""


def one_line(err: TuneGemsError) -> None:
    text = str(err)
    assert text and "\n" not in text and not control_characters(text), repr(text)


# -- YAML documents ----------------------------------------------------------------------------

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(string.ascii_letters + string.digits + " _-.", max_size=12),
)
trees = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(string.ascii_lowercase, min_size=1, max_size=6), inner, max_size=4),
), max_leaves=30)


@FUZZ
@given(tree=st.dictionaries(st.text(string.ascii_lowercase, min_size=1, max_size=6), trees, max_size=5))
def test_the_loader_reads_back_what_tune_gems_dumps(tree):
    """A mapping written as tune-gems writes config.yaml and spec.yaml loads back equal: a string
    that reads as a number (`"1e5"`, which PyYAML's own dumper leaves unquoted) stays a string."""
    assert safe_load_yaml(dump_yaml(tree)) == tree


TOKENS = [*string.printable, "&a ", "*a", "&b ", "*b", "<<: ", "!!python/name:os.system ", "\x1b", "\x00", "é", ": ", "- ",
          "\n  ", "[", "]", "{", "}", ".nan", "1e-3"]
yaml_ish = st.lists(st.sampled_from(TOKENS), max_size=40).map("".join)


@FUZZ
@given(text=yaml_ish)
def test_any_text_as_a_config_file_is_a_mapping_or_one_line(text):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "c.yaml"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        try:
            data = read_yaml(path)
        except TuneGemsError as e:
            one_line(e)
            assert str(path) in str(e)
            return
    assert isinstance(data, dict)
    if "e" in text.lower():
        return  # ours reads `1e-3` as a number, PyYAML's safe loader as text: nothing to compare
    reference = yaml.load(text, Loader=yaml.SafeLoader)  # noqa: S506 - PyYAML's own safe loader
    assert repr(data) == repr(reference or {})  # repr: NaN equals NaN


@FUZZ
@given(width=st.integers(2, 12), depth=st.integers(2, 9))
def test_aliases_are_bounded_before_they_are_expanded(width, depth):
    """`l0: &l0 [x, ...]`, `l1: &l1 [*l0, ...]`, ...: about width^depth values once expanded;
    refused in one line exactly when that is past the bound, loaded otherwise."""
    lines = [f"l0: &l0 [{', '.join(['x'] * width)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, depth)]
    size = [1 + width]  # the tree each list stands for, in nodes
    for _ in range(1, depth):
        size.append(1 + width * size[-1])
    expanded = 1 + sum(1 + n for n in size)  # the mapping, and each key with its list
    try:
        data = safe_load_yaml("\n".join(lines) + "\n")
    except yaml.YAMLError as e:
        assert "alias" in str(e) and expanded > MAX_YAML_NODES, (expanded, str(e))
        return
    assert expanded <= MAX_YAML_NODES and len(data) == depth


# -- overrides ---------------------------------------------------------------------------------

values = st.one_of(
    st.integers(-10**12, 10**12).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["true", "false", "null", "~", "[]", "{}", "[1, 2]", "{a: 1}", ".nan", ".inf", "1e-3", "1e999",
                     "'quoted'", "&a [1, *a]", "2020-13-01", "0x10", "0o7", "1_000"]),
    st.text(string.printable + "\x1b", max_size=20),
)


@FUZZ
@given(key=st.sampled_from(CONFIG_KEYS), raw=values)
def test_an_override_of_a_config_key_is_the_value_it_names_or_one_line(key, raw):
    """`key=value` for every config leaf: refused in one line naming the key (or the memory the
    value would need), or accepted and then the config holds exactly the parsed value."""
    item = f"{key}={raw}"
    try:
        parsed_key, value = parse_override(item)
        cfg = load_config(None, [item])
    except TuneGemsError as e:
        one_line(e)
        return
    assert parsed_key == key
    got = cfg
    for part in key.split("."):
        got = getattr(got, part)
    if isinstance(value, float) and math.isnan(value):
        pytest.fail(f"{item}: NaN accepted")
    if isinstance(value, bool) and isinstance(got, str):
        value = {False: "off", True: "on"}[value]  # YAML 1.1 reads `off`/`on` as booleans: a switch takes them back
    if isinstance(value, (bool, int, str)) or value is None:
        assert got == value, (item, got)


@FUZZ
@given(overrides=st.lists(st.tuples(st.sampled_from(CONFIG_KEYS), values), max_size=4))
def test_several_overrides_at_once_validate_or_refuse_in_one_line(overrides):
    items = [f"{k}={v}" for k, v in overrides]
    try:
        tree = apply_overrides({}, items)
        cfg = build_config(tree, "config")
    except TuneGemsError as e:
        one_line(e)
        return
    assert build_config(cfg.to_dict(), "again") == cfg  # what validated is a config that round-trips


@FUZZ
@given(item=st.text(string.printable + "\x1b\x00é", max_size=40))
def test_any_command_line_item_is_an_override_or_one_line(item):
    try:
        key, _value = parse_override(item)
    except TuneGemsError as e:
        one_line(e)
        return
    assert key == item.partition("=")[0].strip() and key and all(key.split("."))


# -- sweep specs -------------------------------------------------------------------------------

SPEC_KEYS = ["num_samples", "seeds", "design", "sampler_seed", "max_concurrent_trials", "objective.metric", "objective.mode",
             "search.params", "search.gems.g6.modes", "search.gems.g6.weight_low", "blocks.seed_blocks", "scheduler.type",
             "scheduler.grace_period", "resources.cpu", "resources.gpu", "config.first_seed_index", "config.seed",
             "config.trainer.replay_stream", "config.trainer.population", "name", "storage_timeout_s"]
spec_values = st.one_of(values, st.sampled_from([
    "{first_seed_index: {type: int, low: 0, high: 9}}", "{seed: {type: int, low: 0, high: 9}}",
    "{trainer.lr: {type: float, low: 0.0001, high: 0.01, log: true}}", "{trainer.replay_stream: {type: int, low: 0, high: 3}}",
    "{data.synthetic.n: {type: int, low: 900, high: 1000}}", "wire_search_aa", "none", "common", "asha", "2147483647",
    "4294967296", "[measure]", "[wire, wire]"]))


@FUZZ_SLOW
@given(changes=st.lists(st.tuples(st.sampled_from(SPEC_KEYS), spec_values), min_size=1, max_size=3))
def test_a_sweep_spec_is_valid_as_given_or_refused_in_one_line(changes):
    from tune_gems.config.schema import MAX_SEED_INDEX
    from tune_gems.sweep.spec import FIRST_SEED_INDEX, TRIAL_SET_KEYS
    from tune_gems.sweep.spec_load import load_spec, trial_constants

    items = [f"{k}={v}" for k, v in changes]
    try:
        spec = load_spec(SMOKE, [*TINY_SWEEP, *items])
    except TuneGemsError as e:
        one_line(e)
        return
    assert not set(spec.search.params) & set(TRIAL_SET_KEYS)  # never searched
    if spec.design == "wire_search_aa":
        assert "trainer.replay_stream" not in spec.search.params
        assert spec.base_config().trainer.replay_stream == 0
    if spec.blocks is None:  # the largest seed index the sweep will train is a valid one
        assert trial_constants(spec, spec.num_samples - 1)[FIRST_SEED_INDEX] <= MAX_SEED_INDEX
