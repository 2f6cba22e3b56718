"""The judging model of tasks whose checker is an LLM judge (`TaskSpec.uses_judge`).

The judge is the run's own chat model settings (`llm.*`), built on the first verdict it is
asked for and then shared by every environment of the process, so a run that never reaches a
final answer loads no second model.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from crl.agent.config import Settings
from crl.agent.llm.base import ChatModel, GenerationConfig

JUDGE_MAX_NEW_TOKENS = 16

_models: dict[str, ChatModel] = {}
_lock = threading.Lock()


def judge_options(settings: Settings) -> dict:
    """The `judge=` and `judge_model=` arguments for a task factory, from `settings.llm`."""
    from crl.agent.llm.factory import choose_model

    return {"judge": make_judge(settings), "judge_model": choose_model(settings.llm).model}


def make_judge(settings: Settings, model: ChatModel | None = None) -> Callable[[str], str]:
    """A function that sends one prompt to the judging model and returns its reply (greedy, short).

    Args:
        settings: whose `llm` section names the model (used when `model` is None).
        model: a chat model to judge with instead (tests pass a scripted one).
    """
    config = GenerationConfig(max_new_tokens=JUDGE_MAX_NEW_TOKENS, temperature=0.0, seed=settings.llm.seed)

    def judge(prompt: str) -> str:
        chat = model or _shared_model(settings)
        with _lock:
            return chat.generate([[{"role": "user", "content": prompt}]], config)[0].text

    return judge


def _shared_model(settings: Settings) -> ChatModel:
    key = settings.llm.model_dump_json()
    with _lock:
        if key not in _models:
            from crl.agent.llm.factory import build_chat_model

            _models[key] = build_chat_model(settings)
        return _models[key]
