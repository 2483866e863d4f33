"""PostgreSQL URLs and connections: planfence's URL options, the server check, readable causes,
a dropped connection."""

from __future__ import annotations

import re
import select
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import ConfigError
from ..extras import extra_imports
from ..urls import redact_url, url_flag

with extra_imports("postgres", "the PostgreSQL store"):
    import psycopg

_SCHEMA_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")

# The URL options planfence reads itself (libpq never sees them).
OWN_OPTIONS = ("schema", "create", "allow_server", "migration_timeout")


@dataclass(frozen=True)
class PgOptions:
    """planfence's own options of a PostgreSQL URL.

    schema: where the tables live (None: the server's search path, usually `public`).
    create: `?create=1|0`, None when not given (the caller decides).
    allow_server: `?allow_server=NAME`, a server other than PostgreSQL the user vouches for.
    migration_timeout: `?migration_timeout=SECONDS`, how long an open waits for another
        session's migration of the same schema (None: the default).
    """

    schema: str | None = None
    create: bool | None = None
    allow_server: str | None = None
    migration_timeout: float | None = None


def split_options(url: str) -> tuple[str, PgOptions]:
    """Remove planfence's own options (`schema=`, `create=`, `allow_server=`,
    `migration_timeout=`) from the URL's query; return (conninfo, options).

    Raises:
        ConfigError: a URL that does not parse (e.g. a broken IPv6 host), a bad schema name or
            a bad flag.
    """
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigError(f"malformed PostgreSQL URL {redact_url(url)!r}: {exc}") from None
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in OWN_OPTIONS}
    schema = own.get("schema")
    if schema is not None and not _SCHEMA_RE.fullmatch(schema):
        raise ConfigError(f"invalid schema name {schema!r} in store URL")
    create = url_flag("create", own["create"]) if "create" in own else None
    allow = own.get("allow_server")
    if allow is not None and not allow.strip():
        raise ConfigError(
            "allow_server is empty in the store URL: name the server, e.g. allow_server=CockroachDB"
        )
    wait = own.get("migration_timeout")
    timeout = _seconds("migration_timeout", wait) if wait is not None else None
    rest = urlencode([(k, v) for k, v in query if k not in OWN_OPTIONS])
    conninfo = urlunsplit(parts._replace(query=rest))
    return conninfo, PgOptions(schema, create, allow.strip() if allow else None, timeout)


def _seconds(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 86_400:
        raise ConfigError(f"{name} in the store URL must be a number of seconds above 0: {text!r}")
    return value


def split_schema(url: str) -> tuple[str, str | None]:
    """Remove planfence's own options from the URL's query; return (conninfo, schema)."""
    conninfo, options = split_options(url)
    return conninfo, options.schema


def server_name(version: str) -> str:
    """The kind of server a `SELECT version()` answer names: `PostgreSQL`, `CockroachDB`, ..."""
    text = version.strip()
    if re.match(r"PostgreSQL \S*-YB-", text):  # YugabyteDB says PostgreSQL, then its own
        return "YugabyteDB"
    return text.split(None, 1)[0] if text else "an unnamed server"


def check_server(version: str, where: str, allow: str | None) -> None:
    """Refuse a server that is not PostgreSQL (by its version string), unless `allow` names it.

    The store's mutual exclusion rests on transaction-scoped advisory locks and its readers wake
    on LISTEN/NOTIFY: a server that speaks the protocol without them (CockroachDB's advisory
    lock returns at once) would let two writers through together.

    Raises:
        ConfigError: the server is something else, and the URL does not allow it.
    """
    name = server_name(version)
    if name == "PostgreSQL" or (allow is not None and allow.lower() == name.lower()):
        return
    raise ConfigError(
        f"the server at {where} is {name}, not PostgreSQL ({_one_line(version)[:80]}): "
        "planfence's PostgreSQL store needs advisory locks that lock and LISTEN/NOTIFY, so it "
        f"refuses to open it; add ?allow_server={name} to the URL only if this server provides "
        "both"
    )


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
