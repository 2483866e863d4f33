"""The calibrated memory-update stream behind `planfence bench janus` (no LLM, seeded).

What it models, and why each number is what it is (all fixed from the paper before the first
benchmark run; see "Parameters" below, and do not tune them against Janus's results):

- **Tasks.** One task family (arithmetic word problems of 20 kinds, `family.KINDS`) in a
  seeded shuffle: 500 stream tasks and 500 held-out tasks the stream never shows. A task has a
  kind and a base solve rate drawn from Beta with mean 0.727: the paper's memory-free accuracy
  (Qwen3-8B, mean of six test sets). `order="dwell"` (blocks of one kind) is kept only as a
  stream-order ablation.
- **Memory** is a cheatsheet: a list of one-line rules that grows as a curator writes.
  Correct rules for a kind close `rule_gain` of the remaining error of that kind's tasks, with
  diminishing returns per further rule (`rule_step`, at most `max_rules` count). A saturated,
  harm-free cheatsheet therefore reaches about 0.727 + 0.273 * 0.5 * 0.82 = 0.84, above the
  paper's best figure (DC-RS + Janus, 0.832), so a perfect controller has room to reach it.
- **Benign edits** (value small and positive: one more rule for one kind of 20, about +0.3
  points of held-out accuracy at most): after a failure the curator learns a rule for the
  task's kind, repairs a misleading rule for it, or prunes a stray rule; after a success it
  sometimes adds another phrasing. A candidate Janus rejects is lost: the curator proposes
  from the memory it has, and only proposes the edit again if the situation recurs.
- **Harmful edits** (probability `harm` per step, whatever the outcome), the three modes the
  paper names, each in one of two geometric forms. With probability `rho` the edit is an
  *abrupt rewrite*, a deviation from the recent direction of change; otherwise it is an
  *incremental* one-line append that looks like a benign edit:

  - overwriting useful content: a misleading rule for the kind is appended and masks the
    correct ones (incremental), or the rewrite loses the cheatsheet's tail (abrupt:
    truncation);
  - over-specific rules: a rule memorising this one task is appended, distracting its kind
    (incremental), or the kind's rules are rewritten into this task's worked answer (abrupt);
  - drift to recent tasks: "always try <this kind>" is appended, hurting every other kind a
    little (incremental), or half of the other kinds' rules are dropped around it (abrupt:
    topic replacement).

  `rho` is swept (0.2, 0.5, 0.8). The paper's premise (harm shows as an abrupt deviation) is
  high rho; a world where harm mostly arrives as ordinary-looking appends is low rho.
- **Evaluation model: a latent threshold per task, and `eval_redraw`.** Each stream task has
  a latent `u` in [0, 1), drawn once from (seed, task): under memory `M` the task is solved
  when `u < p(task, M)`. Two memories that give a task the same solve probability give it the
  same outcome; an edit that moves `p` for one kind flips only those tasks of that kind whose
  `u` lies between the old and the new value. This is an LLM at temperature 0 judging old and
  new memory on the same task (the paper's setting, and why its boundary set of flipped tasks
  exists). `eval_redraw` = R in [0, 1] is the probability that one evaluation (one task under
  one memory) ignores the latent and draws a fresh `u`, as sampling at temperature would:
  R = 0 is fully paired (deterministic) evaluation, R = 1 is every evaluation an independent
  Bernoulli draw, like an LLM at temperature 0.7 (the model this benchmark had before R
  existed: at R = 1 its numbers are exactly the earlier ones). The agent's own attempt at a
  stream task, which the curator learns from, follows the same rule with the same R: the
  task's latent, or with probability R a fresh draw. R changes only which uniform draw an
  outcome is read from, never a solve probability: an attempt succeeds with probability
  `p(task, M)` at every R, so the calibration below holds at every R up to the luck of the
  attempts (the benchmark reports it per R). It is swept (0, 0.3, 1).
  The final score is the *expected* held-out accuracy (mean solve probability over the 500
  held-out tasks), so it carries no test noise.
- **Common random numbers.** The stream, the held-out set and the curator's coin flips at
  step t come from generators seeded by (seed, purpose, step); every strategy meets the same
  tasks and the same curator luck, so paired differences between strategies are meaningful.
  Latents, and the attempt's redraw coin and fresh draw, are seeded by (seed, purpose, task)
  and shared by every strategy; an evaluation's redraw coins and fresh draws are per strategy
  (independent).

Parameters (decided before the first run; the only one set by measurement is `harm`, chosen
once from the plain updater's accuracy at rho = 0.5 against the paper's DC-RS figure, 0.795,
before any Janus run):

    base_mean 0.727 (paper, memory-free)        rule_gain 0.5, rule_step 0.35, max_rules 4
    wrong_factor 0.7 (a misleading rule)        specific_penalty 0.05, bias_penalty 0.01
    learn_on_failure 0.6, learn_on_success 0.2  prune 0.5
    truncate_keep 0.5..0.8, replace_drop 0.5    harm 0.04

The calibration pass (plain updater and harm-free ceiling only, 20 seeds, no controller) tried
harm 0.10, 0.06, 0.05, 0.04; 0.04 gave plain 0.797 at rho 0.5 (0.808 at 0.2, 0.785 at 0.8),
memory-free 0.729 and ceiling 0.839. Abrupt harm costs more than incremental harm (it drops
several rules at once), so the plain updater is worse at high rho.

What it cannot show: that a real LLM curator's harmful edits have this geometry (rho is the
question, not an answer), that an encoder sees an LLM's text as it sees these templates, or
anything about the cost of real evaluations. It shows how the controller behaves *given* a
harm geometry, with honest counting and noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, NamedTuple, TypeVar

from planfence.plugins.janus import Task
from planfence.shared_memory.extras import extra_imports

from .family import BIAS, KINDS, LEADS, PEOPLE, SPECIFIC, WRONG

with extra_imports("janus", "planfence bench janus"):
    import numpy as np

RuleKind = Literal["good", "wrong", "specific", "bias"]
HARM_MODES = ("overwrite", "specific", "drift")


class Rule(NamedTuple):
    # A named tuple, not a dataclass: cheatsheets are dictionary keys (the stream's memos),
    # hashed rule by rule at every step, and a tuple's hash runs in C.
    kind: RuleKind
    task_kind: int
    text: str


Cheatsheet = tuple[Rule, ...]


def render(memory: Cheatsheet) -> str:
    """The cheatsheet as the encoder (and an LLM) would see it."""
    return "\n".join(f"- {r.text}" for r in memory)


@dataclass(frozen=True)
class StreamConfig:
    stream_tasks: int = 500
    holdout_tasks: int = 500
    rho: float = 0.5
    eval_redraw: float = 1.0
    """R: the probability that an evaluation or attempt draws a fresh `u` (see above)."""
    order: Literal["shuffled", "dwell"] = "shuffled"
    dwell: int = 25
    base_mean: float = 0.727
    base_concentration: float = 10.0
    rule_gain: float = 0.5
    rule_step: float = 0.35
    max_rules: int = 4
    wrong_factor: float = 0.7
    specific_penalty: float = 0.05
    bias_penalty: float = 0.01
    harm: float = 0.04
    learn_on_failure: float = 0.6
    learn_on_success: float = 0.2
    prune: float = 0.5
    truncate_keep: tuple[float, float] = (0.5, 0.8)
    replace_drop: float = 0.5


M = TypeVar("M")


@dataclass(frozen=True)
class Proposal(Generic[M]):
    """A curator's candidate and what it is (for the report; the controller never sees it).
    Both streams' curators propose these (a `Cheatsheet` here, a `runbook.Runbook` there)."""

    memory: M
    label: str  # "none", "benign:<what>" or "harm:<mode>:<form>" (form: abrupt, incremental)

    @property
    def harmful(self) -> bool:
        return self.label.startswith("harm:")

    @property
    def abrupt(self) -> bool:
        return self.label.endswith(":abrupt")


@dataclass
class Stream:
    """Tasks, held-out set, solver and curator for one seed and one rho."""

    config: StreamConfig
    seed: int
    tasks: list[Task] = field(init=False)
    holdout: list[Task] = field(init=False)

    def __post_init__(self) -> None:
        c = self.config
        self.tasks = self._make_tasks(c.stream_tasks, "s", purpose=1, dwell=c.order == "dwell")
        self.holdout = self._make_tasks(c.holdout_tasks, "h", purpose=2, dwell=False)
        self._hold_kind = np.array([t.meta["kind"] for t in self.holdout])
        self._hold_base = np.array([t.meta["base"] for t in self.holdout])
        self._cache: dict[Cheatsheet, np.ndarray] = {}
        # Every strategy walks the same stream, and their memories agree for long stretches:
        # the solver's draws, the curator's candidates and the held-out score are pure
        # functions of (memory, step), so each is computed once per stream.
        self._proposals: dict[tuple[Cheatsheet, int, bool], Proposal[Cheatsheet]] = {}
        self._accuracy: dict[Cheatsheet, float] = {}
        self._draws: dict[int, float] = {}
        self._rendered: dict[Cheatsheet, str] = {}
        self._p_tasks: dict[Cheatsheet, np.ndarray] = {}
        self.latent: dict[str, float] = {
            t.id: float(self._rng(9, i).random()) for i, t in enumerate(self.tasks)
        }
        """Each stream task's latent `u` (an evaluation reads it unless it redraws)."""
        self.index = {t.id: i for i, t in enumerate(self.tasks)}
        """A stream task's position by id."""
        self.latents = np.array([self.latent[t.id] for t in self.tasks])
        self._task_kind = np.array([t.meta["kind"] for t in self.tasks], dtype=np.int64)
        self._task_base = np.array([t.meta["base"] for t in self.tasks])

    def _rng(self, *key: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, *key])

    def _make_tasks(self, n: int, prefix: str, *, purpose: int, dwell: bool) -> list[Task]:
        c = self.config
        rng = self._rng(purpose)
        a = c.base_mean * c.base_concentration
        b = (1.0 - c.base_mean) * c.base_concentration
        if dwell:
            blocks = math.ceil(n / c.dwell)
            order = [int(k) for k in rng.integers(len(KINDS), size=blocks)]
            kinds = [order[i // c.dwell] for i in range(n)]
        else:
            kinds = [int(k) for k in rng.integers(len(KINDS), size=n)]
        out = []
        for i, k in enumerate(kinds):
            person = str(rng.choice(PEOPLE))
            x, y = int(rng.integers(2, 90)), int(rng.integers(2, 40))
            question = KINDS[k].question.format(person=person, a=x, b=y)
            meta = {"kind": k, "base": float(rng.beta(a, b)), "person": person, "a": x, "b": y}
            out.append(Task(id=f"{prefix}{i}", question=question, answer=f"{k}:{x}:{y}",
                            meta=meta))  # fmt: skip
        return out

    # ---- solver

    def _kind_table(self, memory: Cheatsheet) -> np.ndarray:
        """Per kind: [correct rules, misleading rules, specific rules, bias rules]."""
        table = self._cache.get(memory)
        if table is None:
            table = np.zeros((len(KINDS), 4))
            col = {"good": 0, "wrong": 1, "specific": 2, "bias": 3}
            for r in memory:
                table[r.task_kind, col[r.kind]] += 1
            if len(self._cache) > 20_000:
                self._cache.clear()
            self._cache[memory] = table
        return table

    def _p(self, memory: Cheatsheet, kinds: np.ndarray, base: np.ndarray) -> np.ndarray:
        c = self.config
        t = self._kind_table(memory)
        good = np.minimum(t[kinds, 0], c.max_rules)
        helped = base + (1.0 - base) * c.rule_gain * (1.0 - (1.0 - c.rule_step) ** good)
        p = np.where(t[kinds, 1] > 0, base * c.wrong_factor, helped)
        p = p - c.specific_penalty * t[kinds, 2]
        p = p - c.bias_penalty * (t[:, 3].sum() - t[kinds, 3])
        out: np.ndarray = np.clip(p, 0.02, 0.99)
        return out

    def p_correct(self, memory: Cheatsheet, task: Task) -> float:
        kinds = np.array([task.meta["kind"]])
        return float(self._p(memory, kinds, np.array([task.meta["base"]]))[0])

    def p_many(self, memory: Cheatsheet, tasks: Sequence[Task]) -> np.ndarray:
        kinds = np.array([t.meta["kind"] for t in tasks], dtype=np.int64)
        return self._p(memory, kinds, np.array([t.meta["base"] for t in tasks]))

    def p_tasks(self, memory: Cheatsheet) -> np.ndarray:
        """The solve probability of every stream task under `memory`, in stream order.

        Computed once per memory for all tasks (the attempts and the evaluations read it): the
        formula is elementwise, so each number is the one `p_correct` gives."""
        p = self._p_tasks.get(memory)
        if p is None:
            if len(self._p_tasks) > 10_000:
                self._p_tasks.clear()
            p = self._p_tasks[memory] = self._p(memory, self._task_kind, self._task_base)
        return p

    def render(self, memory: Cheatsheet) -> str:
        """`render(memory)`, kept per memory: every strategy renders the same memories, and
        the same text object keeps its hash for the encoder's cache."""
        text = self._rendered.get(memory)
        if text is None:
            if len(self._rendered) > 20_000:
                self._rendered.clear()
            text = self._rendered[memory] = render(memory)
        return text

    def expected_accuracy(self, memory: Cheatsheet) -> float:
        """Mean solve probability over the held-out tasks: the final score, without test noise."""
        score = self._accuracy.get(memory)
        if score is None:
            score = float(self._p(memory, self._hold_kind, self._hold_base).mean())
            self._accuracy[memory] = score
        return score

    def attempt(self, memory: Cheatsheet, step: int) -> bool:
        """The agent's own attempt at stream task `step` (shared by every strategy): the task's
        latent `u`, or with probability `eval_redraw` a fresh draw."""
        u = self._draws.get(step)
        if u is None:
            u = self._draws[step] = self._attempt_u(step)
        return bool(u < self.p_tasks(memory)[step])

    def _attempt_u(self, step: int) -> float:
        r = self.config.eval_redraw
        # At R = 1 no coin is needed (and the draw is the one this stream made before R).
        if r >= 1.0 or (r > 0.0 and float(self._rng(5, step).random()) < r):
            return float(self._rng(3, step).random())
        return self.latent[self.tasks[step].id]

    # ---- curator

    def _good(self, k: int, have: int) -> Rule:
        kind = KINDS[k]
        text = LEADS[have % len(LEADS)].format(name=kind.name, method=kind.method)
        return Rule("good", k, text[0].upper() + text[1:])

    def _wrong(self, k: int, rng: np.random.Generator) -> Rule:
        other = (k + 1 + int(rng.integers(len(KINDS) - 1))) % len(KINDS)
        return Rule("wrong", k, WRONG.format(name=KINDS[k].name, method=KINDS[other].method))

    def _specific(self, task: Task) -> Rule:
        m = task.meta
        text = SPECIFIC.format(person=m["person"], a=m["a"], b=m["b"], answer=task.answer)
        return Rule("specific", m["kind"], text)

    def _bias(self, k: int) -> Rule:
        return Rule("bias", k, BIAS.format(name=KINDS[k].name, method=KINDS[k].method))

    def propose(self, memory: Cheatsheet, step: int, solved: bool) -> Proposal[Cheatsheet]:
        """The curator's candidate after stream task `step` (memory is not changed)."""
        key = (memory, step, solved)
        proposal = self._proposals.get(key)
        if proposal is None:
            proposal = self._proposals[key] = self._propose(memory, step, solved)
        return proposal

    def _propose(self, memory: Cheatsheet, step: int, solved: bool) -> Proposal[Cheatsheet]:
        c = self.config
        rng = self._rng(4, step)
        task = self.tasks[step]
        k = task.meta["kind"]
        harm_draw, form_draw, mode_draw, learn_draw = rng.random(4)
        if harm_draw < c.harm:
            mode = HARM_MODES[int(mode_draw * len(HARM_MODES))]
            abrupt = form_draw < c.rho
            new = self._harm(memory, task, mode, abrupt, rng)
            return Proposal(new, f"harm:{mode}:{'abrupt' if abrupt else 'incremental'}")
        mine = [r for r in memory if r.task_kind == k]
        good = sum(r.kind == "good" for r in mine)
        if not solved and learn_draw < c.learn_on_failure:
            wrong = next((r for r in mine if r.kind == "wrong"), None)
            if wrong is not None:
                fixed = self._good(k, good)
                return Proposal(tuple(fixed if r is wrong else r for r in memory), "benign:repair")
            stray = [r for r in memory if r.kind in ("specific", "bias")]
            if stray and float(rng.random()) < c.prune:
                return Proposal(tuple(r for r in memory if r is not stray[0]), "benign:prune")
            if good < c.max_rules:
                return Proposal((*memory, self._good(k, good)), "benign:learn")
        elif solved and learn_draw < c.learn_on_success and good < c.max_rules:
            return Proposal((*memory, self._good(k, good)), "benign:rephrase")
        return Proposal(memory, "none")

    def _harm(
        self, memory: Cheatsheet, task: Task, mode: str, abrupt: bool, rng: np.random.Generator
    ) -> Cheatsheet:
        c = self.config
        k = task.meta["kind"]
        if mode == "overwrite":
            if not abrupt:
                return (*memory, self._wrong(k, rng))
            keep = math.ceil(len(memory) * float(rng.uniform(*c.truncate_keep)))
            return memory[:keep]
        if mode == "specific":
            if not abrupt:
                return (*memory, self._specific(task))
            return (*(r for r in memory if r.task_kind != k), self._specific(task))
        if not abrupt:
            return (*memory, self._bias(k))
        drops = rng.random(len(memory)) < c.replace_drop
        kept = (r for r, d in zip(memory, drops, strict=True) if r.task_kind == k or not d)
        return (*kept, self._bias(k))


def memory_free_accuracy(stream: Stream) -> float:
    return stream.expected_accuracy(())


def harmful_share(labels: Sequence[str]) -> float:
    """Share of proposals that are harmful (diagnostics)."""
    return sum(x.startswith("harm:") for x in labels) / len(labels) if labels else 0.0
