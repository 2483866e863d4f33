"""The README's AutoGen snippet runs as written (with scripted model clients)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from autogen_ext.models.replay import ReplayChatCompletionClient
from autogen_helpers import MODEL_INFO, tool_call

README = Path(__file__).resolve().parents[2] / "README.md"


def snippets(heading: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"### {heading}\n")
    end = text.find("\n### ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_autogen_readme_snippet_runs(capsys: Any) -> None:
    [code] = snippets("Add planfence to an AutoGen team")
    namespace: dict[str, Any] = {
        "__name__": "readme",
        "planner_client": ReplayChatCompletionClient(
            ["Plan: fly to Lisbon."], model_info=MODEL_INFO
        ),
        "executor_client": ReplayChatCompletionClient(
            [tool_call("book_flight", {"destination": "Lisbon"})], model_info=MODEL_INFO
        ),
    }
    exec(compile(code, str(README), "exec"), namespace)
    try:
        assert "status='done'" in capsys.readouterr().out
        assert namespace["result"].stop_reason == "planfence: book_flight ran (current)"
    finally:
        namespace["store"].close()
