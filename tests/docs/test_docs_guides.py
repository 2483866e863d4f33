"""The guide pages' code blocks run, and say what really happens.

- docs/getting-started.md runs whole, in order, in an empty folder, as a reader types it: its
  files are saved under the names the page gives, its shell blocks run in one shell session
  (variables carry over), and each output block the page shows is what the command before it
  printed, with record ids, times and the folder's path matched rather than compared.
- docs/troubleshooting.md has an entry for every refusal reason the code can give, and the
  error lines it quotes are the ones planfence prints.
- docs/concepts.md's diagram and statements name real verdicts and reasons.
- docs/operating/upgrades.md names the schema version the code migrates to.
- docs/contributing.md gives the commands CI runs.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from docpages import REPO, Block, block, page_blocks

TIME_LIMIT_S = 120
BIN = Path(sys.executable).parent  # the venv's `planfence` and `python`, as after activation

# ---- docs/getting-started.md

TOUR = "docs/getting-started.md"
# The files the tutorial asks the reader to save: (heading, lang) -> file name.
TOUR_FILES = {
    ("Say what the tool depends on", "toml"): "policy.toml",
    ("Book through the gate", "python"): "book.py",
}
INSTALL = "Install"

HEX64 = re.compile(r"\b[0-9a-f]{64}\b")
HEX12 = re.compile(r"\b[0-9a-f]{12}\b")
TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z\b")


def tour_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLANFENCE_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(home)
    env.pop("VIRTUAL_ENV", None)
    return env


def steps() -> list[tuple[Block, Block | None]]:
    """The page's blocks in order, each with the output block that follows it (if any)."""
    blocks = page_blocks(TOUR)
    out: list[tuple[Block, Block | None]] = []
    for i, b in enumerate(blocks):
        if b.lang == "text":
            continue
        nxt = blocks[i + 1] if i + 1 < len(blocks) else None
        out.append((b, nxt if nxt is not None and nxt.lang == "text" else None))
    return out


class Normaliser:
    """Names each record id by the order it first appears in (a 12-digit prefix as its full id),
    so the page's ids and a run's compare as the same structure: the head printed by a `put` is
    the one the check calls current, and so on."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.ids: list[str] = []

    def name(self, hex_id: str) -> str:
        for n, known in enumerate(self.ids):
            if known.startswith(hex_id):
                return f"<id{n}>"
        self.ids.append(hex_id)
        return f"<id{len(self.ids) - 1}>"

    def __call__(self, text: str) -> list[str]:
        text = text.replace(self.folder, "~/planfence-tour")
        text = TIME.sub("<time>", text)
        text = HEX64.sub(lambda m: self.name(m.group(0)), text)
        text = HEX12.sub(lambda m: self.name(m.group(0)), text)
        return [" ".join(line.split()) for line in text.strip().splitlines()]


def test_the_install_block_installs_this_package() -> None:
    """The install block runs here without its `pip install` (the test's own environment has
    planfence installed from this checkout, as the block installs it: from the clone's folder,
    which holds the package's project file)."""
    code = block(TOUR, INSTALL, "bash")
    assert "pip install PATH_TO_THE_CLONE\n" in code
    project = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^name = "planfence"$', project, re.M)


def test_getting_started_runs_as_a_reader_types_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    marker = "@@planfence-tour-block@@"
    script = ["set -u"]
    expected: list[tuple[str, Block | None]] = []
    for b, output in steps():
        if b.lang == "bash" and b.heading == INSTALL:
            # The folder and the venv as the reader makes them; planfence itself comes from the
            # environment running this test (on PATH first, as after activation).
            script.append("mkdir ~/planfence-tour && cd ~/planfence-tour")
            continue
        if b.lang == "bash":
            script.append(f"echo {marker}\n{{\n{b.code}\n}} 2>&1")
            expected.append((b.heading, output))
            continue
        name = TOUR_FILES.get((b.heading, b.lang))
        assert name is not None, f"a {b.lang} block under {b.heading!r} the test does not place"
        script.append(f"cat > {name} <<'PLANFENCE_TOUR_EOF'\n{b.code}PLANFENCE_TOUR_EOF")
    proc = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=home,
        env=tour_env(home),
        capture_output=True,
        text=True,
        timeout=TIME_LIMIT_S,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr == ""
    got = proc.stdout.split(marker + "\n")[1:]
    assert len(got) == len(expected)
    folder = str(home / "planfence-tour")
    page, run = Normaliser(folder), Normaliser(folder)
    for (heading, output), printed in zip(expected, got, strict=True):
        assert "Traceback" not in printed, printed
        assert output is not None, f"the page shows no output for the command under {heading!r}"
        assert run(printed) == page(output.code), f"under {heading!r}"
    # Every id in the page's outputs stood for one the run printed, in the same places.
    assert len(page.ids) == len(run.ids)


def test_getting_started_links_where_next() -> None:
    text = (REPO / TOUR).read_text(encoding="utf-8")
    for target in ("concepts.md", "frameworks/index.md", "troubleshooting.md"):
        assert f"]({target})" in text


# ---- docs/troubleshooting.md

TROUBLE = "docs/troubleshooting.md"
CODE_ROOTS = ("shared_memory", "plugins", "adapters", "demos")
ALLOW_REASONS = {"current", "ungated"}


def planfence(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run the `planfence` command; its exit status and what it printed (stderr after stdout)."""
    proc = subprocess.run(
        [str(BIN / "planfence"), *args],
        cwd=cwd,
        env=env or tour_env(cwd),
        capture_output=True,
        text=True,
        timeout=TIME_LIMIT_S,
    )
    return proc.returncode, proc.stdout + proc.stderr


def refusal_reasons() -> set[str]:
    """Every reason code a refusal can carry: the gate's `Reason`s but the two an allow gives,
    and each code the adapters refuse with themselves (`gate.refuse(call, CODE, ...)`), found in
    the source, so a new one cannot go without an entry."""
    from planfence.plugins.gate.verdicts import Reason

    codes = {r.value for r in Reason} - ALLOW_REASONS
    constants: dict[str, str] = {}
    refused: list[ast.expr] = []
    for root in CODE_ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Assign)
                    and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str)
                ):
                    constants[node.targets[0].id] = node.value.value
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "refuse"
                    and len(node.args) >= 2
                ):
                    refused.append(node.args[1])
    assert refused, "found no `refuse(...)` call: the scan no longer sees the adapters' refusals"
    for arg in refused:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            codes.add(arg.value)
        elif isinstance(arg, ast.Name) and arg.id in constants:
            codes.add(constants[arg.id])
        elif isinstance(arg, ast.Attribute) and arg.attr in constants:
            codes.add(constants[arg.attr])
        # else a variable carrying a code decided elsewhere (a lease's refusal: a `Reason`)
    return codes


def reason_entries() -> list[str]:
    """The reason codes this page has an entry for: its `### `code`` headings."""
    text = (REPO / TROUBLE).read_text(encoding="utf-8")
    return re.findall(r"^### `([a-z_]+)`$", text, re.M)


def test_every_refusal_reason_has_an_entry() -> None:
    codes = refusal_reasons()
    assert {"missing_plan", "stale_after_replan", "malformed_meta", "agent_mismatch"} <= codes
    entries = reason_entries()
    assert len(entries) == len(set(entries)), "a reason with two entries"
    assert sorted(codes - set(entries)) == [], "reasons without an entry"
    assert sorted(set(entries) - codes) == [], "entries for reasons the code does not give"


@pytest.fixture
def changed_trip(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The getting-started store after the customer's change: a plan on the old requirements
    (`$PLAN` in the environment), and the tutorial's policy file."""
    folder = tmp_path / "project"
    folder.mkdir()
    env = tour_env(tmp_path)
    (folder / "policy.toml").write_text(
        block(TOUR, "Say what the tool depends on", "toml"), encoding="utf-8"
    )
    key = "trip/42/requirements"
    assert planfence("memory", "own", key, "--owner", "customer", cwd=folder)[0] == 0
    value = '{"city": "Lisbon", "nights": 3}'
    rc, req = planfence("memory", "put", key, "--as", "customer", "--value", value, cwd=folder)
    assert rc == 0
    rc, plan = planfence(
        "plan", "create", "--as", "planner", "--parents", req.strip(), "--value", value, cwd=folder
    )
    assert rc == 0
    porto = '{"city": "Porto", "nights": 4}'
    assert planfence("memory", "put", key, "--as", "customer", "--value", porto, cwd=folder)[0] == 0
    env["PLAN"] = plan.strip()
    return folder, env


def run_shell(code: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIME_LIMIT_S,
    )


def test_the_check_example_shows_what_check_prints(changed_trip: tuple[Path, dict[str, str]]):
    folder, env = changed_trip
    proc = run_shell(block(TROUBLE, "How to see why", "bash", 1), folder, env)
    assert proc.returncode == 3, proc.stderr  # a replan
    shown = block(TROUBLE, "How to see why", "text")
    assert Normaliser(str(folder))(proc.stdout) == Normaliser(str(folder))(shown)


def test_the_audit_commands_run(changed_trip: tuple[Path, dict[str, str]]) -> None:
    folder, env = changed_trip
    code = block(TROUBLE, "How to see why", "bash", 0).replace("PLAN_ID", "$PLAN")
    for line in code.strip().splitlines():
        proc = run_shell(line, folder, env)
        assert proc.returncode == 0, (line, proc.stderr)


def test_the_messages_quoted_are_the_gates(changed_trip: tuple[Path, dict[str, str]]) -> None:
    """The refusal messages the entries quote inline are what `planfence check` prints."""
    folder, env = changed_trip
    text = (REPO / TROUBLE).read_text(encoding="utf-8")
    policy = folder / "agents.toml"
    policy.write_text(
        '[tools.book_hotel]\ndepends_on = ["trip/{trip}/requirements"]\nagents = ["executor"]\n',
        encoding="utf-8",
    )
    cases = [
        (["book_hotel", "--args", "{}", "--policy", "policy.toml"], "argument 'trip' is missing"),
        (["book_hotel", "--args", '{"trip": "4/2"}', "--policy", "policy.toml"], "cannot name"),
        (["cancel", "--args", "{}", "--policy", "policy.toml"], "has no dependency declaration"),
        (
            ["book_hotel", "--args", '{"trip": "42"}', "--policy", str(policy), "--agent", "NAME"],
            "is for executor",
        ),
    ]
    for args, part in cases:
        rc, out = planfence("check", *args, "--plan", env["PLAN"], cwd=folder, env=env)
        assert rc == 4, out
        lines = out.splitlines()
        [verdict] = [i for i, line in enumerate(lines) if line.startswith("verdict for plan")]
        message = lines[verdict + 1].strip()  # the refusal's message, under its verdict
        assert part in message
        shown = message.replace("'cancel'", "'TOOL'").replace("'book_hotel'", "'TOOL'")
        assert f"`{shown}`" in " ".join(text.split()), shown


def test_the_missing_store_line(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    rc, out = planfence(*block(TROUBLE, "No store at the path", "bash").split()[1:], cwd=folder)
    assert rc == 1
    shown = block(TROUBLE, "No store at the path", "text").strip()
    assert out.strip().replace(str(folder), "~/project") == shown


def test_the_busy_port_line(changed_trip: tuple[Path, dict[str, str]]) -> None:
    folder, env = changed_trip
    holder = socket.socket()
    try:
        try:  # hold the UI's default port, unless another server already does
            holder.bind(("127.0.0.1", 8765))
            holder.listen()
        except OSError:
            pass
        rc, out = planfence(
            *block(TROUBLE, "The port is already in use", "bash").split()[1:], cwd=folder, env=env
        )
    finally:
        holder.close()
    assert rc == 1
    assert out.strip() == block(TROUBLE, "The port is already in use", "text").strip()


# Each line the page quotes, and how to get it: the modules the extra installs made unimportable
# (as in an environment without the extra), and the command.
MISSING_EXTRA = {
    "http": (("starlette", "uvicorn"), ["ui"]),
    "postgres": (("psycopg", "psycopg_pool"), ["memory", "keys", "--store", "postgresql://x/db"]),
    "mcp": (("mcp",), ["proxy", "--policy", "policy.toml", "--", "true"]),
}


def test_the_missing_extra_lines(changed_trip: tuple[Path, dict[str, str]]) -> None:
    folder, env = changed_trip
    lines = block(TROUBLE, "A feature needs an extra", "text").strip().splitlines()
    assert len(lines) == len(MISSING_EXTRA)
    for line in lines:
        [extra] = re.findall(r"needs the '([a-z-]+)' extra", line)
        modules, argv = MISSING_EXTRA[extra]
        program = (
            "import sys\n"
            f"for name in {modules!r}: sys.modules[name] = None\n"
            f"sys.argv = ['planfence', *{argv!r}]\n"
            "from planfence.adapters.cli.main import main\n"
            "sys.exit(main())\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", program],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIME_LIMIT_S,
        )
        assert proc.returncode == 1
        assert (proc.stdout + proc.stderr).strip() == line


def test_the_record_id_line(changed_trip: tuple[Path, dict[str, str]]) -> None:
    folder, env = changed_trip
    rc, out = planfence("memory", "get", "1234", cwd=folder, env=env)
    assert rc == 2 or rc == 1
    assert out.strip() == block(TROUBLE, "A plan id the command does not take", "text").strip()


# ---- docs/concepts.md

CONCEPTS = "docs/concepts.md"


def verdict_reasons() -> dict[str, set[str]]:
    """The gate's reason codes by the verdict that carries them."""
    from planfence.plugins.gate.verdicts import BLOCK_REASONS, Reason

    return {
        "allow": {Reason.CURRENT.value, Reason.UNGATED.value},
        "replan": {Reason.STALE.value},
        "block": {str(r) for r in BLOCK_REASONS},
    }


def test_the_policy_example_declares_what_the_text_says() -> None:
    from planfence.plugins.gate import Policy

    policy = Policy.from_toml(block(CONCEPTS, "D(a): the keys a call depends on", "toml"))
    book = policy.get("book_hotel")
    assert book is not None
    assert book.scope({"trip": "42", "customer": {"id": "c9"}}) == (
        "customer/c9/card",
        "trip/42/requirements",
    )
    weather = policy.get("get_weather")
    assert weather is not None and weather.ungated


def test_the_diagram_names_real_verdicts_and_reasons() -> None:
    diagram = block(CONCEPTS, "The check", "mermaid")
    by_verdict = verdict_reasons()
    labels = re.findall(r'"(allow|replan|block): ([a-z_, <>/.]+)"', diagram)
    assert {verdict for verdict, _ in labels} == {"allow", "replan", "block"}
    named: set[str] = set()
    for verdict, text in labels:
        parts = [part.strip() for part in re.split(r",|<br/>", text)]
        codes = {part for part in parts if re.fullmatch(r"[a-z_]+", part)}  # not "...", prose
        assert codes, text
        assert codes <= by_verdict[verdict], (verdict, codes)
        named |= codes
    # The reasons a check decides on its own (not a failed read or write) are all drawn.
    assert {
        "undeclared_tool",
        "agent_not_allowed",
        "scope_unresolved",
        "missing_plan",
        "unknown_plan",
        "incomplete_lineage",
        "stale_after_replan",
        "stale_dependencies",
        "current",
        "ungated",
    } <= named


def test_the_verdict_table_lists_every_reason() -> None:
    text = (REPO / CONCEPTS).read_text(encoding="utf-8")
    for verdict, codes in verdict_reasons().items():
        [row] = re.findall(rf"^\| `{verdict}` \| ([^|]+) \|", text, re.M)
        assert set(re.findall(r"`([a-z_]+)`", row)) == codes, verdict


def test_the_numbers_are_the_codes() -> None:
    from planfence.plugins.gate.decision import MAX_SUPERSEDES_CHAIN
    from planfence.plugins.janus import JanusConfig
    from planfence.shared_memory.lineage import DEFAULT_MAX_RECORDS

    concepts = " ".join((REPO / CONCEPTS).read_text(encoding="utf-8").split())
    trouble = " ".join((REPO / TROUBLE).read_text(encoding="utf-8").split())
    assert f"longer than {MAX_SUPERSEDES_CHAIN} plans" in concepts
    assert f"{DEFAULT_MAX_RECORDS:,} by default" in trouble
    config = JanusConfig()
    assert f"the first {config.support_size} candidates" in concepts
    assert f"{round(config.budget * 100)}% of the steps over any {config.budget_window}" in concepts
    assert f"the floor ({config.floor})" in concepts
    assert f'`on_tie="{config.on_tie}"`' in concepts


# ---- docs/operating/upgrades.md

UPGRADES = "docs/operating/upgrades.md"
SQLITE_STEPS = "Upgrading a SQLite store"
PG_STEPS = "Upgrading a PostgreSQL store"


def new_store(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rc, out = planfence("memory", "own", "trip/42/requirements", "--owner", "customer", cwd=folder)
    assert rc == 0, out


def test_the_schema_version_named_is_the_codes() -> None:
    from planfence.shared_memory.backends.postgres_schema import MIGRATIONS as POSTGRES
    from planfence.shared_memory.backends.sqlite_schema import MIGRATIONS as SQLITE

    assert len(SQLITE) == len(POSTGRES)
    text = (REPO / UPGRADES).read_text(encoding="utf-8")
    assert f"writes **schema version {len(SQLITE)}**" in text
    rows = re.findall(r"^\| (\d+) \| ", text, re.M)
    assert rows == [str(n) for n in range(1, len(SQLITE) + 1)], "one row per schema version"


def test_the_sqlite_version_command(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    new_store(folder)
    proc = run_shell(block(UPGRADES, "The schema version", "bash"), folder, tour_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == block(UPGRADES, "The schema version", "text").strip()


@pytest.mark.postgres
def test_the_postgres_version_query(pg_url: str) -> None:
    import psycopg

    from planfence.shared_memory import open_store
    from planfence.shared_memory.backends.postgres import MIGRATIONS, split_schema

    open_store(pg_url).close()  # a new store, at this version
    conninfo, schema = split_schema(pg_url)
    with psycopg.connect(conninfo, options=f"-c search_path={schema}") as conn:
        row = conn.execute(block(UPGRADES, "The schema version", "sql")).fetchone()  # type: ignore[arg-type]
    assert row is not None and row[0] == len(MIGRATIONS)


def test_a_newer_store_is_refused_in_the_line_shown(tmp_path: Path) -> None:
    from planfence.shared_memory.backends.sqlite_schema import MIGRATIONS

    folder = tmp_path / "project"
    new_store(folder)
    conn = sqlite3.connect(folder / ".planfence" / "memory.db")
    conn.execute(f"PRAGMA user_version={len(MIGRATIONS) + 1}")
    conn.commit()
    conn.close()
    rc, out = planfence("memory", "keys", cwd=folder)
    assert rc == 1
    shown = block(UPGRADES, "What happens when a store is opened", "text").strip()
    assert out.strip().replace(str(folder), "~/project") == shown


def test_the_sqlite_backup_and_the_first_open(tmp_path: Path) -> None:
    from planfence.shared_memory import open_store

    folder = tmp_path / "project"
    new_store(folder)
    env = tour_env(tmp_path)
    backup = block(UPGRADES, SQLITE_STEPS, "bash", 0)
    proc = run_shell(backup, folder, env)
    assert proc.returncode == 0, proc.stderr
    with open_store(f"sqlite:///{folder / 'memory-backup.db'}", create=False) as copy:
        assert copy.owner("trip/42/requirements") == "customer"
    assert "pip install --upgrade PATH_TO_THE_CLONE" in block(UPGRADES, SQLITE_STEPS, "bash", 1)
    proc = run_shell(block(UPGRADES, SQLITE_STEPS, "bash", 2), folder, env)
    assert proc.returncode == 0, proc.stderr
    assert "trip/42/requirements" in proc.stdout


@pytest.mark.postgres
def test_the_pg_dump_command(pg_url: str, tmp_path: Path) -> None:
    from planfence.shared_memory import open_store
    from planfence.shared_memory.backends.postgres import split_schema

    if shutil.which("pg_dump") is None:
        pytest.skip("pg_dump (PostgreSQL's client tools) is not installed")
    with open_store(pg_url) as store:
        store.own("trip/42/requirements", "customer")
    conninfo, schema = split_schema(pg_url)
    command = block(UPGRADES, PG_STEPS, "bash")
    assert "--schema=planfence " in command and '"postgresql://user@host/db"' in command
    command = command.replace("--schema=planfence ", f"--schema={schema} ")
    command = command.replace('"postgresql://user@host/db"', f"'{conninfo}'")
    proc = run_shell(command, tmp_path, tour_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    listed = subprocess.run(
        ["pg_restore", "--list", str(tmp_path / "planfence-backup.dump")],
        capture_output=True,
        text=True,
        timeout=TIME_LIMIT_S,
    )
    assert listed.returncode == 0, listed.stderr
    assert f"TABLE {schema} pf_keys" in listed.stdout


# ---- docs/contributing.md

CONTRIBUTING = "docs/contributing.md"
TESTS = "Running the tests"
CONFORMANCE = "The conformance suites"


def ci_script() -> str:
    return (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_the_setup_and_suite_commands_are_cis() -> None:
    """Set-up and the whole suite are CI's own lines, verbatim (CI runs them; a test here would
    install and run the suite again)."""
    lines = set(ci_script().splitlines())
    for index in (0, 1):
        command = block(CONTRIBUTING, TESTS, "bash", index).strip()
        assert command in lines, command


def test_the_folder_command_names_a_test_folder() -> None:
    command = block(CONTRIBUTING, TESTS, "bash", 2).strip()
    folder = command.split()[3]
    assert command == f".venv/bin/python -m pytest {folder} -q"
    assert (REPO / folder).is_dir()


def test_the_checks_are_cis() -> None:
    script = ci_script()
    for line in block(CONTRIBUTING, TESTS, "bash", 3).strip().splitlines():
        for command in line.split(" && "):
            assert re.search(rf"^{re.escape(command)}( |$)", script, re.M), command


def test_the_layers_are_the_import_contract() -> None:
    project = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    [layers] = re.findall(r'type = "layers"\nlayers = \[(.*?)\]', project, re.S)
    assert re.findall(r'"planfence\.(\w+)"', layers) == [
        "demos",
        "adapters",
        "fence",
        "plugins",
        "shared_memory",
    ]


def test_the_adapter_conformance_table(tmp_path: Path) -> None:
    command = block(CONTRIBUTING, CONFORMANCE, "bash", 0).strip()
    assert command.startswith("python -m planfence.adapters.conformance ")
    proc = run_shell(command, tmp_path, tour_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    shown = block(CONTRIBUTING, CONFORMANCE, "text")
    assert Normaliser("")(proc.stdout) == Normaliser("")(shown)


def test_the_store_conformance_file_runs_the_suite() -> None:
    """The command runs a file of the suite (CI runs it with the rest): the file is there and
    runs the shipped checks."""
    command = block(CONTRIBUTING, CONFORMANCE, "bash", 1).strip()
    path = command.split()[3]
    assert command == f".venv/bin/python -m pytest {path} -q"
    assert "from planfence.shared_memory.conformance import CHECKS" in (REPO / path).read_text(
        encoding="utf-8"
    )
