"""Run an ASGI app with uvicorn for a command, and say on stderr where it listens."""

from __future__ import annotations

import asyncio
import sys
from typing import Any


def serve_app(
    app: Any, *, host: str, port: int, log_level: str, ready: str, notes: tuple[str, ...] = ()
) -> int:
    """Serve `app` until stopped; once listening, print `ready` followed by the URL (with the
    real port when `port` is 0), then each of `notes` on its own line (the ready line comes
    first, for whoever waits for it). Returns 0 after a clean stop, 1 when the server never
    started."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False)
    server = uvicorn.Server(config)

    async def announce() -> None:
        while not server.started:
            if server.should_exit:
                return
            await asyncio.sleep(0.02)
        shown_host, shown_port = host, port
        for listener in server.servers:
            for sock in listener.sockets:
                shown_host, shown_port = sock.getsockname()[:2]
                break
        shown = f"[{shown_host}]" if ":" in str(shown_host) else shown_host
        print(f"{ready} http://{shown}:{shown_port}", file=sys.stderr, flush=True)
        for note in notes:
            print(note, file=sys.stderr, flush=True)

    async def main() -> None:
        watcher = asyncio.create_task(announce())
        try:
            await server.serve()
        finally:
            watcher.cancel()

    asyncio.run(main())
    return 0 if server.started else 1
