"""How a refusal is fitted to the tool it refuses (no server needed), and how the TypeScript
harness behaves without Node."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
import ts_harness

from planfence.adapters.mcp.catalog import ToolCatalog
from planfence.adapters.mcp.results import ProxyFailure, fit_to_tool, to_wire_result
from planfence.plugins.gate import Verdict

TOOLS = [
    {"name": "typed", "inputSchema": {}, "outputSchema": {"type": "object"}},
    {"name": "text", "inputSchema": {}},
]


class FakeUpstream:
    request_timeout: float | None = 5.0

    def __init__(self, *, down: bool = False) -> None:
        self.down = down
        self.lists = 0

    async def request(
        self, method: str, params: Mapping[str, Any] | None, *, read_timeout: float | None = None
    ) -> dict[str, Any]:
        assert method == "tools/list"
        self.lists += 1
        if self.down:
            raise OSError("gone")
        if params and params.get("cursor") == "2":
            return {"tools": TOOLS[1:]}
        return {"tools": TOOLS[:1], "nextCursor": "2"}


REFUSAL = to_wire_result(Verdict("block", "missing_plan", "typed", None, message="no plan"))


async def test_refusals_carry_structured_content_only_for_tools_without_a_schema() -> None:
    upstream = FakeUpstream()
    catalog = ToolCatalog(upstream)
    typed = await fit_to_tool(REFUSAL, "typed", catalog)
    assert upstream.lists == 2  # every page, listed once, at the first refusal
    payload = json.loads(typed["content"][0]["text"])
    assert typed["_meta"]["dev.planfence/refusal"] == payload
    assert payload["planfence"]["reason"] == "missing_plan"
    assert "structuredContent" not in typed
    assert typed["isError"] is True
    text = await fit_to_tool(REFUSAL, "text", catalog)
    assert text["structuredContent"] == payload
    # A tool the upstream does not list has no schema either.
    assert "structuredContent" in await fit_to_tool(REFUSAL, "ghost", catalog)
    assert upstream.lists == 2


async def test_when_the_schema_cannot_be_known_structured_content_is_left_out() -> None:
    failure = to_wire_result(ProxyFailure("upstream_unavailable", "text", "gone"))
    fitted = await fit_to_tool(failure, "text", ToolCatalog(FakeUpstream(down=True)))
    assert "structuredContent" not in fitted
    assert fitted["_meta"]["dev.planfence/refusal"]["planfence"]["error"] == "upstream_unavailable"


async def test_the_upstreams_own_results_pass_unchanged() -> None:
    upstream = FakeUpstream()
    catalog = ToolCatalog(upstream)
    own = {"content": [], "structuredContent": {"x": 1}, "isError": True, "_meta": {"a.b/c": 1}}
    assert await fit_to_tool(own, "typed", catalog) is own
    assert upstream.lists == 0


def test_tools_lists_passing_through_teach_the_catalog() -> None:
    catalog = ToolCatalog(FakeUpstream(down=True))
    catalog.observe({"tools": TOOLS})
    assert catalog.loaded and set(catalog.tools) == {"typed", "text"}


def test_without_node_the_typescript_tests_skip_but_fail_under_ci(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ts_harness.shutil, "which", lambda name: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="need Node"):
        ts_harness.install()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        ts_harness.install()


def test_the_refusal_body_is_the_gates_wire_model() -> None:
    from planfence.plugins.gate import RefusalPayload, parse_payload

    body = REFUSAL["structuredContent"]["planfence"]
    assert parse_payload(body) == RefusalPayload.of(
        Verdict("block", "missing_plan", "typed", None, message="no plan")
    )
