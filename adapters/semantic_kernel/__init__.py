"""planfence for Semantic Kernel: an auto function invocation filter that gates every function
the model calls, and shows the public records in the chat history.

    fence = PlanfenceFilter(store, policy, keys=["trip/42/requirements"], agent="booker")
    fence.install(kernel)
    await fence.show(history)
    await service.get_chat_message_content(history, settings, kernel=kernel)

Needs the `semantic-kernel` extra; names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planfence.adapters._lazy import lazy_exports

if TYPE_CHECKING:
    from .filter import PlanfenceFilter

_EXPORTS = {"PlanfenceFilter": "filter"}

__all__ = ["PlanfenceFilter"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
