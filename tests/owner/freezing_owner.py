"""The real owner service, which stops itself (SIGSTOP) once, right after it read its keys'
states for a request, while FREEZE_FILE exists: an owner frozen between reading and answering
(a VM pause, a long GC), so the test can change the world and then wake it with SIGCONT.

    python freezing_owner.py --agent old --store URL --port N --keyring FILE \\
        --signing-key FILE --freeze-file PATH
"""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Iterable, Mapping
from pathlib import Path

import uvicorn

from planfence.adapters.owner_service import SigningKey, load_keyring
from planfence.adapters.owner_service.server import create_app
from planfence.shared_memory import KeyState, create_async_store


def freeze_once(flag: Path) -> None:
    """Stop this process (until SIGCONT) if `flag` exists, removing it first."""
    if flag.exists():
        flag.unlink()
        os.kill(os.getpid(), signal.SIGSTOP)


def main() -> None:
    p = argparse.ArgumentParser()
    for flag in ("--agent", "--store", "--keyring", "--signing-key", "--freeze-file"):
        p.add_argument(flag, required=True)
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    store = create_async_store(args.store)
    read = store.states
    freeze = Path(args.freeze_file)

    async def states(keys: Iterable[str]) -> Mapping[str, KeyState]:
        found = await read(keys)
        freeze_once(freeze)
        return found

    store.states = states  # type: ignore[method-assign]
    keyring = load_keyring(args.keyring)
    app = create_app(args.agent, store, keyring, signing_key=SigningKey.load(args.signing_key))

    async def serve() -> None:
        await store.setup()
        try:
            config = uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning")
            await uvicorn.Server(config).serve()
        finally:
            await store.aclose()

    import asyncio

    asyncio.run(serve())


if __name__ == "__main__":
    main()
