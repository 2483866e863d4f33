"""The Starlette app behind `planfence ui`: HTML pages and their JSON under `/api/...`.

Handlers are plain functions over the sync `Store` (Starlette runs them in its thread pool), so
the app never holds a store connection across requests on its own event loop.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from planfence.plugins.gate.audit import Decision
from planfence.plugins.gate.graph import PlanGraph, load_plan_graph
from planfence.shared_memory import (
    AmbiguousIdError,
    InvalidKeyError,
    InvalidValueError,
    Record,
    Store,
    UnknownRecordError,
)

from . import pages

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
FILTERS = ("tool", "verdict", "agent", "plan", "source")
MAX_LIMIT = 1000
HISTORY = 200
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
    """Decision-log entries as JSON, newest first (`source` "all" or empty means every source)."""
    if filters.get("source") in ("all", ""):
        filters["source"] = None
    return [Decision.from_entry(e).to_dict() for e in store.decisions(**filters)]


def plan_data(store: Store, ref: str) -> tuple[PlanGraph, list[dict[str, Any]]]:
    """The plan `ref` (an id or a unique prefix) as a graph, and its decisions."""
    plan = store.resolve_id(ref)
    graph = load_plan_graph(store, plan, max_records=2_000)
    return graph, decisions(store, plan=plan, source=None, limit=200)


def key_json(store: Store, key: str) -> dict[str, Any]:
    state = store.states([key]).get(key)
    if state is None:
        raise LookupError(f"no key {key!r} in this store")
    janus = [
        d
        for d in decisions(store, source="janus", limit=MAX_LIMIT)
        if (d.get("payload") or {}).get("key") == key
    ]
    return {
        "key": key,
        "owner": state.owner,
        "head": state.head,
        "version": state.version,
        "history": [_row(r) for r in _history(store, key, state.head)],
        "janus": janus,
    }


def _history(store: Store, key: str, head: str | None) -> list[Record]:
    """The key's versions from its head back through parents of the same key (each version is
    read once: its parents' read also yields the next version)."""
    out: list[Record] = []
    rec = store.get_many([head]).get(head) if head else None
    seen: set[str] = set()
    while rec is not None and rec.id not in seen and len(out) < HISTORY:
        seen.add(rec.id)
        out.append(rec)
        parents = store.get_many(list(rec.parents))
        rec = next((r for r in parents.values() if r.key == key), None)
    return out


def _row(rec: Record) -> dict[str, Any]:
    text = json.dumps(rec.value, sort_keys=True)
    return {
        "id": rec.id,
        "kind": rec.kind,
        "author": rec.author,
        "created_at": rec.created_at,
        "parents": list(rec.parents),
        "value": rec.value,
        "value_text": text if len(text) <= 200 else text[:199] + "…",
    }


def _filters(request: Request) -> dict[str, Any]:
    values: dict[str, Any] = {k: request.query_params.get(k) or None for k in FILTERS}
    try:
        limit = int(request.query_params.get("limit", "200"))
    except ValueError:
        limit = 200
    values["limit"] = max(1, min(limit, MAX_LIMIT))
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
        return _html(pages.timeline_page(decisions(store, **values), shown))

    def api_decisions(request: Request) -> Response:
        values = _filters(request)
        try:
            resolve_plan(store, values)
        except BAD_REF as exc:
            return _json_error(404, str(exc))
        return _json(decisions(store, **values))

    def plan(request: Request) -> Response:
        try:
            graph, found = plan_data(store, request.path_params["ref"])
        except BAD_REF as exc:
            return _html_error(_status(exc), "Unknown plan", str(exc))
        return _html(pages.plan_page(graph, found))

    def api_plan(request: Request) -> Response:
        try:
            graph, found = plan_data(store, request.path_params["ref"])
        except BAD_REF as exc:
            return _json_error(_status(exc), str(exc))
        return _json({**graph.to_dict(), "decisions": found})

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
