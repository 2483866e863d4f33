"""`@modelcontextprotocol/server-filesystem` (the reference filesystem server, on Node) behind
the stdio proxy, driven by the official TypeScript client offering roots as desktop clients do;
and a TypeScript-SDK server that asks its client for input as soon as it starts.

The server asks its client for roots (`roots/list`) as soon as it is initialized, outside any
request: through a stdio proxy, its one client must get that question. Its `write_file` takes
absolute paths, gated here with `{path:path}`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import World, connect, plan_meta
from test_mcp_relay import Asked
from ts_harness import TS_DIR, install, run_client

from planfence.plugins.gate import Policy, create_plan

FS_SERVER = TS_DIR / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist"


@pytest.fixture(scope="module")
def node() -> str:
    found = install()
    if not (FS_SERVER / "index.js").exists():
        pytest.fail(f"npm ci did not install the filesystem server into {FS_SERVER}")
    return found


def _text(entry: dict[str, Any]) -> str:
    assert entry["ok"], entry.get("error")
    return "\n".join(c.get("text", "") for c in entry["result"].get("content", []))


def _roots_scenario(command: str, args: list[str], root: Path) -> dict[str, Any]:
    return {
        "transport": "stdio",
        "command": command,
        "args": args,
        "env": dict(os.environ),
        "roots": [{"uri": root.as_uri(), "name": "work"}],
        "calls": [{"name": "list_allowed_directories", "until": str(root), "tries": 50}],
    }


async def test_the_upstreams_roots_request_reaches_the_one_stdio_client(
    world: World, node: str, tmp_path: Path
) -> None:
    root = (tmp_path / "work").resolve()
    root.mkdir()
    world.policy.write_text("[tools.list_allowed_directories]\nungated = true\n")
    server = [node, str(FS_SERVER / "index.js")]  # no directory arguments: roots only

    direct = await run_client(node, _roots_scenario(node, server[1:], root))
    assert str(root) in _text(direct["results"][0])  # the client and server agree directly

    proxied = await run_client(
        node, _roots_scenario(sys.executable, world.proxy_args(upstream=server), root)
    )
    listing = _text(proxied["results"][0])
    assert listing.splitlines()[1:] == [str(root)], listing


async def test_changed_roots_reach_the_upstream_through_the_proxy(
    world: World, node: str, tmp_path: Path
) -> None:
    first, second = (tmp_path / "first").resolve(), (tmp_path / "second").resolve()
    first.mkdir()
    second.mkdir()
    world.policy.write_text("[tools.list_allowed_directories]\nungated = true\n")
    server = [node, str(FS_SERVER / "index.js")]
    scenario = _roots_scenario(sys.executable, world.proxy_args(upstream=server), first)
    listing = {"name": "list_allowed_directories", "tries": 50}
    scenario["calls"] = [
        {**listing, "until": str(first)},
        # The client's roots change: the server hears of it and asks again, outside any request.
        {"setRoots": [{"uri": second.as_uri(), "name": "second"}]},
        {**listing, "until": str(second)},
    ]
    report = await run_client(node, scenario)
    before, after = (_text(r).splitlines()[1:] for r in report["results"])
    assert (before, after) == ([str(first)], [str(second)])


async def test_write_file_is_gated_by_its_absolute_path(
    world: World, node: str, tmp_path: Path
) -> None:
    root = (tmp_path / "work").resolve()
    (root / "notes").mkdir(parents=True)
    target = root / "notes" / "a.txt"
    key = "fs" + "/_" + str(target)  # `/srv/x` fills `{path:path}` as `_/srv/x`
    policy = '[tools.write_file]\ndepends_on = ["fs/{path:path}"]\n'
    assert Policy.from_toml(policy).get("write_file").scope({"path": str(target)}) == (key,)
    world.policy.write_text(policy + "[tools.list_allowed_directories]\nungated = true\n")
    await world.store.own(key, "editor")
    brief = await world.store.put(key, {"may_write": True}, author="editor")
    plan = await create_plan(world.store, author="writer", parents=[brief.id])
    meta = plan_meta(plan)

    def write(content: str) -> dict[str, Any]:
        return {
            "name": "write_file",
            "arguments": {"path": str(target), "content": content},
            "meta": meta,
        }

    changed = [
        sys.executable,
        str(Path(__file__).parent / "owner_put.py"),
        world.store_url,
        key,
        '{"may_write": false}',
        "editor",
    ]
    scenario = {
        **_roots_scenario(
            sys.executable,
            world.proxy_args(upstream=[node, str(FS_SERVER / "index.js"), str(root)]),
            root,
        ),
        "calls": [write("first"), {"run": changed}, write("second")],
    }
    report = await run_client(node, scenario)
    allowed, stale = report["results"]
    assert not allowed["result"].get("isError"), allowed
    assert allowed["result"]["_meta"]["dev.planfence/decision"]["verdict"] == "allow"
    body = stale["result"]["_meta"]["dev.planfence/refusal"]["planfence"]
    assert body["verdict"] in ("replan", "block") and body["reason"] == "stale_dependencies", body
    assert target.read_text() == "first"  # the refused write never reached the server


async def test_questions_asked_at_start_reach_the_one_stdio_client(world: World, node: str) -> None:
    # Elicitation, sampling and roots, each asked outside any request (a handshake-era client
    # has all three), go to the proxy's one client, which answers them.
    world.policy.write_text("[tools.answers]\nungated = true\n")
    upstream = [node, str(TS_DIR / "asks_on_start.mjs")]
    asked = Asked()
    params = world.proxy_params(upstream=upstream)
    async with connect(params, "legacy", **asked.callbacks()) as client:
        result = await client.call_tool("answers", {})
    answers = json.loads(result.content[0].text)
    assert answers["elicitation"] == {"action": "accept", "content": {"answer": "Lisbon"}}
    assert answers["sampling"]["content"]["text"] == "a line about the sea"
    assert answers["roots"]["roots"][0]["uri"] == "file:///work/trip"
    assert (asked.elicited, asked.sampled, asked.roots_asked) == (
        ["Which city?"],
        ["Write one line about the sea."],
        1,
    )
