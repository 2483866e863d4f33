"""A scripted model for DSPy: a `dspy.LM` over a custom engine whose answers come from a
function of what the model is shown (DSPy's chat format)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import dspy
from dspy.lm15 import Message, Request, Response, TextPart, Usage

_FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]\n")

Answer = Callable[[dict[str, str]], dict[str, Any]]


def fields(request: Request) -> dict[str, str]:
    """The `[[ ## name ## ]]` sections of the request's last message (what the model was
    shown on this call: its inputs and the trajectory so far)."""
    parts = _FIELD.split(request.messages[-1].text or "")
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}


def _response(out: dict[str, Any]) -> Response:
    body = "".join(f"[[ ## {k} ## ]]\n{_text(v)}\n\n" for k, v in out.items())
    message = Message.assistant([TextPart(body + "[[ ## completed ## ]]")])
    return Response(id=None, model="scripted", message=message, finish_reason="stop", usage=Usage())


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


class Engine:
    """Each model call: `answer(fields shown)` for a ReAct step, `final` for the extraction."""

    def __init__(self, answer: Answer, final: str = "Done.") -> None:
        self.answer, self.final = answer, final
        self.shown: list[dict[str, str]] = []

    def _complete(self, request: Request) -> Response:
        system = request.system if isinstance(request.system, str) else ""
        if "next_tool_name" not in system:
            return _response({"reasoning": "done", "answer": self.final})
        shown = fields(request)
        self.shown.append(shown)
        return _response(self.answer(shown))

    def complete(self, request: Request) -> Response:
        return self._complete(request)

    def stream(self, request: Request) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        return None


class AsyncEngine:
    def __init__(self, sync: Engine) -> None:
        self.sync = sync

    async def complete(self, request: Request) -> Response:
        return self.sync.complete(request)

    def stream(self, request: Request) -> Any:
        raise NotImplementedError

    async def aclose(self) -> None:
        return None


def scripted(answer: Answer, final: str = "Done.") -> tuple[Any, Engine]:
    """A `dspy.LM` answering with `answer`, and its engine (which keeps what it was shown)."""
    engine = Engine(answer, final)
    lm = dspy.LM("scripted", engine=engine, async_engine=AsyncEngine(engine), cache=False)
    return lm, engine


def call(tool: str, **args: Any) -> dict[str, Any]:
    return {"next_thought": "act", "next_tool_name": tool, "next_tool_args": args}


FINISH = {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}}
