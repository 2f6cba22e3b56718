"""DPO preference pairs from successes and failures, in TRL's conversational `prompt/chosen/rejected` form.

Four sources:

- trajectory level (ETO-style): a success and a failure on the same task and seed. Both
  games start in the same state, so their prompts agree until the agents first act
  differently; that step is the pair: same prompt, the higher-return episode's reply
  chosen, the other's rejected. Equal returns are ties and dropped.
- step level: a step of a failed episode whose state is nearly identical (by embedding) to a
  step of a successful episode of the same task; the success's prompt, its action chosen,
  the failure's action rejected, provided the rejected action was valid there and no
  success took it in such a state.
- hard negatives (level "hard_negative", `finetune.hard_negatives`): an inadmissible, looping
  or known-losing reply of a failure, on the failure's own prompt, against the action a
  success took from the nearest state; each row names its `negative_kind`.
- memory level (`dpo_q_pairs`, level "q"): a step the posterior policy decided where memory
  confidently knew the model's argmax loses (advantage <= -`dpo_q_threshold`, support >=
  `dpo_q_min_support`): that step's prompt, the action memory rated best (positive advantage,
  same support) chosen, the argmax rejected. Both sides come from the same step; their
  "returns" are memory's values q of the two actions, which is what orders them.

Every pair is validated (`pair_problem`): empty sides, identical sides, and chosen returns
not above rejected ones are dropped with a count per reason. Pairs whose chosen side is a
synthetic episode are kept in the share `synthetic_weight` (`finetune.synthetic_weight`).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from itertools import combinations
from typing import Any

import numpy as np

from crl.finetune.config import FinetuneConfig
from crl.finetune.hard_negatives import HardNegativePair, hard_negative_pairs
from crl.finetune.posterior_targets import LoggedPosterior, q_pair
from crl.finetune.prompt_replay import PromptCounter, StepPrompt
from crl.finetune.sft_data import BuiltDataset, episode_prompts, rejected_text, reply_text, step_state_text
from crl.finetune.source import LoadedEpisodes, SourceEpisode, qualifies_for_sft
from crl.finetune.synthetic_weight import weigh_synthetic
from crl.memory.trajectory import Step

Embed = Callable[[list[str]], np.ndarray]
MARKERS = ("Action:", "Thought:")


def _body(reply: str) -> str:
    text = reply.strip()
    for marker in MARKERS:
        text = text.replace(marker, " ")
    return " ".join(text.lower().split())


def pair_problem(row: dict[str, Any]) -> str | None:
    """Why a pair must not be trained on, or None when it is sound.

    Example:
        >>> pair_problem({"chosen": [{"role": "assistant", "content": "Action: go north"}],
        ...               "rejected": [{"role": "assistant", "content": "Action: go north"}],
        ...               "chosen_return": 1.0, "rejected_return": 0.0})
        'identical'
    """
    chosen, rejected = row["chosen"][-1]["content"], row["rejected"][-1]["content"]
    if not _body(chosen) or not _body(rejected):
        return "empty"
    if _body(chosen) == _body(rejected):
        return "identical"
    if row["chosen_return"] == row["rejected_return"]:
        return "tie"
    if row["chosen_return"] < row["rejected_return"]:
        return "mis-ordered"
    return None


def _row(
    level: str,
    prompt: StepPrompt,
    good: SourceEpisode,
    good_step: Step,
    bad: SourceEpisode,
    bad_step: Step,
    config: FinetuneConfig,
    rejected: str | None = None,
    negative_kind: str | None = None,
) -> dict[str, Any]:
    return {
        "prompt": prompt.messages,
        "chosen": [{"role": "assistant", "content": reply_text(good_step, good.shape, config.completion)}],
        "rejected": [{"role": "assistant", "content": rejected_text(bad_step, bad) if rejected is None else rejected}],
        "task": good.record.task,
        "level": level,
        "negative_kind": negative_kind,
        "chosen_episode_id": good.id,
        "rejected_episode_id": bad.id,
        "chosen_step_id": good.step_id(good_step.index),
        "rejected_step_id": bad.step_id(bad_step.index),
        "chosen_return": float(good.record.total_return),
        "rejected_return": float(bad.record.total_return),
    }


def trajectory_pairs(
    episodes: Sequence[SourceEpisode],
    prompts: dict[str, list[StepPrompt | str]],
    config: FinetuneConfig,
    dropped: Counter,
) -> list[dict[str, Any]]:
    """Pairs at the first step where two episodes of the same task and seed act differently."""
    groups: dict[tuple[str, int], list[SourceEpisode]] = defaultdict(list)
    for ep in episodes:
        groups[(ep.record.task, ep.record.seed)].append(ep)
    rows = []
    for group in groups.values():
        for a, b in combinations(group, 2):
            if a.record.success == b.record.success:
                continue  # two successes or two failures: no preference between them
            good, bad = (a, b) if a.record.total_return >= b.record.total_return else (b, a)
            if not good.record.success:
                dropped["trajectory:mis-ordered"] += 1
                continue
            row = _first_divergence(good, bad, prompts, config, dropped)
            if row is not None:
                rows.append(row)
    return rows


def _first_divergence(
    good: SourceEpisode,
    bad: SourceEpisode,
    prompts: dict[str, list[StepPrompt | str]],
    config: FinetuneConfig,
    dropped: Counter,
) -> dict[str, Any] | None:
    for i in range(min(len(good.steps), len(bad.steps))):
        pg, pb = prompts[good.id][i], prompts[bad.id][i]
        if isinstance(pg, str) or isinstance(pb, str):
            dropped[f"trajectory:{pg if isinstance(pg, str) else pb}"] += 1
            return None
        if pg.messages != pb.messages:
            dropped["trajectory:no-shared-state"] += 1
            return None
        gs, bs = good.steps[i], bad.steps[i]
        if gs.action and gs.action == bs.action:
            continue
        if not gs.valid or not gs.action or i in good.quarantined_steps:
            dropped["trajectory:chosen-step-unusable"] += 1
            return None
        return _row("trajectory", pg, good, gs, bad, bs, config)
    dropped["trajectory:no-divergence"] += 1
    return None


def step_pairs(
    successes: Sequence[SourceEpisode],
    failures: Sequence[SourceEpisode],
    prompts: dict[str, list[StepPrompt | str]],
    config: FinetuneConfig,
    embed: Embed,
    dropped: Counter,
) -> list[dict[str, Any]]:
    """Pairs of a failed step and the nearest successful step in a near-identical state of the same task."""
    good_steps = [
        (ep, s)
        for ep in successes
        for s in ep.steps
        if s.valid and s.action and s.index not in ep.quarantined_steps and not isinstance(prompts[ep.id][s.index], str)
    ]
    bad_steps = [(ep, s) for ep in failures for s in ep.steps if s.action and s.index not in ep.quarantined_steps]
    if not good_steps or not bad_steps:
        return []
    good_vecs = embed([step_state_text(ep.record.goal, ep.steps, s.index) for ep, s in good_steps])
    bad_vecs = embed([step_state_text(ep.record.goal, ep.steps, s.index) for ep, s in bad_steps])
    sims = bad_vecs @ good_vecs.T
    good_tasks = np.array([ep.record.task for ep, _ in good_steps])
    rows = []
    for row_i, (bad, bs) in enumerate(bad_steps):
        near = np.flatnonzero((sims[row_i] >= config.dpo_state_similarity) & (good_tasks == bad.record.task))
        if near.size == 0:
            continue
        if bs.action in {good_steps[j][1].action for j in near}:
            dropped["step:rejected-also-succeeded"] += 1
            continue
        j = int(near[np.argmax(sims[row_i][near])])
        good, gs = good_steps[j]
        if bs.action not in (gs.admissible_actions or []):
            dropped["step:rejected-not-admissible"] += 1
            continue
        rows.append(_row("step", prompts[good.id][gs.index], good, gs, bad, bs, config))
    return rows


def q_pairs(
    episodes: Sequence[SourceEpisode],
    prompts: dict[str, list[StepPrompt | str]],
    config: FinetuneConfig,
    dropped: Counter,
    seen: Counter,
) -> list[dict[str, Any]]:
    """Pairs from memory's values at posterior-policy steps where it confidently knew the model's
    argmax loses (module docstring); `seen` counts the decisions read and the confident losers."""
    rows = []
    for ep in episodes:
        for step in ep.steps:
            decision = LoggedPosterior.of(step)
            if decision is None:
                continue
            seen["posterior_steps"] += 1
            pair = q_pair(decision, config.dpo_q_threshold, config.dpo_q_min_support)
            if pair is None:
                continue
            seen["confident_losers"] += 1
            prompt = prompts[ep.id][step.index]
            reason = pair if isinstance(pair, str) else prompt if isinstance(prompt, str) else None
            if step.index in ep.quarantined_steps:
                reason = "quarantined-step"
            if reason:
                dropped[f"q:{reason}"] += 1
                continue
            step_id = ep.step_id(step.index)
            rows.append(
                {
                    "prompt": prompt.messages,
                    "chosen": [{"role": "assistant", "content": f"Action: {pair.chosen.action}"}],
                    "rejected": [{"role": "assistant", "content": f"Action: {pair.rejected.action}"}],
                    "task": ep.record.task,
                    "level": "q",
                    "negative_kind": None,
                    "chosen_episode_id": ep.id,
                    "rejected_episode_id": ep.id,
                    "chosen_step_id": step_id,
                    "rejected_step_id": step_id,
                    "chosen_return": float(pair.chosen.q),
                    "rejected_return": float(pair.rejected.q),
                }
            )
    return rows


def hard_negative_rows(
    pairs: Sequence[HardNegativePair],
    prompts: dict[str, list[StepPrompt | str]],
    config: FinetuneConfig,
    dropped: Counter,
) -> list[dict[str, Any]]:
    """Rows of hard-negative pairs, on the rejected step's prompt."""
    rows = []
    for pair in pairs:
        bad, bs = pair.negative.episode, pair.negative.step
        prompt = prompts[bad.id][bs.index]
        if isinstance(prompt, str):
            dropped[f"hard_negative:{prompt}"] += 1
            continue
        negative = pair.negative
        row = _row("hard_negative", prompt, pair.episode, pair.step, bad, bs, config, negative.reply, negative.kind)
        rows.append(row)
    return rows


def _pair_key(row: dict[str, Any]) -> str:
    return f"{row['chosen_step_id']}|{row['rejected_step_id']}|{row['rejected'][0]['content']}"


def build_dpo(
    loaded: LoadedEpisodes,
    config: FinetuneConfig,
    counter: PromptCounter | None = None,
    embed: Embed | None = None,
    synthetic_weight: float | None = None,
) -> BuiltDataset:
    """DPO rows from usable episodes (successes and failures), validated and de-duplicated.

    Args:
        loaded: episodes that passed the general filter (`load_episodes(...)`).
        config: pair levels, state similarity, hard-negative kinds, Q-pair thresholds, `min_value`
            for the chosen side, synthetic weight.
        counter: the run model's token counter (see `build_sft`).
        embed: unit embeddings of state texts; needed for step-level pairs and hard negatives.
        synthetic_weight: overrides `config.synthetic_weight` (a caller's down-weighting, e.g. for drift).
    """
    dropped = Counter({f"episode:{k}": v for k, v in loaded.dropped.items()})
    usable = []
    for ep in loaded.episodes:
        if ep.record.success and qualifies_for_sft(ep.record, config):
            dropped["episode:below-min-value"] += 1
            continue
        usable.append(ep)
    prompts = {ep.id: episode_prompts(ep, config, counter) for ep in usable}
    candidates: list[dict[str, Any]] = []
    if "trajectory" in config.dpo_levels:
        candidates += trajectory_pairs(usable, prompts, config, dropped)
    successes = [ep for ep in usable if ep.record.success]
    failures = [ep for ep in usable if not ep.record.success]
    if embed is None and {"step", "hard_negative"} & set(config.dpo_levels):
        raise ValueError(
            "step-level and hard-negative DPO pairs need state embeddings; pass embed= (the bank's embedder)"
        )
    if "step" in config.dpo_levels:
        candidates += step_pairs(successes, failures, prompts, config, embed, dropped)
    negatives_found: Counter = Counter()
    if "hard_negative" in config.dpo_levels:
        pairs = hard_negative_pairs(
            successes,
            failures,
            config.hard_negative_kinds,
            config.dpo_state_similarity,
            config.hard_negative_min_losses,
            embed,
            dropped,
            negatives_found,
        )
        candidates += hard_negative_rows(pairs, prompts, config, dropped)
    q_seen: Counter = Counter()
    if config.dpo_q_pairs:
        candidates += q_pairs(usable, prompts, config, dropped, q_seen)
    rows, seen = [], set()
    for row in candidates:
        problem = pair_problem(row)
        if problem:
            dropped[f"{row['level']}:{problem}"] += 1
            continue
        key = json.dumps([row["prompt"], row["chosen"], row["rejected"]], sort_keys=True)
        if key in seen:
            dropped[f"{row['level']}:duplicate"] += 1
            continue
        seen.add(key)
        rows.append(row)
    synthetic = {ep.id for ep in usable if ep.record.source == "synthetic"}
    weight = config.synthetic_weight if synthetic_weight is None else synthetic_weight
    keys = [_pair_key(r) if r["chosen_episode_id"] in synthetic else None for r in rows]
    kept, share = weigh_synthetic(keys, weight)
    if len(kept) < len(rows):
        dropped["synthetic-weight"] += len(rows) - len(kept)
    rows = [rows[i] for i in kept]
    episode_ids = {r[k] for r in rows for k in ("chosen_episode_id", "rejected_episode_id")}
    step_ids = {r[k] for r in rows for k in ("chosen_step_id", "rejected_step_id")}
    return BuiltDataset(
        kind="dpo",
        rows=rows,
        dropped=dropped,
        source_episode_ids=sorted(episode_ids),
        source_step_ids=sorted(step_ids),
        stats={
            "successes": sum(1 for ep in usable if ep.record.success),
            "failures": sum(1 for ep in usable if not ep.record.success),
            "candidates": len(candidates),
            "by_level": dict(Counter(r["level"] for r in rows)),
            "by_task": dict(Counter(r["task"] for r in rows)),
            "hard_negatives": {
                "enabled": "hard_negative" in config.dpo_levels,
                "kinds": list(config.hard_negative_kinds),
                "min_losses": config.hard_negative_min_losses,
                "found": dict(negatives_found),
                "pairs": dict(Counter(r["negative_kind"] for r in rows if r["level"] == "hard_negative")),
            },
            "synthetic": share.to_dict(),
            "q_pairs": {
                "enabled": config.dpo_q_pairs,
                "threshold": config.dpo_q_threshold,
                "min_support": config.dpo_q_min_support,
                "posterior_steps": q_seen["posterior_steps"],
                "confident_losers": q_seen["confident_losers"],
            },
        },
    )
