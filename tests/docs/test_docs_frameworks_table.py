"""The framework tables (the README's and the Frameworks page's) list every framework page with
its extra, where planfence plugs in and the length of its example, and say which frameworks
want a venv of their own: the same rows in both, the counts the pages' examples have, the
extras pyproject.toml declares, and a venv of its own exactly for the extras `all` leaves out
(each one a job of `.ci/run`)."""

from __future__ import annotations

import re
import sys

from docpages import REPO, page_blocks

if sys.version_info >= (3, 11):
    import tomllib
else:  # the package's own dependency on Python 3.10
    import tomli as tomllib

ROW = re.compile(
    r"^\| \[(?P<name>[^\]]+)\]\((?P<link>[^)]+)\) \| (?P<extra>[^|]+) \| [^|]+ \| (?P<n>\d+) lines"
)
OWN = "(a venv of its own)"
NOT_FRAMEWORKS = {"index", "conformance", "write-an-adapter"}


def rows(path: str, prefix: str) -> dict[str, tuple[str, str, int]]:
    """page stem -> (framework name, extra cell, example lines), in the table of `path`."""
    out = {}
    for line in (REPO / path).read_text(encoding="utf-8").splitlines():
        m = ROW.match(line)
        if m:
            assert m["link"].startswith(prefix), line
            stem = m["link"].removeprefix(prefix).removesuffix(".md")
            out[stem] = (m["name"], m["extra"].strip(), int(m["n"]))
    return out


def example_lines(stem: str) -> int:
    """The non-blank lines of a framework page's first Python block (its example)."""
    [first, *_] = page_blocks(f"docs/frameworks/{stem}.md", "python")
    return sum(1 for line in first.code.splitlines() if line.strip())


def test_both_tables_list_every_framework_page_alike() -> None:
    readme = rows("README.md", "docs/frameworks/")
    page = rows("docs/frameworks/index.md", "")
    assert readme == page
    pages = {p.stem for p in (REPO / "docs" / "frameworks").glob("*.md")} - NOT_FRAMEWORKS
    assert set(readme) == pages


def test_the_example_counts_are_the_pages() -> None:
    counts = {stem: n for stem, (_, _, n) in rows("README.md", "docs/frameworks/").items()}
    assert counts == {stem: example_lines(stem) for stem in counts}


def test_extras_and_their_venvs_are_what_pyproject_and_ci_say() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    in_all = {
        name
        for spec in extras["all"]
        for group in re.findall(r"planfence\[([^\]]+)\]", spec)
        for name in group.split(",")
    }
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    own_jobs = set(re.findall(r"^own_venv \S+ (\S+) ", ci, re.M))
    own = set()
    for _, cell, _ in rows("README.md", "docs/frameworks/").values():
        extra = re.match(r"`([\w-]+)`", cell)
        assert extra is not None, cell
        assert extra[1] in extras, f"no extra {extra[1]!r} in pyproject.toml"
        if cell.endswith(OWN):
            own.add(extra[1])
            assert extra[1] not in in_all, f"{extra[1]} wants a venv of its own but is in `all`"
        else:
            assert extra[1] in in_all, f"{extra[1]} is not in `all` and has no venv of its own"
    assert own == own_jobs, "each framework with a venv of its own is a job of .ci/run"
