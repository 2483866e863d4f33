"""The chat client (retries, budget, batching, errors) and the LLM evaluator."""

from __future__ import annotations

import httpx
import pytest
from janus_scripted_llm import ScriptedLLM

from planfence.plugins.janus import JanusConfigError, LLMEvaluator, Task
from planfence.plugins.janus.errors import (
    LLMBudgetExceededError,
    LLMResponseError,
    LLMUnavailableError,
)
from planfence.plugins.janus.evaluators import check_answer, extract_answer
from planfence.plugins.janus.llm import ChatClient, LLMSettings


async def no_sleep(_: float) -> None:
    return None


def settings(**kw: object) -> LLMSettings:
    return LLMSettings(base_url="http://llm.test/v1", model="m", backoff=0.0, **kw)  # type: ignore[arg-type]


async def test_chat_sends_an_openai_request(scripted: ScriptedLLM, llm: ChatClient) -> None:
    scripted.replies = ["hello"]
    assert await llm.chat([{"role": "user", "content": "hi"}]) == "hello"
    body = scripted.requests[0]
    assert body["model"] == "scripted" and body["messages"][0]["content"] == "hi"
    assert body["temperature"] == 0.0
    assert llm.usage.calls == 1 and llm.usage.total_tokens == 15


async def test_retries_server_errors_and_rate_limits(
    scripted: ScriptedLLM, llm: ChatClient
) -> None:
    scripted.replies = [500, 429, "ok"]
    assert await llm.chat([{"role": "user", "content": "x"}]) == "ok"
    assert len(scripted.requests) == 3


async def test_gives_up_after_the_retries(scripted: ScriptedLLM, llm: ChatClient) -> None:
    scripted.replies = [503, 503, 503, 503, "too late"]
    with pytest.raises(LLMUnavailableError, match="4 times"):
        await llm.chat([{"role": "user", "content": "x"}])


async def test_client_errors_are_not_retried(scripted: ScriptedLLM, llm: ChatClient) -> None:
    scripted.replies = [400, "never"]
    with pytest.raises(LLMResponseError, match="HTTP 400"):
        await llm.chat([{"role": "user", "content": "x"}])
    assert len(scripted.requests) == 1


async def test_transport_errors_are_retried() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) < 3:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json={"choices": [{"message": {"content": "up"}}]})

    async with ChatClient(settings(), transport=httpx.MockTransport(handler), sleep=no_sleep) as c:
        assert await c.chat([{"role": "user", "content": "x"}]) == "up"
    assert len(calls) == 3


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(200, text="not json"),
        httpx.Response(200, json={"choices": []}),
        httpx.Response(200, json={"choices": [{"message": {"content": None}}]}),
    ],
)
async def test_malformed_completions(response: httpx.Response) -> None:
    transport = httpx.MockTransport(lambda _: response)
    async with ChatClient(settings(), transport=transport, sleep=no_sleep) as c:
        with pytest.raises(LLMResponseError):
            await c.chat([{"role": "user", "content": "x"}])


async def test_call_budget(scripted: ScriptedLLM) -> None:
    scripted.default = "fine"
    async with ChatClient(settings(max_calls=2), transport=scripted.transport()) as c:
        await c.chat([{"role": "user", "content": "1"}])
        await c.chat([{"role": "user", "content": "2"}])
        with pytest.raises(LLMBudgetExceededError):
            await c.chat([{"role": "user", "content": "3"}])
    assert len(scripted.requests) == 2


async def test_chat_many_keeps_order(scripted: ScriptedLLM) -> None:
    scripted.default = lambda body: body["messages"][-1]["content"].upper()
    async with ChatClient(settings(concurrency=2), transport=scripted.transport()) as c:
        out = await c.chat_many([[{"role": "user", "content": w}] for w in "abcde"])
    assert out == list("ABCDE")


def test_settings_from_env() -> None:
    env = {
        "PLANFENCE_LLM_BASE_URL": "http://x/v1",
        "PLANFENCE_LLM_MODEL": "qwen",
        "PLANFENCE_LLM_API_KEY": "k",
    }
    s = LLMSettings.from_env(env, max_calls=9)
    assert (s.base_url, s.model, s.api_key, s.max_calls) == ("http://x/v1", "qwen", "k", 9)
    with pytest.raises(JanusConfigError, match="PLANFENCE_LLM_BASE_URL"):
        LLMSettings.from_env({"PLANFENCE_LLM_MODEL": "qwen"})


async def test_api_key_is_sent_as_bearer() -> None:
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(200, json={"choices": [{"message": {"content": "x"}}]})

    async with ChatClient(settings(api_key="sekret"), transport=httpx.MockTransport(handler)) as c:
        await c.chat([{"role": "user", "content": "x"}])
    assert seen == ["Bearer sekret"]


@pytest.mark.parametrize(
    ("output", "reference", "ok"),
    [
        ("Reasoning...\nANSWER: Paris", "paris", True),
        ("answer: 42.0", "42", True),
        ("Final answer: 3,5", "3.5", True),
        ("ANSWER: 41", "42", False),
        ("thinking\nLisbon.", "Lisbon", True),
        ("just Lisbon.", "Lisbon", False),
        ("ANSWER: x", None, False),
    ],
)
def test_check_answer(output: str, reference: str | None, ok: bool) -> None:
    assert check_answer(output, reference) is ok


def test_extract_answer_takes_the_last_answer_line() -> None:
    assert extract_answer("ANSWER: 1\nwait\nANSWER: 2") == "2"
    assert extract_answer("") == ""


async def test_llm_evaluator_puts_memory_in_the_prompt(
    scripted: ScriptedLLM, llm: ChatClient
) -> None:
    scripted.default = lambda body: (
        "ANSWER: 4" if "add the units" in body["messages"][-1]["content"] else "ANSWER: 5"
    )
    evaluator = LLMEvaluator(llm)
    tasks = [Task.create("2+2?", "4"), Task.create("1+3?", "4")]
    assert await evaluator.evaluate("add the units", tasks) == [True, True]
    assert await evaluator.evaluate("", tasks) == [False, False]
    attempt = await evaluator.solve({"rules": [{"text": "add the units", "count": 2}]}, tasks[0])
    assert attempt.correct and attempt.output == "ANSWER: 4"
    assert "1. add the units" in scripted.user_prompts()[-1]
