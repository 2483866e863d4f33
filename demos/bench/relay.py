"""The floor under any MCP proxy written in Python: a raw line relay between an MCP client and a
stdio server. It reads each line and writes it on, both ways, on the event loop, as
`planfence proxy` reads and writes its pipes, and understands nothing.

    python -m planfence.demos.bench.relay -- SERVER_COMMAND [ARGS...]
"""

from __future__ import annotations

import asyncio
import sys

LIMIT = 64 * 1024 * 1024


async def relay(command: list[str]) -> None:
    server = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=LIMIT
    )
    assert server.stdin is not None and server.stdout is not None
    loop = asyncio.get_running_loop()
    client = asyncio.StreamReader(limit=LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(client), sys.stdin)
    out, _ = await loop.connect_write_pipe(asyncio.Protocol, sys.stdout)
    upstream = server.stdout

    async def down() -> None:
        while line := await upstream.readline():
            out.write(line)

    answers = loop.create_task(down())
    while line := await client.readline():
        server.stdin.write(line)
    server.stdin.close()
    await server.wait()
    answers.cancel()


def main(argv: list[str]) -> None:
    command = argv[1:] if argv[:1] == ["--"] else argv
    asyncio.run(relay(command))


if __name__ == "__main__":
    main(sys.argv[1:])
