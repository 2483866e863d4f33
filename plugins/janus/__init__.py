"""planfence.plugins.janus: decide whether a memory update is deployed or the old memory kept.

    from planfence.plugins.janus import JanusConfig, JanusController, FunctionEvaluator

    controller = JanusController(FunctionEvaluator(judge), config=JanusConfig(seed=1))
    verdict = await controller.consider(current_memory, candidate_memory, task)

Janus wraps any memory updater; `JanusStoreHook` puts it on the write path of a shared-memory
key. By default a budgeted trigger compares the candidates most likely to harm (a harm
probability from cheap signals, calibrated online from the controller's own comparisons) on
coverage, boundary and fresh tasks plus tasks aimed at the lines the edit changed, and a tie
keeps the current memory; `JanusConfig.paper()` is the authors' method (momentum trigger, ties
deploy).

The controller computes with numpy (the `janus` extra): names are imported on first use, so
`planfence.plugins.janus.memory` and the errors load without it, and using the controller
without numpy fails with the pip hint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planfence.shared_memory.extras import lazy_exports

if TYPE_CHECKING:
    from .config import JanusConfig
    from .controller import JanusController
    from .decision import JanusVerdict, accept
    from .encoders import (
        ChunkPooledEncoder,
        Encoder,
        HashingEncoder,
        SentenceEncoder,
        WordLlamaEncoder,
    )
    from .errors import JanusConfigError, JanusError
    from .evalset import CoverageMemo
    from .evaluators import Evaluator, FunctionEvaluator, LLMEvaluator
    from .store_hook import JanusStoreHook
    from .tasks import Task
    from .trigger import cosine
    from .updaters.base import MemoryUpdater
    from .updaters.dcrs import DCRSUpdater
    from .updaters.expel import ExpeLUpdater

_EXPORTS = {
    "ChunkPooledEncoder": "encoders",
    "CoverageMemo": "evalset",
    "DCRSUpdater": "updaters.dcrs",
    "Encoder": "encoders",
    "Evaluator": "evaluators",
    "ExpeLUpdater": "updaters.expel",
    "FunctionEvaluator": "evaluators",
    "HashingEncoder": "encoders",
    "JanusConfig": "config",
    "JanusConfigError": "errors",
    "JanusController": "controller",
    "JanusError": "errors",
    "JanusStoreHook": "store_hook",
    "LLMEvaluator": "evaluators",
    "MemoryUpdater": "updaters.base",
    "SentenceEncoder": "encoders",
    "Task": "tasks",
    "JanusVerdict": "decision",
    "WordLlamaEncoder": "encoders",
    "accept": "decision",
    "cosine": "trigger",
}

__all__ = [
    "ChunkPooledEncoder",
    "CoverageMemo",
    "DCRSUpdater",
    "Encoder",
    "Evaluator",
    "ExpeLUpdater",
    "FunctionEvaluator",
    "HashingEncoder",
    "JanusConfig",
    "JanusConfigError",
    "JanusController",
    "JanusError",
    "JanusStoreHook",
    "JanusVerdict",
    "LLMEvaluator",
    "MemoryUpdater",
    "SentenceEncoder",
    "Task",
    "WordLlamaEncoder",
    "accept",
    "cosine",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
