"""An owner writes a new version of a key from another process: `owner_put.py STORE KEY JSON
AUTHOR` (the TypeScript-client scenarios run it between calls)."""

from __future__ import annotations

import json
import sys

import anyio

from planfence.shared_memory import open_async_store


async def main(url: str, key: str, value: str, author: str) -> None:
    store = await open_async_store(url, create=False)
    try:
        await store.put(key, json.loads(value), author=author)
    finally:
        await store.aclose()


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:5])
