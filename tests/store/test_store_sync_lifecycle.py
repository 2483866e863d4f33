"""A sync store's life: one left open never keeps the interpreter alive; its signer is settable."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from typing import Any

import pytest

from planfence.shared_memory import Store

# Generous for a loaded machine; a script that hangs at exit never ends at all.
EXIT_LIMIT_S = 20

LEAVE_OPEN = textwrap.dedent(
    """
    import sys
    from planfence.shared_memory import open_store

    store = open_store(sys.argv[1])
    store.own("exit/probe", "alice")
    store.put("exit/probe", {"n": 1}, author="alice")
    print("end", flush=True)
    """
)


def _run_left_open(url: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, "-W", "always::ResourceWarning", "-c", LEAVE_OPEN, url],
            capture_output=True,
            text=True,
            timeout=EXIT_LIMIT_S,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"a script leaving {url} open did not exit: {exc.stdout!r} {exc.stderr!r}")


def test_a_store_left_open_does_not_keep_the_interpreter_alive(store_url: str) -> None:
    done = _run_left_open(store_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "end\n"
    warned = [line for line in done.stderr.splitlines() if "ResourceWarning" in line]
    assert len(warned) == 1, done.stderr  # once, naming the store and the line that opened it
    assert "was never closed" in warned[0] and "<string>:5" in warned[0]


def test_a_store_left_open_is_closed_at_exit(sqlite_url: str) -> None:
    # What the script wrote is there for the next process (the store was closed cleanly).
    assert _run_left_open(sqlite_url).returncode == 0
    with _open(sqlite_url) as store:
        assert store.get(store.head("exit/probe") or "").value == {"n": 1}


def test_a_dropped_store_is_closed_with_one_warning(sqlite_url: str) -> None:
    store = _open(sqlite_url)
    portal = store.portal
    with pytest.warns(ResourceWarning, match="was never closed"):
        del store  # the last reference: dropped at once
    assert portal._closed


def test_a_closed_store_does_not_warn(sqlite_url: str, recwarn: pytest.WarningsRecorder) -> None:
    with _open(sqlite_url) as store:
        store.own("k/x", "alice")
    del store
    gc.collect()
    assert not [w for w in recwarn if issubclass(w.category, ResourceWarning)]


class _Signer:
    def __init__(self, agent: str) -> None:
        self.agent = agent
        self.signed: list[dict[str, Any]] = []

    def sign(self, typ: str, fields: Mapping[str, Any]) -> str:
        self.signed.append(dict(fields))
        return f"sig:{typ}:{fields['key']}"


def test_the_sync_store_signer_signs_writes(store_url: str) -> None:
    signer = _Signer("alice")
    with _open(store_url) as store:
        store.signer = signer
        assert store.signer is signer and store.aio.signer is signer
        store.own("signed/k", "alice")
        rec = store.put("signed/k", {"v": 1}, author="alice")
        state = store.states(["signed/k"])["signed/k"]
    assert state.head == rec.id
    assert state.head_sig == "sig:planfence-head/1:signed/k"
    assert state.owner_sig is not None
    assert [f["key"] for f in signer.signed] == ["signed/k", "signed/k"]


def _open(url: str) -> Store:
    from planfence.shared_memory import open_store

    return open_store(url)
