"""Momentum trigger: cosine, momentum update and every trigger strategy, by hand."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from planfence.plugins.janus import JanusConfig, JanusConfigError, cosine
from planfence.plugins.janus.trigger import decide_trigger
from planfence.plugins.janus.trigger import momentum_update as update


def v(*xs: float) -> np.ndarray:
    return np.array(xs, dtype=np.float64)


def test_cosine_hand_cases() -> None:
    assert cosine(v(1, 0), v(0, 1)) == 0.0
    assert cosine(v(1, 0), v(-2, 0)) == pytest.approx(-1.0)
    assert cosine(v(1, 1), v(2, 0)) == pytest.approx(1 / np.sqrt(2))
    assert cosine(v(3, 4), v(3, 4)) == pytest.approx(1.0)


def test_cosine_is_zero_when_a_norm_is_zero() -> None:
    assert cosine(v(0, 0), v(1, 0)) == 0.0
    assert cosine(v(1e-12, 0), v(1, 0)) == 0.0


def test_momentum_first_update_takes_z() -> None:
    z = v(0.5, -1.0)
    m = update(None, z, 0.9)
    assert m.tolist() == [0.5, -1.0]
    assert m is not z  # a copy: later changes to z do not leak into the momentum


def test_momentum_update_hand_computed() -> None:
    m = update(v(1.0, 0.0), v(0.0, 1.0), 0.9)
    assert m.tolist() == pytest.approx([0.9, 0.1])
    m = update(m, v(-1.0, 0.0), 0.9)
    assert m.tolist() == pytest.approx([0.81 - 0.1, 0.09])


MOMENTUM = JanusConfig(trigger="momentum")


def test_momentum_trigger_needs_a_momentum() -> None:
    info = decide_trigger(MOMENTUM, v(1, 0), None, 1, 0.0)
    assert not info.fired
    assert info.cosine is None


def test_momentum_trigger_fires_below_tau_only() -> None:
    cfg = MOMENTUM  # tau = 0.0
    assert decide_trigger(cfg, v(-1, 0.1), v(1, 0), 3, 0.5).fired
    assert not decide_trigger(cfg, v(1, 0.1), v(1, 0), 3, 0.5).fired
    # cos exactly 0 (orthogonal, or a zero update) is not < 0: accepted directly.
    assert not decide_trigger(cfg, v(0, 1), v(1, 0), 3, 0.5).fired
    assert not decide_trigger(cfg, v(0, 0), v(1, 0), 3, 0.5).fired
    # a positive tau also checks mildly aligned updates
    assert decide_trigger(replace(MOMENTUM, tau=0.5), v(1, 2), v(1, 0), 3, 0.5).fired  # 0.447


@pytest.mark.parametrize(
    ("config", "number", "draw", "fired"),
    [
        (JanusConfig(trigger="always"), 1, 0.9, True),
        (JanusConfig(trigger="never"), 1, 0.0, False),
        (JanusConfig(trigger="random", random_rate=0.25), 1, 0.2, True),
        (JanusConfig(trigger="random", random_rate=0.25), 1, 0.25, False),
        (JanusConfig(trigger="periodic", period=3), 3, 0.0, True),
        (JanusConfig(trigger="periodic", period=3), 4, 0.0, False),
        (JanusConfig(trigger="periodic", period=3), 6, 0.0, True),
    ],
)
def test_ablation_triggers(config: JanusConfig, number: int, draw: float, fired: bool) -> None:
    assert decide_trigger(config, v(-1, 0), v(1, 0), number, draw).fired is fired


@pytest.mark.parametrize(
    "bad",
    [
        {"coverage_size": 21},
        {"beta": 1.0},
        {"tau": 2.0},
        {"trigger": "sometimes"},
        {"period": 0},
        {"random_rate": 1.5},
        {"support_size": 0},
        {"budget": 0.0},
        {"budget": 1.5},
        {"floor": 0.0},
        {"on_tie": "coin"},
        {"aim_size": -1},
        {"aim_lines": 0},
        {"budget_window": 0},
    ],
)
def test_config_rejects_bad_settings(bad: dict[str, object]) -> None:
    with pytest.raises(JanusConfigError):
        JanusConfig(**bad)  # type: ignore[arg-type]


def test_reference_defaults() -> None:
    cfg = JanusConfig.paper()
    assert (cfg.support_size, cfg.coverage_size, cfg.boundary_size, cfg.fresh_size) == (
        20,
        12,
        8,
        5,
    )
    assert (cfg.tau, cfg.beta, cfg.trigger, cfg.on_tie, cfg.aim_size) == (
        0.0,
        0.9,
        "momentum",
        "deploy",
        0,
    )
    assert JanusConfig.from_dict(cfg.to_dict()) == cfg
    # planfence's defaults differ from the paper's in exactly these three settings
    default = JanusConfig()
    assert (default.trigger, default.on_tie, default.aim_size) == ("budget", "keep", 8)
    assert replace(default, trigger="momentum", on_tie="deploy", aim_size=0) == cfg


finite = st.floats(-100, 100, allow_nan=False, allow_infinity=False)


@given(arrays(np.float64, 4, elements=finite), arrays(np.float64, 4, elements=finite))
def test_cosine_is_bounded_and_symmetric(a: np.ndarray, b: np.ndarray) -> None:
    c = cosine(a, b)
    assert -1.0 - 1e-9 <= c <= 1.0 + 1e-9
    assert c == pytest.approx(cosine(b, a))


@given(
    arrays(np.float64, 3, elements=finite),
    arrays(np.float64, 3, elements=finite),
    st.floats(0.0, 0.99),
)
def test_momentum_is_a_convex_combination(m: np.ndarray, z: np.ndarray, beta: float) -> None:
    out = update(m, z, beta)
    assert np.all(out <= np.maximum(m, z) + 1e-9)
    assert np.all(out >= np.minimum(m, z) - 1e-9)
