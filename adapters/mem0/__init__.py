"""Janus in front of a Mem0 memory (`mem0ai`): `JanusMemory` wraps a `mem0.Memory` so that the
writes to one scope's memories (a user's, an agent's or a run's) are deployed only when the
Janus controller finds they break nothing the team relies on.

    memory = JanusMemory(Memory.from_config(config), scope={"user_id": "team"},
                         controller=controller, records=planfence_store)
    with memory.working_on(task):
        memory.add([{"role": "user", "content": "..."}], user_id="team", infer=False)

Needs the `mem0` extra (and `janus`); names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planfence.adapters._lazy import lazy_exports

if TYPE_CHECKING:
    from .janus_memory import JanusMemory

_EXPORTS = {"JanusMemory": "janus_memory"}

__all__ = ["JanusMemory"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
