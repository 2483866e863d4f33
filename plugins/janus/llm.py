"""A small client for any OpenAI-compatible chat-completions endpoint (httpx, async).

Retries transport errors, 429 and 5xx with exponential backoff, runs batches with bounded
concurrency, and stops at a call or token budget. Configure from the environment with
`LLMSettings.from_env()`:

    PLANFENCE_LLM_BASE_URL   e.g. http://127.0.0.1:8000/v1 (required)
    PLANFENCE_LLM_MODEL      model name sent in each request (required)
    PLANFENCE_LLM_API_KEY    bearer token (optional)
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import httpx

from .errors import (
    JanusConfigError,
    LLMBudgetExceededError,
    LLMResponseError,
    LLMUnavailableError,
)

ENV_BASE_URL = "PLANFENCE_LLM_BASE_URL"
ENV_MODEL = "PLANFENCE_LLM_MODEL"
ENV_API_KEY = "PLANFENCE_LLM_API_KEY"

Message = Mapping[str, str]
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class LLMSettings:
    """Endpoint, sampling and cost limits of one client."""

    base_url: str
    model: str
    api_key: str | None = None
    temperature: float = 0.0
    max_tokens: int = 1024
    timeout: float = 60.0
    max_retries: int = 3
    backoff: float = 0.5
    concurrency: int = 4
    max_calls: int | None = None
    max_total_tokens: int | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> LLMSettings:
        """Settings from PLANFENCE_LLM_* variables.

        Raises:
            JanusConfigError: the base URL or the model is not set.
        """
        env = os.environ if environ is None else environ
        base_url = env.get(ENV_BASE_URL, "").strip()
        model = env.get(ENV_MODEL, "").strip()
        if not base_url or not model:
            raise JanusConfigError(
                f"set {ENV_BASE_URL} and {ENV_MODEL} (and {ENV_API_KEY} if the endpoint needs "
                "one) to use an LLM"
            )
        settings = cls(base_url=base_url, model=model, api_key=env.get(ENV_API_KEY) or None)
        return replace(settings, **overrides) if overrides else settings


@dataclass
class Usage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ChatClient:
    """OpenAI-compatible chat client. Use as `async with ChatClient(settings) as llm:`."""

    def __init__(
        self,
        settings: LLMSettings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.usage = Usage()
        self._sleep = sleep
        headers = {"Content-Type": "application/json"}
        if settings.api_key:
            headers["Authorization"] = f"Bearer {settings.api_key}"
        self._http = httpx.AsyncClient(
            base_url=settings.base_url.rstrip("/") + "/",
            headers=headers,
            timeout=settings.timeout,
            transport=transport,
        )
        self._limit = asyncio.Semaphore(max(1, settings.concurrency))

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def _reserve(self) -> None:
        s = self.settings
        if s.max_calls is not None and self.usage.calls >= s.max_calls:
            raise LLMBudgetExceededError(f"LLM call budget of {s.max_calls} calls is spent")
        if s.max_total_tokens is not None and self.usage.total_tokens >= s.max_total_tokens:
            raise LLMBudgetExceededError(
                f"LLM token budget of {s.max_total_tokens} tokens is spent"
            )
        self.usage.calls += 1

    async def chat(self, messages: Sequence[Message]) -> str:
        """The assistant text for one conversation.

        Raises:
            LLMBudgetExceededError, LLMUnavailableError, LLMResponseError.
        """
        body = {
            "model": self.settings.model,
            "messages": [dict(m) for m in messages],
            "temperature": self.settings.temperature,
            "max_tokens": self.settings.max_tokens,
        }
        async with self._limit:
            last: str = ""
            for attempt in range(self.settings.max_retries + 1):
                if attempt:
                    await self._sleep(self.settings.backoff * 2 ** (attempt - 1))
                self._reserve()
                try:
                    response = await self._http.post("chat/completions", json=body)
                except httpx.TransportError as exc:
                    last = f"{type(exc).__name__}: {exc}"
                    continue
                if response.status_code == 429 or response.status_code >= 500:
                    last = f"HTTP {response.status_code}"
                    continue
                if response.status_code >= 400:
                    raise LLMResponseError(
                        f"chat endpoint refused the request: HTTP {response.status_code} "
                        f"{response.text[:200]}"
                    )
                return self._parse(response)
        raise LLMUnavailableError(
            f"chat endpoint failed {self.settings.max_retries + 1} times; last: {last}"
        )

    def _parse(self, response: httpx.Response) -> str:
        try:
            data = response.json()
            content = data["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise LLMResponseError(f"not a chat completion: {response.text[:200]!r}") from None
        if not isinstance(content, str):
            raise LLMResponseError(f"chat completion without text content: {content!r}")
        usage = data.get("usage") or {}
        if isinstance(usage, dict):
            self.usage.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.usage.completion_tokens += int(usage.get("completion_tokens") or 0)
        return content

    async def chat_many(self, conversations: Sequence[Sequence[Message]]) -> list[str]:
        """Answers for many conversations, in order, at most `concurrency` in flight."""
        return list(await asyncio.gather(*(self.chat(c) for c in conversations)))
