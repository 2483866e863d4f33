"""Open a store from a URL: `memory://`, `sqlite:///path.db`, `postgresql://...`.

A URL's scheme names its backend in a registry: the built-in ones below, those added with
`register_backend`, and those other packages declare in the `planfence.stores` entry-point group
(each entry, named by its scheme, points to a factory `(url, limits, create) -> AsyncStore`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from .errors import ConfigError
from .records import DEFAULT_LIMITS, StoreLimits
from .signing import HeadSigner
from .store import AsyncStore
from .sync import Store
from .urls import redact_url, url_flag

DEFAULT_STORE_URL = "sqlite:///.planfence/memory.db"
STORE_ENV = "PLANFENCE_STORE"


def default_store_url() -> str:
    return os.environ.get(STORE_ENV) or DEFAULT_STORE_URL


BackendFactory = Callable[[str, StoreLimits, bool], AsyncStore]
"""Builds (does not connect) a store for a URL: `(url, limits, create) -> AsyncStore`."""
ENTRY_POINT_GROUP = "planfence.stores"


def sqlite_on_loop(url: str) -> str:
    """`url` with `io=loop` when it names a SQLite store and does not choose where its calls run
    itself; any other URL unchanged. Servers open their store this way: a gated request then
    reads and writes SQLite on the server's event loop, without a hop to the store's thread
    (a write that would wait for another process's lock still waits on the thread)."""
    if not url.startswith("sqlite:") or re.search(r"[?&]io=", url):
        return url
    return f"{url}{'&' if '?' in url else '?'}io=loop"


def _memory(url: str, limits: StoreLimits, create: bool) -> AsyncStore:
    from .backends.memory import MemoryStore

    return MemoryStore(limits=limits)


def _sqlite(url: str, limits: StoreLimits, create: bool) -> AsyncStore:
    from .backends.sqlite import SQLiteStore, sqlite_options_from_url, sqlite_path_from_url

    options = sqlite_options_from_url(url)
    return SQLiteStore(
        sqlite_path_from_url(url),
        limits=limits,
        synchronous=options.get("synchronous", "NORMAL"),
        create=_flag(options["create"]) if "create" in options else create,
        io=options.get("io", "thread"),
    )


def _postgres(url: str, limits: StoreLimits, create: bool) -> AsyncStore:
    from .backends.postgres import PostgresStore

    return PostgresStore(url, limits=limits, create=create)


BACKENDS: dict[str, BackendFactory] = {
    "memory": _memory,
    "sqlite": _sqlite,
    "postgresql": _postgres,
    "postgres": _postgres,
}


def register_backend(scheme: str, factory: BackendFactory) -> None:
    """Open URLs `scheme://...` with `factory` (replacing any backend for that scheme)."""
    if not scheme or not scheme.replace("+", "").replace("-", "").isalnum():
        raise ConfigError(f"invalid URL scheme {scheme!r}")
    BACKENDS[scheme] = factory


def _backend(scheme: str) -> BackendFactory | None:
    found = BACKENDS.get(scheme)
    if found is not None:
        return found
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP, name=scheme):
        factory = ep.load()
        if not callable(factory):
            raise ConfigError(f"entry point {ep.value!r} for {scheme}:// is not a store factory")
        BACKENDS[scheme] = factory
        return factory  # type: ignore[no-any-return]
    return None


def create_async_store(
    url: str | None = None,
    *,
    limits: StoreLimits = DEFAULT_LIMITS,
    create: bool = True,
    signer: HeadSigner | None = None,
) -> AsyncStore:
    """Build (but do not connect) the backend for `url`; `await store.setup()` or `async with`.

    Args:
        url: `memory://`, `sqlite:///relative.db`, `sqlite:////abs.db` or `postgresql://...`;
            default `$PLANFENCE_STORE` or the local SQLite file.
        limits: size limits enforced before anything is written.
        create: whether a store that does not exist may be created: a SQLite file (with its
            folders), or a PostgreSQL schema and its tables (also in an existing schema, such
            as an empty `public`, that holds no planfence tables). A `?create=1` or
            `?create=0` flag on the URL overrides it. Memory stores ignore it.
        signer: signs the head advances its agent makes (an Ed25519 `SigningKey`), so readers
            that do not trust the store can check them (see `signing`).

    Raises:
        ConfigError: an unsupported or malformed URL. A store that may not be created and does
            not exist raises `StoreNotFoundError` (a `ConfigError`) at setup.
    """
    url = url or default_store_url()
    scheme, sep, _ = url.partition("://")
    factory = _backend(scheme) if sep else None
    if factory is None:
        raise ConfigError(
            f"unsupported store URL {redact_url(url)!r}: "
            "use memory://, sqlite:///path.db or postgresql://..."
        )
    store = factory(url, limits, create)
    if signer is not None:
        store.signer = signer
    return store


def _flag(text: str) -> bool:
    return url_flag("create", text)


async def open_async_store(
    url: str | None = None,
    *,
    limits: StoreLimits = DEFAULT_LIMITS,
    create: bool = True,
    signer: HeadSigner | None = None,
) -> AsyncStore:
    """A ready async store for `url` (see `create_async_store`); close it with `aclose()`."""
    store = create_async_store(url, limits=limits, create=create, signer=signer)
    try:
        await store.setup()
    except BaseException:
        await store.aclose()
        raise
    return store


def open_store(
    url: str | None = None,
    *,
    limits: StoreLimits = DEFAULT_LIMITS,
    create: bool = True,
    signer: HeadSigner | None = None,
) -> Store:
    """A ready synchronous store for `url` (default: $PLANFENCE_STORE or the local SQLite file).

    `create` and `signer` are as for `create_async_store`.
    """
    return Store(create_async_store(url, limits=limits, create=create, signer=signer))
