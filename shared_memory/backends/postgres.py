"""PostgreSQL backend (psycopg 3, connection pool): the distributed store.

Here: connections, sessions and the change feed's wake-ups. The statements live beside it:
reads in `postgres_reads`, writes in `postgres_writes` (advisory locks on the touched keys, then
the shared `plan_batch` checks; a feed lock so sequence numbers become visible in commit order
and a reader polling `seq > last` never skips an entry), opening in `postgres_migrate` and
`postgres_pooler`. LISTEN/NOTIFY only wakes readers early. Lock ids and the NOTIFY channel are
derived from the schema, so stores sharing a database do not serialize on each other.

The URL may carry `?schema=NAME` to keep planfence's tables in their own schema. A schema that
does not exist, or holds no planfence tables (an empty `public` too), is a store that does not
exist: created only when the store may create (`create=True`, `?create=1`), as a SQLite file is.

The server must be PostgreSQL: at open, its version string is checked, and a server that speaks
the protocol but is something else (CockroachDB, whose advisory locks return at once and which has
no LISTEN/NOTIFY) is refused, unless the URL vouches for it with `?allow_server=NAME`.

Connections: `setup` first makes one plain connection, so a server that cannot be used fails at
once with its real cause (refused, unknown role or database) instead of the pool retrying in the
background. Afterwards the pool checks a connection before handing it out, and an operation whose
connection turns out to be broken before anything could have been committed runs once more on
another: a server restart or dropped connections cost no failed operations.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from ..batches import WriteBatch, WriteResult
from ..errors import ConfigError, StoreUnavailableError
from ..extras import extra_imports
from ..model import KeyState
from ..reads import GetRecords, Lineage, ReadOp, record_and_keys
from ..records import DEFAULT_LIMITS, StoreLimits, utc_now
from ..store import AsyncStore
from ..urls import redact_url, scrub
from .sql import TAMPERABLE, key_row

with extra_imports("postgres", "the PostgreSQL store"):
    import psycopg
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import AsyncConnectionPool, PoolTimeout

from .postgres_conn import (
    _has_input,
    _one_line,
    check_server,
    connect_cause,
    split_options,
    split_schema,
)
from .postgres_migrate import DEFAULT_MIGRATION_TIMEOUT, migrate, require_store
from .postgres_pooler import behind_pooler, refused_startup_option, say_polling, schema_refused
from .postgres_reads import RECORD_AND_KEYS, read_sql, record_and_key_rows
from .postgres_rows import _append_args
from .postgres_schema import _APPEND_SQL, MIGRATIONS
from .postgres_writes import UPSERT_KEY, LockNames, write_tx

CHANNEL = "planfence_changes"


T = TypeVar("T")
__all__ = ["MIGRATIONS", "PostgresStore", "connect_cause", "split_schema"]


class _Progress:
    """How far one attempt went: once a COMMIT may have been sent, it must not be repeated."""

    __slots__ = ("maybe_committed",)

    def __init__(self) -> None:
        self.maybe_committed = False


class PostgresStore(AsyncStore):
    optional_reads = frozenset({Lineage})
    supports_leases = True
    shared_writers = True

    def __init__(
        self,
        url: str,
        *,
        limits: StoreLimits = DEFAULT_LIMITS,
        min_size: int = 1,
        max_size: int = 8,
        connect_timeout: float = 5.0,
        create: bool = True,
    ) -> None:
        super().__init__(limits=limits)
        self.url = url
        self.poll_interval = 0.25
        self._conninfo, options = split_options(url)
        self.schema = options.schema
        self.create = create if options.create is None else options.create
        self._allow_server = options.allow_server
        self.migration_timeout = options.migration_timeout or DEFAULT_MIGRATION_TIMEOUT
        try:
            params = conninfo_to_dict(self._conninfo)
        except psycopg.Error as exc:
            raise ConfigError(
                f"invalid PostgreSQL URL {redact_url(url)!r}: {_one_line(scrub(str(exc), url))}"
            ) from None
        for port in str(params.get("port") or "5432").split(","):
            if not port.strip().isdigit():
                raise ConfigError(f"invalid port {port!r} in PostgreSQL URL {redact_url(url)!r}")
        self._where = f"{params.get('host') or params.get('hostaddr') or 'localhost'}:" + str(
            params.get("port") or "5432"
        )
        kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": int(connect_timeout)}
        if self.schema:
            kwargs["options"] = f"-c search_path={self.schema}"
        if "application_name" not in params:
            kwargs["application_name"] = "planfence"  # how a DBA tells planfence's sessions apart
        self._kwargs = kwargs
        self._connect_timeout = connect_timeout
        self._pool = AsyncConnectionPool(
            self._conninfo,
            min_size=min_size,
            max_size=max_size,
            kwargs=kwargs,
            open=False,
            check=self._check_idle,
        )
        self._listener: psycopg.AsyncConnection[Any] | None = None
        self._listen_lock = asyncio.Lock()
        self._name_locks(self.schema or "public")
        self._ready = False
        self.behind_pooler = False
        """Whether a connection pooler sits in front of the server (found at open)."""

    def _name_locks(self, schema: str) -> None:
        # Advisory locks and NOTIFY channels are database-wide: name them after the schema the
        # tables live in, so stores in other schemas of the same database never wait on this
        # one's locks or wake its readers, while every store on these tables agrees on them.
        self.channel = f"{CHANNEL}_{schema}"[:63]
        self._names = LockNames(f"{schema}:", f"planfence-feed:{schema}", self.channel)

    async def _open(self) -> None:
        if self._ready:
            return
        # One plain connection first: a server that cannot be used is one error naming the
        # cause, at once, not a pool retrying in the background until its timeout.
        try:
            conn = await psycopg.AsyncConnection.connect(self._conninfo, **self._kwargs)
        except psycopg.Error as exc:
            cause = scrub(connect_cause(exc), self.url)
            if self.schema and refused_startup_option(cause):
                raise schema_refused(self._where, self.schema, cause) from None
            raise StoreUnavailableError(
                f"cannot connect to PostgreSQL at {self._where}: {cause}"
            ) from None
        try:
            async with conn:
                check_server(await self._server_version(conn), self._where, self._allow_server)
                if await behind_pooler(conn, self._where):
                    self._through_pooler()
                await self._migrate(conn)
            await self._pool.open(wait=True, timeout=self._connect_timeout)
        except (psycopg.Error, PoolTimeout, TimeoutError) as exc:
            raise self._unavailable(exc, "cannot set up the PostgreSQL store") from exc
        self._ready = True

    def _through_pooler(self) -> None:
        """Keep no session state: see `postgres_pooler`."""
        if self.schema:
            raise schema_refused(self._where, self.schema)
        self.behind_pooler = True
        self._kwargs["prepare_threshold"] = None  # the pool's connections take these too
        say_polling(self._where, self.poll_interval)

    async def _server_version(self, conn: psycopg.AsyncConnection[Any]) -> str:
        """What the server says it is (`SELECT version()`)."""
        row = await (await conn.execute("SELECT version()")).fetchone()
        return str(row[0]) if row and row[0] else ""

    async def _migrate(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if not self.create:
            await require_store(conn, redact_url(self.url), self.schema)
        where = self._where
        self._name_locks(
            await migrate(conn, schema=self.schema, timeout=self.migration_timeout, where=where)
        )

    async def _check_idle(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """The pool's check before handing a connection out. A round trip per operation would
        double the latency of every gate check, so only a connection whose socket has pending
        input (the usual sign of a dropped connection) is checked against the server."""
        if conn.closed or conn.broken or _has_input(conn):
            try:
                await AsyncConnectionPool.check_connection(conn)
            except Exception:
                await self._renew_pool()
                raise

    async def _renew_pool(self) -> None:
        """After one dead connection, replace every idle one: a server restart or a session purge
        drops them all, and the pool would otherwise find them dead one by one, pausing longer
        after each."""
        drain = getattr(self._pool, "drain", None)  # psycopg_pool 3.3+
        if drain is not None:
            await drain()

    def _unavailable(self, exc: BaseException, what: str = "PostgreSQL store") -> Exception:
        return StoreUnavailableError(f"{what}: {_one_line(scrub(str(exc), self.url))}")

    async def _close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.close()
        await self._pool.close()
        self._ready = False

    async def _session(
        self, work: Callable[[psycopg.AsyncConnection[Any], _Progress], Awaitable[T]]
    ) -> T:
        """Run `work` on a pooled connection. If that connection breaks before `work` may have
        committed anything, run it once more on another one (the server may have restarted or
        ended the pool's sessions); any other failure is a `StoreUnavailableError`."""
        self._check_open()  # a closed store never runs `setup` again (it would reconnect)
        if not self._ready:
            await self.setup()
        for attempt in (1, 2):
            progress = _Progress()
            conn: psycopg.AsyncConnection[Any] | None = None
            try:
                async with self._pool.connection() as conn:
                    return await work(conn, progress)
            except (psycopg.Error, PoolTimeout) as exc:
                self._check_open()  # the store closed under this operation
                broken = conn is not None and conn.broken
                if attempt == 1 and broken and not progress.maybe_committed:
                    await self._renew_pool()
                    continue
                raise self._unavailable(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    # ---- primitives

    async def _read(self, ops: Sequence[ReadOp]) -> list[Any]:
        pair = record_and_keys(ops)  # a gate's check: its plan and the heads of D(a)
        if pair is not None:
            record_id, keys = pair
            return record_and_key_rows(await self._fetch(RECORD_AND_KEYS, (record_id, list(keys))))
        plans = [read_sql(op) for op in ops]
        if len(plans) == 1:  # one statement is a snapshot by itself
            sql, args, parse = plans[0]
            return [parse(await self._fetch(sql, args))]
        if sum(not isinstance(op, GetRecords | Lineage) for op in ops) <= 1:
            # Records never change, so beside at most one read of what does (the heads of a
            # plan's scope, say) any instant will do: one pipeline, no transaction to open.
            async def pipelined(conn: psycopg.AsyncConnection[Any], _: _Progress) -> list[Any]:
                async with conn.pipeline():
                    cursors = [await conn.execute(sql, args) for sql, args, _ in plans]
                return [
                    parse(await c.fetchall())
                    for c, (_, _, parse) in zip(cursors, plans, strict=True)
                ]

            return await self._session(pipelined)

        # One network round trip: every statement goes out as one pipeline, inside one
        # repeatable-read transaction, so the answers describe the same instant.
        async def read(conn: psycopg.AsyncConnection[Any], _: _Progress) -> list[Any]:
            async with conn.pipeline(), conn.transaction():
                await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                cursors = [await conn.execute(sql, args) for sql, args, _ in plans]
            return [
                parse(await c.fetchall()) for c, (_, _, parse) in zip(cursors, plans, strict=True)
            ]

        return await self._session(read)

    async def _write(self, batch: WriteBatch) -> WriteResult:
        at = utc_now()
        if batch.journal_only and len(batch.entries) == 1:
            # A journal entry alone (an audit record): one statement, no transaction to open.
            [entry] = batch.entries
            rows = await self._fetch(_APPEND_SQL, _append_args(entry, at), commits=True)
            return WriteResult(entry_ids=[int(rows[0][0])])

        async def write(conn: psycopg.AsyncConnection[Any], progress: _Progress) -> WriteResult:
            async with conn.transaction():
                result = await write_tx(conn, batch, at, self._names)
                progress.maybe_committed = True  # COMMIT goes out as the block ends
                return result

        return await self._session(write)

    async def _fetch(
        self, sql: str, args: Sequence[Any], *, commits: bool = False
    ) -> list[tuple[Any, ...]]:
        """Run one statement (autocommit); `commits`: it writes, so it is never sent twice."""

        async def run(conn: psycopg.AsyncConnection[Any], progress: _Progress) -> list[Any]:
            progress.maybe_committed = commits
            cur = await conn.execute(sql, args)
            return await cur.fetchall()

        return await self._session(run)

    async def _tamper_record(self, record_id: str, fields: Mapping[str, Any] | None) -> None:
        """For integrity tests: change stored fields of a record (None: delete its row)."""
        if fields is None:
            await self._fetch("DELETE FROM pf_records WHERE id = %s RETURNING id", (record_id,))
            return
        for name, value in fields.items():
            stored = list(value) if name == "parents" else value
            await self._fetch(
                f"UPDATE pf_records SET {TAMPERABLE[name]} = %s WHERE id = %s RETURNING id",
                (stored, record_id),
                commits=True,
            )

    async def _tamper_head(self, state: KeyState) -> None:
        """For trust tests: overwrite a key's row (owner, head, sequence, epoch, signature)."""
        await self._fetch(UPSERT_KEY + " RETURNING key", key_row(state), commits=True)

    async def _wait_for_change(self, since: int, timeout: float) -> None:
        if self.behind_pooler:  # a pooler's server sessions do not keep a LISTEN: poll
            await super()._wait_for_change(since, timeout)
            return
        if self._listen_lock.locked():  # someone else is listening; a short sleep is enough
            await asyncio.sleep(min(self.poll_interval, timeout))
            return
        async with self._listen_lock:
            self._check_open()  # never a new listener for a store that closed meanwhile
            try:
                if self._listener is None or self._listener.closed:
                    self._listener = await psycopg.AsyncConnection.connect(
                        self._conninfo, **self._kwargs
                    )
                    await self._listener.execute(f"LISTEN {self.channel}")
                async for _ in self._listener.notifies(timeout=timeout, stop_after=1):
                    break
            except psycopg.OperationalError:
                self._listener = None  # the next call reconnects; the reader re-reads anyway
                await asyncio.sleep(min(self.poll_interval, timeout))
