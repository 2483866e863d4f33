"""The product's import graph has no circles: a module never imports, directly or through others
(function-level imports included), a module that imports it.

The graph is read by grimp (which import-linter installs) over the installed layout: a tree of
symlinks, as `.ci/imports` builds it, since the analyser cannot follow setuptools' package-dir
mapping. `KNOWN` names circles still being taken apart: a new circle fails, and so does a known
one that is gone (so the list only shrinks).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# planfence.<name> -> its folder in the repository (`planfence.fence` installs from plugins/fence)
MAPPED = {name: name for name in ("shared_memory", "plugins", "adapters", "demos")}
MAPPED["fence"] = "plugins/fence"

# The pass-through MCP proxy's parts name the proxy (and the upstream's shared constants) for
# their types: circles through type-only imports, to be taken apart with a protocol for the proxy.
KNOWN: set[frozenset[str]] = {
    frozenset(
        f"planfence.adapters.mcp.{m}"
        for m in ("bridge", "gating", "in_process", "inflight", "proxy", "relay")
    ),
}

SCRIPT = """
import json, sys
import grimp

graph = grimp.build_graph("planfence")
sys.setrecursionlimit(100_000)
index, low, stack, on_stack, circles = {}, {}, [], set(), []

def visit(module):
    index[module] = low[module] = len(index)
    stack.append(module)
    on_stack.add(module)
    for other in graph.find_modules_directly_imported_by(module):
        if other not in index:
            visit(other)
            low[module] = min(low[module], low[other])
        elif other in on_stack:
            low[module] = min(low[module], index[other])
    if low[module] == index[module]:
        component = []
        while True:
            other = stack.pop()
            on_stack.discard(other)
            component.append(other)
            if other == module:
                break
        if len(component) > 1:
            circles.append(sorted(component))

for module in sorted(graph.modules):
    if module not in index:
        visit(module)
print(json.dumps({"modules": len(graph.modules), "circles": circles}))
"""


def circles(tmp_path: Path) -> tuple[int, list[frozenset[str]]]:
    tree = tmp_path / "tree"
    (tree / "planfence").mkdir(parents=True)
    for name, folder in MAPPED.items():
        (tree / "planfence" / name).symlink_to(ROOT / folder)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    return found["modules"], [frozenset(c) for c in found["circles"]]


def test_the_product_has_no_import_circles(tmp_path: Path) -> None:
    modules, found = circles(tmp_path)
    assert modules > 200  # the whole product was read
    new = [sorted(c) for c in found if c not in KNOWN]
    assert not new, f"import circles: {new}"
    gone = [sorted(c) for c in KNOWN if c not in found]
    assert not gone, f"these circles are gone: remove them from KNOWN: {gone}"
