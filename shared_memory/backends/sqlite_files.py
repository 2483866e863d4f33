"""SQLite store URLs and files: options, literal paths, URIs, and opening under contention."""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import quote

from ..errors import ConfigError
from ..urls import redact_url

T = TypeVar("T")

_SYNC_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")


def sqlite_options_from_url(url: str) -> dict[str, str]:
    """Options in the URL's query: `synchronous=normal|full` (default normal: durable across
    process crashes; full also across power loss, at the cost of an fsync per write),
    `create=1|0` (whether a missing file may be created; see `create_async_store`), and
    `io=thread|loop` (where calls run; see `sqlite_runner`, which checks the value)."""
    from urllib.parse import parse_qsl

    query = url.partition("?")[2]
    opts = dict(parse_qsl(query, keep_blank_values=True))
    unknown = set(opts) - {"synchronous", "create", "io"}
    if unknown:
        raise ConfigError(
            f"unknown SQLite store option {sorted(unknown)[0]!r} in {redact_url(url)!r}"
        )
    if "synchronous" in opts and opts["synchronous"].upper() not in _SYNC_MODES:
        raise ConfigError(f"synchronous must be one of {', '.join(_SYNC_MODES).lower()}")
    return opts


def sqlite_path_from_url(url: str) -> str:
    """The file path in a SQLite URL, taken literally: `sqlite:///file:x.db` names a file called
    `file:x.db` (relative to the working directory), never an SQLite URI."""
    if not url.startswith("sqlite://"):
        raise ConfigError(f"not a sqlite URL: {redact_url(url)!r}")
    rest = url[len("sqlite://") :].partition("?")[0]
    if rest in ("", "/", "/:memory:"):
        return ":memory:"
    if not rest.startswith("/"):
        raise ConfigError(
            "sqlite URL must look like sqlite:///relative.db or sqlite:////abs.db: "
            f"{redact_url(url)!r}"
        )
    return rest[1:]


def _file_uri(path: str, mode: str) -> str:
    """An SQLite URI for an absolute path: every character with a meaning in URIs is escaped,
    so the path is read exactly as written."""
    return f"file://{quote(path, safe='/')}?mode={mode}"


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (and their extended codes)
    text = str(exc)
    return "locked" in text or "busy" in text


def _until_not_busy(fn: Callable[[], T], timeout: float) -> T:
    """Run `fn` again while SQLite refuses with busy/locked, until `timeout` seconds have passed.

    The busy timeout does not cover every lock: switching a new file to WAL needs an exclusive
    lock that SQLite refuses at once (to avoid a deadlock) when another connection is making the
    same switch, so several processes opening one new store would fail after a few milliseconds.
    """
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause * random.uniform(0.5, 1.5))  # jitter: racing openers fall out of step
        pause = min(pause * 2, 0.1)
