"""The README's LangGraph snippet runs as written (with a scripted chat model)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage
from langgraph_helpers import ScriptedChatModel, book

README = Path(__file__).resolve().parents[2] / "README.md"


def snippets(heading: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"### {heading}\n")
    end = text.find("\n### ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_langgraph_readme_snippet_runs(capsys: Any) -> None:
    [code] = snippets("Add planfence to a LangGraph agent")
    model = ScriptedChatModel(responses=[book("Lisbon", 0), AIMessage(content="Booked.")])
    namespace: dict[str, Any] = {"__name__": "readme", "model": model}
    exec(compile(code, str(README), "exec"), namespace)
    try:
        assert "'status': 'done'" in capsys.readouterr().out
        assert namespace["state"]["planfence_outcome"]["reason"] == "current"
    finally:
        namespace["store"].close()
