"""Every code block of the documentation (README.md and every page under docs/) is accounted for.

Each Python block and each shell command has one entry in the registry below, by its place (page,
heading, and for Python its index among the heading's Python blocks; for a shell command, the
command itself): `Runs(test)` names the test that runs it (in this file or elsewhere under
tests/), and `Skipped(reason)` says why it does not run here (it serves until stopped, it is a
benchmark, it installs packages). A block added to a page without an entry fails
`test_every_block_is_accounted_for`, and an entry whose block is gone fails it too.

The blocks run here each run as their own program, in a subprocess with a time limit. Where a page
leaves names to the reader ("your model clients", the `store` of the text around it, a fragment
that runs inside a tool), a prelude defines them with real parts (scripted models, a store, a
gated call) and never replaces the snippet's own lines. The safe shell commands run with the
page's placeholders (`ID`, `PLAN_ID`, optional `[...]` parts) filled in, against a temporary store.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from docpages import REPO, all_blocks, block, page_blocks, pages

TESTS = REPO / "tests"
TIME_LIMIT_S = 60
PYTHON = ("python", "py", "pycon")
SHELL = ("bash", "sh", "shell", "console")


# ---- the registry


@dataclass(frozen=True)
class Runs:
    """Run by `test`: `path::name`, the path relative to tests/ (`name[param]` for one case)."""

    test: str
    venv: str = ""  # a venv of its own, where `.ci/run` runs the test


@dataclass(frozen=True)
class Skipped:
    reason: str


Entry = Runs | Skipped


def here(name: str) -> Runs:
    return Runs(f"docs/test_docs_snippets.py::{name}")


FW = "docs/frameworks/"
PYTHON_BLOCKS: dict[tuple[str, str, int], Entry] = {
    ("README.md", "A stale plan, refused and replanned", 0): Runs(
        "docs/test_docs_readme.py::test_the_example_refuses_the_stale_plan_and_ships_after_one_replan"
    ),
    ("docs/operating/store.md", "The shared memory store", 0): Runs(
        "docs/test_docs_pages.py::test_store_snippet"
    ),
    ("docs/operating/store.md", "Pool size", 0): Runs(
        "docs/test_docs_operating.py::test_the_pool_snippet_opens_a_store_with_its_pool"
    ),
    ("docs/gate.md", "Using the gate", 0): Runs("docs/test_docs_pages.py::test_gate_snippet"),
    ("docs/fencing.md", "Fencing tokens and head leases", 0): here(
        "test_fencing_snippet_runs_inside_a_gated_call"
    ),
    ("docs/fencing.md", "Who may mint a token", 0): here(
        "test_the_tools_check_takes_the_gates_token_and_refuses_an_unsigned_one"
    ),
    ("docs/operating/owners.md", "Owner services over HTTP", 0): here(
        "test_owner_services_snippet_builds_its_gate"
    ),
    ("docs/observability.md", "Tracing and metrics", 0): here("test_tracing_snippet_runs"),
    ("docs/janus.md", "The Janus controller", 0): Runs(
        "docs/test_docs_pages.py::test_janus_snippet"
    ),
    ("docs/janus.md", "Janus on a LangGraph store", 0): Runs(
        "docs/test_docs_pages.py::test_janus_store_snippet"
    ),
    ("docs/janus.md", "The default controller", 0): here("test_janus_settings_snippet_runs"),
    ("docs/backends.md", "Prove it: the conformance suite", 0): Skipped(
        "a template for a backend's own test file (it imports `my_backend`); "
        "tests/store/test_store_conformance.py is this file for the backend below"
    ),
    ("docs/backends.md", "Prove it: the conformance suite", 1): Runs(
        "docs/test_docs_backends.py::test_the_backend_in_the_guide_is_the_one_the_suite_proves"
    ),
    (FW + "mcp.md", "The plan in `_meta`, and what comes back", 0): here(
        "test_mcp_client_snippet_calls_a_gated_tool"
    ),
    (FW + "mcp.md", "The gate inside your own MCP server", 0): Runs(
        "docs/test_docs_mcp_server.py::test_the_gate_inside_an_mcp_server"
    ),
    (FW + "autogen.md", "Add planfence to an AutoGen team", 0): here(
        "test_autogen_snippet_runs_and_exits"
    ),
    (FW + "langgraph.md", "Add planfence to a LangGraph agent", 0): here(
        "test_langgraph_snippet_runs_and_exits"
    ),
    (FW + "pydantic-ai.md", "Add planfence to a PydanticAI agent", 0): Runs(
        "pydantic_ai/test_pydantic_ai_readme.py::test_pydantic_ai_page_snippet_runs"
    ),
    (FW + "openai-agents.md", "Add planfence to an OpenAI Agents SDK agent", 0): Runs(
        "openai_agents/test_openai_agents_readme.py::test_openai_agents_page_snippet_runs"
    ),
    (FW + "adk.md", "Add planfence to a Google ADK agent", 0): Runs(
        "adk/test_adk_readme.py::test_adk_page_snippet_runs", venv=".venv-adk"
    ),
    (FW + "crewai.md", "Add planfence to a CrewAI crew", 0): Runs(
        "crewai_fence/test_crewai_hooks.py::test_crewai_page_snippet_runs", venv=".venv-crewai"
    ),
    ("docs/reference/policy.md", "The same policy in code", 0): Runs(
        "docs/test_docs_reference_pages.py::test_policy_code_example_runs"
    ),
    ("docs/getting-started.md", "Book through the gate", 0): Runs(
        "docs/test_docs_guides.py::test_getting_started_runs_as_a_reader_types_it"
    ),
    (FW + "claude-agent-sdk.md", "Example", 0): Runs(
        "claude_agent_sdk/test_claude_agent_sdk_hooks.py::test_the_docs_example_runs_and_its_plan_cites_what_was_shown"
    ),
    (FW + "llamaindex.md", "Example", 0): Runs(
        "llamaindex/test_llamaindex_fence.py::test_the_docs_example_runs"
    ),
    (FW + "haystack.md", "Example", 0): Runs(
        "haystack_fence/test_haystack_fence.py::test_the_docs_example_runs"
    ),
    (FW + "strands.md", "Example", 0): Runs(
        "strands_hooks/test_strands_hooks.py::test_the_docs_example_runs", venv=".venv-strands"
    ),
    (FW + "agno.md", "Example", 0): Runs(
        "agno_hooks/test_agno_hook.py::test_the_docs_example_runs"
    ),
    (FW + "langchain-mcp.md", "The middleware around MCP tools", 0): Runs(
        "langchain_mcp/test_langchain_mcp.py::test_docs_example_runs", venv=".venv-langchain_mcp"
    ),
    (FW + "langchain-mcp.md", "The proxy in front of the MCP server", 0): Skipped(
        "a fragment with the user's paths: the proxy needs mcp 2, langchain-mcp-adapters mcp 1, so "
        "the two run from two venvs; the langchain_mcp.proxy conformance row runs this arrangement"
    ),
    ("docs/janus.md", "Janus on a Mem0 memory", 0): Runs(
        "mem0/test_mem0_janus_memory.py::test_the_docs_example_keeps_the_harmful_rewrite_out"
    ),
    (FW + "dspy.md", "Example", 0): Runs(
        "dspy_fence/test_dspy_react.py::test_the_docs_example_runs"
    ),
    (FW + "semantic-kernel.md", "Example", 0): Runs(
        "semantic_kernel_fence/test_semantic_kernel_filter.py::test_the_docs_example_runs",
        venv=".venv-semantic_kernel",
    ),
    (FW + "maf.md", "Add planfence to a Microsoft Agent Framework agent", 0): Runs(
        "maf/test_maf_readme.py::test_maf_page_snippet_runs"
    ),
    (FW + "a2a.md", "Add planfence to agents that talk A2A", 0): Runs(
        "a2a/test_a2a.py::test_a2a_page_snippet_runs_as_written"
    ),
    (FW + "write-an-adapter.md", "Add a framework adapter", 0): Runs(
        "docs/test_docs_pages.py::test_adapter_howto_runs_and_touches_no_plugin_internals"
    ),
}

# Shell commands run here, in this order, against one temporary store ($PLANFENCE_STORE), each in
# a folder of its page's own (the plan `plan create` makes is the PLAN_ID of the commands after it).
SHELL_RUN: list[tuple[str, str]] = [
    (
        "docs/gate.md",
        "planfence plan create --as planner --parents ID [ID ...] [--supersedes PLAN_ID] --json",
    ),
    ("docs/gate.md", "planfence audit [--tool T] [--verdict allow|replan|block] [--json]"),
    (
        "docs/gate.md",
        "planfence demo quickstart [--executor planfence|freshness|eager|allkeys] [--json]",
    ),
    ("docs/gate.md", "planfence demo workflows --runs 10"),
    (
        "docs/gate.md",
        'planfence check ship_order --args \'{"order_id": "7", "customer": "ana"}\' '
        "--policy policy.toml --plan PLAN_ID",
    ),
    (
        "docs/gate.md",
        'planfence check ship_order --args \'{"order_id": "7", "customer": "ana"}\' '
        "--policy policy.toml --json",
    ),
    ("docs/operating/owners.md", "planfence keys generate --agent planner --out keys/"),
    ("docs/operating/owners.md", "planfence keys generate --agent sales --out keys/"),
    ("docs/operating/owners.md", "planfence keys generate --agent executor --out keys/"),
    ("docs/fencing.md", "planfence keys generate --agent executor --out keys/"),
    ("docs/fencing.md", "planfence keys generate --agent sales --out keys/"),
    ("docs/fencing.md", "planfence keys generate --agent gate-1 --gate --out keys/"),
    ("docs/observability.md", "planfence memory lineage PLAN_ID --format tree"),
    (
        "docs/observability.md",
        "planfence memory lineage PLAN_ID --format dot | dot -Tsvg > plan.svg",
    ),
]
SERVES = Skipped("serves until stopped (its own tests start and stop it)")
BENCH = Skipped("a benchmark: minutes of CPU (tests/bench runs each with --quick)")
LLM = Skipped("configures an LLM endpoint")
STORE_COMMANDS = Runs("docs/test_docs_pages.py::test_store_commands_run_twice")
CREWAI_VENV = Skipped("builds a venv of its own (minutes); .ci/run builds it and runs these tests")
SHELL_COMMANDS: dict[tuple[str, str], Entry] = {
    (
        "README.md",
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[all,dev]' && "
        ".venv/bin/planfence demo quickstart",
    ): Skipped(
        "the set-up command: .ci/run runs it on a fresh clone (test_docs_readme.py checks it is "
        "the same)"
    ),
    ("README.md", ".venv/bin/python -m pytest -n auto --dist loadfile"): Skipped(
        "the test command: .ci/run runs it (test_docs_readme.py checks it is the same)"
    ),
    **{
        ("docs/operating/store.md", c): STORE_COMMANDS
        for c in (
            "planfence memory own trip/42/requirements --owner planner",
            'planfence memory put trip/42/requirements --value \'{"destination": "Lisbon"}\' '
            "--as planner",
            "planfence memory head trip/42/requirements",
            "planfence memory keys",
            "planfence memory get ID",
            "planfence memory lineage ID",
        )
    },
    (FW + "conformance.md", "python -m planfence.adapters.conformance"): Runs(
        "conformance/test_conformance.py::test_every_adapter_passes_every_case"
    ),
    (FW + "conformance.md", "python -m planfence.adapters.conformance --adapter adk --json"): Runs(
        "conformance/test_conformance.py::test_every_adapter_passes_every_case[adk]"
    ),
    (FW + "mcp.md", "planfence policy init --from-upstream -- mcp-server-git --repository ."): Runs(
        "mcp/test_mcp_policy_init.py::test_mcp_server_git"
    ),
    (
        FW + "mcp.md",
        "planfence policy init --file fs.toml --upstream-url http://127.0.0.1:9000/mcp",
    ): Runs("mcp/test_mcp_policy_init.py::test_an_http_upstream"),
    (
        FW + "crewai.md",
        "python3 -m venv .venv-crewai && .venv-crewai/bin/pip install -q -e "
        "'.[crewai]' pytest pytest-asyncio hypothesis",
    ): CREWAI_VENV,
    (
        FW + "crewai.md",
        ".venv-crewai/bin/python -m pytest tests/crewai_fence && "
        ".venv-crewai/bin/python -m planfence.adapters.conformance --adapter crewai",
    ): CREWAI_VENV,
    (
        "docs/benchmarks.md",
        "export PLANFENCE_LLM_BASE_URL=http://localhost:8000/v1 PLANFENCE_LLM_MODEL=qwen3-8b",
    ): LLM,
    ("docs/benchmarks.md", "export PLANFENCE_LLM_API_KEY=..."): LLM,
}


# Shell blocks a test runs (or checks) whole, in order, as a reader types them: every command
# of the block is claimed by that test.
SHELL_BLOCKS: dict[tuple[str, str, int], Entry] = {
    ("docs/getting-started.md", "Install", 0): Runs(
        "docs/test_docs_guides.py::test_the_install_block_installs_this_package"
    ),
    ("docs/getting-started.md", "Give the record an owner", 0): Runs(
        "docs/test_docs_guides.py::test_getting_started_runs_as_a_reader_types_it"
    ),
    ("docs/getting-started.md", "Make a plan", 0): Runs(
        "docs/test_docs_guides.py::test_getting_started_runs_as_a_reader_types_it"
    ),
    ("docs/getting-started.md", "Say what the tool depends on", 0): Runs(
        "docs/test_docs_guides.py::test_getting_started_runs_as_a_reader_types_it"
    ),
    ("docs/getting-started.md", "Book through the gate", 0): Runs(
        "docs/test_docs_guides.py::test_getting_started_runs_as_a_reader_types_it"
    ),
    ("docs/getting-started.md", "The owner changes the record", 0): Runs(
        "docs/test_docs_guides.py::test_getting_started_runs_as_a_reader_types_it"
    ),
    ("docs/getting-started.md", "The same call, refused and replanned", 0): Runs(
        "docs/test_docs_guides.py::test_getting_started_runs_as_a_reader_types_it"
    ),
    ("docs/getting-started.md", "See it in the audit log", 0): Runs(
        "docs/test_docs_guides.py::test_getting_started_runs_as_a_reader_types_it"
    ),
    ("docs/troubleshooting.md", "How to see why", 0): Runs(
        "docs/test_docs_guides.py::test_the_audit_commands_run"
    ),
    ("docs/troubleshooting.md", "How to see why", 1): Runs(
        "docs/test_docs_guides.py::test_the_check_example_shows_what_check_prints"
    ),
    ("docs/troubleshooting.md", "No store at the path", 0): Runs(
        "docs/test_docs_guides.py::test_the_missing_store_line"
    ),
    ("docs/contributing.md", "Running the tests", 0): Runs(
        "docs/test_docs_guides.py::test_the_setup_and_suite_commands_are_cis"
    ),
    ("docs/contributing.md", "Running the tests", 1): Runs(
        "docs/test_docs_guides.py::test_the_setup_and_suite_commands_are_cis"
    ),
    ("docs/contributing.md", "Running the tests", 2): Runs(
        "docs/test_docs_guides.py::test_the_folder_command_names_a_test_folder"
    ),
    ("docs/contributing.md", "Running the tests", 3): Runs(
        "docs/test_docs_guides.py::test_the_checks_are_cis"
    ),
    ("docs/contributing.md", "The conformance suites", 0): Runs(
        "docs/test_docs_guides.py::test_the_adapter_conformance_table"
    ),
    ("docs/contributing.md", "The conformance suites", 1): Runs(
        "docs/test_docs_guides.py::test_the_store_conformance_file_runs_the_suite"
    ),
    ("docs/operating/upgrades.md", "The schema version", 0): Runs(
        "docs/test_docs_guides.py::test_the_sqlite_version_command"
    ),
    ("docs/operating/upgrades.md", "Upgrading a SQLite store", 0): Runs(
        "docs/test_docs_guides.py::test_the_sqlite_backup_and_the_first_open"
    ),
    ("docs/operating/upgrades.md", "Upgrading a SQLite store", 2): Runs(
        "docs/test_docs_guides.py::test_the_sqlite_backup_and_the_first_open"
    ),
    ("docs/operating/upgrades.md", "Upgrading a PostgreSQL store", 0): Runs(
        "docs/test_docs_guides.py::test_the_pg_dump_command"
    ),
    ("docs/operating/upgrades.md", "Upgrading a SQLite store", 1): Skipped(
        "installs planfence from the user's clone "
        "(test_the_sqlite_backup_and_the_first_open reads it)"
    ),
}

INSTALLS = Skipped("installs an extra's packages from the network (CI installs every extra)")


def commands_of(code: str) -> list[str]:
    """The commands of a shell block: continuation lines joined, comments and blank lines out."""
    joined = code.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            out.append(" ".join(line.split()))
    return out


def shell_commands() -> list[tuple[str, str]]:
    """The commands of every shell block no test claims whole (`SHELL_BLOCKS`)."""
    return [
        (b.page, c)
        for b in all_blocks()
        if b.lang in SHELL and (b.page, b.heading, b.index) not in SHELL_BLOCKS
        for c in commands_of(b.code)
    ]


def shell_entry(page: str, command: str) -> Entry:
    """A command's entry: those that serve, benchmark or install an extra are known by their
    first words (an extra installed into a venv of its own, too)."""
    if (page, command) in SHELL_RUN:
        return here("test_shell_commands_run_against_a_temporary_store")
    if (page, command) in SHELL_COMMANDS:
        return SHELL_COMMANDS[(page, command)]
    if command.startswith(("planfence serve-owner", "planfence proxy", "planfence ui")):
        return SERVES
    if command.startswith("planfence bench"):
        return BENCH
    venv = r"(python3 -m venv (\.venv-\w+) && \2/bin/)?"
    if re.fullmatch(venv + r"pip install '(planfence\[[\w,-]+\]'\s*)+", command + " "):
        return INSTALLS
    raise KeyError((page, command))


def test_every_block_is_accounted_for() -> None:
    python = {(b.page, b.heading, b.index) for b in all_blocks() if b.lang in PYTHON}
    missing = sorted(python - set(PYTHON_BLOCKS))
    assert not missing, f"Python blocks with no entry in PYTHON_BLOCKS: {missing}"
    gone = sorted(set(PYTHON_BLOCKS) - python)
    assert not gone, f"entries whose block is gone: {gone}"
    unknown = []
    for page, command in shell_commands():
        try:
            shell_entry(page, command)
        except KeyError:
            unknown.append((page, command))
    assert not unknown, f"shell commands with no entry: {unknown}"
    commands = set(shell_commands())
    gone_shell = sorted((set(SHELL_COMMANDS) | set(SHELL_RUN)) - commands)
    assert not gone_shell, f"entries whose command is gone: {gone_shell}"
    shell = {(b.page, b.heading, b.index) for b in all_blocks() if b.lang in SHELL}
    gone_blocks = sorted(set(SHELL_BLOCKS) - shell)
    assert not gone_blocks, f"entries whose shell block is gone: {gone_blocks}"


def test_every_fence_names_its_language() -> None:
    """A fence without a language is no block to the reader of the pages: it would escape."""
    for page in pages():
        inside = False
        for n, line in enumerate((REPO / page).read_text(encoding="utf-8").splitlines(), 1):
            fence = re.match(r"^ *```(\S*)", line)
            if fence:
                assert inside or fence.group(1), f"{page}:{n}: a fence with no language"
                inside = not inside


def named_tests() -> list[str]:
    entries = [*PYTHON_BLOCKS.values(), *SHELL_COMMANDS.values(), *SHELL_BLOCKS.values()]
    return sorted({e.test for e in entries if isinstance(e, Runs)})


@pytest.mark.parametrize("test", named_tests())
def test_each_named_test_exists(test: str) -> None:
    path, _, name = test.partition("::")
    source = (TESTS / path).read_text(encoding="utf-8")
    name = name.split("[")[0]
    assert re.search(rf"^(async )?def {name}\(", source, re.M), test


# ---- running a block


def run_python(code: str, cwd: Path, *, path: tuple[Path, ...] = ()) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in path)}
    env.pop("PLANFENCE_STORE", None)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=TIME_LIMIT_S,
            env=env,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout
        raise AssertionError(f"the snippet did not exit within {TIME_LIMIT_S} s: {out!r}") from None
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def run_command(command: str, cwd: Path, env: dict[str, str] | None = None, status: int = 0) -> str:
    """Run a page's command with this environment's `planfence` (a pipeline runs in bash);
    `status`: the exit status it must end with."""
    bindir = str(Path(sys.executable).parent)
    full_env = {**os.environ, **(env or {}), "PATH": bindir + os.pathsep + os.environ["PATH"]}
    argv = ["bash", "-c", command] if "|" in command or ">" in command else shlex.split(command)
    try:
        proc = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, timeout=TIME_LIMIT_S, env=full_env
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{command!r} did not exit within {TIME_LIMIT_S} s") from None
    assert proc.returncode == status, (command, proc.stderr)
    return proc.stdout


POLICY_TOML = ("docs/gate.md", "Using the gate", "toml")


# ---- Python blocks run here

FENCED_CALL = """
import asyncio

from planfence.plugins.gate import GateMiddleware, Policy, ToolCall, create_plan
from planfence.shared_memory import Record, WriteBatch, open_async_store
from planfence.shared_memory.batches import AdvanceHead


async def main():
    store = await open_async_store("memory://")
    await store.own("order/7", "sales")
    await store.own("shipment/7", "executor")
    order = await store.put("order/7", {"status": "confirmed"}, author="sales")
    plan = await create_plan(store, author="planner", parents=[order.id])
    args = {"order_id": "7"}
    effect = Record.create("shipment/7", {"shipped": True}, author="executor", parents=[plan.id])
    advance = AdvanceHead("shipment/7", effect.id, None, "executor")
    batch = WriteBatch(records=(effect,), ops=(advance,))
    policy = Policy().declare("ship_order", ["order/{order_id}"])
    gate = GateMiddleware(store, policy, agent="executor")
    async with gate.guard(ToolCall("ship_order", args, plan.id)) as judged:
        assert judged.allowed, judged
        # the tool's body: the page's lines
{body}
    assert await store.head("shipment/7") == effect.id
    print("fenced write committed")
    await store.aclose()


asyncio.run(main())
"""


def test_fencing_snippet_runs_inside_a_gated_call(tmp_path: Path) -> None:
    body = textwrap.indent(block("docs/fencing.md", "Fencing tokens and head leases"), " " * 8)
    assert run_python(FENCED_CALL.replace("{body}", body), tmp_path) == "fenced write committed\n"


GATE_SIGNED_CALL = """
import asyncio
from pathlib import Path

from planfence.adapters.owner_service import SigningKey
from planfence.fence import FenceSignatureError
from planfence.plugins.gate import GateMiddleware, Policy, ToolCall, create_plan
from planfence.shared_memory import open_async_store


async def setup():
    global store
    store = await open_async_store("memory://")
    await store.own("order/7", "sales")
    order = await store.put("order/7", {"status": "confirmed"}, author="sales")
    plan = await create_plan(store, author="planner", parents=[order.id])
    key = SigningKey.load(next(Path("keys").glob("gate-1.*.jwk")))
    policy = Policy().declare("ship", ["order/{order_id}"])
    async with GateMiddleware(store, policy, agent="executor", signing_key=key) as gate:
        judged = await gate.judge(ToolCall("ship", {"order_id": "7"}, plan.id))
    return judged.fence.to_wire()

token = asyncio.run(setup())
# the page's lines
{body}

async def drive():
    await ship({"order_id": "7"}, {"dev.planfence/fence": token})
    print("the gate's token verifies")
    unsigned = {**token, "gate": None, "sig": None}
    try:
        await ship({"order_id": "7"}, {"dev.planfence/fence": unsigned})
    except FenceSignatureError:
        print("an unsigned token is refused")

asyncio.run(drive())
"""


def test_the_tools_check_takes_the_gates_token_and_refuses_an_unsigned_one(tmp_path: Path) -> None:
    # The keys come from the page's own commands (the last one makes the gate's key).
    for command in commands_of(block("docs/fencing.md", "Who may mint a token", "bash")):
        if command.startswith("planfence keys generate"):
            run_command(command, tmp_path)
    body = block("docs/fencing.md", "Who may mint a token")
    out = run_python(GATE_SIGNED_CALL.replace("{body}", body), tmp_path)
    assert out.splitlines() == ["the gate's token verifies", "an unsigned token is refused"]


def test_owner_services_snippet_builds_its_gate(tmp_path: Path) -> None:
    # The keys come from the page's own commands; the policy from the gate page's TOML block.
    for line in commands_of(block("docs/operating/owners.md", "Owner services over HTTP", "bash")):
        if line.startswith("planfence keys generate"):
            run_command(line, tmp_path)
    (tmp_path / "policy.toml").write_text(block(*POLICY_TOML))
    prelude = (
        "from planfence.plugins.gate import Gate, Policy\n"
        "from planfence.shared_memory import open_store\n"
        "store = open_store('memory://').aio\n"
    )
    epilogue = "\nprint(type(gate).__name__, type(gate.head_source).__name__)\n"
    code = block("docs/operating/owners.md", "Owner services over HTTP")
    out = run_python(prelude + code + epilogue, tmp_path)
    assert out.strip() == "Gate HttpOwnerHeads"


def test_tracing_snippet_runs(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.sdk")
    epilogue = (
        "\nfrom opentelemetry import trace as t\nprint(type(t.get_tracer_provider()).__name__)\n"
    )
    out = run_python(block("docs/observability.md", "Tracing and metrics") + epilogue, tmp_path)
    assert out.strip() == "TracerProvider"


JANUS_EVALUATOR = """
from planfence.plugins.janus import FunctionEvaluator, Task

evaluator = FunctionEvaluator(lambda memory, task: task.answer in str(memory))  # the reader's
"""
JANUS_USE = """
for made in (JanusController(evaluator), JanusController(evaluator, config=JanusConfig.paper())):
    verdict = made.consider_sync("fact 1", "fact 1\\nfact 2", Task.create("q", answer="fact 2"))
    print(type(verdict.deploy).__name__)
"""


def test_janus_settings_snippet_runs(tmp_path: Path) -> None:
    code = block("docs/janus.md", "The default controller")
    assert run_python(JANUS_EVALUATOR + code + JANUS_USE, tmp_path).split() == ["bool", "bool"]


MCP_CLIENT = """
import anyio
from mcp import Client
from mcp.server.mcpserver import MCPServer

from planfence.adapters.mcp import PlanfenceServerMiddleware
from planfence.plugins.gate import create_plan
from planfence.shared_memory import open_async_store


async def setup():
    store = await open_async_store("sqlite:///team.db")
    await store.own("repo/site/review", "reviewer")
    review = await store.put("repo/site/review", {"approved": True}, author="reviewer")
    plan = await create_plan(store, author="executor", parents=[review.id])
    await store.aclose()
    return plan

plan = anyio.run(setup)
mcp = MCPServer("git")
mcp.middleware.append(PlanfenceServerMiddleware("sqlite:///team.db", "policy.toml"))


@mcp.tool()
def git_commit(repo_path: str, message: str) -> str:
    return f"committed {message} in {repo_path}"


async def main():
    async with Client(mcp) as client:
        # the page's lines
{body}
        print(result.meta["dev.planfence/decision"]["verdict"], result.content[0].text)

anyio.run(main)
"""


def test_mcp_client_snippet_calls_a_gated_tool(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    policy = block(FW + "mcp.md", "A first policy from the server's tools", "toml")
    (tmp_path / "policy.toml").write_text(policy)
    body = textwrap.indent(
        block(FW + "mcp.md", "The plan in `_meta`, and what comes back"), " " * 8
    )
    out = run_python(MCP_CLIENT.replace("{body}", body), tmp_path)
    assert out.strip() == "allow committed release in /abs/path/repo"


AUTOGEN_CLIENTS = """
from autogen_ext.models.replay import ReplayChatCompletionClient
from autogen_helpers import MODEL_INFO, tool_call

planner_client = ReplayChatCompletionClient(["Plan: fly to Lisbon."], model_info=MODEL_INFO)
executor_client = ReplayChatCompletionClient(
    [tool_call("book_flight", {"destination": "Lisbon"})], model_info=MODEL_INFO
)
"""


def test_autogen_snippet_runs_and_exits(tmp_path: Path) -> None:
    pytest.importorskip("autogen_agentchat")
    code = AUTOGEN_CLIENTS + block(FW + "autogen.md", "Add planfence to an AutoGen team")
    out = run_python(code, tmp_path, path=(TESTS / "autogen",))
    assert "status='done'" in out


LANGGRAPH_MODEL = """
from langchain_core.messages import AIMessage
from langgraph_helpers import ScriptedChatModel, book

model = ScriptedChatModel(responses=[book("Lisbon", 0), AIMessage(content="Booked.")])
"""


def test_langgraph_snippet_runs_and_exits(tmp_path: Path) -> None:
    pytest.importorskip("langchain")
    code = LANGGRAPH_MODEL + block(FW + "langgraph.md", "Add planfence to a LangGraph agent")
    out = run_python(code, tmp_path, path=(TESTS / "langgraph",))
    assert "'status': 'done'" in out


# ---- shell commands run here


def filled(command: str, ids: dict[str, str]) -> str:
    """The command as a user types it from the page's synopsis: optional `[...]` parts left
    out, placeholders replaced by real ids."""
    while re.search(r"\s*\[[^\[\]]*\]", command):
        command = re.sub(r"\s*\[[^\[\]]*\]", "", command)
    for name, value in ids.items():
        command = re.sub(rf"\b{name}\b", value, command)
    return command


def test_shell_commands_run_against_a_temporary_store(tmp_path: Path) -> None:
    ran = [pc for pc in shell_commands() if pc in SHELL_RUN]
    assert sorted(ran) == sorted(SHELL_RUN)  # each once
    env = {"PLANFENCE_STORE": f"sqlite:///{tmp_path / 'team.db'}"}
    folders = {page: tmp_path / page.replace("/", "_") for page, _ in SHELL_RUN}
    for folder in folders.values():
        folder.mkdir()
        (folder / "policy.toml").write_text(block(*POLICY_TOML))
    # The records the commands name: the gate page's order and address, as its snippet has.
    run_command("planfence memory own order/7 --owner sales", tmp_path, env)
    run_command("planfence memory own address/ana --owner ana", tmp_path, env)
    order = run_command(
        'planfence memory put order/7 --value \'{"status": "confirmed"}\' --as sales', tmp_path, env
    ).strip()
    run_command(
        'planfence memory put address/ana --value \'{"line": "1 Harbour St"}\' --as ana',
        tmp_path,
        env,
    )
    ids = {"ID": order[:8]}
    for page, command in SHELL_RUN:
        if "| dot" in command and shutil.which("dot") is None:
            continue  # Graphviz is not part of planfence
        # `planfence check` exits with its verdict: both calls here would be blocked (4)
        status = 4 if command.startswith("planfence check") else 0
        out = run_command(filled(command, ids), folders[page], env, status)
        if command.startswith("planfence plan create"):
            ids["PLAN_ID"] = json.loads(out)["id"]
        if "--plan PLAN_ID" in command:
            assert "verdict for plan" in out and "incomplete_lineage" in out
            # the refusal's pointer to this very dry run is left out of what it prints
            assert "planfence check" not in out
    assert len(list((folders["docs/operating/owners.md"] / "keys").glob("*.jwk"))) == 3
    fencing_keys = folders["docs/fencing.md"] / "keys"
    assert len(list(fencing_keys.glob("*.jwk"))) == 3 and (fencing_keys / "gates.jwks").exists()
    audit = run_command("planfence audit --json", tmp_path, env)
    # `check` wrote nothing; the demos use their own stores
    assert json.loads(audit)["decisions"] == []


def test_page_blocks_are_read_by_heading() -> None:
    # The registry's places are docpages' places: a page's first block under its title.
    [first] = [b for b in page_blocks("docs/gate.md", "toml") if b.index == 0]
    assert first.heading == "Using the gate" and "[tools.ship_order]" in first.code
