"""The fenced code blocks of the documentation (the README and every page under `docs/`), for the
tests that run them.

A block is named by its page (a path relative to the repository: `README.md`,
`docs/frameworks/pydantic-ai.md`), the heading above it and its place among the blocks of its
language under that heading. Tests import this module by name (`tests/` is on `sys.path` through
its conftest).
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository, with forward slashes
    heading: str
    index: int  # among the blocks of its language under that heading
    lang: str
    code: str


def pages() -> list[str]:
    """Every documentation page: the README, then the site's pages in path order."""
    found = sorted(p.relative_to(REPO).as_posix() for p in DOCS.rglob("*.md"))
    return ["README.md", *found]


def page_blocks(page: str, lang: str | None = None) -> list[Block]:
    """The fenced blocks of one page (of one language, or all), in order."""
    text = (REPO / page).read_text(encoding="utf-8")
    # Headings outside code blocks: a `# comment` line inside a block is not one.
    fences = [(m.start(), m.end()) for m in re.finditer(r"^ *```.*?^ *```", text, re.S | re.M)]
    heads = [
        (m.start(), m.group(1))
        for m in re.finditer(r"^#{1,4} (.+)$", text, re.M)
        if not any(a <= m.start() < b for a, b in fences)
    ]
    out: list[Block] = []
    seen: dict[tuple[str, str], int] = {}
    for m in re.finditer(r"^ *```(\w+)[^\n]*\n(.*?)^ *```", text, re.S | re.M):
        if lang is not None and m.group(1) != lang:
            continue
        above = [h for pos, h in heads if pos < m.start()]
        heading = above[-1] if above else ""
        key = (heading, m.group(1))
        n = seen.get(key, 0)
        seen[key] = n + 1
        out.append(Block(page, heading, n, m.group(1), textwrap.dedent(m.group(2))))
    return out


def all_blocks(lang: str | None = None) -> list[Block]:
    """The fenced blocks of every page."""
    return [b for page in pages() for b in page_blocks(page, lang)]


def block(page: str, heading: str, lang: str = "python", index: int = 0) -> str:
    """One block's code; fails naming what it looked for when the page has no such block."""
    found = [b for b in page_blocks(page, lang) if b.heading == heading and b.index == index]
    assert found, f"no {lang} block {index} under {heading!r} in {page}"
    return found[0].code
