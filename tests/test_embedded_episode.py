"""The embedded model plays real keyroom episodes through the whole loop (slow)."""

from __future__ import annotations

import pytest

from crl.agent.app import start_run
from crl.agent.config import load_settings
from crl.agent.llm.embedded import embedded_model_path
from crl.agent.llm.local import LocalChatModel
from crl.agent.runs import RunStore


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["posterior", "llm"])
def test_embedded_model_plays_short_episodes(crl_home, embedded_models_dir, policy):
    """The default (posterior) scores the listed actions: every step valid, nothing generated;
    the llm policy generates its replies."""
    model = LocalChatModel(embedded_model_path(embedded_models_dir))
    settings = load_settings(
        {
            "home": str(crl_home),
            "agent": {"parallel": 2, "max_steps": 3, "policy": policy},
            "memory": {"enabled": False},
        }
    )
    try:
        result = start_run(settings, "keyroom/key", 2, model=model)
    finally:
        model.close()
    assert len(result.episodes) == 2 and all(e.finished for e in result.episodes)
    for episode in result.episodes:
        assert episode.model == "smollm2-135m-instruct"
        assert 1 <= len(episode.steps) <= 3
        for step in episode.steps:
            assert step.raw_output.startswith("Action:") and step.prompt_tokens > 50
            if policy == "posterior":
                assert step.valid and step.completion_tokens == 0 and step.extra.policy.posterior
            else:
                assert step.completion_tokens > 0
            assert step.extra.prompt.tokens <= settings.agent.max_prompt_tokens
            if step.valid:
                assert step.action in step.admissible_actions
    logged = RunStore(crl_home / "runs").episodes(result.info.run_id)
    assert sum(len(e.steps) for e in logged) == sum(len(e.steps) for e in result.episodes)


@pytest.mark.slow
def test_embedded_model_with_memory_sees_earlier_episodes(crl_home, embedded_models_dir):
    from crl.agent.explain import explain_step

    model = LocalChatModel(embedded_model_path(embedded_models_dir))
    settings = load_settings(
        {
            "home": str(crl_home),
            "agent": {"parallel": 1, "max_steps": 3, "memory": "full", "policy": "mixed"},
            "reflect": {"enabled": False},
        }
    )
    try:
        result = start_run(settings, "keyroom/key", 3, model=model)
    finally:
        model.close()
    first, *later = result.episodes
    assert not first.steps[0].extra.prompt.memory_keys  # nothing stored yet
    step = later[-1].steps[0]
    used = step.extra.prompt.memory_keys
    assert any(key.startswith("ep:keyroom:") for key in used)  # an earlier episode as a case
    explained = explain_step(step)
    assert explained["memories"] and {m["id"] for m in explained["memories"]} >= {
        k for k in used if not k.startswith("av:")
    }
