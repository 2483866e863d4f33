"""Checker factories: the gate by default, any factory for experiments, saved as an import path."""

from __future__ import annotations

import pytest

from planfence.demos.baselines import FreshnessOnly, freshness_checker
from planfence.plugins.gate import Gate, Policy, checker_factory, checker_path, gate_checker
from planfence.shared_memory import ConfigError, create_async_store


def test_the_gate_is_the_default_and_saves_as_nothing() -> None:
    assert checker_factory(None) is gate_checker
    assert checker_path(gate_checker) is None
    store = create_async_store("memory://")
    assert isinstance(gate_checker(store, Policy(), "a"), Gate)


def test_a_factory_round_trips_through_its_path() -> None:
    path = checker_path(freshness_checker)
    assert path == "planfence.demos.baselines:freshness_checker"
    assert checker_factory(path) is freshness_checker
    store = create_async_store("memory://")
    assert isinstance(checker_factory(path)(store, Policy(), None), FreshnessOnly)


@pytest.mark.parametrize(
    "spec",
    ["freshness", "planfence.demos.baselines:nope", "no.such.module:x", ":x", 42],
)
def test_bad_checker_specs_are_config_errors(spec: object) -> None:
    with pytest.raises(ConfigError):
        checker_factory(spec)  # type: ignore[arg-type]


def test_a_lambda_cannot_be_saved() -> None:
    with pytest.raises(ConfigError, match="module-level function"):
        checker_path(lambda store, policy, agent: gate_checker(store, policy, agent))
