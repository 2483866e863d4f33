"""Lineage rendering for `planfence memory lineage`: each record drawn once, iteratively.

Any agent can store a deep chain or a lattice in which many paths reach one ancestor, so the walk
never recurses and never draws a record twice: a record reached again is a one-line reference to
where it was drawn. Indentation stops growing after `MAX_INDENT` levels (the depth is printed
instead), so a 1,500-version chain stays readable and linear in size.
"""

from __future__ import annotations

from typing import Any

from planfence.shared_memory import Frontier

MAX_INDENT = 16


def _label(rid: str, fr: Frontier) -> str:
    rec = fr.records.get(rid)
    if rec is None:
        return f"{rid[:12]}  ? (not in the store)"
    return f"{rid[:12]}  {rec.key} ({rec.kind}, {rec.author})"


def lineage_tree(root: str, fr: Frontier) -> list[str]:
    """The ancestry of `root` as text lines, depth-first, parents in stored order."""
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
        lines.append(f"{lead}{deep}{_label(rid, fr)}")
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
    return lines


def lineage_json(root: str, fr: Frontier) -> dict[str, Any]:
    """The ancestry of `root` as flat JSON: each record once, edges as its `parents`."""
    return {
        "root": root,
        "records": {rid: r.to_dict() for rid, r in fr.records.items()},
        "unknown": sorted(fr.unknown),
        "truncated": fr.truncated,
    }
