"""`demos.workflows`: the judge and the executors read only what one run needs, whatever the
store's history, so `planfence demo workflows` takes time linear in the number of runs."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from planfence.adapters.cli.main import main
from planfence.demos.workflows import EXECUTORS, WORKFLOWS, run_workflow
from planfence.shared_memory import AsyncStore, create_async_store

# The primitives every backend implements, and the one-hop read-and-write SQLite adds: every
# read and write of a run goes through them (`changes`, `get`, `states`, `journal`, ...).
PRIMITIVES = ("_read", "_write", "_transact")


class StoreReads:
    """Counts the store primitives a run calls, and the rows (feed entries, records, keys,
    decisions) they hand back."""

    def __init__(self, store: AsyncStore) -> None:
        self.counts: Counter[str] = Counter()
        for name in PRIMITIVES:
            setattr(store, name, self._wrap(name, getattr(store, name)))

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        async def counted(*args: Any, **kwargs: Any) -> Any:
            out = await fn(*args, **kwargs)
            self.counts[f"{name} calls"] += 1
            if isinstance(out, (list, dict)):
                self.counts[f"{name} rows"] += len(out)
            return out

        return counted

    def take(self) -> dict[str, int]:
        out = dict(self.counts)
        self.counts.clear()
        return out


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncStore]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 's.db'}"
    s = create_async_store(url)
    async with s:
        yield s


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_store_reads_per_run_do_not_grow_with_prior_runs(
    store: AsyncStore, executor: str
) -> None:
    reads = StoreReads(store)
    first = {}
    for wf in WORKFLOWS:
        await run_workflow(store, wf, executor)
        first[wf] = reads.take()
    for _ in range(5):  # history piles up: other runs, under every executor
        for ex in EXECUTORS:
            for wf in WORKFLOWS:
                await run_workflow(store, wf, ex)
    reads.take()
    for wf in WORKFLOWS:
        result = await run_workflow(store, wf, executor)
        assert reads.take() == first[wf], (wf, result.to_dict())


async def test_cost_counts_what_each_executor_coordinates(store: AsyncStore) -> None:
    cost = {ex: (await run_workflow(store, "booking", ex)).cost for ex in EXECUTORS}
    # Two checks (the stale plan, then the replan), each one wait for the one owner of D(a):
    # a request and an answer.
    assert (cost["planfence"].stalls, cost["planfence"].messages) == (2, 4)
    # The same two waits, but every owner of the workflow's shared keys is asked.
    assert (cost["allkeys"].stalls, cost["allkeys"].messages) == (2, 8)
    assert cost["allkeys"].bytes > cost["planfence"].bytes
    # Every write (two facts, two revisions) waits for the replica: a push and an ack each.
    assert (cost["eager"].stalls, cost["eager"].messages) == (4, 8)
    # One catch-up before the action; the replica receives every feed entry and record.
    assert cost["freshness"].stalls == 1
    assert cost["freshness"].messages > cost["planfence"].messages
    for c in cost.values():
        assert c.stall_ms >= 0
        assert c.bytes > 0


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_workflows_table_has_blocked_stalls_and_traffic(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_cli(capsys, "demo", "workflows", "--quick")
    assert code == 0
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("executor"))
    assert header.split() == [
        "executor",
        "runs",
        "completed",
        "invalid",
        "replans",
        "blocked",
        "stalls",
        "traffic",
    ]
    rows = {line.split()[0]: line for line in lines if line.split()[0] in EXECUTORS}
    assert set(rows) == set(EXECUTORS)
    assert rows["freshness"].split()[1:6] == ["6", "0", "6", "0", "0"]
    assert all(" msg / " in row and " ms" in row for row in rows.values())
    assert "demo workflows: 24/24" in err  # progress on stderr, as plain lines off a terminal
    assert "demo workflows" not in out


def test_workflows_json_summary_and_quick(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, "demo", "workflows", "--quick", "--executor", "planfence", "--json"
    )
    assert code == 0
    data = json.loads(out)  # stdout is the JSON alone: progress went to stderr
    assert "24" not in err and "6/6" in err
    assert data["runs_per_workflow"] == 2
    assert data["interrupted"] is False
    row = data["summary"]["planfence"]
    assert row["runs"] == 6
    # Two checks per run; a request and an answer per owner of D(a) per check: one owner for the
    # booking, two for fulfilment and deploy.
    assert (row["blocked"], row["stalls"], row["messages"]) == (0, 12, 2 * 2 * (2 + 4 + 4))
    assert row["bytes"] > 0
    assert row["stall_ms"] >= 0


@pytest.mark.parametrize("runs", ["0", "-3", "x"])
def test_workflows_runs_must_be_a_positive_count(
    capsys: pytest.CaptureFixture[str], runs: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["demo", "workflows", "--runs", runs])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("planfence: error: argument --runs")
    assert err.count("\n") == 1


def test_ctrl_c_prints_the_runs_so_far_and_removes_the_store(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from planfence.demos import demo_cli

    played: list[str] = []
    real = demo_cli.run_workflow

    async def interrupted_after_five(store: AsyncStore, *args: Any, **kwargs: Any) -> Any:
        if len(played) == 5:
            raise KeyboardInterrupt
        played.append(store.url)
        return await real(store, *args, **kwargs)

    monkeypatch.setattr(demo_cli, "run_workflow", interrupted_after_five)
    assert main(["demo", "workflows", "--quick"]) == 130
    out, err = capsys.readouterr()
    assert err.strip().splitlines()[-1] == "planfence: error: interrupted"
    [planfence] = [line for line in out.splitlines() if line.startswith("planfence ")]
    assert planfence.split()[1:3] == ["5", "5"]  # runs, completed
    assert "interrupted: the table shows the runs that finished before Ctrl-C" in out
    assert not Path(played[0].removeprefix("sqlite:///")).exists()
