"""Every `planfence bench ...` command follows one set of conventions: one spelling per concept,
help with defaults, counts of at least 1, `--json` prints JSON and `--out FILE` writes it, its
own throwaway store (never the default one), named in the output."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from planfence.adapters.cli.main import build_parser, main
from planfence.demos.bench.cli import BENCHES
from planfence.demos.bench.gate.report import print_tables
from planfence.demos.bench.store import _show

SHOW = {"store": _show, "gate": print_tables}

# benchmarks that store records (janus simulates a memory and needs no store)
WITH_STORE = ("store", "gate", "link", "proxy", "replay", "window", "scale")
# options that only name a file to write: nothing is written when they are left out
OUTPUT_ONLY = {"--out", "--plot"}


def bench_parsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    command = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    bench = command.choices["bench"]
    sub = next(a for a in bench._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {
        a.option_strings[-1]: a
        for a in parser._actions
        if a.option_strings and not isinstance(a, argparse._HelpAction)
    }


def test_every_benchmark_is_registered() -> None:
    assert set(bench_parsers()) == set(BENCHES)


@pytest.mark.parametrize("name", sorted(BENCHES))
def test_one_spelling_per_concept(name: str) -> None:
    opts = options(bench_parsers()[name])
    assert "--quick" in opts
    assert opts["--json"].nargs == 0, "--json prints JSON; --out FILE writes it"
    assert "--out" in opts
    for old in ("--postgres", "--iterations", "--sync-iterations", "--calls"):
        assert old not in opts, f"bench {name} still spells a concept {old}"
    assert ("--store" in opts) == (name in WITH_STORE)


@pytest.mark.parametrize("name", sorted(BENCHES))
def test_every_option_has_help_that_shows_its_default(name: str) -> None:
    parser = bench_parsers()[name]
    formatter = parser._get_formatter()
    for flag, action in options(parser).items():
        assert action.help, f"bench {name} {flag} has no help"
        if action.nargs == 0 or flag in OUTPUT_ONLY:
            continue
        shown = formatter._expand_help(action)
        assert "default" in shown, f"bench {name} {flag}: no default in {shown!r}"


@pytest.mark.parametrize(
    "argv",
    [
        ["store", "--repeat", "0"],
        ["store", "--warmup", "-1"],
        ["gate", "--repeat", "-3"],
        ["link", "--repeat", "0"],
        ["proxy", "--repeat", "0"],
        ["janus", "--seeds", "0"],
        ["janus", "--steps", "-5"],
        ["janus", "--curve-every", "0"],
        ["janus", "--eval-redraw", "1.5"],
        ["janus", "--eval-redraw", "x"],
        ["janus", "--tasks", "t.jsonl", "--llm-budget", "0"],
        ["replay", "--actions", "0"],
        ["replay", "--replicas", "0"],
        ["replay", "--owners", "-1"],
        ["replay", "--keys", "1"],
    ],
)
def test_counts_below_one_are_usage_errors(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("planfence: error: argument ") and err.count("\n") == 1


def test_json_prints_json_only_and_out_writes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results" / "janus.json"
    assert main(["bench", "janus", "--quick", "--json", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out)  # nothing but the JSON on stdout
    assert printed == json.loads(out.read_text())
    assert printed["interrupted"] is False and printed["config"]["seeds"] == 2
    assert "bench janus: 2/2" in captured.err  # progress went to stderr


def test_the_table_is_the_default_and_out_still_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "store.json"
    url = f"sqlite:///{tmp_path / 'x.db'}"
    assert main(["bench", "store", "--quick", "--store", url, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "head_read" in printed and f"wrote {out}" in printed
    assert len(json.loads(out.read_text())["rows"]) == 6


@pytest.mark.parametrize("name", ["store", "gate"])
def test_benchmarks_never_touch_the_default_store(
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    user_store = tmp_path / "mine" / "memory.db"
    monkeypatch.setenv("PLANFENCE_STORE", f"sqlite:///{user_store}")
    monkeypatch.setenv("PLANFENCE_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:1/test")
    assert main(["bench", name, "--quick", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert not user_store.exists() and not (tmp_path / ".planfence").exists()
    (used,) = data["stores"]
    assert used["backend"] == "sqlite" and "planfence-bench-" in used["url"]
    assert str(user_store) not in used["url"]
    assert not Path(used["url"].removeprefix("sqlite:///")).exists()  # removed afterwards

    SHOW[name](data)  # the table the command prints without --json names it too
    assert "store: sqlite:///" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["store", "--store", ""], "--store is empty"),
        (["gate", "--store", "memory://"], "lives in one process"),
        (["store", "--store", "mysql://x/y"], "unsupported scheme 'mysql'"),
    ],
)
def test_a_store_that_cannot_be_benchmarked_is_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", *argv, "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("planfence: error: --store") and message in err


def page_bench_commands() -> list[list[str]]:
    section = (Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md").read_text()
    fill = {"FILE": "x.json", "URL": "sqlite:///x.db", "N": "3"}
    commands = []
    for line in section.splitlines():
        if line.startswith("planfence bench "):
            words = line.split("#", 1)[0].replace("[", " ").replace("]", " ").split()
            commands.append([fill.get(w, w) for w in words[1:]])
    return commands


def test_the_benchmarks_page_shows_the_options_the_benchmarks_take() -> None:
    commands = page_bench_commands()
    assert {argv[1] for argv in commands} == set(BENCHES)
    parser = build_parser()
    for argv in commands:
        parser.parse_args(argv)  # exits with status 2 on an option that does not exist
