"""A PostgreSQL store behind a connection pooler (PgBouncer and the like), found out at open.

A pooler answers a client with its own made-up session key, so the backend pid a connection was
told at start-up is not the pid of the server session that runs its statements: that difference
is how the store knows, rather than guesses, that a pooler is there. Behind one, the server
session under a connection may change between transactions (PgBouncer's `pool_mode=transaction`)
or be handed from one client to the next, so the store keeps no session state: statements are not
prepared, and readers of the change feed poll instead of waiting on LISTEN/NOTIFY (said once, in
a log line). What cannot work is refused at open, in one line that says why and what does:
`?schema=` (a per-session search path) and statement pooling (no transactions).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ..errors import ConfigError
from ..extras import extra_imports
from .postgres_conn import _one_line

with extra_imports("postgres", "the PostgreSQL store"):
    import psycopg

logger = logging.getLogger("planfence.shared_memory.backends.postgres")

_told: set[str] = set()
_told_lock = threading.Lock()


async def behind_pooler(conn: psycopg.AsyncConnection[Any], where: str) -> bool:
    """Whether a pooler sits between `conn` and the server.

    Raises:
        ConfigError: the pooler does not run transactions (statement pooling).
    """
    try:
        row = await (await conn.execute("SELECT pg_backend_pid()")).fetchone()
    except psycopg.Error:  # a server that only speaks the protocol (`?allow_server=`)
        return False
    if row is None or int(row[0]) == conn.info.backend_pid:
        return False
    try:
        async with conn.transaction():
            await conn.execute("SELECT 1")
    except psycopg.Error as exc:
        raise ConfigError(
            f"PostgreSQL at {where} is reached through a connection pooler that refuses "
            f"transactions ({_one_line(str(exc))}): the store writes in transactions, so use "
            "PgBouncer's pool_mode=transaction or pool_mode=session for its database"
        ) from None
    return True


def schema_refused(where: str, schema: str, cause: str = "") -> ConfigError:
    """`?schema=` behind a pooler: the search path it sets is a session's, and a pooler hands
    server sessions from one client to the next."""
    said = f" ({cause})" if cause else ""
    return ConfigError(
        f"PostgreSQL at {where} is reached through a connection pooler{said}: ?schema={schema} "
        "sets a session's search path, which a pooler's shared server sessions do not keep; "
        "leave ?schema= out and give the store a database of its own (or set the role's "
        "search_path), or connect to PostgreSQL directly"
    )


def refused_startup_option(cause: str) -> bool:
    """Whether a connection failed because a pooler refused the `options` start-up parameter
    (PgBouncer before 1.20 refuses it; `?schema=` sends it)."""
    return "unsupported startup parameter" in cause and "options" in cause


def say_polling(where: str, poll_interval: float) -> None:
    """Say once per server, in a log line, what a pooler changes for this process's stores."""
    with _told_lock:
        if where in _told:
            return
        _told.add(where)
    logger.info(
        "PostgreSQL at %s is reached through a connection pooler (the server session is not "
        "the one the connection announced): readers of the change feed poll every %g s "
        "instead of waiting on LISTEN/NOTIFY, and statements are not prepared",
        where,
        poll_interval,
    )
