"""Lineage rendering for `planfence memory lineage`: text, JSON, DOT and Mermaid.

Every format draws each record once and marks, for the root, the versions it used of each key
and whether each is still the current head (see `planfence.plugins.gate.graph`).

Any agent can store a deep chain or a lattice in which many paths reach one ancestor, so the walk
never recurses and never draws a record twice: a record reached again is a one-line reference to
where it was drawn. Indentation stops growing after `MAX_INDENT` levels (the depth is printed
instead), so a 1,500-version chain stays readable and linear in size.
"""

from __future__ import annotations

from typing import Any

from planfence.plugins.gate.graph import PlanGraph
from planfence.shared_memory.lineage import Frontier

MAX_INDENT = 16
FORMATS = ("tree", "json", "dot", "mermaid")


def _mark(rid: str, graph: PlanGraph | None) -> str:
    node = graph.node(rid) if graph is not None and rid != graph.root else None
    if node is None:
        return ""
    if node.used:
        if node.headless:
            return "  [used, no head]"
        return "  [used, current]" if node.current else "  [used, STALE]"
    return "  [current]" if node.current else ""


def _label(rid: str, fr: Frontier, graph: PlanGraph | None = None) -> str:
    rec = fr.records.get(rid)
    if rec is None:
        return f"{rid[:12]}  ? (not in the store)"
    return f"{rid[:12]}  {rec.key} ({rec.kind}, {rec.author}){_mark(rid, graph)}"


def lineage_tree(root: str, fr: Frontier, graph: PlanGraph | None = None) -> list[str]:
    """The ancestry of `root` as text lines, depth-first, parents in stored order; with `graph`,
    the versions the root used are marked current or STALE, and its stale keys and supersedes
    chain follow the tree."""
    lines: list[str] = []
    drawn: set[str] = set()
    # (record id, prefix for this line, prefix for its children, depth)
    stack: list[tuple[str, str, str, int]] = [(root, "", "", 0)]
    while stack:
        rid, lead, child_lead, depth = stack.pop()
        deep = f"[depth {depth}] " if depth > MAX_INDENT else ""
        if rid in drawn:
            lines.append(f"{lead}{deep}{rid[:12]}  (drawn above)")
            continue
        drawn.add(rid)
        lines.append(f"{lead}{deep}{_label(rid, fr, graph)}")
        rec = fr.records.get(rid)
        if rec is None:
            continue
        parents = list(rec.parents)
        for i in reversed(range(len(parents))):
            last = i == len(parents) - 1
            if depth < MAX_INDENT:
                p_lead = child_lead + ("└─ " if last else "├─ ")
                p_child = child_lead + ("   " if last else "│  ")
            else:  # no deeper indentation: the depth tag says where we are
                p_lead = p_child = child_lead
            stack.append((parents[i], p_lead, p_child, depth + 1))
    if fr.unknown:
        lines.append("unknown ids: " + ", ".join(sorted(fr.unknown)))
    if fr.cycle:
        lines.append("cycle: " + " -> ".join(r[:12] for r in fr.cycle))
    if fr.truncated:
        lines.append(f"(walk stopped after {fr.visited} records: raise --max-records)")
    if graph is not None:
        for u in graph.stale:
            now = u.current[:12] if u.current else "no head"
            lines.append(f"stale: {u.key} used {u.used[:12]}, current {now}")
        if graph.supersedes:
            chain = " -> ".join(r[:12] for r in (graph.root, *graph.supersedes))
            lines.append(f"supersedes: {chain}")
    return lines


def lineage_json(root: str, fr: Frontier, graph: PlanGraph | None = None) -> dict[str, Any]:
    """The ancestry of `root` as flat JSON: each record once, edges as its `parents`; with
    `graph`, also its nodes, edges, used versions, stale keys and supersedes chain."""
    out: dict[str, Any] = {
        "root": root,
        "records": {rid: r.to_dict() for rid, r in fr.records.items()},
        "unknown": sorted(fr.unknown),
        "truncated": fr.truncated,
    }
    if graph is not None:
        out["graph"] = graph.to_dict()
    return out


def _dot_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def lineage_dot(graph: PlanGraph) -> list[str]:
    """Graphviz DOT: parents point at children; used versions are bold, stale ones red, current
    heads green; the supersedes chain is dashed."""
    lines = ["digraph lineage {", "  rankdir=BT;", '  node [shape=box, fontname="monospace"];']
    for n in graph.nodes:
        label = "\\n".join(_dot_text(t) for t in (n.key, n.id[:12], f"{n.kind} by {n.author}"))
        style = []
        if n.id == graph.root:
            style.append("peripheries=2")
        if n.used:
            style.append("style=bold")
        if n.missing:
            style.append("style=dashed")
        color = "green4" if n.current else ("red" if n.used and not n.headless else "")
        if color:
            style.append(f"color={color}")
        lines.append(f'  "{n.id}" [label="{label}"{"".join(", " + x for x in style)}];')
    for parent, child in graph.edges:
        lines.append(f'  "{parent}" -> "{child}";')
    for newer, older in zip((graph.root, *graph.supersedes), graph.supersedes, strict=False):
        lines.append(f'  "{older}" -> "{newer}" [style=dashed, label="superseded by"];')
    lines.append("}")
    return lines


def _mermaid_text(text: str) -> str:
    return "".join(c if c.isalnum() or c in " /_.:-" else f"#{ord(c)};" for c in text)


def lineage_mermaid(graph: PlanGraph) -> list[str]:
    """A Mermaid flowchart (renders on GitHub and in most Markdown viewers)."""
    ids = {n.id: f"n{i}" for i, n in enumerate(graph.nodes)}
    for i, rid in enumerate(graph.supersedes):
        ids.setdefault(rid, f"s{i}")
    lines = ["flowchart BT"]
    for n in graph.nodes:
        lines.append(f'  {ids[n.id]}["{_mermaid_text(f"{n.key} {n.id[:12]} ({n.kind})")}"]')
    for rid in graph.supersedes:
        if graph.node(rid) is None:
            lines.append(f'  {ids[rid]}["{_mermaid_text(f"plan {rid[:12]}")}"]')
    for parent, child in graph.edges:
        lines.append(f"  {ids[parent]} --> {ids[child]}")
    for newer, older in zip((graph.root, *graph.supersedes), graph.supersedes, strict=False):
        lines.append(f"  {ids[older]} -. superseded by .-> {ids[newer]}")
    lines.append("  classDef stale stroke:#c00,stroke-width:3px;")
    lines.append("  classDef current stroke:#080,stroke-width:3px;")
    for n in graph.nodes:
        if n.used and not n.headless:
            lines.append(f"  class {ids[n.id]} {'current' if n.current else 'stale'};")
    return lines
