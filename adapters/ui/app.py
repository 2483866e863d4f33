"""The Starlette app behind `planfence ui`: HTML pages and their JSON under `/api/...`.

Handlers are plain functions over the sync `Store` (Starlette runs them in its thread pool), so
the app never holds a store connection across requests on its own event loop.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from planfence.plugins.gate.decision_log import find_decisions_sync
from planfence.plugins.gate.graph import PlanGraph, load_plan_graph
from planfence.plugins.janus.kinds import KIND_CANDIDATE
from planfence.plugins.janus.memory import render_memory
from planfence.shared_memory import Change, InvalidKeyError, Record, Store, UnknownRecordError
from planfence.shared_memory.errors import AmbiguousIdError, InvalidValueError
from planfence.shared_memory.extras import extra_imports

from . import pages

with extra_imports("http", "the UI (planfence ui)"):
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
FILTERS = ("tool", "verdict", "agent", "plan", "source")
MAX_LIMIT = 1000
HISTORY = 200
FEED_PAGE = 5000
JANUS_KINDS = (KIND_CANDIDATE,)
"""Records whose value is a Janus memory: shown as the text a model reads, not as JSON."""
TEXT_SHOWN = 4000
BAD_REF = (UnknownRecordError, InvalidValueError)
"""A record reference that is malformed, unknown or ambiguous (a subclass of unknown)."""
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def allowed_hosts(host: str) -> list[str]:
    """Host names a request may be addressed to: loopback names, and `host` when it is a name
    the server was told to serve. A wildcard bind accepts any (the operator chose to expose it)."""
    if host in ("0.0.0.0", "::", ""):
        return ["*"]
    return list(dict.fromkeys([*LOOPBACK_HOSTS, host]))


def decisions(store: Store, **filters: Any) -> list[dict[str, Any]]:
    """Decision-log entries as JSON, newest first (`source` "all" or empty means every source;
    `before_id`: the page after the entry with that id)."""
    if filters.get("source") in ("all", ""):
        filters["source"] = None
    return [d.to_dict() for d in find_decisions_sync(store, **filters)]


def decisions_page(store: Store, **filters: Any) -> tuple[list[dict[str, Any]], int | None]:
    """One page of decisions, and the id to pass as `before` for the next (None: last page)."""
    limit = filters["limit"]
    rows = decisions(store, **{**filters, "limit": limit + 1})
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (rows[-1]["id"] if more and rows else None)


def plan_data(store: Store, ref: str) -> tuple[PlanGraph, list[dict[str, Any]], dict[str, Any]]:
    """The plan `ref` (an id or a unique prefix) as a graph, its decisions, and what an operator
    needs beside the graph: the used and current values of each stale key, and the plans that
    superseded this one."""
    plan = store.resolve_id(ref)
    graph = load_plan_graph(store, plan, max_records=2_000)
    found = decisions(store, plan=plan, source=None, limit=200)
    return graph, found, {"stale_values": _stale_values(store, graph), **_successors(store, plan)}


def _stale_values(store: Store, graph: PlanGraph) -> list[dict[str, Any]]:
    wanted = {i for u in graph.stale for i in (u.used, u.current) if i}
    records = store.get_many(sorted(wanted)) if wanted else {}
    out = []
    for u in graph.stale:
        used, current = records.get(u.used), records.get(u.current) if u.current else None
        out.append(
            {
                "key": u.key,
                "used": u.used,
                "current": u.current,
                "used_value": used.value if used else None,
                "current_value": current.value if current else None,
                "used_kind": used.kind if used else None,
                "current_kind": current.kind if current else None,
            }
        )
    return out


def _successors(store: Store, plan: str) -> dict[str, Any]:
    """The plans whose `supersedes` is `plan`, among those the decision log names (plans are
    records without a head, so the log is where later plans are found), newest first."""
    named = dict.fromkeys(
        d["plan"] for d in decisions(store, source=None, limit=MAX_LIMIT) if d["plan"]
    )
    named.pop(plan, None)
    records = store.get_many(list(named)) if named else {}
    later = [p for p in named if p in records and records[p].supersedes == plan]
    return {"superseded_by": later}


def key_json(store: Store, key: str) -> dict[str, Any]:
    state = store.states([key]).get(key)
    if state is None:
        raise LookupError(f"no key {key!r} in this store")
    janus = [
        d
        for d in decisions(store, source="janus", limit=MAX_LIMIT)
        if (d.get("payload") or {}).get("key") == key
    ]
    candidates = [str((d.get("payload") or {}).get("candidate") or "") for d in janus]
    memories = store.get_many([c for c in candidates if c]) if any(candidates) else {}
    for d, candidate in zip(janus, candidates, strict=True):
        found = memories.get(candidate)
        d["memory_text"] = render_memory(found.value) if found is not None else None
    return {
        "key": key,
        "owner": state.owner,
        "head": state.head,
        "version": state.version,
        "history": _history(store, key),
        "janus": janus,
    }


def _history(store: Store, key: str) -> list[dict[str, Any]]:
    """The key's versions, newest first (at most HISTORY): every head move of the change feed,
    whether or not the writer cited the previous version as a parent."""
    moves: deque[Change] = deque(maxlen=HISTORY)
    since = 0
    while batch := store.changes(since, FEED_PAGE):
        since = batch[-1].seq
        moves.extend(c for c in batch if c.key == key and c.kind == "head" and c.head)
    records = store.get_many(sorted({c.head for c in moves if c.head}))
    rows = []
    for change in reversed(moves):
        rec = records.get(change.head or "")
        if rec is not None:
            rows.append({**_row(rec), "seq": change.seq, "moved_by": change.by, "at": change.at})
    return rows


def _row(rec: Record) -> dict[str, Any]:
    as_text = rec.kind in JANUS_KINDS
    text = render_memory(rec.value) if as_text else json.dumps(rec.value, sort_keys=True)
    cut = TEXT_SHOWN if as_text else 200
    return {
        "id": rec.id,
        "kind": rec.kind,
        "author": rec.author,
        "created_at": rec.created_at,
        "parents": list(rec.parents),
        "value": rec.value,
        "value_text": text if len(text) <= cut else text[: cut - 1] + "…",
        "text": as_text,
    }


def _filters(request: Request) -> dict[str, Any]:
    values: dict[str, Any] = {k: request.query_params.get(k) or None for k in FILTERS}
    try:
        limit = int(request.query_params.get("limit", "200"))
    except ValueError:
        limit = 200
    values["limit"] = max(1, min(limit, MAX_LIMIT))
    before = request.query_params.get("before", "")
    values["before_id"] = int(before) if before.isdigit() else None
    return values


def create_app(store: Store, *, host: str = "127.0.0.1") -> Starlette:
    """The read-only app over `store` (opened by the caller, who closes it)."""

    def resolve_plan(store: Store, values: dict[str, Any]) -> None:
        if values.get("plan"):
            values["plan"] = store.resolve_id(values["plan"])

    def timeline(request: Request) -> Response:
        values = _filters(request)
        shown = {k: request.query_params.get(k, "") for k in FILTERS}
        try:
            resolve_plan(store, values)
        except BAD_REF as exc:
            return _html_error(404, "Unknown plan", str(exc))
        rows, older = decisions_page(store, **values)
        paged = values["before_id"] is not None
        page = pages.timeline_page(rows, shown, older=older, limit=values["limit"], paged=paged)
        return _html(page)

    def api_decisions(request: Request) -> Response:
        values = _filters(request)
        try:
            resolve_plan(store, values)
        except BAD_REF as exc:
            return _json_error(404, str(exc))
        return _json(decisions(store, **values))

    def plan(request: Request) -> Response:
        try:
            graph, found, extra = plan_data(store, request.path_params["ref"])
        except BAD_REF as exc:
            return _html_error(_status(exc), "Unknown plan", str(exc))
        return _html(pages.plan_page(graph, found, extra))

    def api_plan(request: Request) -> Response:
        try:
            graph, found, extra = plan_data(store, request.path_params["ref"])
        except BAD_REF as exc:
            return _json_error(_status(exc), str(exc))
        return _json({**graph.to_dict(), "decisions": found, **extra})

    def key(request: Request) -> Response:
        try:
            data = key_json(store, request.path_params["key"])
        except (LookupError, InvalidKeyError, InvalidValueError) as exc:
            return _html_error(404, "Unknown key", str(exc))
        return _html(pages.key_page(data["key"], data, data["janus"]))

    def api_key(request: Request) -> Response:
        try:
            return _json(key_json(store, request.path_params["key"]))
        except (LookupError, InvalidKeyError, InvalidValueError) as exc:
            return _json_error(404, str(exc))

    def keys(request: Request) -> Response:
        rows = [
            {"key": s.key, "owner": s.owner, "head": s.head, "version": s.version}
            for s in store.keys(request.query_params.get("prefix", ""))
        ]
        return _html(pages.keys_page(rows))

    def style(request: Request) -> Response:
        return Response(pages.STYLE, media_type="text/css", headers=HEADERS)

    routes = [
        Route("/", timeline),
        Route("/keys", keys),
        Route("/keys/{key:path}", key),
        Route("/plans/{ref}", plan),
        Route("/assets/style.css", style),
        Route("/api/decisions", api_decisions),
        Route("/api/plans/{ref}", api_plan),
        Route("/api/keys/{key:path}", api_key),
    ]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts(host))]
    return Starlette(routes=routes, middleware=middleware)


def _status(exc: Exception) -> int:
    return 400 if isinstance(exc, AmbiguousIdError) else 404


def _html(text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers=HEADERS)


def _html_error(status: int, title: str, message: str) -> HTMLResponse:
    return _html(pages.error_page(title, message), status)


def _json(data: Any) -> JSONResponse:
    return JSONResponse(data, headers=HEADERS)


def _json_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=HEADERS)
