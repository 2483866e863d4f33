"""langchain-mcp-adapters needs the MCP SDK 1.x and installs in a venv of its own
(`.venv-langchain_mcp`); where it is missing these tests are not collected."""

from __future__ import annotations

import importlib.util

collect_ignore_glob = (
    [] if importlib.util.find_spec("langchain_mcp_adapters") is not None else ["test_*.py"]
)
