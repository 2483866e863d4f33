"""Where an AutoGen component finds its shared-memory store, and how it reaches it.

Components must survive `dump_component` / `load_component`, so they carry the store as a URL.
A store handed over as an object is registered under its URL, so a component reloaded in the same
process (an in-memory store above all) finds the very same store instead of an empty twin.
"""

from __future__ import annotations

import itertools
import weakref

from planfence.shared_memory import AsyncStore, Store, StoreBridge

_LIVE: weakref.WeakValueDictionary[str, AsyncStore | Store] = weakref.WeakValueDictionary()
_NAMES: weakref.WeakKeyDictionary[AsyncStore | Store, str] = weakref.WeakKeyDictionary()
_COUNTER = itertools.count(1)


def store_url(store: AsyncStore | Store) -> str:
    """The URL a component dumps for `store`; registered so reloads in this process reuse it."""
    name = _NAMES.get(store)
    if name is None:
        name = store.url or "memory://"
        if name.startswith("memory://"):
            # Every in-memory store answers to "memory://": give each its own process-local name.
            name = f"memory://planfence-{next(_COUNTER)}"
        _NAMES[store] = name
    _LIVE.setdefault(name, store)
    return name


def store_bridge(store: AsyncStore | Store | str) -> StoreBridge:
    """The bridge a component reaches its store through; its `url` is what the component dumps.

    A URL naming a store registered in this process reaches that very store; any other URL is
    opened on first use.
    """
    if isinstance(store, str):
        live = _LIVE.get(store) if store else None
        bridge = StoreBridge(store if live is None else live)
        bridge.url = store
        return bridge
    bridge = StoreBridge(store)
    bridge.url = store_url(store)
    return bridge
