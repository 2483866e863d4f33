"""`planfence plan create`, `planfence audit` and `planfence demo` from the command line."""

from __future__ import annotations

import json

import pytest

from planfence.adapters.cli.main import main
from planfence.shared_memory import open_store


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_create_and_audit(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> None:
    s = ("--store", sqlite_url)
    assert run(capsys, "memory", "own", "order/7", "--owner", "sales", *s)[0] == 0
    code, rid, _ = run(
        capsys, "memory", "put", "order/7", "--value", '{"n": 1}', "--as", "sales", *s
    )
    assert code == 0
    code, out, _ = run(
        capsys,
        "plan",
        "create",
        "--as",
        "planner",
        "--parents",
        rid.strip(),
        "--value",
        '{"ship": true}',
        "--json",
        *s,
    )
    assert code == 0
    plan = json.loads(out)
    assert plan["kind"] == "plan"
    assert plan["parents"] == [rid.strip()]
    code, out, _ = run(
        capsys,
        "plan",
        "create",
        "--as",
        "planner",
        "--parents",
        rid.strip(),
        "--supersedes",
        plan["id"],
        *s,
    )
    assert code == 0
    assert len(out.strip()) == 64


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--parents", "0" * 64), "unknown parent or referenced record"),
        (("--parents", "xyz"), "'xyz' is not a record id"),
        (("--parents", "0" * 64, "--value", "{nope"), "not valid JSON"),
    ],
)
def test_plan_create_errors(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, argv: tuple[str, ...], message: str
) -> None:
    open_store(sqlite_url).close()  # the store exists; the plan is what is wrong
    code, _, err = run(capsys, "plan", "create", "--as", "p", *argv, "--store", sqlite_url)
    assert code == 1
    assert message in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("executor", ["planfence", "freshness", "eager", "allkeys"])
def test_quickstart_json(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, executor: str
) -> None:
    code, out, _ = run(
        capsys, "demo", "quickstart", "--executor", executor, "--json", "--store", sqlite_url
    )
    assert code == 0
    data = json.loads(out)
    assert data["store"] == sqlite_url
    [r] = data["runs"]
    assert set(r) == {
        "workflow",
        "executor",
        "run",
        "completed",
        "invalid_actions",
        "replans",
        "blocked",
        "steps",
        "actions",
        "cost",
    }
    [action] = r["actions"]
    assert action["tool"] == "book_trip"
    if executor == "freshness":
        # Acts on the plan derived from the old requirements: the stale destination.
        assert (r["completed"], r["invalid_actions"], r["replans"]) == (False, 1, 0)
        assert action["args"]["destination"] == "Lisbon"
        assert action["valid"] is False
    else:
        assert (r["completed"], r["invalid_actions"], r["replans"], r["blocked"]) == (True, 0, 1, 0)
        assert action["args"]["destination"] == "Porto"
        assert action["valid"] is True


def test_quickstart_revision_during_replan_blocks_and_is_audited(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    code, out, _ = run(
        capsys,
        "demo",
        "quickstart",
        "--executor",
        "planfence",
        "--revise-during-replan",
        "--json",
        "--store",
        sqlite_url,
    )
    assert code == 0
    [r] = json.loads(out)["runs"]
    assert (r["completed"], r["blocked"], r["invalid_actions"]) == (False, 1, 0)
    code, out, _ = run(capsys, "audit", "--json", "--store", sqlite_url)
    verdicts = [(d["verdict"], d["reason"]) for d in json.loads(out)["decisions"]]
    assert verdicts == [("block", "stale_after_replan"), ("replan", "stale_dependencies")]
    code, out, _ = run(capsys, "audit", "--verdict", "block", "--store", sqlite_url)
    assert "stale_after_replan" in out
    assert "stale_dependencies" not in out


def test_workflows_reproduce_the_paper_claim(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    code, out, _ = run(capsys, "demo", "workflows", "--runs", "2", "--json", "--store", sqlite_url)
    assert code == 0
    summary = json.loads(out)["summary"]
    assert summary["freshness"]["invalid_actions"] == summary["freshness"]["runs"] == 6
    for safe in ("planfence", "eager", "allkeys"):
        assert summary[safe]["invalid_actions"] == 0
        assert summary[safe]["completed"] == 6


def test_quickstart_json_keeps_the_freshness_contrast(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    code, out, _ = run(capsys, "demo", "quickstart", "--json", "--store", sqlite_url)
    assert code == 0
    runs = json.loads(out)["runs"]
    assert [r["executor"] for r in runs] == ["planfence", "freshness"]
    assert [r["invalid_actions"] for r in runs] == [0, 1]
    code, out, _ = run(capsys, "demo", "quickstart", "--store", sqlite_url)
    assert "[planfence]" in out
    assert "[freshness]" in out
    assert "INVALID: acted on a stale plan" in out
