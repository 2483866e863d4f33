"""The gate's one wire model: what every adapter hands on, read back the same, documented once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from planfence.plugins.gate import (
    AllowPayload,
    RefusalPayload,
    StepOutcome,
    Verdict,
    fold_step,
    parse_payload,
)
from planfence.plugins.gate.decision import StaleKey
from planfence.plugins.gate.wire import payload_of

STALE = Verdict(
    "replan",
    "stale_dependencies",
    "book",
    "p1",
    "executor",
    message="plan was derived from outdated versions of trip/1; replan once",
    stale=(StaleKey("trip/1", ("a",), "b"),),
    decision_id=3,
)
ALLOWED = Verdict("allow", "current", "book", "p1", "executor", decision_id=4)


def test_a_refusal_and_an_allow_travel_and_come_back_the_same() -> None:
    refusal = payload_of(STALE)
    assert isinstance(refusal, RefusalPayload)
    assert refusal.wire() == {
        "verdict": "replan",
        "reason": "stale_dependencies",
        "tool": "book",
        "plan": "p1",
        "stale": [{"key": "trip/1", "used": ["a"], "current": "b"}],
        "message": STALE.message,
        "decision_id": 3,
    }
    assert parse_payload(refusal.wire()) == refusal
    assert (refusal.stale_keys, refusal.current) == (("trip/1",), {"trip/1": "b"})
    allow = payload_of(ALLOWED)
    assert isinstance(allow, AllowPayload)
    assert allow.wire() == {
        "verdict": "allow",
        "reason": "current",
        "tool": "book",
        "plan": "p1",
        "decision_id": 4,
    }
    assert parse_payload(allow.wire()) == allow


def test_the_models_are_frozen_and_refuse_what_is_not_theirs() -> None:
    refusal = payload_of(STALE)
    with pytest.raises(ValidationError):
        refusal.reason = "current"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        parse_payload({**refusal.wire(), "verdict": "allow"})  # an allow has no stale keys
    with pytest.raises(ValidationError):
        parse_payload({"verdict": "maybe", "reason": "x", "tool": "t"})
    with pytest.raises(ValueError, match="an allow's payload"):
        AllowPayload.of(STALE)
    with pytest.raises(ValueError, match="a refusal's payload"):
        RefusalPayload.of(ALLOWED)


def test_a_step_folds_wire_forms_and_models_alike() -> None:
    models = fold_step([payload_of(ALLOWED), payload_of(STALE)])
    wired = fold_step([payload_of(ALLOWED).wire(), payload_of(STALE).wire()])
    assert isinstance(models, StepOutcome) and models == wired
    assert (models.status, models.tool, models.stale, models.gated) == (
        "replan",
        "book",
        ("trip/1",),
        True,
    )
    assert fold_step([payload_of(STALE)], replans_spent=1).status == "blocked"  # type: ignore[union-attr]


def test_the_docs_document_every_field_of_the_wire_model() -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "frameworks" / "write-an-adapter.md"
    text = page.read_text(encoding="utf-8")
    for model in (RefusalPayload, AllowPayload, StepOutcome):
        [row] = [ln for ln in text.splitlines() if ln.strip().startswith(f"| `{model.__name__}` |")]
        documented = re.findall(r"`([a-z_]+)`", row.split("|")[2])
        assert [f for f in model.model_fields if f not in documented] == [], model.__name__


def test_the_audit_detail_the_gate_writes_is_the_models() -> None:
    from planfence.plugins.gate.wire import DecisionDetail

    full = STALE.evolve(
        scope=("trip/1",),
        frontier={"trip/1": ("a",)},
        heads={"trip/1": "b"},
        epochs={"trip/1": 2},
        args_digest="d" * 64,
        value_digests={"to": "e" * 64},
        latency_ms=0.25,
    )
    for verdict in (full, ALLOWED):
        written = DecisionDetail.record(verdict, "planfence")
        assert written == DecisionDetail.of(verdict, "planfence").wire()
        assert DecisionDetail.model_validate(written).wire() == written
