"""A plan's lineage graph as inline SVG: layered from the plan down to its oldest ancestors.

The layout is deliberately simple (no JavaScript, no library): a record's layer is its shortest
distance from the plan, records in a layer are ordered by key, and every edge is a straight line
from a parent (below) to its child (above). A plan's node links to its plan page, a version of a
key to its key's page; a record the store does not hold links nowhere.
"""

from __future__ import annotations

from html import escape
from urllib.parse import quote

from planfence.plugins.gate.graph import Node, PlanGraph
from planfence.shared_memory.records import KIND_PLAN

BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 210, 48, 24, 42, 12
MAX_LAYERS = 40
MAX_PER_LAYER = 12


def layers(graph: PlanGraph) -> list[list[Node]]:
    """Nodes by shortest distance from the root; drawn at most `MAX_LAYERS` deep."""
    parents: dict[str, list[str]] = {}
    for parent, child in graph.edges:
        parents.setdefault(child, []).append(parent)
    depth = {graph.root: 0}
    level = [graph.root]
    while level:
        nxt = []
        for rid in level:
            for p in parents.get(rid, ()):
                if p not in depth:
                    depth[p] = depth[rid] + 1
                    nxt.append(p)
        level = nxt
    out: list[list[Node]] = []
    for node in graph.nodes:
        d = depth.get(node.id)
        if d is None or d >= MAX_LAYERS:
            continue
        while len(out) <= d:
            out.append([])
        out[d].append(node)
    return [sorted(layer, key=lambda n: (n.key, n.id)) for layer in out]


def node_class(node: Node, root: str) -> str:
    if node.id == root:
        return "node root"
    if node.missing:
        return "node missing"
    if node.used and not node.headless:
        return "node used current" if node.current else "node used stale"
    return "node current" if node.current else "node"


def plan_svg(graph: PlanGraph) -> str:
    """The graph as an `<svg>` element; stale versions carry the class `stale`."""
    rows = layers(graph)
    pos: dict[str, tuple[int, int]] = {}
    width = PAD * 2 + BOX_W
    for d, layer in enumerate(rows):
        shown = layer[:MAX_PER_LAYER]
        for i, node in enumerate(shown):
            pos[node.id] = (PAD + i * (BOX_W + GAP_X), PAD + d * (BOX_H + GAP_Y))
        width = max(width, PAD * 2 + len(shown) * (BOX_W + GAP_X) - GAP_X)
    height = PAD * 2 + max(len(rows), 1) * (BOX_H + GAP_Y) - GAP_Y
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="lineage" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="lineage of plan {escape(graph.root[:12])}">'
    ]
    for parent, child in graph.edges:
        if parent in pos and child in pos:
            (px, py), (cx, cy) = pos[parent], pos[child]
            parts.append(
                f'<line class="edge" x1="{px + BOX_W // 2}" y1="{py}" '
                f'x2="{cx + BOX_W // 2}" y2="{cy + BOX_H}"/>'
            )
    for layer in rows:
        for node in layer:
            if node.id not in pos:
                continue
            x, y = pos[node.id]
            mark = " · STALE" if "stale" in node_class(node, graph.root) else ""
            box = (
                f'<g class="{node_class(node, graph.root)}" data-key="{escape(node.key)}">'
                f"<title>{escape(node.id)}</title>"
                f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6"/>'
                f'<text x="{x + 8}" y="{y + 19}">{escape(_clip(node.key, 26))}</text>'
                f'<text x="{x + 8}" y="{y + 38}" class="sub">'
                f"{escape(node.id[:12])} {escape(node.kind)}{mark}</text></g>"
            )
            link = node_link(node)
            if link is None:
                parts.append(box)
            else:
                parts.append(f'<a href="{escape(link)}" data-id="{escape(node.id)}">{box}</a>')
    parts.append("</svg>")
    return "".join(parts)


def node_link(node: Node) -> str | None:
    """Where a node's box leads: a plan to its plan page (a plan's key has no page: plans are
    records without a head), a version to its key's page, a record the store lacks nowhere."""
    if node.missing:
        return None
    if node.kind == KIND_PLAN:
        return f"/plans/{quote(node.id, safe='')}"
    return f"/keys/{quote(node.key, safe='/')}"


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
