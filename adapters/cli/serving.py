"""Run an ASGI app with uvicorn (the `http` extra) for a command, and say on stderr where it
listens.

The listening socket is bound before anything else starts, so a busy or forbidden port is one
`planfence: error:` line (exit 1), and the ready line is printed only once the server accepts
connections on it.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import sys
from collections.abc import Callable
from typing import Any

from planfence.shared_memory import ConfigError
from planfence.shared_memory.extras import extra_imports


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host`:`port` (0: any free port), ready to hand to uvicorn.

    Raises:
        ConfigError: the address is in use, cannot be assigned, or the name does not resolve.
    """
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    # The family uvicorn would choose for `host`: IPv6 for an IPv6 literal, else IPv4.
    want = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        infos = socket.getaddrinfo(host, port, want, socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {shown}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.set_inheritable(True)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            why = "the port is already in use (another server is listening there: stop it, or "
            why += "choose another port with --port)"
        else:
            why = exc.strerror or str(exc)
        raise ConfigError(f"cannot listen on {shown}: {why}") from None
    return sock


def socket_url(sock: socket.socket, path: str = "") -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in str(host) else host
    return f"http://{shown}:{port}{path}"


async def run_uvicorn(
    app: Any,
    sock: socket.socket,
    *,
    log_level: str,
    on_ready: Callable[[], None],
    **config: Any,
) -> bool:
    """Serve `app` on the bound `sock` until stopped; `on_ready` runs once it accepts
    connections. Returns whether the server started."""
    with extra_imports("http", "serving over HTTP"):
        import uvicorn

    host, port = sock.getsockname()[:2]
    server = uvicorn.Server(
        uvicorn.Config(app, host=host, port=port, log_level=log_level, **config)
    )

    async def announce() -> None:
        while not server.started:
            if server.should_exit:
                return
            await asyncio.sleep(0.02)
        on_ready()

    watcher = asyncio.ensure_future(announce())
    try:
        await server.serve(sockets=[sock])
    finally:
        watcher.cancel()
    return bool(server.started)


def serve_app(
    app: Any, *, host: str, port: int, log_level: str, ready: str, notes: tuple[str, ...] = ()
) -> int:
    """Serve `app` until stopped; once listening, print `ready` followed by the URL (with the
    real port when `port` is 0), then each of `notes` on its own line (the ready line comes
    first, for whoever waits for it). Returns 0 after a clean stop, 1 when the server never
    started.

    Raises:
        ConfigError: the port is busy or the address cannot be used (nothing was started).
    """
    sock = listen_socket(host, port)

    def say_ready() -> None:
        print(f"{ready} {socket_url(sock)}", file=sys.stderr, flush=True)
        for note in notes:
            print(note, file=sys.stderr, flush=True)

    try:
        started = asyncio.run(
            run_uvicorn(app, sock, log_level=log_level, on_ready=say_ready, access_log=False)
        )
    finally:
        sock.close()
    return 0 if started else 1
