"""A second stream for `planfence bench janus`, built where the paper's premise fails.

The calibrated stream (`stream`) is arithmetic cheatsheets, and its harm, at high rho, turns
against the recent direction of change: the premise of the momentum trigger. This one is an
operations team's runbook, another domain, and breaks that premise on both sides:

- **Benign updates often move against the trend.** Besides learning a fact (a new line), the
  curator refines a vague line into an exact one (a rewrite), consolidates a service's lines
  into one (several removed, one added), files incident notes and prunes old ones (removals).
  Tasks come in incidents (runs on one service), so the direction of change keeps turning.
- **Every harmful update is abrupt** (rho = 1): a summariser that truncates the runbook, a
  rewrite around the current incident's service that drops the rest, or a reformat that
  rewrites every line and loses half the facts. A rewrite around the service the team has
  been adding to points where the recent changes pointed.

The model: 12 services x 6 facts (deploy, rollback, port, on-call, dashboard, restart). A task
asks one fact of one service; it is solved with probability 0.9 when a line states the fact
exactly, 0.55 when a line states it vaguely, 0.2 otherwise (the team guesses). Incident notes
change nothing. Evaluations follow the calibrated stream's latent threshold and `eval_redraw`
(see `stream`); the score is the expected accuracy over one held-out task per fact.

Parameters (set once from the description above, before any controller ran on it):

    harm 0.05 per step          learn_exact 0.5 (else a vague line)   refine 0.7
    learn 0.8 after a failure   note 0.08, prune 0.06, consolidate 0.05
    incident 0.7 (next task on the same service)   truncate_keep 0.3..0.7
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from planfence.plugins.janus import Task
from planfence.shared_memory.extras import extra_imports

from .stream import Proposal

with extra_imports("janus", "planfence bench janus"):
    import numpy as np

SERVICES = ("payments", "search", "checkout", "inventory", "auth", "billing", "notifications",
            "reporting", "gateway", "scheduler", "storage", "analytics")  # fmt: skip
PEOPLE = (
    "Ana",
    "Ben",
    "Chen",
    "Dara",
    "Eli",
    "Fatima",
    "Gus",
    "Hana",
    "Ivan",
    "Jo",
    "Kofi",
    "Lena",
)
FACTS: tuple[tuple[str, tuple[str, ...], str, str], ...] = (
    # name, question templates, exact line, vague line ({s}: service, {v}: value)
    ("deploy", ("How do I deploy {s}?", "What ships a new {s} build?", "Deploy steps for {s}?"),
     "{s}: deploy with `{v}`", "{s}: deploys go through the usual make target"),
    ("rollback", ("How do I roll back {s}?", "{s} release is bad, how to revert?",
                  "Undo the last {s} deploy?"),
     "{s}: roll back with `{v}`", "{s}: rollbacks use the deploy tool"),
    ("port", ("Which port does {s} listen on?", "What port to probe for {s}?",
              "{s} health check port?"),
     "{s}: listens on port {v}", "{s}: listens on the standard service port range"),
    ("on-call", ("Who is on call for {s}?", "Whom to page about {s}?", "{s} owner on call?"),
     "{s}: on call is {v}", "{s}: on call rotates within the platform team"),
    ("dashboard", ("Where is the {s} dashboard?", "Which dashboard shows {s} health?",
                   "{s} metrics dashboard link?"),
     "{s}: dashboard at {v}", "{s}: dashboards live in grafana"),
    ("restart", ("How do I restart {s}?", "{s} is stuck, how to restart it?",
                 "Restart command for {s}?"),
     "{s}: restart with `{v}`", "{s}: restart the worker through systemd"),
)  # fmt: skip
SYMPTOMS = ("latency spike", "error burst", "disk pressure", "stuck queue", "memory leak")


def value(s: int, f: int) -> str:
    name = SERVICES[s]
    return (
        f"make ship-{name}",
        f"deployctl rollback {name} --to previous",
        str(8000 + 37 * s + f),
        PEOPLE[(s * 5 + 3) % len(PEOPLE)],
        f"grafana/d/{name}-golden",
        f"systemctl restart {name}-worker",
    )[f]


class Line(NamedTuple):
    text: str
    facts: tuple[tuple[int, int, bool], ...]  # (service, fact, exact)


Runbook = tuple[Line, ...]
BASE, VAGUE, EXACT = 0.2, 0.55, 0.9


def render(memory: Runbook) -> str:
    return "\n".join(f"- {line.text}" for line in memory)


@dataclass(frozen=True)
class RunbookConfig:
    stream_tasks: int = 500
    holdout_tasks: int = len(SERVICES) * len(FACTS)  # one per fact; fixed
    rho: float = 1.0
    """Every harmful edit is abrupt (kept for the report's columns)."""
    eval_redraw: float = 1.0
    harm: float = 0.05
    learn: float = 0.8
    learn_exact: float = 0.5
    refine: float = 0.7
    note: float = 0.08
    prune: float = 0.06
    consolidate: float = 0.05
    incident: float = 0.7
    truncate_keep: tuple[float, float] = (0.3, 0.7)


@dataclass
class RunbookStream:
    """Tasks, held-out set, solver and curator of the runbook stream for one seed."""

    config: RunbookConfig
    seed: int
    tasks: list[Task] = field(init=False)
    holdout: list[Task] = field(init=False)

    def __post_init__(self) -> None:
        rng = self._rng(1)
        tasks, s = [], int(rng.integers(len(SERVICES)))
        for i in range(self.config.stream_tasks):
            if rng.random() >= self.config.incident:
                s = int(rng.integers(len(SERVICES)))
            f, form = int(rng.integers(len(FACTS))), int(rng.integers(3))
            tasks.append(self._task(f"r{i}", s, f, form))
        self.tasks = tasks
        self.holdout = [
            self._task(f"rh{s}-{f}", s, f, 0)
            for s in range(len(SERVICES))
            for f in range(len(FACTS))
        ]
        self.latent = {t.id: float(self._rng(9, i).random()) for i, t in enumerate(self.tasks)}
        self.index = {t.id: i for i, t in enumerate(self.tasks)}
        self.latents = np.array([self.latent[t.id] for t in self.tasks])
        self._pairs = np.array([t.meta["pair"] for t in self.tasks], dtype=np.int64)
        self._hold_pairs = np.array([t.meta["pair"] for t in self.holdout], dtype=np.int64)
        self._known: dict[Runbook, np.ndarray] = {}
        self._rendered: dict[Runbook, str] = {}
        self._proposals: dict[tuple[Runbook, int, bool], Proposal[Runbook]] = {}
        self._draws: dict[int, float] = {}

    def _rng(self, *key: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, 77, *key])

    @staticmethod
    def _task(task_id: str, s: int, f: int, form: int) -> Task:
        question = FACTS[f][1][form].format(s=SERVICES[s])
        meta = {"service": s, "fact": f, "pair": s * len(FACTS) + f}
        return Task(id=task_id, question=question, answer=value(s, f), meta=meta)

    # ---- solver

    def _table(self, memory: Runbook) -> np.ndarray:
        """Solve probability per (service, fact) pair under `memory`."""
        table = self._known.get(memory)
        if table is None:
            table = np.full(len(SERVICES) * len(FACTS), BASE)
            for line in memory:
                for s, f, exact in line.facts:
                    at = s * len(FACTS) + f
                    table[at] = max(table[at], EXACT if exact else VAGUE)
            if len(self._known) > 20_000:
                self._known.clear()
            self._known[memory] = table
        return table

    def p_tasks(self, memory: Runbook) -> np.ndarray:
        out: np.ndarray = self._table(memory)[self._pairs]
        return out

    def p_many(self, memory: Runbook, tasks: Sequence[Task]) -> np.ndarray:
        pairs = np.array([t.meta["pair"] for t in tasks], dtype=np.int64)
        out: np.ndarray = self._table(memory)[pairs]
        return out

    def expected_accuracy(self, memory: Runbook) -> float:
        return float(self._table(memory)[self._hold_pairs].mean())

    def render(self, memory: Runbook) -> str:
        text = self._rendered.get(memory)
        if text is None:
            if len(self._rendered) > 20_000:
                self._rendered.clear()
            text = self._rendered[memory] = render(memory)
        return text

    def attempt(self, memory: Runbook, step: int) -> bool:
        u = self._draws.get(step)
        if u is None:
            r = self.config.eval_redraw
            fresh = r >= 1.0 or (r > 0.0 and float(self._rng(5, step).random()) < r)
            u = float(self._rng(3, step).random()) if fresh else self.latent[self.tasks[step].id]
            self._draws[step] = u
        return bool(u < self.p_tasks(memory)[step])

    # ---- curator

    def propose(self, memory: Runbook, step: int, solved: bool) -> Proposal[Runbook]:
        key = (memory, step, solved)
        found = self._proposals.get(key)
        if found is None:
            found = self._proposals[key] = self._propose(memory, step, solved)
        return found

    def _propose(self, memory: Runbook, step: int, solved: bool) -> Proposal[Runbook]:
        c = self.config
        rng = self._rng(4, step)
        task = self.tasks[step]
        s, f = task.meta["service"], task.meta["fact"]
        harm, learn, event, pick = rng.random(4)
        if harm < c.harm and len(memory) >= 2:
            new, mode = self._harm(memory, s, rng)
            return Proposal(new, f"harm:{mode}:abrupt")
        mine = [line for line in memory if any(x[:2] == (s, f) for x in line.facts)]
        if not solved and learn < c.learn:
            vague = next(
                (ln for ln in mine if not any(x[2] for x in ln.facts if x[:2] == (s, f))), None
            )
            if not mine:
                exact = pick < c.learn_exact
                return Proposal((*memory, _line(s, f, exact)), "benign:learn")
            if vague is not None and pick < c.refine:
                fixed = _refined(vague, s, f)
                return Proposal(
                    tuple(fixed if ln is vague else ln for ln in memory), "benign:refine"
                )
        notes = [ln for ln in memory if not ln.facts]
        if event < c.note:
            text = (
                f"incident {1000 + step}: {SERVICES[s]} {SYMPTOMS[step % len(SYMPTOMS)]}, resolved"
            )
            return Proposal((*memory, Line(text, ())), "benign:note")
        if event < c.note + c.prune and notes:
            return Proposal(tuple(ln for ln in memory if ln is not notes[0]), "benign:prune")
        if event < c.note + c.prune + c.consolidate:
            lines = [ln for ln in memory if ln.facts and all(x[0] == s for x in ln.facts)]
            if len(lines) >= 2:
                merged = _merged(s, lines)
                first = memory.index(lines[0])
                rest = tuple(ln for ln in memory if ln not in lines)
                return Proposal((*rest[:first], merged, *rest[first:]), "benign:consolidate")
        return Proposal(memory, "none")

    def _harm(self, memory: Runbook, s: int, rng: np.random.Generator) -> tuple[Runbook, str]:
        mode = ("truncate", "topic", "reformat")[int(rng.integers(3))]
        if mode == "topic":
            kept = tuple(ln for ln in memory if any(x[0] == s for x in ln.facts))
            if kept and len(kept) < len(memory):
                summary = Line(f"focus: the current incident is on {SERVICES[s]}", ())
                return (*kept, summary), mode
            mode = "truncate"
        if mode == "reformat":
            out = []
            for ln in memory:
                facts = tuple(x for x in ln.facts if rng.random() < 0.5)
                if facts:
                    out.append(Line(_reformatted(facts), facts))
            return tuple(out), mode
        keep = max(1, math.floor(len(memory) * float(rng.uniform(*self.config.truncate_keep))))
        return memory[: min(keep, len(memory) - 1)], "truncate"


def _line(s: int, f: int, exact: bool) -> Line:
    template = FACTS[f][2] if exact else FACTS[f][3]
    return Line(template.format(s=SERVICES[s], v=value(s, f)), ((s, f, exact),))


def _refined(line: Line, s: int, f: int) -> Line:
    if len(line.facts) == 1:
        return _line(s, f, True)
    facts = tuple((a, b, True if (a, b) == (s, f) else e) for a, b, e in line.facts)
    return _merged(s, [Line("", facts)])


def _merged(s: int, lines: Sequence[Line]) -> Line:
    facts = tuple(sorted({x for ln in lines for x in ln.facts}))
    parts = []
    for _, f, exact in facts:
        if exact:
            parts.append(f"{FACTS[f][0]} `{value(s, f)}`")
        else:
            parts.append(f"{FACTS[f][0]} per the usual tooling")
    return Line(f"{SERVICES[s]} runbook: " + "; ".join(parts), facts)


def _reformatted(facts: tuple[tuple[int, int, bool], ...]) -> str:
    s = facts[0][0]
    items = ", ".join(
        f"{FACTS[f][0]}={value(s, f) if exact else 'standard'}" for _, f, exact in facts
    )
    return f"[{SERVICES[s].upper()}] {items}"
