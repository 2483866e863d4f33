"""`planfence check`: the gate's verdict for one call, as a dry run that writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planfence.adapters.cli.main import main
from planfence.plugins.gate import BLOCK, REPLAN, Policy, SyncGate, ToolCall, find_decisions_sync
from planfence.plugins.gate.decision import Reason
from planfence.plugins.gate.plans import create_plan_sync
from planfence.shared_memory import Store, open_store

POLICY = """\
[tools.ship_order]
depends_on = ["order/{order_id}", "address/{customer.id}", "notes/{url:enc}", "files/{p:path}"]

[tools.get_weather]
ungated = true
"""
ARGS = {"order_id": "o1", "customer": {"id": "c9"}, "url": "https://x.test/a b", "p": "eu/pt"}
KEYS = ("order/o1", "address/c9", "notes/https:=2F=2Fx.test=2Fa=20b", "files/eu/pt")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def policy_file(tmp_path: Path) -> str:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY)
    return str(path)


@pytest.fixture
def world(sqlite_url: str) -> dict[str, str]:
    """Four owned keys, a plan from their first versions, then a second version of one key."""
    with open_store(sqlite_url) as store:
        used = {}
        for key in KEYS:
            store.own(key, "owner")
            used[key] = store.put(key, {"v": 1}, author="owner").id
        plan = create_plan_sync(store, author="planner", parents=list(used.values()))
        moved = store.put("address/c9", {"v": 2}, author="owner").id
    return {"plan": plan.id, "moved": moved, **used}


def check(
    capsys: pytest.CaptureFixture[str], url: str, policy: str, *extra: str
) -> tuple[int, str, str]:
    argv = ["check", "ship_order", "--args", json.dumps(ARGS), "--policy", policy]
    return run(capsys, *argv, "--store", url, *extra)


def written(store: Store) -> tuple[int, int]:
    """How much the store holds that a check could add: journal entries, and feed changes."""
    return len(find_decisions_sync(store, source=None, limit=1000)), len(store.changes(0, 1000))


def test_check_shows_keys_versions_heads_and_the_verdict(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, policy_file: str, world: dict[str, str]
) -> None:
    code, out, err = check(capsys, sqlite_url, policy_file, "--plan", world["plan"][:12], "--json")
    assert code == 3, err  # replan
    doc = json.loads(out)
    # Templates filled, convertors applied: nested argument, :enc and :path.
    assert [(t["template"], t["key"]) for t in doc["templates"]] == [
        ("order/{order_id}", "order/o1"),
        ("address/{customer.id}", "address/c9"),
        ("notes/{url:enc}", KEYS[2]),
        ("files/{p:path}", "files/eu/pt"),
    ]
    keys = {k["key"]: k for k in doc["keys"]}
    assert set(keys) == set(KEYS)
    for key in KEYS:
        assert keys[key]["used"] == [world[key]]
        assert keys[key]["owner"] == "owner"
    assert keys["address/c9"]["head"] == world["moved"]
    assert keys["address/c9"]["current"] is False
    assert keys["order/o1"]["head"] == world["order/o1"] and keys["order/o1"]["current"] is True
    assert doc["plan"] == world["plan"]
    assert doc["verdict"]["verdict"] == REPLAN
    assert doc["verdict"]["reason"] == Reason.STALE
    [stale] = doc["verdict"]["stale"]
    assert stale == {"key": "address/c9", "used": [world["address/c9"]], "current": world["moved"]}
    assert "address/c9" in doc["verdict"]["message"]

    code, text, _ = check(capsys, sqlite_url, policy_file, "--plan", world["plan"])
    assert code == 3
    assert f"plan used  {world['address/c9']}" in text
    assert f"head       {world['moved']}  (changed)" in text
    assert f"notes/{{url:enc}} -> {KEYS[2]}" in " ".join(text.split())
    assert "verdict for plan" in text and "replan (stale" in text


def test_check_writes_nothing_and_spends_no_replan_budget(
    capsys: pytest.CaptureFixture[str],
    sqlite_url: str,
    policy_file: str,
    world: dict[str, str],
    tmp_path: Path,
) -> None:
    with open_store(sqlite_url) as store:
        before = written(store)
    for _ in range(3):  # a stale plan, checked again and again
        code, out, _ = check(capsys, sqlite_url, policy_file, "--plan", world["plan"], "--json")
        assert code == 3 and json.loads(out)["verdict"]["verdict"] == REPLAN
    with open_store(sqlite_url) as store:
        assert written(store) == before  # no audit entry, nothing in the change feed
        # The budget is whole: a replan of that plan, still stale, gets its one replan verdict
        # (had the dry run spent it, the gate would block it as stale_after_replan).
        replan = create_plan_sync(
            store, author="planner", parents=[world[k] for k in KEYS], supersedes=world["plan"]
        )
        gate = SyncGate(store, Policy.load(policy_file))
        assert gate.check(ToolCall("ship_order", ARGS, replan.id)).verdict == REPLAN
        # The contrast, by a real check: after the gate's own refusal of the first plan, the same
        # replan is out of budget.
        assert gate.check(ToolCall("ship_order", ARGS, world["plan"])).verdict == REPLAN
        again = create_plan_sync(
            store,
            author="planner",
            parents=[world[k] for k in KEYS],
            supersedes=world["plan"],
            value={"n": 2},
        )
        assert (
            gate.check(ToolCall("ship_order", ARGS, again.id)).reason == Reason.STALE_AFTER_REPLAN
        )
        assert written(store) != before


def test_check_without_a_plan_prints_the_keys_and_their_heads(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, policy_file: str, world: dict[str, str]
) -> None:
    code, out, err = check(capsys, sqlite_url, policy_file, "--json")
    assert code == 4, err  # a call without a plan is blocked
    doc = json.loads(out)
    heads = {k["key"]: k["head"] for k in doc["keys"]}
    assert heads == {**{k: world[k] for k in KEYS}, "address/c9": world["moved"]}
    assert all(k["used"] is None for k in doc["keys"])
    assert doc["verdict"]["reason"] == Reason.MISSING_PLAN
    code, text, _ = check(capsys, sqlite_url, policy_file)
    assert "heads (no --plan given):" in text and world["moved"] in text


def test_check_shows_the_keys_that_resolve_when_one_does_not(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, policy_file: str, world: dict[str, str]
) -> None:
    argv = ["check", "ship_order", "--args", '{"order_id": "o1"}', "--policy", policy_file]
    code, out, _ = run(capsys, *argv, "--plan", world["plan"], "--store", sqlite_url, "--json")
    assert code == 4
    doc = json.loads(out)
    assert doc["verdict"]["reason"] == Reason.SCOPE_UNRESOLVED
    assert "planfence check" in doc["verdict"]["message"]
    assert [k["key"] for k in doc["keys"]] == ["order/o1"]
    errors = {t["template"]: t.get("error") for t in doc["templates"]}
    assert errors["order/{order_id}"] is None
    assert "'customer.id' is missing" in errors["address/{customer.id}"]


def test_check_ungated_and_undeclared_tools(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, policy_file: str, world: dict[str, str]
) -> None:
    s = ("--policy", policy_file, "--store", sqlite_url, "--json")
    code, out, _ = run(capsys, "check", "get_weather", *s)
    assert code == 0 and json.loads(out)["verdict"]["reason"] == Reason.UNGATED
    code, out, _ = run(capsys, "check", "ship_ordr", *s)
    assert code == 4
    doc = json.loads(out)
    assert doc["declared"] is False and doc["verdict"]["reason"] == Reason.UNDECLARED_TOOL


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (("--args", "{nope"), 2, "--args is not valid JSON"),
        (("--args", "[1]"), 2, "--args must be a JSON object"),
        (("--plan", "xyz"), 1, "'xyz' is not a record id"),
        (("--agent", "bad agent"), 1, "bad agent"),
    ],
)
def test_check_errors_are_one_line(
    capsys: pytest.CaptureFixture[str],
    sqlite_url: str,
    policy_file: str,
    world: dict[str, str],
    argv: tuple[str, ...],
    code: int,
    message: str,
) -> None:
    got, out, err = run(
        capsys, "check", "ship_order", "--policy", policy_file, *argv, "--store", sqlite_url
    )
    assert got == code
    assert err.startswith("planfence: error: ") and err.count("\n") == 1 and message in err
    assert out == ""


def test_check_usage(capsys: pytest.CaptureFixture[str], tmp_path: Path, policy_file: str) -> None:
    with pytest.raises(SystemExit) as exited:  # no --policy
        main(["check", "ship_order"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "--policy" in err and err.count("\n") == 1
    missing = f"sqlite:///{tmp_path / 'typo.db'}"
    code, _, err = run(capsys, "check", "ship_order", "--policy", policy_file, "--store", missing)
    assert code == 1 and "no store at" in err
    assert not (tmp_path / "typo.db").exists()


def test_check_out_file(
    capsys: pytest.CaptureFixture[str],
    sqlite_url: str,
    policy_file: str,
    world: dict[str, str],
    tmp_path: Path,
) -> None:
    out_file = tmp_path / "check.json"
    code, out, _ = check(
        capsys, sqlite_url, policy_file, "--plan", world["plan"], "--out", str(out_file)
    )
    assert code == 3 and "verdict for plan" in out
    assert json.loads(out_file.read_text())["verdict"]["verdict"] == REPLAN


def test_refusals_a_dry_run_explains_mention_it(sqlite_url: str, policy_file: str) -> None:
    # incomplete_lineage: the plan never read one of the keys; scope_unresolved: a missing argument.
    with open_store(sqlite_url) as store:
        ids = []
        for key in KEYS:
            store.own(key, "owner")
            ids.append(store.put(key, 1, author="owner").id)
        plan = create_plan_sync(store, author="planner", parents=ids[:-1])
        gate = SyncGate(store, Policy.load(policy_file))
        lineage = gate.check(ToolCall("ship_order", ARGS, plan.id))
        scope = gate.check(ToolCall("ship_order", {"order_id": "o1"}, plan.id))
    assert (lineage.verdict, lineage.reason) == (BLOCK, Reason.INCOMPLETE_LINEAGE)
    assert (scope.verdict, scope.reason) == (BLOCK, Reason.SCOPE_UNRESOLVED)
    for verdict in (lineage, scope):
        assert "planfence check" in verdict.message


def test_the_exit_status_is_the_verdict(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, policy_file: str, world: dict[str, str]
) -> None:
    """0 allow, 3 replan, 4 block, so a script can tell them apart; 1 and 2 stay errors."""
    with open_store(sqlite_url) as store:
        current = create_plan_sync(
            store,
            author="planner",
            parents=[world[k] for k in KEYS if k != "address/c9"] + [world["moved"]],
        )
    verdicts = {}
    for plan in (current.id, world["plan"], "ab" * 32):
        code, out, _ = check(capsys, sqlite_url, policy_file, "--plan", plan, "--json")
        verdicts[json.loads(out)["verdict"]["verdict"]] = code
    assert verdicts == {"allow": 0, "replan": 3, "block": 4}
    code, out, _ = check(capsys, sqlite_url, policy_file, "--plan", current.id)
    assert code == 0 and "verdict for plan" in out
    # a store that does not exist: the check could not be made
    code, _, _ = check(capsys, f"sqlite:///{world['plan'][:8]}/none.db", policy_file)
    assert code == 1


def test_an_argument_too_long_for_a_key_is_told_as_such(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, policy_file: str, world: dict[str, str]
) -> None:
    """100,000 characters: no convertor shortens a value, so `:enc` is no advice; and the dry
    run does not tell its user to run the dry run."""
    huge = {**ARGS, "order_id": "x" * 100_000}
    argv = ["check", "ship_order", "--args", json.dumps(huge), "--policy", policy_file]
    code, out, _ = run(capsys, *argv, "--plan", world["plan"], "--store", sqlite_url)
    assert code == 4
    [said] = [line.strip() for line in out.splitlines() if line.startswith("  'order/")]
    assert said.startswith(
        "'order/{order_id}' would fill to a key of 100006 characters, over 256 (the longest a "
        "key may be), 100000 of them from argument 'order_id'"
    )
    assert "{order_id:enc}" not in out and "planfence check" not in out
    # A real check of the same call says the same, and points to the dry run.
    with open_store(sqlite_url) as store:
        verdict = SyncGate(store, Policy.load(policy_file)).check(
            ToolCall("ship_order", huge, world["plan"])
        )
    assert verdict.reason == Reason.SCOPE_UNRESOLVED
    assert verdict.message.startswith(said) and "planfence check" in verdict.message
