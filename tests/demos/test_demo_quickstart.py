"""`planfence demo quickstart` tells the story in values, explains the baseline it contrasts
with, keeps the contrast in `--json`, and shows what the safe baselines cost."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from planfence.adapters.cli.main import build_parser, main

CHANGE = re.compile(r"trip/[0-9a-f]{8}/requirements: destination Lisbon -> Porto")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["demo", "quickstart", *argv]) == 0
    return capsys.readouterr().out


def sections(out: str) -> dict[str, list[str]]:
    """Executor -> the lines of its part of the story."""
    parts: dict[str, list[str]] = {}
    current: list[str] = []
    for line in out.splitlines():
        if m := re.match(r"\[(\w+)\] ", line):
            current = parts.setdefault(m.group(1), [])
        current.append(line)
    return parts


def test_story_shows_the_changed_values(capsys: pytest.CaptureFixture[str]) -> None:
    parts = sections(run(capsys))
    assert list(parts) == ["planfence", "freshness"]
    [refused] = [line for line in parts["planfence"] if "stale plan" in line]
    assert CHANGE.search(refused), refused
    [acted] = [line for line in parts["freshness"] if "INVALID" in line]
    assert CHANGE.search(acted), acted
    assert '"destination": "Lisbon"' in acted


def test_freshness_only_is_explained_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys)
    [line] = [line for line in out.splitlines() if "freshness-only:" in line]
    assert "never checks which versions its plan was derived from" in line
    assert "freshness-only:" not in "\n".join(sections(out)["planfence"])


def test_json_keeps_the_freshness_contrast_with_values(
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = json.loads(run(capsys, "--json"))
    planfence, freshness = data["runs"]
    assert (planfence["executor"], freshness["executor"]) == ("planfence", "freshness")
    [replan, allow] = planfence["steps"]
    assert (replan["verdict"], allow["verdict"]) == ("replan", "allow")
    [stale] = replan["stale"]
    assert stale["changed"] == {"destination": ["Lisbon", "Porto"]}
    [acted] = freshness["actions"]
    assert acted["valid"] is False
    assert [s["changed"] for s in acted["stale"]] == [{"destination": ["Lisbon", "Porto"]}]


@pytest.mark.parametrize("executor", ["eager", "allkeys"])
def test_safe_baselines_show_what_they_cost(
    capsys: pytest.CaptureFixture[str], executor: str
) -> None:
    out = run(capsys, "--executor", executor)
    [cost] = [line for line in out.splitlines() if line.strip().startswith("cost:")]
    m = re.search(r"waited (\d+) times? .* traffic (\d+) messages, (\d+) bytes", cost)
    assert m, cost
    assert all(int(n) > 0 for n in m.groups())
    assert "valid" in out
    [r] = json.loads(run(capsys, "--executor", executor, "--json"))["runs"]
    assert r["cost"]["messages"] > 0 and r["cost"]["bytes"] > 0 and r["cost"]["stalls"] > 0


def _subcommand(parser: argparse.ArgumentParser, *path: str) -> argparse.ArgumentParser:
    for name in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


@pytest.mark.parametrize("command", ["quickstart", "workflows"])
def test_every_demo_option_has_help(command: str) -> None:
    parser = _subcommand(build_parser(), "demo", command)
    for action in parser._actions:
        if action.option_strings:
            assert action.help, f"demo {command} {action.option_strings[0]} has no help"
