"""HTML for `planfence ui`: small server-rendered pages, every store value escaped."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from difflib import SequenceMatcher
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
.muted{color:#5b6570}td.message{max-width:28em}.pager a{margin-right:12px}
td.at{white-space:nowrap}
.memory{white-space:pre-wrap;max-width:40em}
.diff div{white-space:pre-wrap;padding:0 4px}.diff .del{background:#fdeceb}
.diff .ins{background:#e6f4ea}
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
        "<th>tool</th><th>agent</th><th>plan</th><th>stale keys</th><th>message</th></tr>"
    ]
    for d in rows:
        payload = d.get("payload") or {}
        stale = [s.get("key", "") for s in payload.get("stale") or [] if isinstance(s, dict)]
        key = payload.get("key") if d.get("source") == "janus" else None
        verdict = str(d.get("verdict", ""))
        out.append(
            f'<tr><td class="mono at">{escape(str(d.get("at", "")))}</td>'
            f"<td>{escape(str(d.get('source', '')))}</td>"
            f'<td class="verdict-{escape(verdict)}">{escape(verdict)}</td>'
            f"<td>{escape(str(d.get('reason', '')))}</td>"
            f"<td>{escape(str(d.get('tool') or ''))}</td>"
            f"<td>{escape(str(d.get('agent') or ''))}</td>"
            f"<td>{plan_link(d.get('plan'))}{key_link(key) if isinstance(key, str) else ''}</td>"
            f"<td class=stale>{', '.join(key_link(k) for k in stale)}</td>"
            f"<td class=message>{escape(_message(verdict, payload))}</td></tr>"
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


def _message(verdict: str, payload: Mapping[str, Any]) -> str:
    """A refusal's message (what the caller was told); allows and deploys need none."""
    if verdict in ("allow", "deploy"):
        return ""
    message = payload.get("message")
    return message if isinstance(message, str) else ""


def timeline_page(
    rows: Sequence[Mapping[str, Any]],
    values: Mapping[str, str],
    *,
    older: int | None = None,
    limit: int = 200,
    paged: bool = False,
) -> str:
    """The decision log, newest first, one page of `limit` rows; `older`: the id the next page
    starts before (None: this is the last page)."""
    verdicts = ("allow", "replan", "block", "deploy", "keep")
    shown = {k: v for k, v in values.items() if v}
    note = f"<p class=muted>filtered by {escape(urlencode(shown))}</p>" if shown else ""
    links = []
    if paged:
        links.append(f'<a href="/?{escape(urlencode(shown))}">newest</a>')
    if older is not None:
        query = urlencode({**shown, "limit": str(limit), "before": str(older)})
        links.append(f'<a class=older href="/?{escape(query)}">older decisions →</a>')
    pager = f"<p class=pager>{' · '.join(links)}</p>" if links else ""
    body = filters_form(values, verdicts) + note + decisions_table(rows) + pager
    return page("Decisions", body)


def plan_page(
    graph: PlanGraph,
    decisions: Sequence[Mapping[str, Any]],
    extra: Mapping[str, Any] | None = None,
) -> str:
    """`extra`: the used and current values of the stale keys (`stale_values`) and the plans
    that superseded this one (`superseded_by`), as `app.plan_data` reads them."""
    extra = extra or {}
    body = [f"<p>plan <code>{escape(graph.root)}</code></p>"]
    later = extra.get("superseded_by") or []
    if later:
        links = ", ".join(plan_link(p) for p in later)
        body.append(f"<p class=superseded>Superseded by {links}</p>")
    if graph.problems:
        body.append("".join(f"<p class=stale>{escape(p)}</p>" for p in graph.problems))
    if graph.stale:
        # by version: a plan can use two versions of one key (directly, and through another
        # plan), each with its own value
        values = {(v["key"], v["used"]): v for v in extra.get("stale_values") or []}
        body.append(
            "<h2>Stale versions</h2><table class=stale-values><tr><th>key</th>"
            "<th>used by this plan</th><th>current</th></tr>"
        )
        for u in graph.stale:
            v = values.get((u.key, u.used), {})
            used, now = value_diff(v.get("used_value"), v.get("current_value"))
            body.append(
                f"<tr><td class=stale>{key_link(u.key)}</td>"
                f"<td><div class=mono>{escape(u.used[:12])}</div>{used}</td>"
                f"<td><div class=mono>{escape((u.current or '')[:12])}</div>{now}</td></tr>"
            )
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
            f'<td>{escape(r["author"])}</td><td class="mono at">{escape(r["at"])}</td>'
            f"<td>{_value_cell(r['value_text'], text=r.get('text', False))}</td></tr>"
        )
    body.append("</table>")
    if janus:
        body.append(
            "<h2>Janus candidates</h2><table class=janus><tr><th>candidate</th><th>verdict</th>"
            "<th>triggered</th><th>cosine</th><th>score old</th><th>score new</th>"
            "<th>reason</th><th>memory</th></tr>"
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
                f"<td>{escape(str(d.get('reason', '')))}</td>"
                f"<td>{_value_cell(str(d.get('memory_text') or '—'), text=True)}</td></tr>"
            )
        body.append("</table>")
    return page(f"Key {key}", "".join(body))


def _value_cell(shown: str, *, text: bool) -> str:
    """A value in a table: a Janus memory as the text a model reads (line breaks kept), any
    other value as its JSON."""
    if text:
        return f"<div class=memory>{escape(shown)}</div>"
    return f"<span class=mono>{escape(shown)}</span>"


def _lines(value: Any) -> list[str]:
    if isinstance(value, str):
        return value.splitlines() or [""]
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


def value_diff(used: Any, current: Any) -> tuple[str, str]:
    """Two values side by side: each as lines (text as it is, other JSON pretty-printed), with
    the lines only one side has marked (`del` on the used side, `ins` on the current side)."""
    old, new = _lines(used), _lines(current)
    left: list[str] = []
    right: list[str] = []
    for op, i1, i2, j1, j2 in SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        mark = "" if op == "equal" else " class=del"
        left += [f"<div{mark}>{escape(line) or ' '}</div>" for line in old[i1:i2]]
        mark = "" if op == "equal" else " class=ins"
        right += [f"<div{mark}>{escape(line) or ' '}</div>" for line in new[j1:j2]]
    return (
        f'<div class="diff mono">{"".join(left)}</div>',
        f'<div class="diff mono">{"".join(right)}</div>',
    )


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
