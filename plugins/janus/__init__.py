"""planfence.plugins.janus: decide whether a memory update is deployed or the old memory kept.

    from planfence.plugins.janus import JanusConfig, JanusController, FunctionEvaluator

    controller = JanusController(FunctionEvaluator(judge), config=JanusConfig(seed=1))
    verdict = await controller.consider(current_memory, candidate_memory, task)

Janus (momentum trigger + hybrid coverage/boundary/fresh evaluation set) wraps any memory
updater; `JanusStoreHook` puts it on the write path of a shared-memory key.
"""

from .config import MOMENTUM_SOURCES, TRIGGER_KINDS, JanusConfig, MomentumSource, TriggerKind
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
from .evaluators import Attempt, Evaluator, FunctionEvaluator, LLMEvaluator, Solver, check_answer
from .llm import ENV_API_KEY, ENV_BASE_URL, ENV_MODEL, ChatClient, LLMSettings
from .memory import Memory, render_memory
from .state import JanusState, read_state_file, write_state_file
from .store_hook import JanusStoreHook, Submission
from .tasks import Feedback, Task
from .trigger import TriggerInfo, cosine, decide_trigger, momentum_update
from .updaters import DCRSUpdater, ExpeLUpdater, MemoryUpdater

__all__ = [
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_MODEL",
    "MOMENTUM_SOURCES",
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
