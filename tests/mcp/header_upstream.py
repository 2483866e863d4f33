"""The test upstream server over streamable HTTP, recording the headers of every request it gets
(one JSON line each), so a test can see what the proxy sent it.

    python header_upstream.py --effects FILE --headers FILE --port N
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import uvicorn
from upstream_server import build


def record(log: Path, headers: dict[str, str]) -> None:
    with log.open("a") as f:
        f.write(json.dumps(headers) + "\n")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--effects", required=True)
    p.add_argument("--headers", required=True)
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    inner = build(Path(args.effects)).streamable_http_app()
    log = Path(args.headers)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            record(log, headers)
        await inner(scope, receive, send)

    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", lifespan="on")


if __name__ == "__main__":
    main()
