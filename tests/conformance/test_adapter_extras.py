"""Each new framework adapter imports its framework only when used, and without it fails with
the exact install line (run in a subprocess where the framework cannot be imported)."""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = [
    ("planfence.adapters.pydantic_ai", "PlanfenceCapability", "pydantic_ai", "pydantic-ai"),
    ("planfence.adapters.openai_agents", "PlanfenceGuardrail", "agents", "openai-agents"),
    ("planfence.adapters.adk", "PlanfencePlugin", "google.adk", "adk"),
    ("planfence.adapters.maf", "PlanfenceFunctionMiddleware", "agent_framework", "maf"),
    ("planfence.adapters.a2a", "PlanfenceAgentExecutor", "a2a", "a2a"),
    ("planfence.adapters.a2a", "PlanfenceInterceptor", "a2a.client", "a2a"),
    ("planfence.adapters.crewai", "PlanfenceHooks", "crewai", "crewai"),
    ("planfence.adapters.dspy", "PlanfenceReAct", "dspy", "dspy"),
    ("planfence.adapters.semantic_kernel", "PlanfenceFilter", "semantic_kernel", "semantic-kernel"),
    ("planfence.adapters.llamaindex", "PlanfenceMemoryBlock", "llama_index", "llamaindex"),
    ("planfence.adapters.haystack", "PlanfenceHook", "haystack", "haystack"),
    ("planfence.adapters.strands", "PlanfenceHookProvider", "strands", "strands"),
    ("planfence.adapters.agno", "PlanfenceToolHook", "agno", "agno"),
]

PROGRAM = """
import sys
sys.modules[{blocked!r}] = None  # the framework is not installed
import {package} as adapter  # importing the adapter package needs nothing
try:
    getattr(adapter, {name!r})
except Exception as exc:
    print(type(exc).__name__, exc)
"""


@pytest.mark.parametrize(("package", "name", "blocked", "extra"), CASES)
def test_a_missing_framework_fails_at_use_with_the_install_line(
    package: str, name: str, blocked: str, extra: str
) -> None:
    code = PROGRAM.format(blocked=blocked, package=package, name=name)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("MissingExtraError"), done.stdout
    assert f"pip install 'planfence[{extra}]'" in done.stdout
