"""HTML for `planfence ui`: small server-rendered pages, every store value escaped."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

from planfence.plugins.gate.graph import PlanGraph

from .svg import plan_svg

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f7f8fa}
header{background:#1d2330;color:#fff;padding:10px 20px}header a{color:#fff;margin-right:16px}
main{padding:16px 20px}h1{font-size:20px;margin:4px 0 12px}h2{font-size:16px;margin:20px 0 8px}
table{border-collapse:collapse;background:#fff;width:100%}
td,th{border-bottom:1px solid #e3e6ea;padding:4px 8px;text-align:left;vertical-align:top}
code,.mono{font-family:ui-monospace,monospace;font-size:12px}
.verdict-allow,.verdict-deploy{color:#17723a}.verdict-replan{color:#a45c00}
.verdict-block,.verdict-keep{color:#b3261e}.stale{color:#b3261e;font-weight:600}
form.filters input,form.filters select{margin-right:8px}
svg.lineage{background:#fff;border:1px solid #e3e6ea}
svg .edge{stroke:#9aa3ae;stroke-width:1.4}
svg .node rect{fill:#fff;stroke:#7c8794;stroke-width:1.2}
svg .node text{font:12px ui-monospace,monospace;fill:#1d2330}svg .node text.sub{fill:#5b6570}
svg .root rect{stroke:#1d2330;stroke-width:3}svg .current rect{stroke:#17723a;stroke-width:2.5}
svg .stale rect{stroke:#b3261e;stroke-width:3.5;fill:#fdeceb}svg .missing rect{stroke-dasharray:4}
.muted{color:#5b6570}
"""


def page(title: str, body: str) -> str:
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f"<title>{escape(title)} · planfence</title>"
        '<link rel=stylesheet href="/assets/style.css"></head><body>'
        '<header><a href="/">decisions</a><a href="/keys">keys</a></header>'
        f"<main><h1>{escape(title)}</h1>{body}</main></body></html>"
    )


def plan_link(plan: str | None) -> str:
    if not plan:
        return ""
    return f'<a class=mono href="/plans/{quote(plan, safe="")}">{escape(plan[:12])}</a>'


def key_link(key: str) -> str:
    return f'<a href="/keys/{quote(key, safe="/")}">{escape(key)}</a>'


def decisions_table(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return "<p class=muted>No decisions.</p>"
    out = [
        "<table class=decisions><tr><th>at</th><th>source</th><th>verdict</th><th>reason</th>"
        "<th>tool</th><th>agent</th><th>plan</th><th>stale keys</th></tr>"
    ]
    for d in rows:
        payload = d.get("payload") or {}
        stale = [s.get("key", "") for s in payload.get("stale") or [] if isinstance(s, dict)]
        key = payload.get("key") if d.get("source") == "janus" else None
        verdict = str(d.get("verdict", ""))
        out.append(
            f"<tr><td class=mono>{escape(str(d.get('at', '')))}</td>"
            f"<td>{escape(str(d.get('source', '')))}</td>"
            f'<td class="verdict-{escape(verdict)}">{escape(verdict)}</td>'
            f"<td>{escape(str(d.get('reason', '')))}</td>"
            f"<td>{escape(str(d.get('tool') or ''))}</td>"
            f"<td>{escape(str(d.get('agent') or ''))}</td>"
            f"<td>{plan_link(d.get('plan'))}{key_link(key) if isinstance(key, str) else ''}</td>"
            f"<td class=stale>{', '.join(key_link(k) for k in stale)}</td></tr>"
        )
    out.append("</table>")
    return "".join(out)


def filters_form(values: Mapping[str, str], verdicts: Iterable[str]) -> str:
    def field(name: str) -> str:
        return (
            f'<label>{name} <input name="{name}" value="{escape(values.get(name, ""))}" '
            "size=14></label>"
        )

    options = "".join(
        f"<option{' selected' if values.get('verdict') == v else ''}>{escape(v)}</option>"
        for v in ("", *verdicts)
    )
    return (
        '<form class=filters method=get action="/">'
        f"{field('tool')}{field('agent')}{field('plan')}"
        f"<label>verdict <select name=verdict>{options}</select></label>"
        "<button type=submit>filter</button></form>"
    )


def timeline_page(rows: Sequence[Mapping[str, Any]], values: Mapping[str, str]) -> str:
    verdicts = ("allow", "replan", "block", "deploy", "keep")
    shown = {k: v for k, v in values.items() if v}
    note = f"<p class=muted>filtered by {escape(urlencode(shown))}</p>" if shown else ""
    return page("Decisions", filters_form(values, verdicts) + note + decisions_table(rows))


def plan_page(graph: PlanGraph, decisions: Sequence[Mapping[str, Any]]) -> str:
    body = [f"<p>plan <code>{escape(graph.root)}</code></p>"]
    if graph.problems:
        body.append("".join(f"<p class=stale>{escape(p)}</p>" for p in graph.problems))
    if graph.stale:
        body.append(
            "<h2>Stale versions</h2><table><tr><th>key</th><th>used</th><th>current</th></tr>"
        )
        body += [
            f"<tr class=stale><td>{key_link(u.key)}</td><td class=mono>{escape(u.used[:12])}</td>"
            f"<td class=mono>{escape((u.current or '')[:12])}</td></tr>"
            for u in graph.stale
        ]
        body.append("</table>")
    else:
        body.append("<p>Every version this plan used is still its key's head.</p>")
    if graph.supersedes:
        chain = " → ".join(plan_link(p) for p in graph.supersedes)
        body.append(f"<h2>Supersedes</h2><p>{chain}</p>")
    body.append(f"<h2>Lineage</h2>{plan_svg(graph)}")
    body.append(f"<h2>Decisions</h2>{decisions_table(decisions)}")
    return page(f"Plan {graph.root[:12]}", "".join(body))


def key_page(key: str, state: Mapping[str, Any], janus: Sequence[Mapping[str, Any]]) -> str:
    body = [
        f"<p>owner <b>{escape(str(state.get('owner') or '—'))}</b>, head "
        f"<code>{escape(str(state.get('head') or '—'))}</code>, version "
        f"{escape(str(state.get('version', 0)))}</p><h2>Versions (newest first)</h2>"
        "<table class=history><tr><th>record</th><th>kind</th><th>author</th><th>at</th>"
        "<th>value</th></tr>"
    ]
    for r in state.get("history", []):
        body.append(
            f"<tr><td class=mono>{escape(r['id'][:12])}</td><td>{escape(r['kind'])}</td>"
            f"<td>{escape(r['author'])}</td><td class=mono>{escape(r['created_at'])}</td>"
            f"<td class=mono>{escape(r['value_text'])}</td></tr>"
        )
    body.append("</table>")
    if janus:
        body.append(
            "<h2>Janus candidates</h2><table><tr><th>candidate</th><th>verdict</th>"
            "<th>triggered</th><th>cosine</th><th>score old</th><th>score new</th>"
            "<th>reason</th></tr>"
        )
        for d in janus:
            p = d.get("payload") or {}
            scores = p.get("scores") or {}
            found = p.get("trigger")
            trigger: Mapping[str, Any] = found if isinstance(found, dict) else {}
            verdict = str(d.get("verdict", ""))
            body.append(
                f"<tr><td class=mono>{escape(str(p.get('candidate', ''))[:12])}</td>"
                f'<td class="verdict-{escape(verdict)}">{escape(verdict)}</td>'
                f"<td>{'yes' if trigger.get('fired') else 'no'}</td>"
                f"<td>{escape(_score(trigger.get('cosine')))}</td>"
                f"<td>{escape(_score(scores.get('old')))}</td>"
                f"<td>{escape(_score(scores.get('new')))}</td>"
                f"<td>{escape(str(d.get('reason', '')))}</td></tr>"
            )
        body.append("</table>")
    return page(f"Key {key}", "".join(body))


def keys_page(states: Sequence[Mapping[str, Any]]) -> str:
    rows = "".join(
        f"<tr><td>{key_link(s['key'])}</td><td>{escape(str(s['owner'] or ''))}</td>"
        f"<td>{escape(str(s['version']))}</td></tr>"
        for s in states
    )
    return page("Keys", f"<table><tr><th>key</th><th>owner</th><th>version</th></tr>{rows}</table>")


def error_page(title: str, message: str) -> str:
    return page(title, f"<p>{escape(message)}</p>")


def _score(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, int | float) else "—"
