"""The AutoGen page's snippet runs as written (with scripted model clients)."""

from __future__ import annotations

from typing import Any

from autogen_ext.models.replay import ReplayChatCompletionClient
from autogen_helpers import MODEL_INFO, tool_call
from docpages import block

PAGE = "docs/frameworks/autogen.md"


def test_autogen_page_snippet_runs(capsys: Any) -> None:
    code = block(PAGE, "Add planfence to an AutoGen team")
    namespace: dict[str, Any] = {
        "__name__": "snippet",
        "planner_client": ReplayChatCompletionClient(
            ["Plan: fly to Lisbon."], model_info=MODEL_INFO
        ),
        "executor_client": ReplayChatCompletionClient(
            [tool_call("book_flight", {"destination": "Lisbon"})], model_info=MODEL_INFO
        ),
    }
    exec(compile(code, PAGE, "exec"), namespace)
    try:
        assert "status='done'" in capsys.readouterr().out
        assert namespace["result"].stop_reason == "planfence: book_flight ran (current)"
    finally:
        namespace["store"].close()
