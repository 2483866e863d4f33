"""Several OS processes advance one key with read-head-then-CAS retry loops (SQLite, PostgreSQL).

The workers contended (some compare-and-set failed because another worker advanced first: without
that the race proves nothing), no update is lost (every success is on the chain), the head never
forks (each feed entry's `previous` is the prior head), and the number of successes equals the
chain's length. The same race between stores of one process is a conformance check
(`conformance.checks_races`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from planfence.shared_memory import open_store

KEY = "race/counter"
WORKERS = 4
ADVANCES = 12

WORKER = textwrap.dedent(
    """
    import json, os, sys, time
    from planfence.shared_memory import HeadConflictError, open_store
    url, key, name, n, go = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    with open_store(url) as store:
        open(go + "." + name, "w").close()  # ready: the parent starts the race when all are
        while not os.path.exists(go):
            time.sleep(0.002)
        ids, conflicts = [], 0
        while len(ids) < n:
            head = store.head(key)
            try:
                rec = store.put(
                    key, {"worker": name, "i": len(ids)}, author="owner",
                    parents=[head] if head else [], expected_head=head,
                )
            except HeadConflictError as exc:
                conflicts += 1
                assert exc.current is not None and exc.current != head
                continue
            ids.append(rec.id)
    print(json.dumps({"ids": ids, "conflicts": conflicts}))
    """
)


def race(url: str, tmp_path: Path) -> None:
    with open_store(url) as store:
        store.own(KEY, "owner")
        start_seq = store.changes()[-1].seq
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, url, KEY, f"w{i}", str(ADVANCES), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(WORKERS)
    ]
    # Start the race once every worker is ready (a slow start would leave it racing alone).
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"go.w{i}").exists() for i in range(WORKERS)):
        assert time.monotonic() < deadline, "the workers did not start"
        assert all(p.poll() is None for p in procs), "a worker ended before the race"
        time.sleep(0.01)
    go.write_text("go")
    results = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    conflicts = [r["conflicts"] for r in results]
    assert sum(conflicts) > 0, "the workers never contended: the race proved nothing"
    successes = [rid for r in results for rid in r["ids"]]
    assert len(successes) == len(set(successes)) == WORKERS * ADVANCES

    with open_store(url) as store:
        feed = [c for c in store.iter_changes(start_seq) if c.key == KEY]
        head = store.head(KEY)
        state = store.states([KEY])[KEY]
        records = store.get_many(successes)
    # the feed is one linear chain: each entry moves the head from the previous one
    assert [c.kind for c in feed] == ["head"] * len(successes)
    previous = None
    for c in feed:
        assert c.previous == previous
        previous = c.head
    assert previous == head
    assert state.version == len(successes)
    # every success is on the chain exactly once: no update was lost or overwritten
    assert sorted(c.head for c in feed if c.head) == sorted(successes)
    # the parent links agree with the feed (each writer built on the head it saw)
    chain, cur = [], head
    while cur is not None:
        chain.append(cur)
        parents = records[cur].parents
        assert len(parents) <= 1
        cur = parents[0] if parents else None
    assert chain[::-1] == [c.head for c in feed]
    for r in results:  # each worker's own records keep its order
        order = [records[i].value["i"] for i in r["ids"]]
        assert order == list(range(ADVANCES))


@pytest.mark.slow
def test_processes_race_on_sqlite(sqlite_url: str, tmp_path: Path) -> None:
    race(sqlite_url, tmp_path)


@pytest.mark.slow
def test_processes_race_on_postgres(pg_url: str, tmp_path: Path) -> None:
    race(pg_url, tmp_path)
