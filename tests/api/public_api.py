"""The public API as text, from griffe's static reading of the source: every name in a public
package's `__all__`, with its kind and signature, and for a class its public methods and
properties. `test_public_api.py` compares it with `public_api.txt`, so that a change to the API is
a deliberate diff:

    python tests/api/public_api.py --write      # after reviewing `git diff`
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import griffe

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = Path(__file__).with_name("public_api.txt")
TOP_LEVEL = ("shared_memory", "plugins", "adapters", "demos")
# The packages (and the one module) whose `__all__` is the product's API.
PUBLIC = (
    "planfence.shared_memory",
    "planfence.shared_memory.conformance",
    "planfence.plugins.gate",
    "planfence.plugins.janus",
    "planfence.fence",
    "planfence.adapters.base",
    "planfence.adapters.conformance",
    "planfence.adapters.owner_service",
    "planfence.adapters.a2a",
    "planfence.adapters.agno",
    "planfence.adapters.adk",
    "planfence.adapters.autogen",
    "planfence.adapters.claude_agent_sdk",
    "planfence.adapters.claude_agent_sdk.testing",
    "planfence.adapters.crewai",
    "planfence.adapters.dspy",
    "planfence.adapters.haystack",
    "planfence.adapters.langgraph",
    "planfence.adapters.llamaindex",
    "planfence.adapters.langchain_mcp",
    "planfence.adapters.maf",
    "planfence.adapters.mem0",
    "planfence.adapters.mcp",
    "planfence.adapters.openai_agents",
    "planfence.adapters.pydantic_ai",
    "planfence.adapters.semantic_kernel",
    "planfence.adapters.strands",
    "planfence.adapters.ui",
)


def _signature(fn: griffe.Function) -> str:
    params = []
    star = False
    given = list(fn.parameters)
    for i, p in enumerate(given):
        if p.name in ("self", "cls") and fn.parent is not None and fn.parent.is_class:
            continue
        kind = p.kind.value if p.kind else ""
        if kind == "keyword-only" and not star:
            params.append("*")
            star = True
        text = p.name
        if kind == "variadic positional":
            text, star = f"*{p.name}", True
        elif kind == "variadic keyword":
            text = f"**{p.name}"
        if p.annotation is not None:
            text += f": {p.annotation}"
        if p.default is not None and not kind.startswith("variadic"):
            text += f" = {p.default}"
        params.append(text)
        if kind == "positional-only" and (i + 1 == len(given) or given[i + 1].kind != p.kind):
            params.append("/")
    ret = f" -> {fn.returns}" if fn.returns is not None else ""
    prefix = "async def" if "async" in fn.labels else "def"
    return f"{prefix} {fn.name}({', '.join(params)}){ret}"


def _class(cls: griffe.Class, name: str) -> Iterator[str]:
    bases = ", ".join(str(b) for b in cls.bases)
    yield f"class {name}({bases})" if bases else f"class {name}"
    for member_name, member in sorted(cls.all_members.items()):
        if member_name.startswith("_") and member_name != "__init__":
            continue
        try:
            target = member.final_target if member.is_alias else member
        except (griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue
        if target.parent is not None and not str(target.parent.path).startswith("planfence"):
            continue  # inherited from a framework's base class
        if isinstance(target, griffe.Function):
            if "property" in target.labels:
                yield f"    property {member_name}: {target.returns}"
            else:
                yield f"    {_signature(target)}"
        elif isinstance(target, griffe.Attribute) and "class-attribute" in target.labels:
            yield f"    {member_name}: {target.annotation}"


def _object(obj: griffe.Object | griffe.Alias, name: str) -> Iterator[str]:
    target = obj.final_target if obj.is_alias else obj
    if isinstance(target, griffe.Class):
        yield from _class(target, name)
    elif isinstance(target, griffe.Function):
        yield _signature(target).replace(f"def {target.name}(", f"def {name}(", 1)
    elif isinstance(target, griffe.Attribute):
        yield f"{name}: {target.annotation}" if target.annotation else name
    else:
        yield f"{target.kind.value} {name}"


def render() -> str:
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tree:
        (Path(tree) / "planfence").mkdir()
        for top in TOP_LEVEL:
            (Path(tree) / "planfence" / top).symlink_to(ROOT / top)
        (Path(tree) / "planfence" / "fence").symlink_to(ROOT / "plugins" / "fence")
        loader = griffe.GriffeLoader(search_paths=[tree])
        root = loader.load("planfence")
        loader.resolve_aliases(external=False, implicit=False)
        for path in PUBLIC:
            module = root[path.removeprefix("planfence.")]
            names = [str(n) for n in module.exports or []]
            lines.append(f"## {path} ({len(names)})")
            for name in names:
                lines.extend(_object(module[name], name))
            lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    text = render()
    if "--write" in sys.argv:
        SNAPSHOT.write_text(text)
    else:
        sys.stdout.write(text)
