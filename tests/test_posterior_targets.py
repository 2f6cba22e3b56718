"""Training toward the posterior: soft SFT targets and DPO pairs from memory's values.

Hand-built posterior logs (no model) pin the arithmetic; a scripted posterior run with memory
shows that what a real run logs becomes the intended rows.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict

import pytest

from crl.finetune.config import FinetuneConfig
from crl.finetune.dpo_data import build_dpo, pair_problem
from crl.finetune.posterior_targets import LoggedPosterior, apportion, q_pair, soft_targets
from crl.finetune.prompt_replay import PromptShape
from crl.finetune.sft_data import build_sft
from crl.finetune.source import LoadedEpisodes, SourceEpisode, load_episodes
from crl.memory.records import EpisodeRecord, episode_record_id
from crl.memory.trajectory import PolicyDecision, Step, StepExtra

CONFIG = FinetuneConfig(near_duplicate_similarity=None)
SOFT = CONFIG.model_copy(update={"sft_targets": "soft", "sft_soft_top_k": 2, "sft_soft_min_mass": 0.1})


def logged(posterior: dict[str, float], chosen: str, model: dict[str, float] | None = None, **extra) -> dict:
    """A posterior decision as `PosteriorDecision.to_dict` logs it; `memory` maps an action to
    (advantage, support), with q = advantage (baseline 0)."""
    model = model or posterior
    memory = extra.pop("memory", {})
    actions = {}
    for a, p in posterior.items():
        entry = {"model": model[a], "lambda": 0.0, "posterior": p}
        if a in memory:
            adv, support = memory[a]
            entry["memory"] = {"q": adv, "baseline": 0.0, "advantage": adv, "support": support, "n": 1, "hint": ""}
        actions[a] = entry
    return {
        "chosen": chosen,
        "model_best": max(model, key=model.get),
        "avoided": extra.pop("avoided", []),
        "actions": actions,
    }


def step(index: int, observation: str, action: str, posterior: dict | None = None) -> Step:
    policy = PolicyDecision("llm", posterior=posterior) if posterior else None
    actions = list(posterior["actions"]) if posterior else [action, "look"]
    return Step(
        index,
        observation,
        action,
        raw_output=f"Action: {action}",
        admissible_actions=actions,
        extra=StepExtra(policy=policy),
    )


def episode(name: str, steps: list[Step], success: bool = True) -> SourceEpisode:
    record = EpisodeRecord(
        id=episode_record_id("keyroom", name),
        episode_id=name,
        run_id="r",
        task="keyroom/key",
        family="keyroom",
        variant="key",
        seed=0,
        goal="Find the key.",
        status="done",
        outcome="success" if success else "failure",
        success=success,
        total_return=1.0 if success else -1.0,
        length=len(steps),
        reward_sparsity=1.0,
        novelty=0.0,
        text=steps[0].observation,
        created_at=time.time(),
        updated_at=time.time(),
    )
    return SourceEpisode(record, steps, PromptShape())


# ---- soft targets ------------------------------------------------------------------------------


def test_soft_targets_keep_the_top_k_above_the_mass_cut_and_sum_to_one():
    d = LoggedPosterior.from_dict(logged({"a": 0.5, "b": 0.3, "c": 0.15, "d": 0.05}, chosen="a"))
    top2 = soft_targets(d, top_k=2, min_mass=0.0, rows=4)
    assert [t.action for t in top2] == ["a", "b"]
    assert [t.mass for t in top2] == pytest.approx([0.625, 0.375])
    assert [t.copies for t in top2] == [3, 1]  # 2.5 and 1.5: the tie goes to the heavier action
    cut = soft_targets(d, top_k=4, min_mass=0.1, rows=4)
    assert [t.action for t in cut] == ["a", "b", "c"]  # d holds 0.05 < 0.1
    assert sum(t.mass for t in cut) == pytest.approx(1.0)
    assert sum(t.copies for t in cut) == 4


def test_soft_targets_leave_out_avoided_actions_and_always_keep_the_one_taken():
    d = LoggedPosterior.from_dict(
        logged({"look": 0.5, "take key": 0.3, "go west": 0.15, "wait": 0.05}, chosen="take key", avoided=["look"])
    )
    t = soft_targets(d, top_k=2, min_mass=0.1, rows=4)
    assert [(x.action, x.copies) for x in t] == [("take key", 3), ("go west", 1)]
    assert [x.mass for x in t] == pytest.approx([2 / 3, 1 / 3])
    sampled = LoggedPosterior.from_dict(logged({"a": 0.9, "b": 0.08, "c": 0.02}, chosen="c"))
    kept = soft_targets(sampled, top_k=1, min_mass=0.5, rows=10)
    assert [x.action for x in kept] == ["a", "c"]
    assert sum(x.mass for x in kept) == pytest.approx(1.0) and kept[1].mass == pytest.approx(0.02 / 0.92)


def test_apportion_sums_to_the_total_by_largest_remainder():
    assert apportion([0.7, 0.2, 0.1], 4) == [3, 1, 0]
    assert apportion([1 / 3] * 3, 4) == [2, 1, 1]
    assert apportion([0.5, 0.5], 1) == [1, 0]
    with pytest.raises(ValueError):
        apportion([0.0], 3)


def test_soft_sft_rows_weight_each_state_by_its_posterior():
    posterior = logged({"go west": 0.6, "look": 0.3, "inventory": 0.1}, chosen="go west")
    steps = [
        step(0, "You are in the pantry.", "go west", posterior),
        step(1, "You are in the workshop.", "take key"),  # decided without the posterior
    ]
    built = build_sft(LoadedEpisodes([episode("e1", steps)], Counter()), SOFT)
    by_state: dict[str, list[dict]] = defaultdict(list)
    for row in built.rows:
        by_state[row["step_id"]].append(row)
    first, second = (by_state[f"st:keyroom:e1:{i}"] for i in (0, 1))
    assert len(first) == len(second) == SOFT.sft_soft_rows
    replies = Counter(r["completion"][0]["content"] for r in first)
    assert replies == {"Action: go west": 3, "Action: look": 1}  # inventory is only top-3
    masses = {r["completion"][0]["content"]: r["target_mass"] for r in first}
    assert sum(masses.values()) == pytest.approx(1.0) and masses["Action: go west"] == pytest.approx(2 / 3)
    assert {r["completion"][0]["content"] for r in second} == {"Action: take key"}
    assert all(r["target_mass"] == 1.0 and r["copies"] == 4 for r in second)
    targets = built.stats["targets"]
    assert targets["mode"] == "soft" and targets["posterior_states"] == 1 and targets["states"] == 2
    assert "duplicated rows" in targets["weights"]


def test_chosen_targets_teach_one_row_per_state_without_weight_columns():
    posterior = logged({"go west": 0.6, "look": 0.4}, chosen="go west")
    built = build_sft(LoadedEpisodes([episode("e1", [step(0, "A pantry.", "go west", posterior)])], Counter()), CONFIG)
    assert [r["completion"][0]["content"] for r in built.rows] == ["Action: go west"]
    assert "target_mass" not in built.rows[0] and built.stats["targets"] == {"mode": "chosen"}


def test_loop_erased_sft_teaches_only_the_path_a_won_episode_took():
    steps = [
        step(0, "A pantry.", "take bottle"),
        step(1, "A pantry, holding a bottle.", "drop bottle"),
        step(2, "A pantry.", "go west"),
        step(3, "A hall.", "take key"),
    ]
    loaded = LoadedEpisodes([episode("e1", steps)], Counter())
    taught = build_sft(loaded, CONFIG)
    assert CONFIG.sft_loop_erasure, "loop erasure is the default"
    assert [r["completion"][0]["content"] for r in taught.rows] == ["Action: go west", "Action: take key"]
    assert taught.dropped["detour"] == 2
    every = build_sft(loaded, CONFIG.model_copy(update={"sft_loop_erasure": False}))
    assert len(every.rows) == 4 and "detour" not in every.dropped


def test_a_posterior_choice_the_loop_breaker_replaced_teaches_what_was_done():
    posterior = logged({"go west": 0.6, "look": 0.4}, chosen="look")
    built = build_sft(LoadedEpisodes([episode("e1", [step(0, "A pantry.", "go west", posterior)])], Counter()), SOFT)
    assert {r["completion"][0]["content"] for r in built.rows} == {"Action: go west"}
    assert built.stats["targets"]["posterior_not_taken"] == 1


# ---- Q pairs -----------------------------------------------------------------------------------


def test_a_confident_loser_is_paired_with_memorys_best_action():
    d = LoggedPosterior.from_dict(
        logged(
            {"look": 0.3, "go west": 0.5, "inventory": 0.2},
            chosen="go west",
            model={"look": 0.7, "go west": 0.2, "inventory": 0.1},
            memory={"look": (-0.8, 2.0), "go west": (0.6, 1.5), "inventory": (0.9, 0.5)},
        )
    )
    pair = q_pair(d, threshold=0.2, min_support=1.0)
    assert pair.rejected.action == "look"
    assert pair.chosen.action == "go west"  # inventory's higher advantage has too little support


@pytest.mark.parametrize(
    "memory, expected",
    [
        ({"look": (-0.8, 0.5), "go west": (0.6, 2.0)}, None),  # the loser's support is too small
        ({"look": (-0.1, 3.0), "go west": (0.6, 2.0)}, None),  # it does not lose by enough
        ({"go west": (0.6, 2.0)}, None),  # memory knows nothing of the argmax
        ({"look": (-0.8, 2.0), "go west": (0.6, 0.5)}, "no-confident-better-action"),
        ({"look": (-0.8, 2.0), "go west": (-0.3, 2.0)}, "no-confident-better-action"),
    ],
)
def test_unconfident_memory_makes_no_pair(memory, expected):
    d = LoggedPosterior.from_dict(
        logged({"look": 0.5, "go west": 0.5}, chosen="look", model={"look": 0.7, "go west": 0.3}, memory=memory)
    )
    assert q_pair(d, threshold=0.2, min_support=1.0) == expected


def test_an_untried_actions_optimistic_prior_is_not_evidence_for_a_pair():
    data = logged(
        {"look": 0.2, "go west": 0.8},
        chosen="go west",
        model={"look": 0.7, "go west": 0.3},
        memory={"look": (-0.8, 2.0), "go west": (0.9, 2.0)},
    )
    assert q_pair(LoggedPosterior.from_dict(data), threshold=0.2, min_support=1.0).chosen.action == "go west"
    data["actions"]["go west"]["memory"]["n"] = 0
    untried = LoggedPosterior.from_dict(data)
    assert untried.get("go west").advantage is None
    assert q_pair(untried, threshold=0.2, min_support=1.0) == "no-confident-better-action"


def test_q_pairs_are_dpo_rows_on_the_steps_prompt_counted_and_deduplicated():
    confident = logged(
        {"look": 0.2, "go west": 0.8},
        chosen="go west",
        model={"look": 0.7, "go west": 0.3},
        memory={"look": (-0.9, 2.0), "go west": (0.9, 2.0)},
    )
    unsure = logged(
        {"look": 0.6, "go west": 0.4},
        chosen="look",
        model={"look": 0.7, "go west": 0.3},
        memory={"look": (-0.9, 0.2), "go west": (0.9, 0.2)},
    )
    failed = episode("e1", [step(0, "A pantry.", "go west", confident), step(1, "A hall.", "look", unsure)], False)
    again = episode("e2", [step(0, "A pantry.", "go west", confident)], False)  # the same state and pair
    config = CONFIG.model_copy(update={"dpo_levels": ["trajectory"]})
    built = build_dpo(LoadedEpisodes([failed, again], Counter()), config)
    assert [r["level"] for r in built.rows] == ["q"]
    row = built.rows[0]
    assert row["chosen"][0]["content"] == "Action: go west" and row["rejected"][0]["content"] == "Action: look"
    assert row["chosen_step_id"] == row["rejected_step_id"] == "st:keyroom:e1:0"
    assert "Now: A pantry." in row["prompt"][1]["content"] and pair_problem(row) is None
    assert built.dropped["q:duplicate"] == 1
    assert built.stats["q_pairs"]["posterior_steps"] == 3 and built.stats["q_pairs"]["confident_losers"] == 2
    off = build_dpo(LoadedEpisodes([failed], Counter()), config.model_copy(update={"dpo_q_pairs": False}))
    assert off.rows == []


# ---- a scripted posterior run with memory ------------------------------------------------------


def _sent(model) -> list[list[dict]]:
    """The prompts the scored calls sent, without the primed `Action:` reply."""
    out = []
    for call in model.calls:
        for messages in call.batch:
            assert messages[-1] == {"role": "assistant", "content": "Action:"}
            out.append(messages[:-1])
    return out


@pytest.mark.slow
def test_a_posterior_run_trains_on_the_action_taken_with_the_prompt_the_model_scored(crl_home):
    from crl.agent.app import open_bank, start_run
    from crl.finetune.build import collect
    from tests.test_posterior_policy import looker_after_a_failure_and_a_success

    mem, looker, solved = looker_after_a_failure_and_a_success(crl_home)
    looker.calls.clear()
    steered = start_run(mem, "keyroom/key", 1, model=looker)
    ep = steered.episodes[0]
    overridden = [s for s in ep.steps if s.extra.policy.posterior["memory_changed_argmax"]]
    assert ep.success and overridden
    sent = _sent(looker)
    assert len(sent) == len(ep.steps)
    config = FinetuneConfig(near_duplicate_similarity=None)
    with open_bank(mem) as bank:
        loaded = load_episodes(bank, config, successes_only=True)
        dpo = collect("dpo", bank, config.model_copy(update={"dpo_levels": ["trajectory"]}))
    # only the steered episode: the solved one has the same rows and would win the de-duplication
    loaded.episodes = [e for e in loaded.episodes if e.record.episode_id == ep.episode_id]
    for mode in ("action", "raw"):
        built = build_sft(loaded, config.model_copy(update={"completion": mode}))
        rows = {r["step_id"]: r for r in built.rows}
        assert len(rows) == len(ep.steps), mode
        for s, prompt in zip(ep.steps, sent):
            row = rows[f"st:keyroom:{ep.episode_id}:{s.index}"]
            assert row["completion"] == [{"role": "assistant", "content": f"Action: {s.action}"}], mode
            assert row["prompt"] == prompt, mode
    first = overridden[0]
    assert first.raw_output == f"Action: {first.extra.policy.posterior['model_best']}" != f"Action: {first.action}"
    # memory knew the looking model's "look" loses at both steps; at the first the pair equals the
    # trajectory pair (solved vs failed play of the seed) and is kept once
    q_rows = [r for r in dpo.rows if r["level"] == "q"]
    assert q_rows and dpo.dropped["q:duplicate"] == 1
    for row in q_rows:
        assert row["rejected"][0]["content"] == "Action: look" and row["chosen_return"] > row["rejected_return"]
        index = int(row["chosen_step_id"].rsplit(":", 1)[1])
        assert row["chosen"][0]["content"] == f"Action: {solved.episodes[0].steps[index].action}"
    assert dpo.stats["q_pairs"]["confident_losers"] == len(ep.steps)
    assert json.loads(json.dumps(dpo.stats["q_pairs"]))["enabled"] is True  # JSON-ready for the card


@pytest.mark.parametrize("reply_format, llm", [("react", {}), ("auto", {"model": "a-served-model"})])
def test_a_posterior_run_configured_for_react_replays_the_prompts_it_scored(crl_home, reply_format, llm):
    from crl.agent.app import start_run
    from crl.agent.config import load_settings
    from crl.agent.llm.scripted import ScriptedModel
    from crl.finetune.prompt_replay import load_prompt_shape, replay_prompts
    from crl.memory.storage.episode_log import read_episodes
    from crl.tasks.keyroom import solve
    from crl.tasks.registry import fold_seeds

    seed = fold_seeds("keyroom/key", "train", 1)[0]
    model = ScriptedModel([f" {a}" for a in solve(seed, "key")])
    agent = {"policy": "posterior", "parallel": 1, "reply_format": reply_format}
    settings = load_settings(
        {"home": str(crl_home), "agent": agent, "llm": llm, "memory": {"enabled": False}, "reflect": {"enabled": False}}
    )
    result = start_run(settings, "keyroom/key", 1, model=model)
    [played] = read_episodes(crl_home / "runs" / result.info.run_id / "episodes.jsonl")
    shape = load_prompt_shape(crl_home / "runs", played.run_id)
    replayed = [p.messages for p in replay_prompts(played.goal, played.steps, shape)]
    assert replayed == _sent(model)
