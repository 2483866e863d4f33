"""Fixtures for the MCP proxy tests (helpers live in mcp_helpers.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp_helpers import World, make_world


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    w = await make_world(tmp_path)
    try:
        yield w
    finally:
        await w.store.aclose()
