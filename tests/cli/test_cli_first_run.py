"""Small things a new user met at the command line: names in errors, no-op transfers, the help an
error points to, pipes closed early, plurals."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from planfence.adapters.cli.main import main
from planfence.demos.demo_cli import _cost_line
from planfence.demos.metering import Cost
from planfence.shared_memory import open_store
from planfence.shared_memory.records import KIND_PLAN

PLANFENCE = [sys.executable, "-m", "planfence.adapters.cli"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def fact(sqlite_url: str) -> str:
    with open_store(sqlite_url) as store:
        store.own("order/7", "sales")
        return store.put("order/7", {"status": "confirmed"}, author="sales").id


def test_plan_create_names_a_bad_agent(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, fact: str
) -> None:
    code, _, err = run(
        capsys, "plan", "create", "--as", "bad agent", "--parents", fact, "--store", sqlite_url
    )
    assert code == 1
    [line] = err.splitlines()
    assert "invalid agent id 'bad agent'" in line
    assert "plans/" not in line


def test_plan_create_supersedes_only_a_plan(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, fact: str
) -> None:
    argv = ("plan", "create", "--as", "planner", "--parents", fact, "--store", sqlite_url)
    code, _, err = run(capsys, *argv, "--supersedes", fact[:10])
    assert code == 1
    [line] = err.splitlines()
    assert f"record {fact[:12]} is a fact of order/7, not a plan" in line
    code, first, _ = run(capsys, *argv)
    assert code == 0
    code, second, err = run(capsys, *argv, "--supersedes", first.strip()[:10])
    assert code == 0, err
    with open_store(sqlite_url) as store:
        replan = store.get(second.strip())
    assert replan.kind == KIND_PLAN and replan.supersedes == first.strip()


def test_transfer_to_the_current_owner_changes_nothing(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, fact: str
) -> None:
    with open_store(sqlite_url) as store:
        before, seq = store.states(["order/7"])["order/7"], store.last_seq()
    argv = ("memory", "transfer", "order/7", "--to", "sales", "--as", "sales")
    code, out, err = run(capsys, *argv, "--store", sqlite_url)
    assert code == 0, err
    assert out == "order/7: owner sales (already), epoch 1\n"
    with open_store(sqlite_url) as store:
        assert store.states(["order/7"])["order/7"] == before
        assert store.last_seq() == seq  # no owner change in the feed
    code, out, _ = run(capsys, "memory", "transfer", "order/7", "--to", "ops", "--as", "sales",
                       "--store", sqlite_url)  # fmt: skip
    assert code == 0 and out.endswith("epoch 2\n")


@pytest.mark.parametrize(
    ("argv", "helps"),
    [
        (("memory", "keys", "--bogus"), "planfence memory keys --help"),
        (("plan", "create", "--as", "a", "--parents", "x", "--frob"), "planfence plan create"),
        (("audit", "--nope"), "planfence audit --help"),
        (("demo", "workflows", "--fast"), "planfence demo workflows --help"),
    ],
)
def test_a_mistyped_option_points_to_its_subcommand_help(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], helps: str
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    [line] = err.splitlines()
    assert line.startswith("planfence: error: unrecognized arguments: ")
    assert f"(see '{helps}" in line


def test_one_wait_is_one_time() -> None:
    assert "waited 1 time (" in _cost_line("freshness", Cost(stalls=1, stall_ms=2.0))
    assert "waited 2 times (" in _cost_line("freshness", Cost(stalls=2, stall_ms=2.0))


def test_demo_workflows_into_head_stops_at_once() -> None:
    """`planfence demo workflows | head -3`: once the reader has its lines and goes away, the
    demo stops there (it does not play its remaining runs), quietly."""
    proc = subprocess.Popen(
        [*PLANFENCE, "demo", "workflows"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    head = [proc.stdout.readline() for _ in range(3)]
    proc.stdout.close()  # what `head -3` does once it has its three lines
    try:
        err = proc.stderr.read()
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.stderr.close()
    assert head[0].startswith("store: ") and head[1].startswith("executor")
    assert head[2].startswith("planfence ")
    assert code == 141, err
    assert "Traceback" not in err and "error" not in err, err
    done = [int(m) for m in re.findall(r"demo workflows: (\d+)/120", err)]
    assert done and max(done) < 120  # stopped well before the last run


def test_transfer_to_the_owner_by_someone_else_is_refused(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, fact: str
) -> None:
    """The no-op is the owner's own: a non-owner naming the owner is refused, not told 'already'."""
    argv = ("memory", "transfer", "order/7", "--to", "sales", "--as", "mallory")
    code, out, err = run(capsys, *argv, "--store", sqlite_url)
    assert code == 1 and out == ""
    assert "mallory" in err and "own" in err


def test_own_says_when_it_creates_a_store(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A mistyped path would become a new store, folders and all: `memory own` says where."""
    typo = tmp_path / "projct" / ".planfence" / "memroy.db"
    url = f"sqlite:///{typo}"
    code, out, err = run(capsys, "memory", "own", "order/7", "--owner", "sales", "--store", url)
    assert (code, out) == (0, "order/7: owner sales\n")
    assert err == (
        f"planfence: created a new store at {typo} (there was none; check the path if you "
        "meant an existing store)\n"
    )
    # The store exists now: nothing more to say, and --json stays JSON.
    code, out, err = run(
        capsys, "memory", "own", "order/8", "--owner", "sales", "--store", url, "--json"
    )
    assert code == 0 and err == "" and json.loads(out)["key"] == "order/8"
