"""ScriptedModel: the test double every other test uses."""

from __future__ import annotations

import threading

import pytest

from crl.agent.llm.base import ChatModel, GenerationConfig, LLMError
from crl.agent.llm.scripted import ScriptedModel


def conversation(text: str) -> list[dict]:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]


def test_is_a_chat_model():
    assert isinstance(ScriptedModel(["x"]), ChatModel)
    assert ScriptedModel(["x"], name="fake").name == "fake"


def test_list_replies_are_consumed_in_order_across_calls_and_batches():
    model = ScriptedModel(["one", "two", "three"])
    first = model.generate([conversation("a"), conversation("b")], GenerationConfig())
    second = model.generate([conversation("c")], GenerationConfig())
    assert [c.text for c in first + second] == ["one", "two", "three"]


def test_running_out_raises_a_clear_error_without_consuming_a_partial_batch():
    model = ScriptedModel(["only"])
    with pytest.raises(LLMError, match="ScriptedModel ran out of replies"):
        model.generate([conversation("a"), conversation("b")], GenerationConfig())
    assert model.generate([conversation("a")], GenerationConfig())[0].text == "only"
    with pytest.raises(LLMError, match="script more replies"):
        model.generate([conversation("a")], GenerationConfig())


def test_function_replies_see_each_conversation():
    model = ScriptedModel(lambda messages: messages[-1]["content"].upper())
    out = model.generate([conversation("go north"), conversation("take key")], GenerationConfig())
    assert [c.text for c in out] == ["GO NORTH", "TAKE KEY"]


def test_calls_record_batches_and_config_as_received():
    model = ScriptedModel(["r1", "r2"])
    batch = [conversation("a"), conversation("b")]
    config = GenerationConfig(max_new_tokens=5, stop=["\n"])
    model.generate(batch, config)
    batch[0][1]["content"] = "mutated later"
    assert len(model.calls) == 1
    assert model.calls[0].config is config
    assert model.calls[0].batch == [conversation("a"), conversation("b")]


def test_stop_sequences_cut_the_reply():
    model = ScriptedModel(["Thought: hm\nAction: open door\nObservation: made up"])
    out = model.generate([conversation("x")], GenerationConfig(stop=["\nObservation:"]))
    assert out[0].text == "Thought: hm\nAction: open door"
    assert out[0].finish_reason == "stop"


def test_token_counts_are_whitespace_words():
    model = ScriptedModel(["three word reply"])
    messages = conversation("go  north\nnow")
    assert model.count_tokens(messages) == 2 + 3
    out = model.generate([messages], GenerationConfig())[0]
    assert (out.prompt_tokens, out.completion_tokens) == (5, 3)


def test_concurrent_callers_each_get_a_distinct_reply():
    replies = [f"r{i}" for i in range(40)]
    model = ScriptedModel(replies)
    got: list[str] = []
    lock = threading.Lock()

    def call() -> None:
        for _ in range(10):
            text = model.generate([conversation("q")], GenerationConfig())[0].text
            with lock:
                got.append(text)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == sorted(replies)
    assert len(model.calls) == 40
