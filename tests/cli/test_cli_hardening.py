"""The command line as careless users meet it: short ids, missing stores, pipes, Ctrl-C, races.

Each test here failed before its fix (issue: hardening by trying planfence as a new user would).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from interrupts import interruptible, wait_reading_stdin

from planfence.adapters.cli.main import build_parser, main
from planfence.plugins.gate import ToolCall
from planfence.shared_memory import open_store
from planfence.shared_memory.records import KIND_PLAN

KEY = "order/7"
PLANFENCE = [sys.executable, "-m", "planfence.adapters.cli"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str, match: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("planfence: error: "), lines[0]
    assert match in lines[0], lines[0]
    assert "Traceback" not in err


def cli(*argv: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PLANFENCE, *argv], capture_output=True, text=True, timeout=60, check=False, **kwargs
    )  # type: ignore[call-overload]


@pytest.fixture
def seeded(sqlite_url: str) -> tuple[str, str, str]:
    """A store with one owned key, one version and one plan citing it: (url, record, plan)."""
    with open_store(sqlite_url) as store:
        store.own(KEY, "sales")
        rec = store.put(KEY, {"status": "confirmed"}, author="sales")
        plan = store.add(
            "plan/ship", {"ship": True}, author="planner", parents=[rec.id], kind=KIND_PLAN
        )
    return sqlite_url, rec.id, plan.id


# ---- 3: lineage walks iteratively and draws each record once --------------------------------


def test_lineage_of_a_long_chain_answers(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    with open_store(sqlite_url) as store:
        store.own(KEY, "sales")
        prev = store.put(KEY, {"v": 0}, author="sales")
        for i in range(1, 1500):
            prev = store.put(KEY, {"v": i}, author="sales", parents=[prev.id])
    code, out, err = run(capsys, "memory", "lineage", prev.id, "--store", sqlite_url)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 1500
    assert max(len(line) for line in lines) < 200  # indentation stops growing
    code, out, _ = run(capsys, "memory", "lineage", prev.id[:10], "--store", sqlite_url, "--json")
    assert code == 0
    assert len(json.loads(out)["records"]) == 1500


def test_lineage_of_a_diamond_lattice_draws_each_record_once(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    # 40 levels, two records a level, each citing both records of the level below: 2^40 paths.
    with open_store(sqlite_url) as store:
        store.own("lattice/base", "mallory")
        base = store.put("lattice/base", 0, author="mallory")
        below = [base.id]
        for level in range(40):
            below = [
                store.add(f"lattice/{level}/{side}", level, author="mallory", parents=below).id
                for side in ("l", "r")
            ]
        top = store.add("lattice/top", "top", author="mallory", parents=below)
    code, out, err = run(capsys, "memory", "lineage", top.id, "--store", sqlite_url)
    assert code == 0, err
    lines = out.splitlines()
    labelled = [line for line in lines if "(drawn above)" not in line]
    assert len(labelled) == 82  # top + 80 lattice records + base, each once
    assert sum("(drawn above)" in line for line in lines) == 39 * 2 + 1 - 40 + 40
    code, out, _ = run(capsys, "memory", "lineage", top.id, "--store", sqlite_url, "--json")
    assert code == 0
    assert len(json.loads(out)["records"]) == 82


# ---- 8: a mistyped path is an error, never a new empty store ---------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ("memory", "keys"),
        ("memory", "head", KEY),
        ("memory", "get", "0" * 64),
        ("memory", "changes"),
        ("memory", "lineage", "0" * 64),
        ("audit",),
        ("memory", "put", KEY, "--value", "1", "--as", "sales"),
        ("plan", "create", "--as", "p", "--parents", "0" * 64),
    ],
)
def test_commands_refuse_a_store_that_does_not_exist(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: tuple[str, ...]
) -> None:
    missing = tmp_path / "typo" / "tema.db"
    code, _, err = run(capsys, *argv, "--store", f"sqlite:///{missing}")
    assert code == 1
    one_error_line(err, str(missing))
    assert not missing.exists()
    assert not missing.parent.exists()


def test_own_creates_the_store(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "new" / "team.db"
    code, _, err = run(
        capsys, "memory", "own", KEY, "--owner", "sales", "--store", f"sqlite:///{path}"
    )
    assert code == 0, err
    assert path.exists()


def test_an_empty_store_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "memory", "keys", "--store", "")
    assert code == 2
    one_error_line(err, "--store is empty")


def test_writes_to_memory_store_warn(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "memory", "own", KEY, "--owner", "sales", "--store", "memory://")
    assert code == 0
    assert "planfence: warning: memory:// keeps nothing" in err


# ---- 9: the short ids printed everywhere are accepted as input ---------------------------------


def test_short_ids_are_accepted_wherever_an_id_is_taken(
    capsys: pytest.CaptureFixture[str], seeded: tuple[str, str, str]
) -> None:
    url, rid, plan = seeded
    s = ("--store", url)
    code, out, _ = run(capsys, "memory", "get", rid[:8], *s, "--json")
    assert code == 0 and json.loads(out)["id"] == rid
    code, out, _ = run(capsys, "memory", "lineage", plan[:12], *s, "--json")
    assert code == 0 and json.loads(out)["root"] == plan
    code, out, err = run(
        capsys,
        "plan",
        "create",
        "--as",
        "planner",
        "--parents",
        rid[:8],
        "--supersedes",
        plan[:9],
        *s,
        "--json",
    )
    assert code == 0, err
    replan = json.loads(out)
    assert replan["parents"] == [rid] and replan["supersedes"] == plan
    code, out, err = run(
        capsys,
        "memory",
        "put",
        KEY,
        "--value",
        "2",
        "--as",
        "sales",
        "--parents",
        rid[:8],
        *s,
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["parents"] == [rid]


def test_audit_plan_filter_takes_a_prefix_and_refuses_junk(
    capsys: pytest.CaptureFixture[str], seeded: tuple[str, str, str]
) -> None:
    url, _, plan = seeded
    with open_store(url) as store:
        from planfence.plugins.gate import Policy, SyncGate

        with SyncGate(store, Policy().declare("ship", depends_on=[KEY])) as gate:
            assert gate.check(ToolCall("ship", {}, plan, agent="executor")).verdict == "allow"
    code, out, _ = run(capsys, "audit", "--plan", plan[:8], "--store", url, "--json")
    assert code == 0
    rows = json.loads(out)["decisions"]
    assert [r["plan"] for r in rows] == [plan]
    code, out, _ = run(capsys, "audit", "--plan", plan[:8], "--store", url)
    assert "executor" in out  # the agent is shown
    code, _, err = run(capsys, "audit", "--plan", "xyz", "--store", url)
    assert code == 1
    one_error_line(err, "'xyz' is not a record id")
    code, _, err = run(capsys, "audit", "--plan", "deadbeef00", "--store", url)
    assert code == 1
    one_error_line(err, "unknown record id prefix")


# ---- 10: one line instead of a traceback --------------------------------------------------------


def test_a_closed_pipe_ends_quietly(seeded: tuple[str, str, str]) -> None:
    from planfence.plugins.gate import Decision
    from planfence.shared_memory import WriteBatch

    url, _, plan = seeded
    with open_store(url) as store:  # more output than a pipe holds, in one write
        verdicts = [Decision("gate", "allow", "current", "executor", "ship", plan)] * 3000
        store.write(WriteBatch(entries=tuple(verdicts)))
    proc = subprocess.run(
        f"{' '.join(PLANFENCE)} audit --limit 3000 --store '{url}' | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert len(proc.stdout.splitlines()) == 1
    assert proc.stderr == ""


def test_usage_mistakes_are_one_line_with_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    cases = [
        (("proxy", "--policy", "p.toml", "--log-level", "bogus", "--", "x"), "--log-level"),
        (("audit", "--limit", "0", "--store", "memory://"), "must be at least 1"),
        (("audit", "--limit", "-3", "--store", "memory://"), "must be at least 1"),
        (("memory", "lineage", "x", "--max-records", "0"), "must be at least 1"),
        (("memory", "changes", "--since", "-1"), "must not be negative"),
        (("memory", "keys", "--bogus"), "unrecognized arguments"),
    ]
    for argv, match in cases:
        code, _, err = run(capsys, *argv)
        assert code == 2, argv
        one_error_line(err, match)


def test_deeply_nested_json_value_is_one_line(
    capsys: pytest.CaptureFixture[str], seeded: tuple[str, str, str]
) -> None:
    url = seeded[0]
    deep = "[" * 200_000 + "]" * 200_000
    code, _, err = run(
        capsys, "memory", "put", KEY, "--value", deep, "--as", "sales", "--store", url
    )
    assert code == 1
    one_error_line(err, "nested too deeply")


def test_ctrl_c_ends_with_130_and_one_line(seeded: tuple[str, str, str]) -> None:
    url = seeded[0]
    proc = subprocess.Popen(
        interruptible(
            [*PLANFENCE, "memory", "put", KEY, "--value-file", "-", "--as", "sales", "--store", url]
        ),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_reading_stdin(proc.pid)  # it is now waiting for the value on stdin
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    one_error_line(err, "interrupted")


# ---- 11: two writers without --expect both land ------------------------------------------------


def test_concurrent_puts_without_expect_all_land(seeded: tuple[str, str, str]) -> None:
    url = seeded[0]
    script = (
        "import sys\n"
        "from planfence.adapters.cli.main import main\n"
        "fails = 0\n"
        "for i in range(40):\n"
        "    fails += main(['memory', 'put', 'order/7', '--value', str(i), '--as', 'sales',"
        f" '--store', {url!r}]) != 0\n"
        "sys.exit(fails)\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    with open_store(url) as store:
        assert store.states([KEY])[KEY].version == 81


def test_a_stale_expect_is_told_in_plain_words(
    capsys: pytest.CaptureFixture[str], seeded: tuple[str, str, str]
) -> None:
    url, rid, _ = seeded
    s = ("--store", url)
    code, out, _ = run(
        capsys, "memory", "put", KEY, "--value", "2", "--as", "sales", "--expect", rid[:8], *s
    )
    assert code == 0
    now = out.strip()
    code, _, err = run(
        capsys, "memory", "put", KEY, "--value", "3", "--as", "sales", "--expect", rid, *s
    )
    assert code == 1
    one_error_line(err, f"someone else advanced {KEY} since you read it: now {now}")


# ---- 12: help, consistency, values from files ----------------------------------------------------


def _parsers(
    parser: argparse.ArgumentParser, prefix: str = "planfence"
) -> list[tuple[str, argparse.ArgumentParser]]:
    out = [(prefix, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _parsers(sub, f"{prefix} {name}")
    return out


def test_every_option_has_help_and_shows_its_default() -> None:
    missing = []
    for name, parser in _parsers(build_parser()):
        for action in parser._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS:
                continue
            if not action.help:
                missing.append(f"{name} {action.option_strings[0]}")
    assert missing == []
    text = dict(_parsers(build_parser()))["planfence audit"].format_help()
    assert "(default: 50)" in " ".join(text.split())


def test_put_parents_does_not_swallow_the_key(
    capsys: pytest.CaptureFixture[str], seeded: tuple[str, str, str]
) -> None:
    url, rid, _ = seeded
    code, out, err = run(
        capsys,
        "memory",
        "put",
        "--parents",
        rid,
        KEY,
        "--value",
        "5",
        "--as",
        "sales",
        "--store",
        url,
        "--json",
    )
    assert code == 0, err
    rec = json.loads(out)
    assert rec["key"] == KEY and rec["parents"] == [rid]


def test_put_reads_large_values_from_a_file_or_stdin(
    capsys: pytest.CaptureFixture[str], seeded: tuple[str, str, str], tmp_path: Path
) -> None:
    url = seeded[0]
    value = {"lines": ["x" * 100] * 3000}  # ~300 KB: too large for many command lines
    path = tmp_path / "value.json"
    path.write_text(json.dumps(value))
    code, out, err = run(
        capsys,
        "memory",
        "put",
        KEY,
        "--value-file",
        str(path),
        "--as",
        "sales",
        "--store",
        url,
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["value"] == value
    proc = cli(
        "memory",
        "put",
        KEY,
        "--value-file",
        "-",
        "--as",
        "sales",
        "--store",
        url,
        "--json",
        input='{"n": 9}',
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["value"] == {"n": 9}
    code, _, err = run(
        capsys,
        "memory",
        "put",
        KEY,
        "--value-file",
        str(tmp_path / "nope.json"),
        "--as",
        "sales",
        "--store",
        url,
    )
    assert code == 2
    one_error_line(err, "no such file")


def test_audit_lists_janus_verdicts(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> None:
    from planfence.plugins.gate import Decision

    with open_store(sqlite_url) as store:
        store.log(Decision(source="janus", verdict="keep", reason="old_better", agent="janus"))
        store.log(Decision(source="janus", verdict="deploy", reason="new_better", agent="janus"))
    code, out, err = run(capsys, "audit", "--verdict", "keep", "--store", sqlite_url, "--json")
    assert code == 0, err
    assert [d["verdict"] for d in json.loads(out)["decisions"]] == ["keep"]


def test_serve_owner_prints_one_ready_line(seeded: tuple[str, str, str], tmp_path: Path) -> None:
    url = seeded[0]
    keyring = tmp_path / "keys.toml"
    keyring.write_text('sales = "0123456789abcdef0123"\n')
    proc = subprocess.Popen(
        interruptible(
            [
                *PLANFENCE,
                "serve-owner",
                "--agent",
                "sales",
                "--store",
                url,
                "--port",
                "0",
                "--keyring",
                str(keyring),
            ]
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        ready, _, _ = select.select([proc.stderr], [], [], 30)  # a silent server fails, not hangs
        assert ready, "serve-owner printed nothing within 30 s"
        line = proc.stderr.readline()
        assert line.startswith("planfence serve-owner: agent sales ready at http://127.0.0.1:"), (
            line
        )
        port = int(line.rsplit(":", 1)[1])
        assert port > 0
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def test_policy_check_lists_uncovered_tools_and_stray_entries(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(
        '[tools.get_current_time]\nungated = true\n[tools.get_time]\ndepends_on = ["clock/{tz}"]\n'
    )
    server = Path(sys.executable).with_name("mcp-server-time")
    if not server.exists():
        pytest.skip("mcp-server-time is not installed (dev extra)")
    proc = cli("policy", "check", str(policy), "--json", "--tools-from-upstream", "--", str(server))
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["uncovered"] == ["convert_time"]
    assert report["stray"] == ["get_time"]
    assert main(["policy", "check", str(policy)]) == 0  # without an upstream: valid


def test_policy_check_reports_a_bad_literal_at_load(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools.ship]\ndepends_on = ["bad key!/{x}"]\n')
    proc = cli("policy", "check", str(policy))
    assert proc.returncode == 1
    one_error_line(proc.stderr, "bad key!")
    assert str(policy) in proc.stderr


def test_no_command_writes_into_an_unrelated_default_store(tmp_path: Path) -> None:
    env = {**os.environ, "PLANFENCE_STORE": ""}
    proc = cli("memory", "keys", cwd=str(tmp_path), env=env)
    assert proc.returncode == 1
    assert not (tmp_path / ".planfence").exists()


@pytest.mark.parametrize("command", ["proxy", "serve-owner"])
def test_servers_refuse_a_store_that_does_not_exist(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "typo.db"
    policy = tmp_path / "policy.toml"
    policy.write_text("[tools.t]\nungated = true\n")
    if command == "proxy":
        argv = ["proxy", "--policy", str(policy), "--store", f"sqlite:///{missing}", "--", "true"]
    else:
        argv = ["serve-owner", "--agent", "a", "--port", "0", "--store", f"sqlite:///{missing}"]
    proc = cli(*argv)
    assert proc.returncode == 1
    one_error_line(proc.stderr, str(missing))
    assert not missing.exists()


@pytest.mark.parametrize(
    "url",
    [
        "postgresq://ana:s3cret-pw@db.example/team",
        "postgresql://ana:s3cret-pw@[::1/team",
        "sqlite://ana:s3cret-pw@[::1",
    ],
)
def test_bad_store_urls_are_one_line_without_the_password(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    code, out, err = run(capsys, "memory", "keys", "--store", url)
    assert code == 1
    one_error_line(err, "")
    assert "s3cret-pw" not in err + out
