"""DC-RS (Dynamic Cheatsheet with retrieval and synthesis) as a memory updater.

For each input: retrieve the top-3 most similar past (input, output) pairs, and a curator call
rewrites the cheatsheet from the previous cheatsheet, those pairs and the next input. Every
input and its output then join the retrieval pool. The generator step (answering with the
cheatsheet) is the solver's job; under Janus it answers with the deployed cheatsheet.
"""

from __future__ import annotations

import re
from typing import Any

from planfence.shared_memory.extras import extra_imports

from ..encoders import CachedEncoder, Encoder, HashingEncoder
from ..errors import UpdaterOutputError
from ..llm import ChatClient, Message
from ..memory import Memory
from ..tasks import Feedback, Task

with extra_imports("janus", "the Janus controller"):
    import numpy as np

CURATOR_SYSTEM = """You maintain a cheatsheet: short, reusable notes that help solve future \
tasks of the same kinds (strategies, formulas, checks, pitfalls). You will see the current \
cheatsheet, a few solved examples similar to the next task, and the next task itself.

Rewrite the whole cheatsheet:
- keep every note that is still useful, even if it is unrelated to the next task;
- add or sharpen general notes suggested by the examples; never copy a single task's answer;
- merge duplicates and drop notes that proved wrong;
- stay under {max_chars} characters.

Reply with the complete new cheatsheet between <cheatsheet> and </cheatsheet>, nothing after."""

_CHEATSHEET_RE = re.compile(r"<cheatsheet>(.*?)</cheatsheet>", re.DOTALL | re.IGNORECASE)


def parse_cheatsheet(reply: str, max_chars: int) -> str:
    """The cheatsheet inside the last <cheatsheet> block of a curator reply.

    Raises:
        UpdaterOutputError: no block, an empty block, or one over `max_chars`.
    """
    blocks = _CHEATSHEET_RE.findall(reply)
    if not blocks:
        raise UpdaterOutputError("dc-rs", "no <cheatsheet>...</cheatsheet> block", reply)
    text = str(blocks[-1]).strip()
    if not text:
        raise UpdaterOutputError("dc-rs", "empty cheatsheet", reply)
    if len(text) > max_chars:
        raise UpdaterOutputError(
            "dc-rs", f"cheatsheet of {len(text)} characters, over {max_chars}", reply
        )
    return text


class DCRSUpdater:
    """Cheatsheet memory (a string) rewritten by a curator model with retrieved examples."""

    name = "dc-rs"

    def __init__(
        self,
        client: ChatClient,
        *,
        encoder: Encoder | None = None,
        top_k: int = 3,
        max_chars: int = 4000,
    ) -> None:
        self.client = client
        enc = encoder if encoder is not None else HashingEncoder()
        self.encoder = enc if isinstance(enc, CachedEncoder) else CachedEncoder(enc)
        self.top_k = top_k
        self.max_chars = max_chars
        self.pool: list[dict[str, str]] = []

    def initial_memory(self) -> Memory:
        return ""

    def retrieve(self, question: str) -> list[dict[str, str]]:
        """The `top_k` past pairs whose input is most similar to `question` (most similar first)."""
        if not self.pool or self.top_k <= 0:
            return []
        vecs = self.encoder.encode([question] + [p["input"] for p in self.pool])
        sims = vecs[1:] @ vecs[0]
        order = np.argsort(-sims, kind="stable")[: self.top_k]
        return [self.pool[int(i)] for i in order]

    def messages(self, cheatsheet: str, task: Task) -> list[Message]:
        examples = self.retrieve(task.question)
        shown = (
            "\n\n".join(
                f"Example {n}\nINPUT: {p['input']}\nOUTPUT: {p['output']}"
                for n, p in enumerate(examples, 1)
            )
            or "(none yet)"
        )
        user = (
            f"CURRENT CHEATSHEET:\n{cheatsheet.strip() or '(empty)'}\n\n"
            f"SIMILAR SOLVED EXAMPLES:\n{shown}\n\nNEXT TASK:\n{task.question}"
        )
        return [
            {"role": "system", "content": CURATOR_SYSTEM.format(max_chars=self.max_chars)},
            {"role": "user", "content": user},
        ]

    async def propose(self, memory: Memory, task: Task, feedback: Feedback) -> Memory:
        cheatsheet = memory if isinstance(memory, str) else ""
        reply = await self.client.chat(self.messages(cheatsheet, task))
        new = parse_cheatsheet(reply, self.max_chars)
        self.pool.append({"input": task.question, "output": feedback.output})
        return new

    def state_dict(self) -> dict[str, Any]:
        return {"pool": [dict(p) for p in self.pool]}

    def load_state_dict(self, data: dict[str, Any]) -> None:
        self.pool = [{"input": str(p["input"]), "output": str(p["output"])} for p in data["pool"]]
