"""A controlled sequential-memory world for the Janus benchmark: no LLM, fully deterministic.

The world models the failure modes the Janus paper describes, with a rule-based solver:

- Topics and skills. Each task belongs to one skill of one topic; its text mixes topic words,
  skill words and incidental detail, so task embeddings cluster by topic.
- Memory is a list of rules (a cheatsheet). A task is solved with probability `rule_p` when the
  right general rule for its skill is present, `wrong_p` when a wrong rule for its skill is
  present (both: the average), `base_p` otherwise. Over-specific rules memorise one task
  (certain on that task) and distract on the other tasks of their topic (`noise_penalty` each).
  Correctness is `u < p` with a fixed uniform `u` per task, so a better memory for a task never
  makes it fail.
- The updater learns general rules from failures, but also misgeneralises (wrong rules),
  distrusts a right rule after an unlucky failure and overwrites it, adds over-specific rules,
  evicts the least recently used rules when the cheatsheet is full (drift to recent topics) and
  now and then rewrites the cheatsheet around the current topic.
- The stream drifts: it dwells on one topic for a while, then moves on. Held-out accuracy is
  measured on a fixed, topic-balanced set of tasks the stream never shows.

Every random choice comes from generators seeded by (seed, purpose, step), so every strategy
faces the same stream and the same updater coin flips.

Design decisions, and why they follow the paper rather than favour any strategy:

- The paper's trigger rests on one premise: memory updates form a trajectory in the encoder's
  space; small incremental updates follow it, abrupt deviations (new knowledge or harmful
  distortion) leave it. A world where most good updates point in unrelated directions would
  test a different method. So, as DC-RS (the curator rewrites the cheatsheet after every
  task) and ExpeL (AGREE/EDIT after successes) do, the curator also writes after successes:
  with probability `elaborate` it elaborates the rule it just used with that task's own topic
  and skill vocabulary (at most `elaborate_max` words per rule). The solver ignores these
  words: elaborations neither help nor hurt, they only make the memory's recent trajectory
  what an LLM curator's would be (more text about the topic being worked on).
- The stream dwells on topics (a curriculum-like order). With a shuffled stream the simulated
  memory has no recent trend at all (every cosine is near zero), which is outside the premise;
  we keep the dwell and say so rather than pretend the trigger is order-independent.
- Fault rates are set so the plain updater still beats a memory-free agent (`base_p`), as both
  base updaters do in the paper (72.7 memory-free -> 79.5 DC-RS), while harmful updates remain
  frequent enough to degrade the memory along the stream. Earlier rates made the plain updater
  worse than no memory at all, which contradicts the paper's setting.
- Nothing about harm reaches the encoder or the controller: the encoder sees rule text only,
  harm is a property of the solver. Whether an update is harmful is measured afterwards, on
  the held-out set, for the `--diagnose` report only.
- Known limit, reported rather than hidden: a "refocus" rewrite drops other topics' rules while
  the stream dwells on one topic. Under mean pooling (as in the paper's sentence encoders)
  removing other topics' text moves the embedding the same way as adding text about the
  current one, so these drift updates are aligned with the momentum and the trigger misses
  most of them; only comparisons that happen for other reasons catch them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from planfence.plugins.janus import Task

_SYLLABLES = (
    "ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "ve", "da", "zu", "fe", "gi", "ho", "ju",
    "be", "co", "wa", "xi", "ye", "ar", "en", "is", "on", "ul",
)  # fmt: skip


@dataclass(frozen=True)
class WorldConfig:
    """Size of the world and the updater's fault rates (per step, given the situation)."""

    topics: int = 5
    skills_per_topic: int = 4
    stream_length: int = 300
    holdout_per_skill: int = 15
    capacity: int = 24
    base_p: float = 0.5
    rule_p: float = 0.9
    wrong_p: float = 0.2
    noise_penalty: float = 0.03
    dwell: tuple[int, int] = (20, 45)
    on_topic: float = 0.85
    learn: float = 0.55
    misgeneralise: float = 0.15
    distrust: float = 0.15
    specific_on_failure: float = 0.15
    specific_on_success: float = 0.04
    rephrase: float = 0.1
    rewrite: float = 0.01
    rewrite_when_failing: float = 0.15
    rewrite_drop: float = 0.6
    elaborate: float = 0.5
    elaborate_max: int = 6


def _word(rng: np.random.Generator, syllables: int = 3) -> str:
    return "".join(_SYLLABLES[int(i)] for i in rng.integers(len(_SYLLABLES), size=syllables))


@dataclass(frozen=True)
class Vocabulary:
    topic_words: list[list[str]]
    skill_words: list[list[list[str]]]
    methods: list[list[str]]
    filler: list[str]


class World:
    """Stream, held-out set, solver and faulty updater for one seed."""

    def __init__(self, config: WorldConfig, seed: int) -> None:
        self.config = config
        self.seed = seed
        rng = np.random.default_rng([seed, 1])
        c = config
        self.vocab = Vocabulary(
            topic_words=[[_word(rng) for _ in range(6)] for _ in range(c.topics)],
            skill_words=[
                [[_word(rng) for _ in range(3)] for _ in range(c.skills_per_topic)]
                for _ in range(c.topics)
            ],
            methods=[[_word(rng, 2) for _ in range(c.skills_per_topic)] for _ in range(c.topics)],
            filler=[_word(rng, 2) for _ in range(120)],
        )
        self._filler = set(self.vocab.filler)
        self.stream = self._make_stream()
        self.last_event = "none"
        hold_rng = np.random.default_rng([seed, 2])
        self.holdout = [
            self._task(hold_rng, f"h{k}-{j}-{n}", k, j)
            for k in range(c.topics)
            for j in range(c.skills_per_topic)
            for n in range(c.holdout_per_skill)
        ]

    # ---- tasks

    def _task(self, rng: np.random.Generator, task_id: str, topic: int, skill: int) -> Task:
        v = self.vocab
        words = list(rng.choice(v.topic_words[topic], size=3, replace=False))
        words += list(rng.choice(v.skill_words[topic][skill], size=2, replace=False))
        words += list(rng.choice(v.filler, size=4, replace=False))
        rng.shuffle(words)
        number = int(rng.integers(10, 99))
        question = f"{' '.join(words)} {number}?"
        meta = {"topic": topic, "skill": skill, "u": float(rng.random())}
        return Task(id=task_id, question=question, answer=f"{topic}-{skill}-{number}", meta=meta)

    def _make_stream(self) -> list[Task]:
        c = self.config
        rng = np.random.default_rng([self.seed, 3])
        tasks: list[Task] = []
        topic = int(rng.integers(c.topics))
        left = int(rng.integers(c.dwell[0], c.dwell[1] + 1))
        for n in range(c.stream_length):
            if left == 0:
                topic = int(rng.choice([t for t in range(c.topics) if t != topic]))
                left = int(rng.integers(c.dwell[0], c.dwell[1] + 1))
            left -= 1
            k = topic if rng.random() < c.on_topic else int(rng.integers(c.topics))
            j = int(rng.integers(c.skills_per_topic))
            tasks.append(self._task(rng, f"s{n}", k, j))
        return tasks

    # ---- rules

    def general_rule(
        self, topic: int, skill: int, wording: int = 0, examples: Sequence[str] = ()
    ) -> dict[str, Any]:
        v = self.vocab
        tw, sw = v.topic_words[topic], v.skill_words[topic][skill]
        lead = ("for", "with", "in")[wording % 3]
        text = f"{lead} {tw[0]} {tw[1]} {sw[0]} {sw[1]} tasks apply {v.methods[topic][skill]}"
        if examples:
            text += f" such as {' '.join(examples)}"
        return {
            "text": text,
            "kind": "general",
            "topic": topic,
            "skill": skill,
            "wording": wording,
            "examples": list(examples),
        }

    def wrong_rule(self, topic: int, skill: int) -> dict[str, Any]:
        """A misgeneralisation: a technique carried over from another topic."""
        v = self.vocab
        c = self.config
        other = (topic + 1 + (skill + topic) % (c.topics - 1)) % c.topics
        tw, sw = v.topic_words[topic], v.skill_words[topic][skill]
        ow = v.topic_words[other]
        text = (
            f"for {tw[0]} {sw[0]} tasks apply {v.methods[other][skill]} as in {ow[2]} {ow[3]} "
            f"{ow[4]}"
        )
        return {"text": text, "kind": "wrong", "topic": topic, "skill": skill}

    def specific_rule(self, task: Task) -> dict[str, Any]:
        """An over-specific rule: the incidental details of one task and its answer."""
        incidental = [w for w in task.question.rstrip("?").split() if w in self._filler]
        text = f"when a task says {' '.join(incidental)} answer {task.answer}"
        return {
            "text": text,
            "kind": "specific",
            "topic": task.meta["topic"],
            "skill": task.meta["skill"],
            "task": task.id,
        }

    # ---- solver

    def p_correct(self, memory: dict[str, Any], task: Task) -> float:
        c = self.config
        topic, skill = task.meta["topic"], task.meta["skill"]
        general = wrong = False
        distractors = 0
        for rule in memory["rules"]:
            if rule["kind"] == "specific":
                if rule["task"] == task.id:
                    return 1.0
                if rule["topic"] == topic:
                    distractors += 1
            elif rule["topic"] == topic and rule["skill"] == skill:
                general |= rule["kind"] == "general"
                wrong |= rule["kind"] == "wrong"
        if general and wrong:
            p = (c.rule_p + c.wrong_p) / 2
        elif general:
            p = c.rule_p
        elif wrong:
            p = c.wrong_p
        else:
            p = c.base_p
        return max(0.02, p - c.noise_penalty * distractors)

    def correct(self, memory: dict[str, Any], task: Task) -> bool:
        return bool(task.meta["u"] < self.p_correct(memory, task))

    def accuracy(self, memory: dict[str, Any], tasks: Sequence[Task] | None = None) -> float:
        tasks = self.holdout if tasks is None else tasks
        return sum(self.correct(memory, t) for t in tasks) / len(tasks)

    # ---- the faulty updater

    def propose(
        self,
        memory: dict[str, Any],
        task: Task,
        step: int,
        solved: bool,
        *,
        failing: bool = False,
    ) -> dict[str, Any]:
        """The candidate a locally-minded curator writes after `task` (memory is not mutated).

        `failing`: most recent tasks failed (typically a new kind of task); the curator then
        tends to rewrite the cheatsheet around the task in front of it.
        """
        c = self.config
        rng = np.random.default_rng([self.seed, 4, step])
        draw = float(rng.random())
        topic, skill = task.meta["topic"], task.meta["skill"]
        rules = [dict(r) for r in memory["rules"]]
        # Rules for the skill just used are "recent"; the rest age, which drives eviction.
        for r in rules:
            r["age"] = 0 if (r["topic"], r["skill"]) == (topic, skill) else r.get("age", 0) + 1
        mine = [
            i for i, r in enumerate(rules)
            if r["kind"] != "specific" and (r["topic"], r["skill"]) == (topic, skill)
        ]  # fmt: skip
        has_general = any(rules[i]["kind"] == "general" for i in mine)

        def without_mine() -> list[dict[str, Any]]:
            return [r for i, r in enumerate(rules) if i not in mine]

        event = "none"
        if not solved and not has_general:
            if draw < c.learn:
                rules, event = [*without_mine(), self.general_rule(topic, skill)], "learn"
            elif draw < c.learn + c.misgeneralise:
                rules, event = [*without_mine(), self.wrong_rule(topic, skill)], "misgeneralise"
            elif draw < c.learn + c.misgeneralise + c.specific_on_failure:
                rules, event = [*rules, self.specific_rule(task)], "specific"
        elif not solved:
            if draw < c.distrust:
                rules, event = [*without_mine(), self.wrong_rule(topic, skill)], "overwrite"
            elif draw < c.distrust + c.specific_on_failure:
                rules, event = [*rules, self.specific_rule(task)], "specific"
        elif draw < c.specific_on_success:
            rules, event = [*rules, self.specific_rule(task)], "specific"
        elif draw < c.specific_on_success + c.rephrase and has_general:
            wording = int(rng.integers(1, 3))
            old = next(rules[i] for i in mine if rules[i]["kind"] == "general")
            examples = old.get("examples", [])
            rules = [*without_mine(), self.general_rule(topic, skill, wording, examples)]
            event = "rephrase"
        elif draw < c.specific_on_success + c.rephrase + c.elaborate and has_general:
            old = next(rules[i] for i in mine if rules[i]["kind"] == "general")
            examples = list(old.get("examples", []))
            known = set(old["text"].split())
            v = self.vocab
            on_topic = set(v.topic_words[topic]) | set(v.skill_words[topic][skill])
            new = [w for w in task.question.rstrip("?").split() if w in on_topic and w not in known]
            room = c.elaborate_max - len(examples)
            if new and room > 0:
                examples += new[: min(2, room)]
                wording = old.get("wording", 0)
                rules = [*without_mine(), self.general_rule(topic, skill, wording, examples)]
                event = "elaborate"

        if rng.random() < (c.rewrite_when_failing if failing else c.rewrite):
            # The curator "refocuses" the cheatsheet on the task that just went wrong.
            rules = [r for r in rules if r["topic"] == topic or rng.random() >= c.rewrite_drop]
            if not any(r.get("task") == task.id for r in rules):
                rules.append(self.specific_rule(task))
            event += "+rewrite"
        for r in rules:
            r.setdefault("age", 0)
        while len(rules) > c.capacity:
            oldest = max(range(len(rules)), key=lambda i: (rules[i]["age"], -i))
            del rules[oldest]
            event += "+evict"
        self.last_event = event
        return {"rules": rules}


def empty_memory() -> dict[str, Any]:
    return {"rules": []}


_TOKEN_RE = re.compile(r"[a-z0-9]+")
_FUNCTION_WORDS = ("for", "tasks", "apply", "when", "a", "task", "says", "answer", "as", "in",
                   "with")  # fmt: skip


class WorldEncoder:
    """The simulation's stand-in for a sentence encoder: mean-pooled word vectors.

    Like a real sentence encoder it places words of one topic near each other (a topic
    direction, plus a skill direction for skill words and techniques), gives incidental details
    unrelated directions, and shares one direction among function words. Texts map to the
    normalised mean of their word vectors. Deterministic for a world seed.
    """

    def __init__(self, world: World, dim: int = 64) -> None:
        self.dim = dim
        rng = np.random.default_rng([world.seed, 5])
        c, v = world.config, world.vocab

        def unit(x: np.ndarray) -> np.ndarray:
            out: np.ndarray = x / np.linalg.norm(x)
            return out

        def noise() -> np.ndarray:
            return unit(rng.standard_normal(dim))

        topic = [noise() for _ in range(c.topics)]
        skill = [[noise() for _ in range(c.skills_per_topic)] for _ in range(c.topics)]
        common = noise()
        self._words: dict[str, np.ndarray] = {w: unit(common + 0.3 * noise())
                                              for w in _FUNCTION_WORDS}  # fmt: skip
        for k in range(c.topics):
            for w in v.topic_words[k]:
                self._words[w] = unit(topic[k] + 0.5 * noise())
            for j in range(c.skills_per_topic):
                for w in v.skill_words[k][j]:
                    self._words[w] = unit(0.7 * topic[k] + 0.7 * skill[k][j] + 0.4 * noise())
                m = v.methods[k][j]
                self._words[m] = unit(0.6 * topic[k] + 0.8 * skill[k][j] + 0.4 * noise())
        for w in v.filler:
            self._words[w] = noise()

    def _word(self, token: str) -> np.ndarray:
        vec = self._words.get(token)
        if vec is None:  # numbers and unknown tokens: a fixed unrelated direction each
            seed = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
            raw = np.random.default_rng(seed).standard_normal(self.dim)
            vec = self._words[token] = raw / np.linalg.norm(raw)
        return vec

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        rows = []
        for text in texts:
            tokens = _TOKEN_RE.findall(text.lower())
            if not tokens:
                rows.append(np.zeros(self.dim))
                continue
            mean = np.mean([self._word(t) for t in tokens], axis=0)
            rows.append(mean / np.linalg.norm(mean))
        return np.array(rows, dtype=np.float64).reshape(len(texts), self.dim)
