"""`planfence policy init`: a commented first policy from real servers' tool listings
(`mcp-server-time`, the reference filesystem server, `mcp-server-git`, and the test server over
streamable HTTP), which loads with `Policy` and covers every tool the server lists."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import UPSTREAM, background, free_port, wait_for_port
from ts_harness import TS_DIR, install

from planfence.adapters.mcp.scaffold import scaffold_policy
from planfence.plugins.gate import Policy

FS_SERVER = TS_DIR / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist"


def planfence(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "planfence.adapters.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )


def init(out: Path, *upstream: str) -> Policy:
    """Run `policy init` into `out`; the policy it wrote, checked to load and to be commented."""
    done = planfence("policy", "init", "--file", str(out), "--json", *upstream)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    policy = Policy.load(out)
    text = out.read_text()
    entries = re.findall(r"^\[tools\.", text, re.M)
    assert len(entries) == summary["tools"] == len(policy.tools)
    # Every entry carries a suggestion for the author to confirm, right above it.
    assert text.count("# CONFIRM:") == len(entries)
    assert summary["ungated"] == sorted(n for n, t in policy.tools.items() if t.ungated)
    return policy


def keys(policy: Policy, tool: str) -> list[str]:
    spec = policy.get(tool)
    assert spec is not None and not spec.ungated, tool
    return [t.text for t in spec.depends_on]


def check_covers(out: Path, *upstream: str) -> None:
    flag = ["--tools-from-upstream"] if "--upstream-url" not in upstream else []
    done = planfence("policy", "check", str(out), *flag, *upstream)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every upstream tool is declared" in done.stdout


def test_mcp_server_time(tmp_path: Path) -> None:
    pytest.importorskip("mcp_server_time")
    out = tmp_path / "policy.toml"
    command = ["--from-upstream", "--", sys.executable, "-m", "mcp_server_time"]
    policy = init(out, *command)
    # Both tools are annotated readOnlyHint: both suggested ungated.
    assert {n: t.ungated for n, t in policy.tools.items()} == {
        "get_current_time": True,
        "convert_time": True,
    }
    assert "readOnlyHint" in out.read_text()
    check_covers(out, "--", sys.executable, "-m", "mcp_server_time")


def test_the_filesystem_server(tmp_path: Path) -> None:
    node = install()
    out = tmp_path / "policy.toml"
    command = [node, str(FS_SERVER / "index.js"), str(tmp_path)]
    policy = init(out, "--from-upstream", "--", *command)
    assert policy.tools["read_text_file"].ungated and policy.tools["list_directory"].ungated
    server = keys(policy, "write_file")[0].split("/")[0]
    assert keys(policy, "write_file") == [f"{server}/{{path:path}}"]  # content: the payload
    assert keys(policy, "move_file") == [
        f"{server}/{{source:path}}",
        f"{server}/{{destination:path}}",
    ]
    assert keys(policy, "edit_file") == [f"{server}/{{path:path}}"]  # edits: an array
    # An absolute path, as the server takes them, fills the suggested key.
    (key,) = policy.get("write_file").scope({"path": "/srv/notes/a.txt", "content": "x"})
    assert key == f"{server}/_/srv/notes/a.txt"
    check_covers(out, "--", *command)


def test_mcp_server_git(tmp_path: Path) -> None:
    pytest.importorskip("mcp_server_git")
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    out = tmp_path / "policy.toml"
    command = [sys.executable, "-m", "mcp_server_git", "--repository", str(repo)]
    policy = init(out, "--from-upstream", "--", *command)
    assert policy.tools["git_status"].ungated and policy.tools["git_log"].ungated
    assert keys(policy, "git_commit") == ["mcp-git/{repo_path:path}"]  # message: the payload
    assert keys(policy, "git_checkout") == [
        "mcp-git/{repo_path:path}",
        "mcp-git/branch_name/{branch_name:enc}",
    ]
    assert "base_branch" in out.read_text()  # optional: named, not in a key
    check_covers(out, "--", *command)


async def test_an_http_upstream(tmp_path: Path) -> None:
    port = free_port()
    upstream = [sys.executable, UPSTREAM, "--effects", str(tmp_path / "effects.jsonl")]
    upstream += ["--transport", "http", "--port", str(port)]
    url = f"http://127.0.0.1:{port}/mcp"
    async with background(upstream, tmp_path / "upstream.log"):
        await wait_for_port(port)
        out = tmp_path / "policy.toml"
        policy = init(out, "--upstream-url", url)
        # A trip's destination is not a path: the tool says nothing of files.
        server = keys(policy, "book")[0].split("/")[0]
        assert keys(policy, "book") == [
            f"{server}/destination/{{destination:enc}}",
            f"{server}/trip/{{trip:enc}}",
        ]
        check_covers(out, "--upstream-url", url)


def test_an_existing_file_is_kept_without_force(tmp_path: Path) -> None:
    out = tmp_path / "policy.toml"
    out.write_text("# mine\n")
    # The command would fail to start; the existing file is refused before it is tried.
    done = planfence("policy", "init", "--file", str(out), "--from-upstream", "--", "no-such-cmd")
    assert done.returncode == 1
    assert done.stderr.strip() == f"planfence: error: {out} exists: give --force to overwrite it"
    assert out.read_text() == "# mine\n"

    pytest.importorskip("mcp_server_time")
    command = ["--from-upstream", "--", sys.executable, "-m", "mcp_server_time"]
    done = planfence("policy", "init", "--file", str(out), "--force", *command)
    assert done.returncode == 0, done.stderr
    assert "[tools.get_current_time]" in out.read_text()
    Policy.load(out)


def test_usage_errors(tmp_path: Path) -> None:
    for argv in (
        ["policy", "init"],
        ["policy", "init", "--from-upstream"],
        ["policy", "init", "--upstream-url", "http://127.0.0.1:1/mcp", "--", "cmd"],
    ):
        done = planfence(*argv, cwd=tmp_path)
        assert done.returncode == 2, (argv, done.stderr)
        assert done.stderr.startswith("planfence: error: ") and done.stderr.count("\n") == 1
    assert not (tmp_path / "policy.toml").exists()


def wire_tool(
    name: str, props: dict[str, Any], required: list[str], **extra: Any
) -> dict[str, Any]:
    schema = {"type": "object", "properties": props, "required": required}
    return {"name": name, "inputSchema": schema, **extra}


def test_odd_tool_names_and_arguments_still_load() -> None:
    text = scaffold_policy(
        {"name": "Weird Server!", "version": "1"},
        [
            wire_tool("dotted.name", {"q": {"type": "string"}}, ["q"]),
            wire_tool("no_args", {}, []),
            wire_tool(
                "count", {"n": {"type": "integer"}, "flag": {"type": "boolean"}}, ["n", "flag"]
            ),
            wire_tool("bad-arg", {"two words": {"type": "string"}}, ["two words"]),
            wire_tool("ro", {}, [], annotations={"readOnlyHint": True}),
        ],
    )
    policy = Policy.from_toml(text)
    assert set(policy.tools) == {"dotted.name", "no_args", "count", "bad-arg", "ro"}
    assert keys(policy, "dotted.name") == ["Weird-Server/q/{q:enc}"]
    assert keys(policy, "no_args") == ["Weird-Server/no_args"]
    assert keys(policy, "count") == ["Weird-Server/n/{n}"]
    assert keys(policy, "bad-arg") == ["Weird-Server/bad-arg"]
    assert policy.tools["ro"].ungated
    with pytest.raises(ValueError, match="lists no tools"):
        scaffold_policy(None, [])
