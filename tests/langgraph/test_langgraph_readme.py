"""The LangGraph page's snippet runs as written (with a scripted chat model)."""

from __future__ import annotations

from typing import Any

from docpages import block
from langchain_core.messages import AIMessage
from langgraph_helpers import ScriptedChatModel, book

PAGE = "docs/frameworks/langgraph.md"


def test_langgraph_page_snippet_runs(capsys: Any) -> None:
    code = block(PAGE, "Add planfence to a LangGraph agent")
    model = ScriptedChatModel(responses=[book("Lisbon", 0), AIMessage(content="Booked.")])
    namespace: dict[str, Any] = {"__name__": "snippet", "model": model}
    exec(compile(code, PAGE, "exec"), namespace)
    try:
        assert "'status': 'done'" in capsys.readouterr().out
        assert namespace["state"]["planfence_outcome"]["reason"] == "current"
    finally:
        namespace["store"].close()
