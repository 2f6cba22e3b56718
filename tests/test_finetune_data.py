"""Datasets from the experience bank: exact prompt replay, SFT rows, DPO pairs, filters, cards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crl.finetune.build import build_dataset, collect
from crl.finetune.config import FinetuneConfig
from crl.finetune.dataset_card import CARD_FILE, DATA_FILE, load_rows, resolve_dataset
from crl.finetune.dpo_data import pair_problem
from crl.finetune.prompt_replay import PromptShape, load_prompt_shape, replay_prompts
from crl.finetune.source import exclusion_reason, quarantined_ids
from crl.memory.storage.episode_log import read_episodes
from tests.finetune_fixtures import (
    WordCounter,
    copy_home,
    cycling_model,
    fill_bank,
    open_bank,
    settings_for,
)

CONFIG = FinetuneConfig()


@pytest.fixture(scope="module")
def filled_home(tmp_path_factory) -> Path:
    return fill_bank(tmp_path_factory.mktemp("finetune-bank") / ".crl")


@pytest.fixture
def bank(filled_home):
    b = open_bank(filled_home)
    yield b
    b.close()


# ---- prompt replay: the oracle is what the scripted model was actually sent -------------------


def _sent_prompts(model) -> list[list[dict]]:
    sent = []
    for call in model.calls:
        assert len(call.batch) == 1
        sent.append([m for m in call.batch[0] if m["role"] != "assistant"])
    return sent


def _replayed(home: Path, result, counter=None) -> list[list[dict]]:
    out = []
    for episode in read_episodes(home / "runs" / result.info.run_id / "episodes.jsonl"):
        shape = load_prompt_shape(home / "runs", episode.run_id)
        for prompt in replay_prompts(episode.goal, episode.steps, shape, counter=counter):
            assert not isinstance(prompt, str), prompt
            assert prompt.exact
            out.append(prompt.messages)
    return out


def test_live_loop_and_replay_build_the_same_prompt_states_and_prompts(tmp_path, monkeypatch):
    from crl.agent.app import start_run
    from crl.prompts.state import PromptHistory

    built = []
    state = PromptHistory.state

    def recorded(self, *args, **kwargs):
        built.append(state(self, *args, **kwargs))
        return built[-1]

    monkeypatch.setattr(PromptHistory, "state", recorded)
    home = tmp_path / ".crl"
    # repeats ("already did" notes), unparseable replies (error notes), history beyond the window
    model = cycling_model([" look", " look", " dance wildly", " inventory", " inventory", " go north", " go south"])
    settings = settings_for(home, parallel=1, max_steps=9, loop_breaker=False, history_window=2)
    result = start_run(settings, "keyroom/compound", 2, model=model)
    steps = [s for e in result.episodes for s in e.steps]
    assert any(s.extra.repeat for s in steps) and any(not s.action for s in steps)
    live, built[:] = list(built), []
    assert len(live) == len(steps)
    assert _replayed(home, result) == _sent_prompts(model)
    assert built == live  # replay advanced the same prompt state, step for step


def test_replay_rebuilds_budget_shortened_prompts_with_the_runs_counter(tmp_path):
    from crl.agent.app import start_run

    home = tmp_path / ".crl"
    model = cycling_model([" look", " inventory", " go north", " go south", " dance", " examine"])
    settings = settings_for(home, parallel=1, max_steps=8, history_window=6, max_prompt_tokens=150)
    result = start_run(settings, "keyroom/compound", 1, model=model)
    reports = [s.extra.prompt for s in result.episodes[0].steps]
    assert any(r.history_dropped for r in reports), "the budget should have dropped history"
    assert any(s.decided_by == "loop-breaker" for s in result.episodes[0].steps)
    assert _replayed(home, result, counter=WordCounter()) == _sent_prompts(model)
    episode = result.episodes[0]
    shape = load_prompt_shape(home / "runs", episode.run_id)
    reasons = [p for p in replay_prompts(episode.goal, episode.steps, shape) if isinstance(p, str)]
    assert reasons and set(reasons) == {"needs-token-counter"}


def test_steps_with_memory_are_stripped_or_skipped():
    from crl.memory.trajectory import Step
    from crl.prompts.report import PromptReport

    step = Step(0, "A hall.", "look", admissible_actions=["look"])
    step.extra.prompt = PromptReport(tokens=10, budget=1024, memory_keys=["ep:keyroom:x"])
    stripped = replay_prompts("Goal.", [step], PromptShape(), memory_prompts="strip")[0]
    assert not stripped.exact and "memory" in stripped.note and "Past attempts" not in stripped.messages[1]["content"]
    assert replay_prompts("Goal.", [step], PromptShape(), memory_prompts="skip") == ["prompt-has-memory"]


def test_steps_the_memory_policy_took_alone_get_the_prompt_the_model_would_have_seen():
    from crl.memory.trajectory import PolicyDecision, Step, StepExtra

    step = Step(
        0,
        "A hall.",
        "look",
        admissible_actions=["look"],
        decided_by="memory",
        extra=StepExtra(policy=PolicyDecision("memory", "best value", None)),
    )
    prompt = replay_prompts("Goal.", [step], PromptShape())[0]
    assert not prompt.exact and prompt.note == "model not asked (decided by memory)"
    assert prompt.messages[1]["content"].startswith("Goal: Goal.")


def test_logged_messages_are_used_as_they_are():
    from crl.memory.trajectory import Step, StepExtra
    from crl.prompts.report import PromptReport

    sent = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U"},
        {"role": "assistant", "content": "Action:"},
    ]
    step = Step(0, "A hall.", "look", extra=StepExtra(prompt=PromptReport(tokens=3, budget=1024, messages=sent)))
    assert replay_prompts("Goal.", [step], PromptShape())[0].messages == sent[:2]


def test_prompt_shape_follows_the_runs_reply_format():
    assert PromptShape.from_run_settings({"agent": {"reply_format": "auto"}, "llm": {"model": None}}).react is False
    assert PromptShape.from_run_settings({"agent": {"reply_format": "auto"}, "llm": {"model": "gpt-x"}}).react is True
    assert PromptShape.from_run_settings({"agent": {"reply_format": "react", "history_window": 2}}).history_window == 2


# ---- SFT ------------------------------------------------------------------------------------


def test_sft_rows_are_trl_conversational_prompt_completion(bank):
    built = collect("sft", bank, CONFIG)
    assert built.rows
    successes = {r.id for r in bank.ls(kind="episode", outcome="success")}
    for row in built.rows:
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        assert [m["role"] for m in row["completion"]] == ["assistant"]
        reply = row["completion"][0]["content"]
        assert reply.startswith("Action: ") and not reply.endswith(" ")
        assert f"- {reply.removeprefix('Action: ')}" in row["prompt"][1]["content"]
        assert row["episode_id"] in successes
    assert set(built.tasks) == {"keyroom/key", "keyroom/door"}
    assert built.dropped["duplicate"] > 0  # the repeated solver run
    assert built.dropped["episode:not-successful"] > 0
    assert built.stats["exact_prompts"] == len(built.rows)


def test_near_duplicates_are_removed_by_state_similarity(bank):
    exact_only = collect("sft", bank, CONFIG.model_copy(update={"near_duplicate_similarity": None}))
    loose = collect("sft", bank, CONFIG.model_copy(update={"near_duplicate_similarity": 0.5}))
    assert len(loose.rows) < len(exact_only.rows)
    assert loose.dropped["near-duplicate"] == len(exact_only.rows) - len(loose.rows)


def test_min_value_filters_episodes(bank):
    values = sorted(r.value for r in bank.ls(kind="episode", outcome="success"))
    built = collect("sft", bank, CONFIG.model_copy(update={"min_value": values[-1] + 1e-6}))
    assert built.rows == [] and built.dropped["episode:below-min-value"] == len(values)


def test_quarantined_episodes_and_steps_never_become_training_data(filled_home, tmp_path):
    home = copy_home(filled_home, tmp_path / ".crl")
    bank = open_bank(home)
    try:
        successes = bank.ls(kind="episode", outcome="success", variant="door")
        bank.quarantine(successes[0].id)
        other = bank.get(successes[1].id)
        step_id = f"st:keyroom:{other.episode_id}:0"
        bank.quarantine(step_id)
        sft = collect("sft", bank, CONFIG)
        dpo = collect("dpo", bank, CONFIG)
        assert quarantined_ids(bank) >= {successes[0].id, step_id}
    finally:
        bank.close()
    assert successes[0].id not in sft.source_episode_ids + dpo.source_episode_ids
    assert step_id not in sft.source_step_ids + dpo.source_step_ids
    assert sft.dropped["episode:quarantined"] == 1 and sft.dropped["quarantined-step"] == 1


def test_synthetic_episodes_need_acceptance(bank):
    record = bank.ls(kind="episode", outcome="success")[0].model_copy(update={"source": "synthetic"})
    assert exclusion_reason(record, CONFIG) == "synthetic-not-accepted"
    assert exclusion_reason(record.model_copy(update={"tags": ["accepted"]}), CONFIG) is None
    assert exclusion_reason(record.model_copy(update={"tier": "golden"}), CONFIG) is None
    assert exclusion_reason(record, CONFIG.model_copy(update={"synthetic": "none"})) == "synthetic"


def test_a_success_nobody_verified_is_never_taught(bank):
    real = bank.ls(kind="episode", outcome="success")[0]
    assert real.verified and exclusion_reason(real, CONFIG) is None
    claimed = real.model_copy(update={"verified": False, "verified_by": None})
    assert exclusion_reason(claimed, CONFIG) == "unverified-success"
    assert exclusion_reason(claimed.model_copy(update={"tier": "golden"}), CONFIG) is None, "a curator vouched"
    failed = bank.ls(kind="episode", outcome="failure")[0].model_copy(update={"verified": False})
    assert exclusion_reason(failed, CONFIG) is None, "an unverified failure claims nothing"


# ---- DPO ------------------------------------------------------------------------------------


def test_dpo_pairs_prefer_the_successful_action_in_the_same_state(bank):
    built = collect("dpo", bank, CONFIG)
    assert built.rows and {"trajectory"} <= set(built.stats["by_level"])
    for row in built.rows:
        assert set(row) >= {"prompt", "chosen", "rejected"}
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        assert row["chosen"][0]["role"] == row["rejected"][0]["role"] == "assistant"
        assert pair_problem(row) is None
        assert row["chosen_return"] > row["rejected_return"]
        chosen = bank.get(row["chosen_episode_id"])
        assert chosen.success and not bank.get(row["rejected_episode_id"]).success
    trajectory = [r for r in built.rows if r["level"] == "trajectory"]
    assert all(r["rejected"][0]["content"] == "Action: look" for r in trajectory)


def test_step_level_pairs_come_from_near_identical_states(bank):
    config = CONFIG.model_copy(update={"dpo_levels": ["step"], "dpo_state_similarity": 0.9})
    built = collect("dpo", bank, config)
    assert built.rows and set(built.stats["by_level"]) == {"step"}
    assert all(r["chosen_step_id"] != r["rejected_step_id"] for r in built.rows)


@pytest.mark.parametrize(
    "chosen, rejected, returns, problem",
    [
        ("Action: go north", "Action:", (1.0, 0.0), "empty"),
        ("", "Action: look", (1.0, 0.0), "empty"),
        ("Action: go north", "Action:  go  north", (1.0, 0.0), "identical"),
        ("Action: go north", "Action: look", (0.0, 1.0), "mis-ordered"),
        ("Action: go north", "Action: look", (1.0, 1.0), "tie"),
        ("Action: go north", "Action: look", (1.0, 0.0), None),
    ],
)
def test_bad_pairs_are_rejected_with_a_reason(chosen, rejected, returns, problem):
    row = {
        "chosen": [{"role": "assistant", "content": chosen}],
        "rejected": [{"role": "assistant", "content": rejected}],
        "chosen_return": returns[0],
        "rejected_return": returns[1],
    }
    assert pair_problem(row) == problem


# ---- writing and loading ----------------------------------------------------------------------


def test_dataset_is_written_with_a_card_and_loads_with_datasets(bank, tmp_path):
    card = build_dataset("dpo", bank, CONFIG, tmp_path / "d1", family="keyroom")
    assert card.kind == "dpo" and card.examples > 0 and card.families == ["keyroom"]
    assert card.filters["family"] == "keyroom" and card.filters["quarantined"] == "excluded"
    assert card.source_episode_ids and all(i.startswith("ep:keyroom:") for i in card.source_episode_ids)
    assert any(k.startswith("trajectory:") or k.startswith("step:") for k in card.dropped)
    rows = load_rows(tmp_path / "d1", trl_only=True)
    assert rows.column_names == ["prompt", "chosen", "rejected"] and len(rows) == card.examples
    assert rows[0]["prompt"][0]["role"] == "system"
    assert "sha256" in (tmp_path / "d1" / "README.md").read_text()
    assert resolve_dataset(tmp_path, "d1") == tmp_path / "d1"
    with pytest.raises(ValueError, match="already holds a dataset"):
        build_dataset("dpo", bank, CONFIG, tmp_path / "d1")


def test_soft_targets_are_written_as_duplicated_rows_and_recorded_in_the_card(bank, tmp_path):
    chosen = build_dataset("sft", bank, CONFIG, tmp_path / "chosen")
    soft_config = CONFIG.model_copy(update={"sft_targets": "soft", "sft_soft_rows": 3})
    soft = build_dataset("sft", bank, soft_config, tmp_path / "soft")
    assert soft.examples == 3 * chosen.examples  # solver runs log no posterior: each state's one action, 3 times
    assert soft.stats["targets"]["rows_per_state"] == 3 and soft.stats["targets"]["posterior_states"] == 0
    assert chosen.stats["targets"] == {"mode": "chosen"}
    rows = load_rows(tmp_path / "soft")
    assert set(rows["copies"]) == {3} and set(rows["target_mass"]) == {1.0}
    assert load_rows(tmp_path / "soft", trl_only=True).column_names == ["prompt", "completion"]
    assert "rows_per_state" in (tmp_path / "soft" / "README.md").read_text()


def test_a_changed_data_file_is_refused(bank, tmp_path):
    build_dataset("sft", bank, CONFIG, tmp_path / "d")
    data = tmp_path / "d" / DATA_FILE
    data.write_text(data.read_text().replace("Action: take", "Action: drop", 1))
    with pytest.raises(ValueError, match="changed after its card"):
        load_rows(tmp_path / "d")


def test_nothing_qualifying_is_an_error_that_says_why(bank, tmp_path):
    with pytest.raises(ValueError, match="no sft examples qualify.*below-min-value"):
        build_dataset("sft", bank, CONFIG.model_copy(update={"min_value": 2.0}), tmp_path / "d")
    assert not (tmp_path / "d" / CARD_FILE).exists()


# ---- tokenisation against the real tokenizer (needs the converted embedded model) -------------


@pytest.fixture(scope="module")
def tokenizer(embedded_models_dir):
    from crl.agent.llm.embedded import embedded_model_path
    from crl.finetune.tokens import load_tokenizer

    return load_tokenizer(embedded_model_path(embedded_models_dir))


@pytest.mark.slow
def test_every_example_trains_on_its_reply_and_sees_the_inference_prompt(bank, tokenizer, tmp_path):
    from crl.agent.llm.local import LocalChatModel
    from crl.finetune.tokens import TokenizerCounter, tokenize_pair

    card = build_dataset("sft", bank, CONFIG, tmp_path / "sft", tokenizer=tokenizer, base_model="smollm2-135m-instruct")
    assert card.tokens["total_max"] < card.max_length <= CONFIG.max_length
    rows = [json.loads(line) for line in (tmp_path / "sft" / DATA_FILE).read_text().splitlines()]
    counter = TokenizerCounter(tokenizer, "x")
    for row in rows:
        sizes = tokenize_pair(tokenizer, row["prompt"], row["completion"])
        assert sizes.completion >= 3  # the action and the end-of-turn token
        primed = row["prompt"] + [{"role": "assistant", "content": "Action:"}]
        inference = counter.encode(LocalChatModel.render(_Renderer(tokenizer), primed))
        full = tokenizer.apply_chat_template(row["prompt"] + row["completion"], tokenize=True, return_dict=True)
        assert full["input_ids"][: len(inference)] == inference


class _Renderer:
    """Just enough of LocalChatModel to call its `render` (the inference-side oracle)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def _tokenizer(self):
        return self.tokenizer


@pytest.mark.slow
def test_too_long_examples_are_dropped_not_truncated(bank, tokenizer, tmp_path):
    full = build_dataset("sft", bank, CONFIG, tmp_path / "a", tokenizer=tokenizer)
    cap = full.tokens["total_p50"] + 1
    short = build_dataset(
        "sft", bank, CONFIG.model_copy(update={"max_length": cap}), tmp_path / "b", tokenizer=tokenizer
    )
    assert 0 < short.examples < full.examples and short.dropped["too-long"] == full.examples - short.examples
    assert short.tokens["total_max"] <= cap and short.max_length <= cap


@pytest.mark.slow
def test_a_reply_that_does_not_continue_the_primed_marker_is_refused(tokenizer):
    from crl.finetune.tokens import TokenizationError, tokenize_pair

    prompt = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    tokenize_pair(tokenizer, prompt, [{"role": "assistant", "content": "Action: look"}])
    with pytest.raises(TokenizationError, match="inference prompt"):
        tokenize_pair(tokenizer, prompt, [{"role": "assistant", "content": "Action:: look"}])
