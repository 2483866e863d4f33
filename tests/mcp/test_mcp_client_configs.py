"""The MCP page's client configurations (Claude Desktop / Cursor / Claude Code `mcpServers`,
VS Code `servers`, Codex `[mcp_servers.NAME]`), taken from the page as written: each starts
the proxy with `--agent`, and its command line parses with planfence's own parser."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from docpages import page_blocks

from planfence.adapters.cli.main import build_parser

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PAGE = "docs/frameworks/mcp.md"
SECTION = "Desktop clients and coding assistants"


def section(lang: str) -> list[str]:
    return [b.code for b in page_blocks(PAGE, lang) if b.heading == SECTION]


def configurations() -> dict[str, dict[str, Any]]:
    """Each client's server entries, by the map that holds them."""
    found: dict[str, dict[str, Any]] = {}
    for block in section("json"):
        data = json.loads(block)
        for name in ("mcpServers", "servers"):
            if name in data:
                found[name] = data[name]
    for block in section("toml"):
        data = tomllib.loads(block)
        if "mcp_servers" in data:
            found["mcp_servers"] = data["mcp_servers"]
    return found


def test_the_page_has_a_configuration_for_each_kind_of_client() -> None:
    assert set(configurations()) == {"mcpServers", "servers", "mcp_servers"}


@pytest.mark.parametrize("kind", ["mcpServers", "servers", "mcp_servers"])
def test_each_configuration_starts_the_proxy_as_an_agent(kind: str) -> None:
    entries = configurations()[kind]
    assert entries, kind
    for name, entry in entries.items():
        if kind == "servers":  # VS Code requires the transport
            assert entry["type"] == "stdio"
        command, argv = entry["command"], entry["args"]
        assert Path(command).name == "planfence" and Path(command).is_absolute(), name
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        assert args.agent == "executor"
        assert Path(args.policy).is_absolute()
        assert args.store.startswith("sqlite:////")  # an absolute path: clients pick the folder
        upstream = [a for a in args.upstream if a != "--"]
        # the upstream's command too: a desktop client's PATH does not find a bare name
        assert Path(upstream[0]).name == "mcp-server-git" and Path(upstream[0]).is_absolute()
        assert args.transport == "stdio"
        assert args.handler is not None


def test_a_configuration_without_agent_is_what_the_page_warns_about() -> None:
    # The parser is no rubber stamp: a mistyped option in a configuration fails to parse.
    argv = list(configurations()["mcpServers"]["git"]["args"])
    argv[argv.index("--agent")] = "--agnet"
    with pytest.raises(SystemExit):
        build_parser(argv).parse_args(argv)
