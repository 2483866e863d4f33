"""Opening a SQLite store: many processes creating one new file at once, paths that only look
like SQLite URIs, and stores that must already exist (`create=False`)."""

from __future__ import annotations

import multiprocessing
import traceback
from pathlib import Path
from typing import Any

import pytest

from planfence.shared_memory import ConfigError, create_async_store, open_async_store, open_store
from planfence.shared_memory.errors import StoreNotFoundError

OPENERS = 8
ROUNDS = 60


def _open_together(folder: str, me: int, rounds: int, barrier: Any, results: Any) -> None:
    """One process: at each round, wait for the others, then open (and so create) a new store."""
    for r in range(rounds):
        barrier.wait()
        try:
            with open_store(f"sqlite:///{folder}/round{r}.db") as store:
                store.own(f"round/{r}/opener/{me}", f"opener{me}")
            results.put((r, me, None))
        except Exception:
            results.put((r, me, traceback.format_exc()))


@pytest.mark.slow
def test_processes_opening_one_new_file_together_all_succeed(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(OPENERS)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_open_together, args=(str(tmp_path), i, ROUNDS, barrier, results))
        for i in range(OPENERS)
    ]
    for p in procs:
        p.start()
    got = [results.get(timeout=120) for _ in range(OPENERS * ROUNDS)]
    for p in procs:
        p.join(timeout=60)
    failures = [err for _, _, err in got if err is not None]
    assert failures == []
    for r in range(ROUNDS):
        with open_store(f"sqlite:///{tmp_path}/round{r}.db") as store:
            assert len(store.keys(f"round/{r}/")) == OPENERS


# ---- paths that look like SQLite URIs are plain paths


def test_a_path_starting_with_file_colon_memory_is_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    url = "sqlite:///file::memory:"
    with open_store(url) as store:
        store.own("k", "a")
    assert (tmp_path / "file::memory:").is_file()
    with open_store(url) as store:  # not a throwaway in-memory database: the key is still there
        assert store.owner("k") == "a"


def test_a_percent_escaped_path_does_not_leave_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inner = tmp_path / "inner"
    inner.mkdir()
    monkeypatch.chdir(inner)
    with open_store("sqlite:///file:..%2Fescape.db") as store:
        store.own("k", "a")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inner"]
    assert (inner / "file:..%2Fescape.db").is_file()


@pytest.mark.parametrize("name", ["file:x.db#frag", "file:", "file:x.db%3Fmode=memory"])
def test_uri_syntax_in_a_path_is_taken_literally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with open_store(f"sqlite:///{name}") as store:
        store.own("k", "a")
    assert (tmp_path / name).is_file()


# ---- create=False: a mistyped path is an error, not a new empty store


def test_create_false_refuses_a_missing_file_and_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "no" / "such" / "team.db"
    with pytest.raises(StoreNotFoundError) as info:
        open_store(f"sqlite:///{path}", create=False)
    assert str(path) in str(info.value)
    assert "check the path" in str(info.value)
    assert info.value.path == str(path)
    assert isinstance(info.value, ConfigError)
    assert not (tmp_path / "no").exists()


async def test_create_false_async_and_relative_paths_name_the_resolved_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreNotFoundError, match=str(tmp_path / "team.db")):
        await open_async_store("sqlite:///team.db", create=False)
    store = create_async_store("sqlite:///team.db", create=False)  # builds; refuses at setup
    with pytest.raises(StoreNotFoundError):
        await store.setup()
    await store.aclose()
    assert _entries(tmp_path) == []


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_create_false_opens_an_existing_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'team.db'}"
    with open_store(url) as store:  # the default creates it
        store.own("k", "a")
    with open_store(url, create=False) as store:
        assert store.owner("k") == "a"


@pytest.mark.parametrize("flag", ["create=1", "create=true", "create=yes"])
def test_a_url_flag_allows_creating(tmp_path: Path, flag: str) -> None:
    path = tmp_path / "sub" / "team.db"
    with open_store(f"sqlite:///{path}?{flag}", create=False) as store:
        store.own("k", "a")
    assert path.is_file()


def test_a_url_flag_can_forbid_creating(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError):
        open_store(f"sqlite:///{tmp_path / 'team.db'}?create=0")
    with pytest.raises(ConfigError, match="create"):
        open_store(f"sqlite:///{tmp_path / 'team.db'}?create=maybe")


def test_create_does_not_apply_to_memory_stores() -> None:
    with open_store("memory://", create=False) as store:
        store.own("k", "a")
