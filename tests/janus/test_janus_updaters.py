"""DC-RS and ExpeL driven by a scripted model: parsing, operations, malformed output."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from janus_scripted_llm import ScriptedLLM

from planfence.plugins.janus import DCRSUpdater, ExpeLUpdater, MemoryUpdater, Task
from planfence.plugins.janus.errors import UpdaterOutputError
from planfence.plugins.janus.llm import ChatClient
from planfence.plugins.janus.tasks import Feedback
from planfence.plugins.janus.updaters.expel import Operation, apply_operations, parse_operations


def task(q: str, a: str = "1") -> Task:
    return Task.create(q, a)


# ---- DC-RS


async def test_dcrs_rewrites_the_cheatsheet_with_retrieved_examples(
    scripted: ScriptedLLM, llm: ChatClient
) -> None:
    dcrs = DCRSUpdater(llm)
    assert isinstance(dcrs, MemoryUpdater)
    scripted.replies = [
        "<cheatsheet>fractions: common denominator</cheatsheet>",
        "<cheatsheet>ignored draft</cheatsheet> then <cheatsheet>fractions: LCD first\n"
        "angles: sum to 180</cheatsheet>",
        "<cheatsheet>v3</cheatsheet>",
        "<cheatsheet>v4</cheatsheet>",
        "<cheatsheet>v5</cheatsheet>",
    ]
    memory = dcrs.initial_memory()
    memory = await dcrs.propose(memory, task("add fractions 1/2 + 1/3"), Feedback("5/6", True))
    assert memory == "fractions: common denominator"
    memory = await dcrs.propose(memory, task("triangle angles sum"), Feedback("180", True))
    assert memory == "fractions: LCD first\nangles: sum to 180"  # the last block wins
    for q in ("subtract fractions 3/4 - 1/8", "multiply fractions 2/3 by 3/5"):
        memory = await dcrs.propose(memory, task(q), Feedback("ok", True))
    assert len(dcrs.pool) == 4
    memory = await dcrs.propose(memory, task("divide fractions 1/2 by 1/4"), Feedback("2", True))
    prompt = scripted.user_prompts()[-1]
    assert "CURRENT CHEATSHEET:\nv4" in prompt
    assert prompt.count("INPUT:") == 3  # top-3 retrieval
    assert "fractions" in prompt.split("NEXT TASK:")[0]
    assert "triangle" not in prompt.split("NEXT TASK:")[0]  # the least similar is left out


def test_dcrs_retrieval_ranks_by_similarity(llm: ChatClient) -> None:
    dcrs = DCRSUpdater(llm, top_k=2)
    dcrs.pool = [
        {"input": "book a flight to Lisbon", "output": "x"},
        {"input": "add two fractions quickly", "output": "y"},
        {"input": "add fractions with unlike denominators", "output": "z"},
    ]
    got = dcrs.retrieve("add fractions with different denominators")
    assert [p["output"] for p in got] == ["z", "y"]


@pytest.mark.parametrize(
    "reply",
    [
        "Here is the new cheatsheet: fractions...",  # no block
        "<cheatsheet>   </cheatsheet>",  # empty
        "<cheatsheet>" + "x" * 5000 + "</cheatsheet>",  # over the limit
        "<cheatsheet>unterminated",
    ],
)
async def test_dcrs_malformed_reply_is_a_typed_error_and_changes_nothing(
    scripted: ScriptedLLM, llm: ChatClient, reply: str
) -> None:
    dcrs = DCRSUpdater(llm, max_chars=4000)
    dcrs.pool = [{"input": "earlier", "output": "e"}]
    scripted.replies = [reply]
    memory = "keep me"
    with pytest.raises(UpdaterOutputError) as err:
        await dcrs.propose(memory, task("next"), Feedback("out", False))
    assert err.value.updater == "dc-rs" and err.value.raw == reply
    assert memory == "keep me"
    assert dcrs.pool == [{"input": "earlier", "output": "e"}]


# ---- ExpeL: parsing and applying operations


RULES = [
    {"text": "check units", "count": 3},
    {"text": "draw a diagram", "count": 1},
    {"text": "guess first", "count": 2},
]


def test_parse_operations_hand_case() -> None:
    reply = (
        "Looking at the failure, here is what I propose:\n"
        "REMOVE 3: guess first\n"
        "AGREE 1: check units\n"
        "EDIT 2: draw a labelled diagram before computing\n"
        "ADD: verify the answer against the question's constraints\n"
    )
    assert parse_operations(reply, 3) == [
        Operation("REMOVE", 3, "guess first"),
        Operation("AGREE", 1, "check units"),
        Operation("EDIT", 2, "draw a labelled diagram before computing"),
        Operation("ADD", None, "verify the answer against the question's constraints"),
    ]
    assert parse_operations("- **AGREE** rule #2: yes", 3) == [Operation("AGREE", 2, "yes")]
    assert parse_operations("NONE", 3) == []
    # Prose that merely starts with a capitalised verb is not an operation.
    assert parse_operations("Add more detail later.\nNONE", 3) == []


def test_apply_operations_hand_case() -> None:
    ops = [
        Operation("REMOVE", 3, ""),
        Operation("AGREE", 1, ""),
        Operation("EDIT", 2, "draw a labelled diagram"),
        Operation("ADD", None, "verify the answer"),
    ]
    before = copy.deepcopy(RULES)
    out = apply_operations(RULES, ops)
    assert before == RULES  # pure
    assert out == [
        {"text": "check units", "count": 4},
        {"text": "draw a labelled diagram", "count": 2},
        {"text": "verify the answer", "count": 2},
        {"text": "guess first", "count": 1},
    ]


def test_remove_costs_three_when_the_list_is_full_and_zero_counts_drop() -> None:
    rules = [{"text": f"r{i}", "count": 3} for i in range(4)]
    out = apply_operations(rules, [Operation("REMOVE", 2, "")], max_rules=4)
    assert [r["text"] for r in out] == ["r0", "r2", "r3"]  # r1: 3 - 3 = 0, dropped
    out = apply_operations(rules, [Operation("REMOVE", 2, "")], max_rules=20)
    assert out[-1] == {"text": "r1", "count": 2}
    # the list never grows past the limit
    out = apply_operations(rules, [Operation("ADD", None, "new")], max_rules=4)
    assert len(out) == 4


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("I think the rules are fine.", "no AGREE"),
        ("AGREE 7: nope", "names no rule"),
        ("REMOVE: which one?", "without a rule number"),
        ("EDIT 1:", "without a new text"),
        ("ADD:", "ADD without"),
        ("AGREE 1: a\nREMOVE 1: b", "two operations on rule 1"),
        ("AGREE 1: a\nAGREE 2: b\nAGREE 3: c\nADD: d\nADD: e", "at most 4"),
    ],
)
def test_parse_operations_rejects_malformed_replies(reply: str, problem: str) -> None:
    with pytest.raises(UpdaterOutputError, match=problem):
        parse_operations(reply, 3)


# ---- ExpeL: the updater loop


async def test_expel_failure_critique_updates_rules(scripted: ScriptedLLM, llm: ChatClient) -> None:
    expel = ExpeLUpdater(llm)
    scripted.replies = ["ADD: read the question twice", "AGREE 1: read the question twice"]
    memory: Any = expel.initial_memory()
    memory = await expel.propose(memory, task("q1", "7"), Feedback("8", False, ("9",)))
    assert memory == {"rules": [{"text": "read the question twice", "count": 2}]}
    prompt = scripted.user_prompts()[0]
    assert "FAILED TRY 1:\n9" in prompt and "FAILED TRY 2:\n8" in prompt
    assert "REFERENCE ANSWER: 7" in prompt
    memory = await expel.propose(memory, task("q2", "1"), Feedback("2", False))
    assert memory["rules"][0]["count"] == 3


async def test_expel_batches_successes(scripted: ScriptedLLM, llm: ChatClient) -> None:
    expel = ExpeLUpdater(llm, success_batch=3)
    scripted.replies = ["ADD: show your work"]
    memory: Any = {"rules": []}
    for i in range(2):
        memory = await expel.propose(memory, task(f"s{i}"), Feedback("ok", True))
        assert memory == {"rules": []}
    assert scripted.requests == []  # no call until the batch is full
    memory = await expel.propose(memory, task("s2"), Feedback("ok", True))
    assert memory["rules"] == [{"text": "show your work", "count": 2}]
    assert scripted.user_prompts()[0].count("SUCCESS ") == 3
    assert expel.successes == []


async def test_expel_malformed_reply_leaves_memory_and_buffer(
    scripted: ScriptedLLM, llm: ChatClient
) -> None:
    expel = ExpeLUpdater(llm, success_batch=2)
    memory = {"rules": copy.deepcopy(RULES)}
    expel.successes = [{"input": "s0", "output": "ok"}]
    scripted.replies = ["AGREE 9: out of range"]
    with pytest.raises(UpdaterOutputError, match="names no rule"):
        await expel.propose(memory, task("s1"), Feedback("ok", True))
    assert memory == {"rules": RULES}
    assert expel.successes == [{"input": "s0", "output": "ok"}]
    state = expel.state_dict()
    fresh = ExpeLUpdater(llm)
    fresh.load_state_dict(state)
    assert fresh.successes == expel.successes


async def test_expel_rejects_a_memory_that_is_not_an_insight_list(llm: ChatClient) -> None:
    with pytest.raises(UpdaterOutputError, match="not an insight list"):
        await ExpeLUpdater(llm).propose("a cheatsheet", task("q"), Feedback("x", False))
