"""Every snippet of the README runs to completion in a subprocess, within a time limit.

Each Python block runs as its own program. Where the README leaves names to the reader ("your
model clients", the `store` of the text around it, a fragment that runs inside a tool), a prelude
defines them with real parts (scripted models, a store, a gated call) and never replaces the
snippet's own lines. Each shell command that is safe against a temporary store runs too, with the
README's placeholders (`ID`, `PLAN_ID`, optional `[...]` parts) filled in; a command that serves
until stopped or needs a network service is listed with the reason it does not run here.
A snippet added to the README without an entry here fails `test_every_snippet_is_accounted_for`.
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

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
TIME_LIMIT_S = 60

# ---- the README's fenced blocks, by the heading above them


@dataclass(frozen=True)
class Block:
    heading: str
    index: int  # among the blocks of its language under that heading
    lang: str
    code: str


def blocks(lang: str) -> list[Block]:
    text = README.read_text(encoding="utf-8")
    heads = [(m.start(), m.group(1)) for m in re.finditer(r"^#{2,4} (.+)$", text, re.M)]
    out: list[Block] = []
    seen: dict[str, int] = {}
    for m in re.finditer(r"^ *```(\w+)\n(.*?)^ *```", text, re.S | re.M):
        if m.group(1) != lang:
            continue
        heading = [h for pos, h in heads if pos < m.start()][-1]
        n = seen.get(heading, 0)
        seen[heading] = n + 1
        out.append(Block(heading, n, lang, textwrap.dedent(m.group(2))))
    return out


def block(heading: str, lang: str = "python", index: int = 0) -> str:
    found = [b for b in blocks(lang) if b.heading == heading and b.index == index]
    assert found, f"no {lang} block {index} under {heading!r}"
    return found[0].code


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


# ---- Python blocks: those the older docs tests run, and those run here

COVERED = {
    "The shared memory store": "test_docs_readme.py::test_store_snippet",
    "The gate": "test_docs_readme.py::test_gate_snippet",
    "The gate inside your own MCP server": "test_docs_mcp_server.py",
    "Add a framework adapter": "test_docs_readme.py::test_adapter_howto_runs_and_touches_no_...",
    "The Janus controller": "test_docs_readme.py::test_janus_snippet",
    "Janus on a LangGraph store": "test_docs_readme.py::test_janus_store_snippet",
    "Add planfence to a PydanticAI agent": "test_pydantic_ai_readme.py",
    "Add planfence to an OpenAI Agents SDK agent": "test_openai_agents_readme.py",
    "Add planfence to a Google ADK agent": "test_adk_readme.py",
    "Add planfence to a Microsoft Agent Framework agent": "test_maf_readme.py",
    "Add planfence to agents that talk A2A": "test_a2a.py::test_a2a_readme_snippet_runs",
    "Add planfence to a CrewAI crew": "crewai_fence/test_crewai_hooks.py (in .venv-crewai)",
}
RUN_HERE = {
    "Fencing tokens and head leases",
    "Owner services over HTTP",
    "Tracing and metrics",
    "Putting the gate in front of an MCP server",
    "Add planfence to an AutoGen team",
    "Add planfence to a LangGraph agent",
}


def test_every_snippet_is_accounted_for() -> None:
    python = {b.heading for b in blocks("python")}
    assert python == set(COVERED) | RUN_HERE
    assert all(b.index == 0 for b in blocks("python"))  # one Python block per heading
    commands = {c for b in blocks("bash") for c in commands_of(b.code)}
    assert commands == set(SHELL_RUN) | set(SHELL_SKIPPED) | set(SHELL_COVERED)


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
        # the tool's body: the README's lines
{body}
    assert await store.head("shipment/7") == effect.id
    print("fenced write committed")
    await store.aclose()


asyncio.run(main())
"""


def test_fencing_snippet_runs_inside_a_gated_call(tmp_path: Path) -> None:
    body = textwrap.indent(block("Fencing tokens and head leases"), " " * 8)
    assert run_python(FENCED_CALL.replace("{body}", body), tmp_path) == "fenced write committed\n"


def test_owner_services_snippet_builds_its_gate(tmp_path: Path) -> None:
    # The keys come from the README's own commands; the policy from its first TOML block.
    for line in commands_of(block("Owner services over HTTP", "bash")):
        if line.startswith("planfence keys generate"):
            run_command(line, tmp_path)
    (tmp_path / "policy.toml").write_text(block("The gate", "toml"))
    prelude = (
        "from planfence.plugins.gate import Gate, Policy\n"
        "from planfence.shared_memory import open_store\n"
        "store = open_store('memory://').aio\n"
    )
    epilogue = "\nprint(type(gate).__name__, type(gate.head_source).__name__)\n"
    out = run_python(prelude + block("Owner services over HTTP") + epilogue, tmp_path)
    assert out.strip() == "Gate HttpOwnerHeads"


def test_tracing_snippet_runs(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.sdk")
    epilogue = (
        "\nfrom opentelemetry import trace as t\nprint(type(t.get_tracer_provider()).__name__)\n"
    )
    out = run_python(block("Tracing and metrics") + epilogue, tmp_path)
    assert out.strip() == "TracerProvider"


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
        # the README's lines
{body}
        print(result.meta["dev.planfence/decision"]["verdict"], result.content[0].text)

anyio.run(main)
"""


def test_mcp_client_snippet_calls_a_gated_tool(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    section = "Putting the gate in front of an MCP server"
    (tmp_path / "policy.toml").write_text(block(section, "toml"))
    body = textwrap.indent(block(section), " " * 8)
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
    code = AUTOGEN_CLIENTS + block("Add planfence to an AutoGen team")
    out = run_python(code, tmp_path, path=(REPO / "tests" / "autogen",))
    assert "status='done'" in out


LANGGRAPH_MODEL = """
from langchain_core.messages import AIMessage
from langgraph_helpers import ScriptedChatModel, book

model = ScriptedChatModel(responses=[book("Lisbon", 0), AIMessage(content="Booked.")])
"""


def test_langgraph_snippet_runs_and_exits(tmp_path: Path) -> None:
    pytest.importorskip("langchain")
    code = LANGGRAPH_MODEL + block("Add planfence to a LangGraph agent")
    out = run_python(code, tmp_path, path=(REPO / "tests" / "langgraph",))
    assert "'status': 'done'" in out


# ---- shell commands


def commands_of(code: str) -> list[str]:
    """The commands of a bash block: continuation lines joined, comments and blank lines out."""
    joined = code.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            out.append(" ".join(line.split()))
    return out


SHELL_COVERED = {
    # test_docs_readme.py::test_store_commands_run_twice runs the store section's commands.
    c: "test_docs_readme.py::test_store_commands_run_twice"
    for c in (
        "planfence memory own trip/42/requirements --owner planner",
        'planfence memory put trip/42/requirements --value \'{"destination": "Lisbon"}\' '
        "--as planner",
        "planfence memory head trip/42/requirements",
        "planfence memory keys",
        "planfence memory get ID",
        "planfence memory lineage ID",
    )
}
SHELL_COVERED.update(
    {
        # tests/conformance/test_conformance.py runs the suite per adapter, as JSON.
        "python -m planfence.adapters.conformance": "test_conformance.py (one adapter per test)",
        "python -m planfence.adapters.conformance --adapter adk --json": (
            "test_conformance.py::test_every_adapter_passes_every_case[adk]"
        ),
        # tests/mcp/test_mcp_policy_init.py runs `policy init` against real servers.
        # .ci/run runs the CrewAI section's two commands as written, beside the main tests.
        **dict.fromkeys(
            (
                "python3 -m venv .venv-crewai && .venv-crewai/bin/pip install -q -e '.[crewai]' "
                "pytest pytest-asyncio hypothesis",
                ".venv-crewai/bin/python -m pytest tests/crewai_fence && .venv-crewai/bin/python "
                "-m planfence.adapters.conformance --adapter crewai",
            ),
            ".ci/run (the CrewAI step)",
        ),
        "planfence policy init --from-upstream -- mcp-server-git --repository .": (
            "test_mcp_policy_init.py::test_mcp_server_git"
        ),
        "planfence policy init --file fs.toml --upstream-url http://127.0.0.1:9000/mcp": (
            "test_mcp_policy_init.py::test_an_http_upstream"
        ),
    }
)
SERVES = "serves until stopped (its own tests start and stop it)"
SHELL_SKIPPED = {
    **{
        c: SERVES
        for b in blocks("bash")
        for c in commands_of(b.code)
        if c.startswith(("planfence serve-owner", "planfence proxy", "planfence ui"))
    },
    **{
        c: "a benchmark: minutes of CPU (tests/bench runs each with --quick)"
        for b in blocks("bash")
        for c in commands_of(b.code)
        if c.startswith("planfence bench")
    },
    "pip install 'planfence[tasks]'": "installs packages from the network",
    "export PLANFENCE_LLM_BASE_URL=http://localhost:8000/v1 PLANFENCE_LLM_MODEL=qwen3-8b": (
        "configures an LLM endpoint"
    ),
    "export PLANFENCE_LLM_API_KEY=...": "configures an LLM endpoint",
    "python3 -m venv .venv && .venv/bin/pip install -q -e '.[all,dev]' && "
    ".venv/bin/planfence demo quickstart": "the set-up command: .ci/run runs it on a fresh clone",
    ".venv/bin/python -m pytest -n auto --dist loadfile": "the test command: .ci/run runs it",
}
SHELL_RUN = [
    # Each runs against the temporary store ($PLANFENCE_STORE) of one folder, in this order (the
    # plan `plan create` makes is the PLAN_ID of the commands after it).
    "planfence plan create --as planner --parents ID [ID ...] [--supersedes PLAN_ID] --json",
    "planfence audit [--tool T] [--verdict allow|replan|block] [--json]",
    "planfence demo quickstart [--executor planfence|freshness|eager|allkeys] [--json]",
    "planfence demo workflows --runs 10",
    'planfence check ship_order --args \'{"order_id": "7", "customer": "ana"}\' '
    "--policy policy.toml --plan PLAN_ID",
    'planfence check ship_order --args \'{"order_id": "7", "customer": "ana"}\' '
    "--policy policy.toml --json",
    "planfence keys generate --agent planner --out keys/",
    "planfence keys generate --agent sales --out keys/",
    "planfence keys generate --agent executor --out keys/",
    "planfence memory lineage PLAN_ID --format tree",
    "planfence memory lineage PLAN_ID --format dot | dot -Tsvg > plan.svg",
]


def filled(command: str, ids: dict[str, str]) -> str:
    """The command as a user types it from the README's synopsis: optional `[...]` parts left
    out, placeholders replaced by real ids."""
    while re.search(r"\s*\[[^\[\]]*\]", command):
        command = re.sub(r"\s*\[[^\[\]]*\]", "", command)
    for name, value in ids.items():
        command = re.sub(rf"\b{name}\b", value, command)
    return command


def run_command(command: str, cwd: Path, env: dict[str, str] | None = None, status: int = 0) -> str:
    """Run a README command with this environment's `planfence` (a pipeline runs in bash);
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


def test_shell_commands_run_against_a_temporary_store(tmp_path: Path) -> None:
    ran = [c for b in blocks("bash") for c in commands_of(b.code) if c in SHELL_RUN]
    assert sorted(ran) == sorted(SHELL_RUN)  # each once
    env = {"PLANFENCE_STORE": f"sqlite:///{tmp_path / 'team.db'}"}
    (tmp_path / "policy.toml").write_text(block("The gate", "toml"))
    # The records the commands name: the gate section's order and address, as its snippet has.
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
    for command in SHELL_RUN:
        if "| dot" in command and shutil.which("dot") is None:
            continue  # Graphviz is not part of planfence
        # `planfence check` exits with its verdict: both calls here would be blocked (4)
        status = 4 if command.startswith("planfence check") else 0
        out = run_command(filled(command, ids), tmp_path, env, status)
        if command.startswith("planfence plan create"):
            ids["PLAN_ID"] = json.loads(out)["id"]
        if "--plan PLAN_ID" in command:
            assert "verdict for plan" in out and "incomplete_lineage" in out
            # the refusal's pointer to this very dry run is left out of what it prints
            assert "planfence check" not in out
    assert len(list((tmp_path / "keys").glob("*.jwk"))) == 3
    audit = run_command("planfence audit --json", tmp_path, env)
    # `check` wrote nothing; the demos use their own stores
    assert json.loads(audit)["decisions"] == []
