"""Demos never write into the user's store: without `--store` they run in a temporary store,
removed when they end, and they say which store they used; with `--store URL` they write there."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from planfence.adapters.cli.main import main
from planfence.demos import autogen_team, langgraph_graph
from planfence.shared_memory import open_store

Demo = Callable[[Sequence[str]], int]

DEMOS: dict[str, Demo] = {
    "demo quickstart": lambda argv: main(["demo", "quickstart", *argv]),
    "demo workflows": lambda argv: main(["demo", "workflows", "--quick", *argv]),
    "autogen_team": lambda argv: autogen_team.main(["--scripted", *argv]),
    "langgraph_graph": lambda argv: langgraph_graph.main(["--scripted", *argv]),
}


def contents(url: str) -> tuple[Any, ...]:
    """Everything a demo could leave in a store: keys and heads, the feed, the journal."""
    with open_store(url) as s:
        keys = [(k.key, k.owner, k.head) for k in s.keys(prefix="")]
        feed = [c.to_dict() for c in s.iter_changes()]
        journal = [e.to_dict() for e in s.journal(limit=10_000)]
    return keys, feed, journal


@pytest.fixture
def user_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A user's store with one key of theirs, which `$PLANFENCE_STORE` points at; the working
    folder is where the default store (`.planfence/memory.db`) would be created."""
    monkeypatch.delenv("PLANFENCE_LLM_MODEL", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    url = f"sqlite:///{tmp_path / 'user.db'}"
    with open_store(url) as s:
        s.own("notes/mine", "me")
        s.put("notes/mine", {"text": "my one key"}, author="me")
    monkeypatch.setenv("PLANFENCE_STORE", url)
    return url


def store_line(out: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith("store: ")]
    assert len(lines) == 1, out
    return lines[0]


@pytest.mark.parametrize("demo", DEMOS)
def test_demo_leaves_the_user_store_untouched(
    demo: str, user_store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = contents(user_store)
    assert DEMOS[demo]([]) == 0
    out = capsys.readouterr().out
    assert contents(user_store) == before
    assert not Path(".planfence").exists()  # nor the default store in the working folder
    line = store_line(out)
    assert "temporary" in line and "--store URL keeps the records" in line
    match = re.match(r"store: sqlite:///(\S+)", line)
    assert match, line
    assert not Path(match.group(1)).exists()  # removed when the demo ended


@pytest.mark.parametrize("demo", DEMOS)
def test_demo_writes_to_the_store_given(
    demo: str, user_store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = contents(user_store)
    target = f"sqlite:///{tmp_path / 'kept.db'}"
    for _ in range(2):  # a kept store can hold the demo twice
        assert DEMOS[demo](["--store", target]) == 0
        assert store_line(capsys.readouterr().out) == f"store: {target}"
    keys, feed, _ = contents(target)
    assert len(keys) >= 1 and len(feed) >= 2
    assert contents(user_store) == before


@pytest.mark.parametrize("command", ["quickstart", "workflows"])
def test_demo_json_says_which_store(
    command: str, user_store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = contents(user_store)
    argv = ["demo", command, "--json"] + (["--quick"] if command == "workflows" else [])
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["temporary_store"] is True
    assert data["store"].startswith("sqlite:///")
    assert not Path(data["store"].removeprefix("sqlite:///")).exists()
    assert contents(user_store) == before
    target = f"sqlite:///{tmp_path / 'kept.db'}"
    out = tmp_path / "out.json"
    assert main([*argv, "--store", target, "--out", str(out)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["store"], data["temporary_store"]) == (target, False)
    assert json.loads(out.read_text()) == data


def test_store_urls_are_shown_without_password(capsys: pytest.CaptureFixture[str]) -> None:
    from planfence.demos.support import DemoStore

    line = DemoStore("postgresql://alice:s3cret@db.example:5432/team", False).line()
    assert "s3cret" not in line
    assert line == "store: postgresql://alice:***@db.example:5432/team"


@pytest.mark.parametrize("demo", DEMOS)
def test_empty_store_option_is_a_usage_error(
    demo: str, user_store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = contents(user_store)
    try:
        code = DEMOS[demo](["--store", ""])
    except SystemExit as exc:  # argparse's own exit, for the module demos
        code = int(exc.code or 0)
    assert code == 2
    err = capsys.readouterr().err
    assert "error: --store is empty" in err.splitlines()[-1]
    assert contents(user_store) == before
