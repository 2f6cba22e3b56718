"""SFT examples from successful episodes: the prompt the agent saw at a step, and the reply it gave.

One example per agent turn, in TRL's conversational prompt-completion format:

    {"prompt": [{"role": "system", ...}, {"role": "user", ...}],
     "completion": [{"role": "assistant", "content": "Action: take brass key"}]}

Why prompt-completion rather than a single `messages` list: the loss must fall on the reply
only, and TRL's `assistant_only_loss` needs `{% generation %}` markers that SmolLM2's chat
template lacks (TRL 1.x cannot patch that template). With a prompt and a completion TRL masks
everything before the completion itself. Why per turn rather than per episode: the agent
sees each step as a fresh prompt (history is inside the user message), so a multi-turn
conversation would train on contexts it never sees.

Because the agent primes its reply with "Action:" (no trailing space), the completion starts
with that marker: the tokens before the action are then exactly the inference prompt's
(checked by `finetune.tokens.tokenize_pair`). A step the posterior policy decided teaches the
action taken (`step.action`, memory's choice where it overrode the model), never the model's
scored argmax.

With `sft_targets = "soft"` a state teaches the posterior's top actions instead of one, each
as identical-prompt rows in proportion to its posterior mass (`finetune.posterior_targets`):
TRL's SFTTrainer has no per-example loss weight, and duplicated rows are what it trains on
unchanged. Every state then gets `sft_soft_rows` rows, so each state weighs the same.

Synthetic episodes (stitched, relabelled) weigh `synthetic_weight` against real ones
(`finetune.synthetic_weight`): real episodes go first, so a synthetic state that duplicates a
real one gives way to it, and of the synthetic states left a share w is kept, before any
soft-target expansion.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from crl.finetune.config import FinetuneConfig
from crl.finetune.posterior_targets import LoggedPosterior, soft_targets
from crl.finetune.prompt_replay import PromptCounter, PromptShape, StepPrompt, replay_prompts
from crl.finetune.source import LoadedEpisodes, SourceEpisode
from crl.finetune.synthetic_weight import weigh_synthetic
from crl.finetune.tool_rows import is_native_call, tool_completion, tool_skip_reason, tools_column, trl_messages
from crl.memory.ingest import history_action, step_detours
from crl.memory.records import state_text
from crl.memory.trajectory import Step

Message = dict[str, str]
Embed = Callable[[list[str]], np.ndarray]
STATE_HISTORY = 3
_ID_KEYS = {
    "episode": ("episode_id", "chosen_episode_id", "rejected_episode_id"),
    "step": ("step_id", "chosen_step_id", "rejected_step_id"),
}


def reply_text(step: Step, shape: PromptShape, mode: str = "action") -> str:
    """The assistant reply an example teaches for `step` ("" when there is none to teach).

    Example:
        >>> from crl.memory.trajectory import Step
        >>> reply_text(Step(0, "A hall.", "take brass key"), PromptShape(react=False))
        'Action: take brass key'

    A step the posterior policy decided was scored, not generated: its raw output is the
    model's argmax written out, so even in "raw" mode it teaches the action taken.
    """
    if mode == "raw" and LoggedPosterior.of(step) is None:
        return step.raw_output.rstrip()
    if not step.action:
        return ""
    if shape.react and step.thought:
        return f"Thought: {step.thought}\nAction: {step.action}"
    return f"Action: {step.action}"


def rejected_text(step: Step, episode: SourceEpisode) -> str:
    """What a failing step did, as a DPO rejected side: the action it took, or its unusable reply as written."""
    if step.action:
        return reply_text(step, episode.shape)
    return step.raw_output.rstrip()


def step_state_text(goal: str, steps: Sequence[Step], index: int) -> str:
    """The state text of step `index` as the bank embeds it (goal, recent actions, observation)."""
    history = [history_action(s) for s in steps[max(0, index - STATE_HISTORY) : index]]
    return state_text(goal, steps[index].observation, history)


@dataclass
class BuiltDataset:
    """Rows ready for JSONL, with everything the dataset card reports about how they were chosen."""

    kind: str
    rows: list[dict[str, Any]]
    dropped: Counter = field(default_factory=Counter)
    source_episode_ids: list[str] = field(default_factory=list)
    source_step_ids: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    prompt_memory: dict[str, list[str]] = field(default_factory=dict)

    @property
    def tasks(self) -> list[str]:
        return sorted({r["task"] for r in self.rows})

    @property
    def prompt_memory_ids(self) -> list[str]:
        """Memory records (episodes, steps, rules) whose text was in a kept row's prompt: the
        memories retrieved at the step whose logged prompt a row trains on (`prompt_memory`, by step
        id; a DPO pair counts both of its steps)."""
        keys = {r[k] for r in self.rows for k in _ID_KEYS["step"] if k in r}
        return sorted({rid for key in keys for rid in self.prompt_memory.get(key, [])})

    def keep(self, indices: set[int], reason: str) -> None:
        """Keep only the rows at `indices`, counting the others as dropped for `reason`."""
        self.dropped[reason] += len(self.rows) - len(indices)
        self.rows = [r for i, r in enumerate(self.rows) if i in indices]
        self.source_episode_ids = sorted({r[k] for r in self.rows for k in _ID_KEYS["episode"] if k in r})
        self.source_step_ids = sorted({r[k] for r in self.rows for k in _ID_KEYS["step"] if k in r})


def _verify(episode: SourceEpisode, counter: PromptCounter | None) -> bool:
    """Token counts can be compared only when the counter counts as the run's model did."""
    return counter is not None and episode.record.model.split("+", 1)[0] == counter.name


def episode_prompts(
    episode: SourceEpisode, config: FinetuneConfig, counter: PromptCounter | None
) -> list[StepPrompt | str]:
    """Every step's rebuilt prompt (or why it could not be rebuilt)."""
    if episode.shape is None:
        return ["unknown-prompt-shape"] * len(episode.steps)
    return replay_prompts(
        episode.record.goal,
        episode.steps,
        episode.shape,
        counter=counter,
        memory_prompts=config.memory_prompts,
        verify_tokens=_verify(episode, counter),
    )


def _detours(episode: SourceEpisode) -> set[int]:
    """Indices of the episode's steps that loop erasure leaves off its path (`step_detours`)."""
    return step_detours(episode.record.task, episode.steps)


def _unneeded(episode: SourceEpisode, detours: set[int], spent: Counter) -> set[int]:
    """Indices of the won episode's steps its win did not need (`memory.synthesis.minimal`), replayed
    from its loop-erased, valid steps. `spent` counts the replays' cost."""
    from crl.memory.synthesis.minimal import unneeded_steps

    unneeded, found = unneeded_steps(episode.record.task, episode.record.seed, episode.steps, detours)
    spent["env_steps"] += found.env_steps
    spent["episodes" if found.replayed else "not_replayable"] += 1
    return unneeded


def build_sft(
    loaded: LoadedEpisodes,
    config: FinetuneConfig,
    counter: PromptCounter | None = None,
    embed: Embed | None = None,
    synthetic_weight: float | None = None,
) -> BuiltDataset:
    """SFT rows from successful episodes, one per valid step, near-duplicates removed,
    synthetic states kept in the share `synthetic_weight` (module docstring).

    Args:
        loaded: episodes that passed the SFT filter (`load_episodes(..., successes_only=True)`).
        config: reply mode, memory policy, near-duplicate threshold, synthetic weight.
        counter: the run model's token counter (rebuilds budget-shortened prompts, verifies counts).
        embed: unit embeddings of state texts, for near-duplicate removal (None: exact only).
        synthetic_weight: overrides `config.synthetic_weight` (a caller's down-weighting, e.g. for drift).
    """
    dropped = Counter({f"episode:{k}": v for k, v in loaded.dropped.items()})
    weight = config.synthetic_weight if synthetic_weight is None else synthetic_weight
    candidates: list[dict[str, Any]] = []
    states: list[str] = []
    exact: list[bool] = []
    sources: list[Step] = []
    synthetic: list[bool] = []
    stripped = not_asked = templates_changed = 0
    minimal: Counter = Counter()
    for episode in sorted(loaded.episodes, key=lambda e: e.record.source == "synthetic"):
        prompts = episode_prompts(episode, config, counter)
        detours = _detours(episode) if config.sft_loop_erasure else set()
        unneeded = _unneeded(episode, detours, minimal) if config.sft_minimal else set()
        for step, prompt in zip(episode.steps, prompts):
            if step.index in episode.quarantined_steps:
                dropped["quarantined-step"] += 1
                continue
            if step.index in detours:
                dropped["detour"] += 1
                continue
            if step.index in unneeded:
                dropped["unneeded"] += 1
                continue
            if not step.valid or not step.action:
                dropped["invalid-step"] += 1
                continue
            if isinstance(prompt, str):
                dropped[prompt] += 1
                continue
            tools = episode.shape.tools
            skip = tool_skip_reason(step, tools)
            if skip is not None:
                dropped[skip] += 1
                continue
            native = is_native_call(step)
            reply = "" if native else reply_text(step, episode.shape, config.completion)
            if not reply and not native:
                dropped["empty-reply"] += 1
                continue
            stripped += "memory section stripped" in prompt.note
            not_asked += prompt.note.startswith("model not asked")
            templates_changed += prompt.templates_changed
            exact.append(prompt.exact)
            row = {
                "prompt": trl_messages(prompt.messages) if native else prompt.messages,
                "completion": tool_completion(step) if native else [{"role": "assistant", "content": reply}],
                "task": episode.record.task,
                "episode_id": episode.id,
                "step_id": episode.step_id(step.index),
            }
            if native:
                row["tools"] = tools_column(tools)
            candidates.append(row)
            states.append(step_state_text(episode.record.goal, episode.steps, step.index))
            sources.append(step)
            synthetic.append(episode.record.source == "synthetic")
    keep = dedupe(candidates, states, config.near_duplicate_similarity, embed, dropped)
    weighed, share = weigh_synthetic([candidates[i]["step_id"] if synthetic[i] else None for i in keep], weight)
    if len(weighed) < len(keep):
        dropped["synthetic-weight"] += len(keep) - len(weighed)
    keep = [keep[i] for i in weighed]
    rows = [candidates[i] for i in keep]
    targets: dict[str, Any] = {"mode": config.sft_targets}
    if config.sft_targets == "soft":
        rows, targets = expand_soft([(candidates[i], sources[i]) for i in keep], config)
    return BuiltDataset(
        kind="sft",
        rows=rows,
        dropped=dropped,
        source_episode_ids=sorted({r["episode_id"] for r in rows}),
        source_step_ids=sorted({r["step_id"] for r in rows}),
        stats={
            "candidates": len(candidates),
            "exact_prompts": sum(1 for i in keep if exact[i]),
            "memory_stripped": stripped,
            "decided_without_model": not_asked,
            "templates_changed": templates_changed,
            "by_task": dict(Counter(r["task"] for r in rows)),
            "targets": targets,
            "synthetic": share.to_dict(),
            **({"minimal": dict(minimal)} if config.sft_minimal else {}),
        },
    )


def expand_soft(kept: list[tuple[dict[str, Any], Step]], config: FinetuneConfig) -> tuple[list[dict[str, Any]], dict]:
    """Soft-target rows for the kept states (`sft_targets = "soft"`), and how they were made.

    Each kept row (one state, the action taken) becomes `config.sft_soft_rows` rows: at a step
    the posterior decided, its top actions (`posterior_targets.soft_targets`), each repeated
    `copies` times; elsewhere, the action taken repeated. Every row carries `target_mass` (the
    action's renormalised posterior mass) and `copies`.
    """
    rows: list[dict[str, Any]] = []
    posterior_states = not_taken = actions = below_one_row = 0
    for row, step in kept:
        decision = LoggedPosterior.of(step)
        if decision is not None and decision.chosen != step.action:
            not_taken += 1  # the loop breaker replaced the posterior's choice: teach what was done
            decision = None
        if decision is None:
            targets = [(row["completion"][0]["content"], 1.0, config.sft_soft_rows)]
        else:
            posterior_states += 1
            soft = soft_targets(decision, config.sft_soft_top_k, config.sft_soft_min_mass, config.sft_soft_rows)
            below_one_row += sum(1 for t in soft if t.copies == 0)
            targets = [(f"Action: {t.action}", t.mass, t.copies) for t in soft if t.copies]
        actions += len(targets)
        for reply, mass, copies in targets:
            target = row | {
                "completion": [{"role": "assistant", "content": reply}],
                "target_mass": round(mass, 6),
                "copies": copies,
            }
            rows.extend(dict(target) for _ in range(copies))
    states = len(kept)
    return rows, {
        "mode": "soft",
        "weights": "duplicated rows: an action's weight is copies / rows_per_state "
        "(TRL's SFTTrainer has no per-example loss weight)",
        "rows_per_state": config.sft_soft_rows,
        "top_k": config.sft_soft_top_k,
        "min_mass": config.sft_soft_min_mass,
        "states": states,
        "posterior_states": posterior_states,
        "posterior_not_taken": not_taken,
        "actions_per_state": round(actions / states, 3) if states else 0.0,
        "actions_below_one_row": below_one_row,
    }


def _key(row: dict[str, Any]) -> str:
    flat = json.dumps([row["prompt"], row["completion"]], sort_keys=True)
    return " ".join(flat.split())


def dedupe(
    rows: list[dict[str, Any]],
    states: list[str],
    threshold: float | None,
    embed: Embed | None,
    dropped: Counter,
) -> list[int]:
    """Indices of rows to keep: exact duplicates go, then (with `embed`) rows whose reply is the
    same as a kept row's and whose state is at least `threshold` similar to it."""
    seen: set[str] = set()
    keep: list[int] = []
    for i, row in enumerate(rows):
        key = _key(row)
        if key in seen:
            dropped["duplicate"] += 1
            continue
        seen.add(key)
        keep.append(i)
    if embed is None or threshold is None or len(keep) < 2:
        return keep
    vectors = embed([states[i] for i in keep])
    kept_by_reply: dict[str, list[int]] = {}
    out: list[int] = []
    for pos, i in enumerate(keep):
        reply = json.dumps(rows[i]["completion"], sort_keys=True)
        same = kept_by_reply.setdefault(reply, [])
        if same and float(np.max(vectors[same] @ vectors[pos])) >= threshold:
            dropped["near-duplicate"] += 1
            continue
        same.append(pos)
        out.append(i)
    return out
