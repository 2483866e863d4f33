"""A scripted OpenAI-compatible chat endpoint: a real ASGI app served in-process over httpx."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

Reply = str | int | Callable[[dict[str, Any]], str]


@dataclass
class ScriptedLLM:
    """Answers each chat request with the next scripted reply (an int is an HTTP error)."""

    replies: list[Reply] = field(default_factory=list)
    default: Reply | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)

    async def endpoint(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.requests.append(body)
        reply = self.replies.pop(0) if self.replies else self.default
        if reply is None:
            return JSONResponse({"error": "script exhausted"}, status_code=400)
        if isinstance(reply, int):
            return JSONResponse({"error": "scripted failure"}, status_code=reply)
        text = reply(body) if callable(reply) else reply
        return JSONResponse(
            {
                "choices": [{"message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5},
            }
        )

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self.endpoint, methods=["POST"])])

    def transport(self) -> httpx.ASGITransport:
        return httpx.ASGITransport(app=self.app())

    def user_prompts(self) -> list[str]:
        return [r["messages"][-1]["content"] for r in self.requests]
