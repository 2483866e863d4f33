"""Fixtures for the Janus tests: a scripted chat endpoint and a client connected to it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from janus_scripted_llm import ScriptedLLM

from planfence.plugins.janus.llm import ChatClient, LLMSettings


@pytest.fixture
def scripted() -> ScriptedLLM:
    return ScriptedLLM()


async def _no_sleep(_: float) -> None:
    return None


@pytest.fixture
async def llm(scripted: ScriptedLLM) -> AsyncIterator[ChatClient]:
    settings = LLMSettings(base_url="http://llm.test/v1", model="scripted", backoff=0.0)
    async with ChatClient(settings, transport=scripted.transport(), sleep=_no_sleep) as client:
        yield client
