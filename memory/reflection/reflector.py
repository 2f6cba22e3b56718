"""The reflector: after episodes, compare experiences and edit the rule set later prompts use.

    reflector = Reflector(bank, model, settings.reflect)
    report = reflector.reflect(family="keyroom")         # `crl reflect`
    runner = Runner(..., on_episode_end=reflector.on_episode_end)   # every N episodes in `crl run`

One run of the reflector (a reflection, id `rf-...`): pick what is due
(`memory.reflection_inputs`: failure/success pairs, groups of successes, lone failures;
never quarantined episodes), render one prompt per input (`prompts/templates/reflect.j2`,
showing the rules in scope, numbered), generate the replies in batches, parse them
(`memory.rule_ops`), refuse rules that are or copy an instruction planted in a stored
observation (`drop_planted`, with `strip_instructions`; the prompt itself shows those spans
replaced) and apply them (`memory.rule_editor`: ExpeL's votes, dedupe,
contradictions, the cap). A bad reply costs nothing: its operations are rejected with
reasons and counted. Prompts of one batch see the same rules; an operation on a rule an
earlier reply of the batch removed is rejected.

The model is anything with `name` and `generate(batch, config) -> [completion with .text]`
(the agent's `ChatModel`); `config` is a `ReflectGeneration`, which has the fields the
agent's `GenerationConfig` has. Memory never imports the agent.

Traceability: each input reflected on is one line of `<memory dir>/reflections.jsonl`
(reflection id, time, model, the input's episodes, the reply, accepted and rejected
operations with reasons, the changes made). That log also says what was already
reflected on, so an input is reflected on once. Each rule change is a journal entry with
actor `reflect:<id>` (`bank.history(rule_id)`), and the rule itself records the episodes
and reflections it came from and the model that wrote it.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from crl.memory.records import EpisodeRecord, RuleRecord
from crl.memory.reflection.config import ReflectorConfig
from crl.memory.reflection.inputs import (
    ReflectedSoFar,
    ReflectionInput,
    episode_text,
    planted_instructions,
    reflectable,
    select_inputs,
)
from crl.memory.reflection.rule_editor import EditResult, RuleChange, RuleEditor, RuleTarget, scope_key
from crl.memory.reflection.rule_ops import ParsedReply, Rejected, content_words, parse_operations, ungrounded
from crl.memory.storage.store import SEARCH_BUCKETS
from crl.prompts.render import render
from crl.prompts.untrusted import is_instruction_like, shared_words

log = logging.getLogger(__name__)

LOG_NAME = "reflections.jsonl"
MAX_REPLY_CHARS_LOGGED = 20_000


class ReflectModel(Protocol):
    """What the reflector needs of a chat model (the agent's `ChatModel` fits)."""

    name: str

    def generate(self, batch: list[list[dict[str, str]]], config: Any) -> list[Any]:
        """One completion (with `.text`) per conversation."""
        ...


@dataclass
class ReflectGeneration:
    """Decoding settings handed to the model; the same fields as the agent's `GenerationConfig`."""

    max_new_tokens: int = 160
    temperature: float = 0.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    seed: int | None = 0


@dataclass
class InputOutcome:
    """One input reflected on: the input, the reply, and what became of its operations."""

    input: ReflectionInput
    reply: str = ""
    format: str = "lines"
    accepted: list[dict[str, str]] = field(default_factory=list)
    rejected: list[dict[str, str]] = field(default_factory=list)
    other_lines: int = 0
    changes: list[RuleChange] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "input": self.input.to_dict(),
            "reply": self.reply[:MAX_REPLY_CHARS_LOGGED],
            "format": self.format,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "other_lines": self.other_lines,
            "changes": [c.to_dict() for c in self.changes],
        }


@dataclass
class ReflectionReport:
    """What one reflection did: inputs, operations accepted and rejected, rule changes, errors."""

    id: str
    model: str
    family: str | None = None
    since_run: str | None = None
    started_at: float = field(default_factory=time.time)
    seconds: float = 0.0
    outcomes: list[InputOutcome] = field(default_factory=list)
    pending: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def accepted(self) -> int:
        """Operations applied (some transformed, e.g. a duplicate ADD counted as AGREE)."""
        return sum(len(o.accepted) for o in self.outcomes)

    @property
    def rejected(self) -> int:
        """Operations dropped as malformed or not applicable, each with a reason."""
        return sum(len(o.rejected) for o in self.outcomes)

    @property
    def changes(self) -> list[RuleChange]:
        return [c for o in self.outcomes for c in o.changes]

    def summary(self) -> str:
        """One line, e.g. `reflection rf-...: 2 inputs, 3 operations accepted, 1 rejected, 4 rule changes`."""
        return (
            f"reflection {self.id}: {len(self.outcomes)} input(s), {self.accepted} operation(s) accepted, "
            f"{self.rejected} rejected, {len(self.changes)} rule change(s)"
            + (f", {self.pending} input(s) left for later" if self.pending else "")
            + (f", {len(self.errors)} error(s)" if self.errors else "")
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "model": self.model,
            "family": self.family,
            "since_run": self.since_run,
            "started_at": self.started_at,
            "seconds": round(self.seconds, 3),
            "inputs": len(self.outcomes),
            "accepted": self.accepted,
            "rejected": self.rejected,
            "pending": self.pending,
            "errors": self.errors,
            "outcomes": [o.to_dict() for o in self.outcomes],
        }


def episode_vocabulary(item: ReflectionInput) -> set[str]:
    """Every content word of the reflected episodes: goals, observations, actions."""
    words: set[str] = set()
    for record in item.episodes:
        words |= content_words(record.goal)
        for step in record.trajectory:
            words |= content_words(f"{step.observation} {step.action}")
    return words


def drop_ungrounded(parsed: ParsedReply, vocabulary: set[str]) -> ParsedReply:
    """The reply without ADD and EDIT operations whose text names nothing from the episodes
    (`ungrounded`); those become rejections with the reason."""
    return drop_rule_texts(parsed, lambda text: ungrounded(text, vocabulary), "ungrounded rule")


def drop_rule_texts(parsed: ParsedReply, why_not: Callable[[str], str | None], label: str) -> ParsedReply:
    """The reply without the ADD and EDIT operations whose rule text `why_not` refuses; each
    becomes a rejection reading "`label`: reason"."""
    kept, rejected = [], list(parsed.rejected)
    for op in parsed.ops:
        why = why_not(op.text) if op.kind in ("ADD", "EDIT") and op.text else None
        if why:
            rejected.append(Rejected(op.raw or op.describe(), f"{label}: {why}"))
        else:
            kept.append(op)
    return ParsedReply(kept, rejected, parsed.other_lines, parsed.format)


def planted_reason(text: str, planted: Sequence[str]) -> str | None:
    """Why a rule text may not be stored, if it is instruction-like or copies one of the `planted`
    spans found in the reflected episodes (four words in a row in common), else None."""
    if is_instruction_like(text):
        return "instruction-like text (prompts.untrusted.INSTRUCTION_PATTERNS)"
    copied = next((span for span in planted if shared_words(text, span)), None)
    if copied is not None:
        return f"copies an instruction-like span of a stored observation: {copied[:80]!r}"
    return None


def drop_planted(parsed: ParsedReply, planted: Sequence[str]) -> ParsedReply:
    """The reply without ADD and EDIT operations whose text is an injected instruction
    (`planted_reason`); those become rejections with the reason."""
    return drop_rule_texts(parsed, lambda text: planted_reason(text, planted), "refused rule")


def new_reflection_id() -> str:
    """A sortable, unique reflection id such as `rf-20261129-221530-3fa2`."""
    return "rf-" + time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


class ReflectionLog:
    """`reflections.jsonl`: one line per input reflected on (append-only)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def append(self, reflection: str, model: str, outcome: InputOutcome, when: float) -> None:
        line = json.dumps(
            {"reflection": reflection, "time": when, "model": model, **outcome.to_dict()}, ensure_ascii=False
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode("utf-8"))
        finally:
            os.close(fd)

    def entries(self) -> Iterator[dict[str, Any]]:
        """Every complete line, oldest first (a torn last line is skipped)."""
        if not self.path.exists():
            return
        with open(self.path, encoding="utf-8") as f:
            for raw in f:
                try:
                    yield json.loads(raw)
                except ValueError:
                    continue

    def done(self) -> ReflectedSoFar:
        """What earlier reflections used (so an input is reflected on once)."""
        done = ReflectedSoFar()
        for e in self.entries():
            item = e.get("input") or {}
            done.note_ids(str(item.get("kind", "")), list(item.get("episodes", [])))
        return done

    def about_rule(self, rule_id: str) -> list[dict[str, Any]]:
        """The lines whose changes touched `rule_id`."""
        return [e for e in self.entries() if any(c.get("rule_id") == rule_id for c in e.get("changes", []))]


class Reflector:
    """Distils rules from stored episodes with a chat model (see the module docstring).

    Args:
        bank: the open `ExperienceBank`.
        model: the reflecting model (`ReflectModel`).
        config: `settings.reflect` (defaults when None).
        log_path: the reflection log (default `<bank dir>/reflections.jsonl`).
    """

    def __init__(
        self, bank, model: ReflectModel, config: ReflectorConfig | None = None, log_path: str | Path | None = None
    ):
        self.bank = bank
        self.model = model
        self.config = config or ReflectorConfig()
        self.log = ReflectionLog(log_path or Path(bank.dir) / LOG_NAME)
        self.reports: list[ReflectionReport] = []
        self.errors: list[str] = []
        self._finished = 0
        self._last_at = 0

    @property
    def model_name(self) -> str:
        return str(getattr(self.model, "name", "") or type(self.model).__name__)

    def generation(self) -> ReflectGeneration:
        """The decoding settings of every reflection call."""
        c = self.config
        return ReflectGeneration(max_new_tokens=c.max_new_tokens, temperature=c.temperature, seed=c.seed)

    # ---- when ---------------------------------------------------------------------------

    def maybe_reflect(self, finished_episodes: int, family: str | None = None) -> ReflectionReport | None:
        """Reflect when `config.every` more episodes finished since the last reflection.

        Args:
            finished_episodes: episodes finished so far (by the caller's count).
            family: reflect on this family only (the run's).
        """
        every = self.config.every
        if not self.config.enabled or every <= 0 or finished_episodes - self._last_at < every:
            return None
        self._last_at = finished_episodes
        return self.reflect(family=family)

    def on_episode_end(self, episode: Any) -> None:
        """The runner's episode-end hook: count the episode, reflect every `config.every`.

        Never raises (a failed reflection must not end a run): errors are logged and kept in
        `errors`, reports in `reports`.
        """
        self._finished += 1
        try:
            report = self.maybe_reflect(self._finished, getattr(episode, "family", None))
        except Exception as e:  # noqa: BLE001 - the run goes on; the error is kept and logged
            message = f"reflection after {self._finished} episodes failed: {type(e).__name__}: {e}"
            log.warning(message)
            self.errors.append(message)
            return
        if report is not None:
            log.info(report.summary())
            self.errors += report.errors

    # ---- what ---------------------------------------------------------------------------

    def due(self, family: str | None = None, since_run: str | None = None) -> list[ReflectionInput]:
        """Every input due now, in the order reflections take them (episodes without trajectories)."""
        families = [family] if family else None
        episodes = [
            r
            for r, _ in self.bank.view.scan("episode", families, SEARCH_BUCKETS)
            if isinstance(r, EpisodeRecord)
            and reflectable(r, self.config.verified_only)
            and (since_run is None or r.run_id >= since_run)
        ]
        return select_inputs(episodes, self.log.done(), self.config)

    def _with_trajectories(self, inputs: Sequence[ReflectionInput]) -> list[ReflectionInput]:
        """The inputs with full episode records; one whose episode is gone (or was quarantined) is dropped."""
        ids = [e.id for item in inputs for e in item.episodes]
        full = self.bank.view.locate(ids, documents=True) if ids else {}
        out = []
        for item in inputs:
            records = [full[e.id].record for e in item.episodes if e.id in full]
            if len(records) == len(item.episodes) and all(reflectable(r, self.config.verified_only) for r in records):
                out.append(ReflectionInput(item.kind, item.task, records))  # type: ignore[arg-type]
        return out

    @property
    def prime(self) -> str:
        """The reply's start written for the model (`config.prime`), if it continues partial replies."""
        return (self.config.prime or "") if getattr(self.model, "supports_prefill", False) else ""

    def prompt(self, item: ReflectionInput, rules: Sequence[RuleRecord], full: bool) -> list[dict[str, str]]:
        """The chat messages asking the model to reflect on `item` given the numbered `rules`
        (ending with the primed start of the reply, see `prime`)."""
        c = self.config
        labels = {"pair": ["Failed attempt", "Successful attempt"]}.get(item.kind, [])
        episodes = [
            {
                "label": labels[i] if i < len(labels) else f"Attempt {i + 1}",
                "text": episode_text(e, c.max_steps_shown, c.max_observation_chars, c.strip_instructions),
            }
            for i, e in enumerate(item.episodes)
        ]
        cap = c.max_critiques if item.kind == "critique" else c.max_rules
        content = render(
            "reflect.j2",
            kind=item.kind,
            task=item.task,
            episodes=episodes,
            rules=[r.text for r in rules],
            cap=cap,
            full=full,
            max_ops=c.max_ops,
        )
        messages = [{"role": "user", "content": content}]
        if self.prime:
            messages.append({"role": "assistant", "content": self.prime})
        return messages

    # ---- doing --------------------------------------------------------------------------

    def reflect(self, family: str | None = None, since_run: str | None = None) -> ReflectionReport:
        """Reflect on what is due now (see the module docstring); returns what happened.

        Args:
            family: only episodes of this task family.
            since_run: only episodes of this run and later runs (run ids sort by start time).

        A model that fails (e.g. a server down) ends the reflection early: the inputs not
        done are left for the next one and the error is in `report.errors`.
        """
        t0 = time.perf_counter()
        report = ReflectionReport(new_reflection_id(), self.model_name, family, since_run)
        flush = getattr(self.bank, "flush", None)
        if flush is not None:
            flush()
        due = self.due(family, since_run)
        inputs = self._with_trajectories(due[: self.config.max_inputs])
        report.pending = len(due) - min(len(due), self.config.max_inputs)
        editor = RuleEditor(self.bank, self.config, report.id, report.model)
        size = self.config.batch_size
        for start in range(0, len(inputs), size):
            batch = inputs[start : start + size]
            shown, prompts = [], []
            for item in batch:
                game = self._game(item)
                rules = [r for r, _ in editor.live_rules(game)]
                target = item.target(self.config.rule_scope)
                key = (target.family, target.variant, target.seed)
                full = sum(1 for r in rules if scope_key(r) == key) >= editor.cap_of(key)
                shown.append(rules)
                prompts.append(self.prompt(item, rules, full))
            try:
                completions = self.model.generate(prompts, self.generation())
                if len(completions) != len(prompts):
                    raise RuntimeError(f"the model returned {len(completions)} replies for {len(prompts)} prompts")
            except Exception as e:  # noqa: BLE001 - any backend failure ends this reflection, reported
                report.errors.append(f"the reflecting model {report.model} failed: {type(e).__name__}: {e}")
                report.pending += len(inputs) - start
                break
            for item, rules, completion in zip(batch, shown, completions):
                reply = self.prime + str(getattr(completion, "text", completion) or "")
                outcome = self._apply(editor, item, rules, reply)
                report.outcomes.append(outcome)
                self.log.append(report.id, report.model, outcome, time.time())
        report.seconds = time.perf_counter() - t0
        self.reports.append(report)
        return report

    @staticmethod
    def _game(item: ReflectionInput) -> RuleTarget:
        """The game whose rules a reflection sees: the variant, and the seed for a critique."""
        seed = item.episodes[0].seed if item.kind == "critique" and item.episodes else None
        return RuleTarget(item.family, item.variant, seed)

    def _apply(
        self, editor: RuleEditor, item: ReflectionInput, rules: Sequence[RuleRecord], reply: str
    ) -> InputOutcome:
        parsed = parse_operations(reply)
        if self.config.strip_instructions:
            parsed = drop_planted(parsed, planted_instructions(item.episodes))
        if self.config.require_grounded:
            parsed = drop_ungrounded(parsed, episode_vocabulary(item))
        result: EditResult = editor.apply(
            parsed.ops, rules, item.target(self.config.rule_scope), item.episode_ids, self._game(item)
        )
        rejected = parsed.rejected + result.rejected
        for r in rejected:
            log.info("reflection %s: rejected %r: %s", editor.reflection, r.raw[:120], r.reason)
        return InputOutcome(
            input=item,
            reply=reply,
            format=parsed.format,
            accepted=[{"op": op.describe(), "note": note} for op, note in result.accepted],
            rejected=[{"raw": r.raw, "reason": r.reason} for r in rejected],
            other_lines=parsed.other_lines,
            changes=result.changes,
        )
