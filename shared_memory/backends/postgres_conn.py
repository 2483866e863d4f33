"""PostgreSQL URLs and connections: the schema option, readable causes, a dropped connection."""

from __future__ import annotations

import re
import select
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import ConfigError
from ..extras import extra_imports
from ..urls import redact_url

with extra_imports("postgres", "the PostgreSQL store"):
    import psycopg

_SCHEMA_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def split_schema(url: str) -> tuple[str, str | None]:
    """Remove `schema=` from the URL's query; return (conninfo, schema).

    Raises:
        ConfigError: a URL that does not parse (e.g. a broken IPv6 host) or a bad schema name.
    """
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigError(f"malformed PostgreSQL URL {redact_url(url)!r}: {exc}") from None
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in query if k == "schema"), None)
    if schema is not None and not _SCHEMA_RE.fullmatch(schema):
        raise ConfigError(f"invalid schema name {schema!r} in store URL")
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def connect_cause(exc: BaseException) -> str:
    """The reason in a libpq connection error, without its framing: 'connection refused',
    'role "x" does not exist', 'database "y" does not exist', ..."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    cause = first.rpartition(" failed: ")[2] if " failed: " in first else first
    cause = cause.removeprefix("connection failed: ")
    cause = re.sub(r"^(FATAL|ERROR):\s*", "", cause).strip()
    if len(cause) > 1 and cause[0].isupper() and cause[1].islower():
        cause = cause[0].lower() + cause[1:]  # "Connection refused" reads as part of a sentence
    return _one_line(cause)


def _has_input(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Whether an idle connection's socket has something to read, without blocking: on an idle
    connection that is the server saying goodbye (terminated, restarted) or closing it."""
    try:
        fd = conn.pgconn.socket
    except psycopg.OperationalError:
        return True
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([fd], [], [], 0)  # pragma: no cover - Windows
    return bool(readable)
