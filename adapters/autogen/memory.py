"""`SharedMemory`: an AutoGen `Memory` that shows an agent the current public records.

Each turn, `update_context` reads the heads of the configured keys, shows them in one system
message with their values, and returns them as that turn's memory results, each carrying its
record id. The agent yields those results in its own turn's `MemoryQueryEvent`, and a
`PlanningAgent` stamps exactly those ids on its plan as parents. The memory keeps no read set of
its own, so one `SharedMemory` can serve any number of agents and teams at once.

The system message of an earlier turn is replaced, not kept: a model context that still showed
an older version of a record would let the model plan from a version its plan does not cite.
The memory recognises its own earlier messages by their text (its `header` line followed only
by records of the keys it shows): give two `SharedMemory`s of one agent different headers.

When the store cannot be reached, the turn's message says the records cannot be read (and
replaces the records shown before), and the turn's one memory result says why
(`metadata["unavailable"]`): a `PlanningAgent` then stamps no plan, and the executor's gated
calls are refused as `store_unavailable`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from planfence.shared_memory import AsyncStore, ConfigError, Record, Store
from planfence.shared_memory.extras import extra_imports

with extra_imports("autogen", "planfence.adapters.autogen"):
    from autogen_core import CancellationToken, Component
    from autogen_core.memory import (
        Memory,
        MemoryContent,
        MemoryMimeType,
        MemoryQueryResult,
        UpdateContextResult,
    )
    from autogen_core.model_context import ChatCompletionContext, ChatCompletionContextState
    from autogen_core.models import SystemMessage
from pydantic import BaseModel, Field
from typing_extensions import Self

from planfence.plugins.gate.outage import PlanUnavailable, store_down
from planfence.plugins.gate.reads import read_heads

from ..base import DEFAULT_HEADER, UNREADABLE, records_text, unreadable_text
from ._store import store_bridge

# Marks the memory results that are public records, as opposed to other memories' results.
SOURCE = "planfence"
UNREADABLE_START = UNREADABLE.split("{", 1)[0]


class SharedMemoryConfig(BaseModel):
    """Declarative form of `SharedMemory`; the store travels as a URL."""

    store: str
    keys: list[str] = Field(default_factory=list)
    prefixes: list[str] = Field(default_factory=list)
    agent: str | None = None
    header: str = DEFAULT_HEADER


class SharedMemory(Memory, Component[SharedMemoryConfig]):
    """Injects the current versions of public records into an agent's context each turn.

    Args:
        store: an `AsyncStore`, a sync `Store`, or a store URL (opened on first use).
        keys: keys whose current version the agent sees.
        prefixes: key prefixes; every key under them is shown too.
        agent: the agent id that `add` publishes as (it must own the keys it writes).
        header: the first line of the injected system message.
    """

    component_type = "memory"
    component_config_schema = SharedMemoryConfig
    component_provider_override = "planfence.adapters.autogen.SharedMemory"

    def __init__(
        self,
        store: AsyncStore | Store | str,
        *,
        keys: Iterable[str] = (),
        prefixes: Iterable[str] = (),
        agent: str | None = None,
        header: str = DEFAULT_HEADER,
    ) -> None:
        self.store = store_bridge(store)
        self.keys = list(keys)
        self.prefixes = list(prefixes)
        if not self.keys and not self.prefixes:
            raise ConfigError("SharedMemory needs keys or prefixes to show")
        self.agent = agent
        self.header = header

    async def read(self) -> list[Record]:
        """The current record of every configured key that has a version, ordered by key."""
        keys, prefixes = self.keys, self.prefixes
        return await self.store.acall(read_heads, keys, prefixes)

    async def update_context(self, model_context: ChatCompletionContext) -> UpdateContextResult:
        """Show the current records; the result (this turn's read set) names their ids."""
        try:
            records = await self.read()
        except Exception as exc:
            if not store_down(exc):
                raise
            down = PlanUnavailable.of(exc)
            text = unreadable_text(down.error)
            await self._replace_shown(model_context, SystemMessage(content=text))
            return UpdateContextResult(memories=MemoryQueryResult(results=[_unavailable(down)]))
        if records:
            text = records_text(self.header, records)
            await self._replace_shown(model_context, SystemMessage(content=text))
        return UpdateContextResult(
            memories=MemoryQueryResult(results=[_content(r) for r in records])
        )

    async def _replace_shown(
        self, model_context: ChatCompletionContext, message: SystemMessage
    ) -> None:
        """Drop the records this memory showed on earlier turns and show `message` at the end,
        through the context's own state API (every `ChatCompletionContext` keeps its messages
        in its state; a windowed one still chooses what the model sees)."""
        state = ChatCompletionContextState.model_validate(await model_context.save_state())
        kept = [m for m in state.messages if not self._shown_here(m)]
        if len(kept) == len(state.messages):
            await model_context.add_message(message)
            return
        state.messages = [*kept, message]
        await model_context.load_state(state.model_dump())

    def _shown_here(self, message: Any) -> bool:
        """Whether `message` is a records message of this memory (same header, its keys)."""
        if not isinstance(message, SystemMessage):
            return False
        if message.content.startswith(UNREADABLE_START):
            return True
        first, *lines = message.content.split("\n")
        if first != self.header or not lines:
            return False
        for line in lines:
            key = line[2:].split(" (version ", 1)[0] if line.startswith("- ") else None
            if key is None or not self._shows(key):
                return False
        return True

    def _shows(self, key: str) -> bool:
        return key in self.keys or any(key.startswith(p) for p in self.prefixes)

    async def query(
        self,
        query: str | MemoryContent,
        cancellation_token: CancellationToken | None = None,
        **kwargs: Any,
    ) -> MemoryQueryResult:
        """Current records whose key contains `query` (all configured ones for an empty query)."""
        text = query if isinstance(query, str) else str(query.content)
        return MemoryQueryResult(results=[_content(r) for r in await self.read() if text in r.key])

    async def add(
        self, content: MemoryContent, cancellation_token: CancellationToken | None = None
    ) -> None:
        """Publish a new version of `content.metadata["key"]` as `agent` (its owner)."""
        key = (content.metadata or {}).get("key")
        if not isinstance(key, str) or self.agent is None:
            raise ConfigError(
                "SharedMemory.add publishes a record: set agent= and metadata={'key': ...}"
            )
        value = content.content
        if not isinstance(value, str | dict):
            raise ConfigError("SharedMemory.add takes text or JSON content")
        author = self.agent

        async def put(store: AsyncStore) -> None:
            await store.put(key, value, author=author)

        await self.store.acall(put)

    async def clear(self) -> None:
        """Nothing to clear: public records are immutable and the memory keeps no read state."""

    async def close(self) -> None:
        await self.store.aclose()

    def _to_config(self) -> SharedMemoryConfig:
        return SharedMemoryConfig(
            store=self.store.url,
            keys=self.keys,
            prefixes=self.prefixes,
            agent=self.agent,
            header=self.header,
        )

    @classmethod
    def _from_config(cls, config: SharedMemoryConfig) -> Self:
        return cls(
            config.store,
            keys=config.keys,
            prefixes=config.prefixes,
            agent=config.agent,
            header=config.header,
        )


def _content(record: Record) -> MemoryContent:
    return MemoryContent(
        content={"key": record.key, "value": record.value},
        mime_type=MemoryMimeType.JSON,
        metadata={
            "record_id": record.id,
            "key": record.key,
            "author": record.author,
            "source": SOURCE,
        },
    )


def _unavailable(down: PlanUnavailable) -> MemoryContent:
    return MemoryContent(
        content={"unavailable": down.error},
        mime_type=MemoryMimeType.JSON,
        metadata={"source": SOURCE, "unavailable": down.error},
    )


def unavailable_of(results: Sequence[MemoryContent]) -> PlanUnavailable | None:
    """Why the records could not be read, when a `SharedMemory` said so in `results`."""
    for content in results:
        meta = content.metadata or {}
        if meta.get("source") == SOURCE and isinstance(meta.get("unavailable"), str):
            return PlanUnavailable(meta["unavailable"])
    return None


def record_ids(results: Sequence[MemoryContent]) -> list[str]:
    """The public record ids among memory results (what a `SharedMemory` showed), in order."""
    ids: list[str] = []
    for content in results:
        meta = content.metadata or {}
        record_id = meta.get("record_id")
        if meta.get("source") == SOURCE and isinstance(record_id, str):
            ids.append(record_id)
    return ids
