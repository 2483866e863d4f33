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
    from .config import (
        MOMENTUM_SOURCES,
        TIE_RULES,
        TRIGGER_KINDS,
        JanusConfig,
        MomentumSource,
        TieRule,
        TriggerKind,
    )
    from .controller import JanusController, JanusUpdater, StepResult
    from .decision import Plan, Verdict, accept, finish_step, plan_step
    from .encoders import (
        CachedEncoder,
        ChunkPooledEncoder,
        Encoder,
        HashingEncoder,
        SentenceEncoder,
        WordLlamaEncoder,
        default_encoder,
        wordllama_available,
    )
    from .errors import (
        JanusConfigError,
        JanusConflictError,
        JanusError,
        JanusStateError,
        LLMBudgetExceededError,
        LLMError,
        LLMResponseError,
        LLMUnavailableError,
        UpdaterOutputError,
    )
    from .evalset import CoverageMemo
    from .evaluators import (
        Attempt,
        Evaluator,
        FunctionEvaluator,
        LLMEvaluator,
        Solver,
        check_answer,
    )
    from .llm import ENV_API_KEY, ENV_BASE_URL, ENV_MODEL, ChatClient, LLMSettings
    from .memory import Memory, render_memory
    from .state import JanusState, read_state_file, write_state_file
    from .store_hook import JanusStoreHook, Submission
    from .tasks import Feedback, Task
    from .trigger import TriggerInfo, cosine, decide_trigger, momentum_update
    from .updaters import DCRSUpdater, ExpeLUpdater, MemoryUpdater

_EXPORTS = {
    "Attempt": "evaluators",
    "CachedEncoder": "encoders",
    "ChatClient": "llm",
    "ChunkPooledEncoder": "encoders",
    "CoverageMemo": "evalset",
    "DCRSUpdater": "updaters",
    "ENV_API_KEY": "llm",
    "ENV_BASE_URL": "llm",
    "ENV_MODEL": "llm",
    "Encoder": "encoders",
    "Evaluator": "evaluators",
    "ExpeLUpdater": "updaters",
    "Feedback": "tasks",
    "FunctionEvaluator": "evaluators",
    "HashingEncoder": "encoders",
    "JanusConfig": "config",
    "JanusConfigError": "errors",
    "JanusConflictError": "errors",
    "JanusController": "controller",
    "JanusError": "errors",
    "JanusState": "state",
    "JanusStateError": "errors",
    "JanusStoreHook": "store_hook",
    "JanusUpdater": "controller",
    "LLMBudgetExceededError": "errors",
    "LLMError": "errors",
    "LLMEvaluator": "evaluators",
    "LLMResponseError": "errors",
    "LLMSettings": "llm",
    "LLMUnavailableError": "errors",
    "MOMENTUM_SOURCES": "config",
    "Memory": "memory",
    "MemoryUpdater": "updaters",
    "MomentumSource": "config",
    "Plan": "decision",
    "SentenceEncoder": "encoders",
    "Solver": "evaluators",
    "StepResult": "controller",
    "Submission": "store_hook",
    "TIE_RULES": "config",
    "TRIGGER_KINDS": "config",
    "Task": "tasks",
    "TieRule": "config",
    "TriggerInfo": "trigger",
    "TriggerKind": "config",
    "UpdaterOutputError": "errors",
    "Verdict": "decision",
    "WordLlamaEncoder": "encoders",
    "accept": "decision",
    "check_answer": "evaluators",
    "cosine": "trigger",
    "decide_trigger": "trigger",
    "default_encoder": "encoders",
    "finish_step": "decision",
    "momentum_update": "trigger",
    "plan_step": "decision",
    "read_state_file": "state",
    "render_memory": "memory",
    "wordllama_available": "encoders",
    "write_state_file": "state",
}

__all__ = [
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_MODEL",
    "MOMENTUM_SOURCES",
    "TIE_RULES",
    "TRIGGER_KINDS",
    "Attempt",
    "CachedEncoder",
    "ChatClient",
    "ChunkPooledEncoder",
    "CoverageMemo",
    "DCRSUpdater",
    "Encoder",
    "Evaluator",
    "ExpeLUpdater",
    "Feedback",
    "FunctionEvaluator",
    "HashingEncoder",
    "JanusConfig",
    "JanusConfigError",
    "JanusConflictError",
    "JanusController",
    "JanusError",
    "JanusState",
    "JanusStateError",
    "JanusStoreHook",
    "JanusUpdater",
    "LLMBudgetExceededError",
    "LLMError",
    "LLMEvaluator",
    "LLMResponseError",
    "LLMSettings",
    "LLMUnavailableError",
    "Memory",
    "MemoryUpdater",
    "MomentumSource",
    "Plan",
    "SentenceEncoder",
    "Solver",
    "StepResult",
    "Submission",
    "Task",
    "TieRule",
    "TriggerInfo",
    "TriggerKind",
    "UpdaterOutputError",
    "Verdict",
    "WordLlamaEncoder",
    "accept",
    "check_answer",
    "cosine",
    "decide_trigger",
    "default_encoder",
    "finish_step",
    "momentum_update",
    "plan_step",
    "read_state_file",
    "render_memory",
    "wordllama_available",
    "write_state_file",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
