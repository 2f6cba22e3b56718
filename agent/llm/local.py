"""The `local` backend: a transformers causal LM, optionally with a PEFT LoRA adapter."""

from __future__ import annotations

import gc
import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    StoppingCriteria,
    StoppingCriteriaList,
)

from crl.agent.llm.base import Completion, GenerationConfig, LLMError, Message, cut_at_stop
from crl.agent.llm.embedded import EMBEDDED_MODEL_NAME, cached_checkpoint, convert_gguf, embedded_model_path
from crl.agent.llm.threads import configure_torch_threads

PAD_MULTIPLE = 32
"""On CPU, prompts are left-padded to a multiple of this many tokens. bf16 (and fp16) matmuls
there go through oneDNN, which compiles and keeps a kernel for every new shape (its caches hold
up to 1,024 each): prompts of ever-new lengths grew a long run's memory by ~2 MB per call, and
widths in steps of 32 keep the shapes, and so the caches, few (docs/notes/memory-growth.md)."""

_DTYPES = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
}


class LocalChatModel:
    """A chat model run in this process with transformers.

    Args:
        model: a hub id (read from the local cache only when `HF_HUB_OFFLINE` is set), a
            checkpoint folder, or a `.gguf` file (converted once per machine, see `model_cache_dir`).
        adapter: folder of a PEFT LoRA adapter to load on top, or None.
        device: "auto" (CUDA when available, else CPU), "cpu", "cuda", "cuda:1", ...
        dtype: "auto" (bf16 on CUDA, fp32 on CPU), "fp32", "bf16" or "fp16".
        cache_dir: a data home's former model folder; a finished conversion there is reused.
        name: the name reported as `self.name`; defaults to the folder name or hub id, with
            "+<adapter name>" appended when an adapter is loaded (`adapter_name`).

    A conversation whose last message has role "assistant" is a primed reply: its content is
    appended verbatim after the generation prompt and only the continuation is returned.
    """

    supports_prefill = True
    primes_tool_calls = True  # small local models write tool arguments, not whole calls (`agent.tool_choice`)

    def __init__(
        self,
        model: str | Path,
        adapter: str | Path | None = None,
        device: str = "auto",
        dtype: str = "auto",
        cache_dir: Path | None = None,
        name: str | None = None,
    ) -> None:
        configure_torch_threads()
        self.device = _resolve_device(device)
        self.dtype = _resolve_dtype(dtype, self.device)
        source, base_name = _resolve_source(model, cache_dir)
        self.tokenizer = _load_tokenizer(source)
        self.model = _load_model(source, self.dtype)
        if adapter is not None:
            self.model = _apply_adapter(self.model, Path(adapter))
        self.model.to(self.device)
        self.model.eval()
        self.pad_multiple = PAD_MULTIPLE if self.device.type == "cpu" else 1
        self.adapter = Path(adapter) if adapter is not None else None
        self.name = name or (base_name + (f"+{adapter_name(self.adapter)}" if self.adapter is not None else ""))

    @classmethod
    def embedded(
        cls,
        cache_dir: Path,
        adapter: str | Path | None = None,
        device: str = "auto",
        dtype: str = "auto",
    ) -> LocalChatModel:
        """The embedded SmolLM2-135M-Instruct, converted once per machine (or found in `cache_dir`)."""
        name = EMBEDDED_MODEL_NAME + (f"+{adapter_name(Path(adapter))}" if adapter is not None else "")
        return cls(
            embedded_model_path(Path(cache_dir)),
            adapter=adapter,
            device=device,
            dtype=dtype,
            name=name,
        )

    def render(self, messages: list[Message]) -> str:
        """The exact prompt text for `messages`, as `generate` feeds it to the model.

        A trailing assistant message is a reply prefix: the chat template renders the
        messages before it with the generation prompt, and the prefix follows unchanged.
        """
        prefix = ""
        if messages and messages[-1]["role"] == "assistant":
            messages, prefix = messages[:-1], messages[-1]["content"]
        text = self._tokenizer().apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        return text + prefix

    def count_tokens(self, messages: list[Message]) -> int:
        """Tokens of the rendered prompt for `messages` (the same rendering as `generate`)."""
        return len(self._encode(self.render(messages)))

    def score_actions(self, batch: list[list[Message]], candidates: list[list[str]], temperature: float = 1.0):
        """pi_model(a | s) over each conversation's candidate actions: the token-normalised
        log-likelihood of each action after the primed prompt, one prefill per prompt with its
        KV cache reused for every candidate (`agent.llm.scoring.score_actions`)."""
        from crl.agent.llm.scoring import score_actions

        return score_actions(self, batch, candidates, temperature)

    def generate(self, batch: list[list[Message]], config: GenerationConfig) -> list[Completion]:
        """One reply per conversation, generated together in one left-padded batch.

        Greedy when `config.temperature` is 0, else nucleus sampling with `config.top_p`;
        `config.seed` makes sampling reproducible for the same batch. Each reply is cut
        before its earliest stop string, and a row stops generating once it holds one.
        `latency_s` is the wall time of the whole batch.
        """
        if not batch:
            return []
        tokenizer, model = self._tokenizer(), self.model
        start = time.perf_counter()
        rows = [self._encode(self.render(messages)) for messages in batch]
        input_ids, attention_mask = _left_pad(rows, tokenizer.pad_token_id, self.pad_multiple)
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        stops = [s for s in config.stop if s]
        prompt_width = input_ids.shape[1]
        criteria = StoppingCriteriaList([_StopOnStrings(tokenizer, stops, prompt_width)] if stops else [])
        sampling = config.temperature > 0
        options: dict = {
            "max_new_tokens": config.max_new_tokens,
            "do_sample": sampling,
            "pad_token_id": tokenizer.pad_token_id,
            "stopping_criteria": criteria,
        }
        if sampling:
            options.update(temperature=config.temperature, top_p=config.top_p, top_k=0)
        with torch.inference_mode(), _seeded(config.seed if sampling else None, self.device):
            output = model.generate(input_ids=input_ids, attention_mask=attention_mask, **options)
        latency = time.perf_counter() - start
        end_ids = _end_token_ids(model, tokenizer)
        return [
            self._completion(row, output[i, prompt_width:].tolist(), end_ids, stops, config, latency)
            for i, row in enumerate(rows)
        ]

    def close(self) -> None:
        """Free the model and tokenizer; the object cannot generate afterwards."""
        on_cuda = self.device.type == "cuda"
        self.model = None
        self.tokenizer = None
        gc.collect()
        if on_cuda:
            torch.cuda.empty_cache()

    def _completion(
        self,
        prompt: list[int],
        generated: list[int],
        end_ids: set[int],
        stops: list[str],
        config: GenerationConfig,
        latency: float,
    ) -> Completion:
        """Turn one row of generated ids into a Completion with honest token accounting."""
        ended_at = next((i for i, t in enumerate(generated) if t in end_ids), None)
        body = generated if ended_at is None else generated[:ended_at]
        text, hit = cut_at_stop(self._decode(body), stops)
        if hit:
            used = _tokens_until_stop(body, stops, self._decode)
        elif ended_at is not None:
            used = ended_at + 1
        else:
            used = len(body)
        finished = hit or ended_at is not None or used < config.max_new_tokens
        return Completion(
            text=text,
            prompt_tokens=len(prompt),
            completion_tokens=used,
            latency_s=latency,
            finish_reason="stop" if finished else "length",
        )

    def _tokenizer(self):
        if self.tokenizer is None:
            raise LLMError(f"Model {self.name} was closed; create a new LocalChatModel.")
        return self.tokenizer

    def _encode(self, text: str) -> list[int]:
        # The chat template already writes every special token the model expects.
        return self._tokenizer()(text, add_special_tokens=False)["input_ids"]

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer().decode(ids, skip_special_tokens=True)


class _StopOnStrings(StoppingCriteria):
    """Stops each row once its generated text (not its prompt) holds a stop string."""

    def __init__(self, tokenizer, stops: list[str], prompt_width: int) -> None:
        self.tokenizer = tokenizer
        self.stops = stops
        self.prompt_width = prompt_width

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_width :], skip_special_tokens=True)
        done = [any(s in text for s in self.stops) for text in texts]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def _tokens_until_stop(ids: list[int], stops: list[str], decode) -> int:
    """Fewest leading tokens of `ids` whose text already contains a stop string."""
    low, high = 1, len(ids)
    while low < high:
        mid = (low + high) // 2
        if cut_at_stop(decode(ids[:mid]), stops)[1]:
            high = mid
        else:
            low = mid + 1
    return high


def padded_width(longest: int, multiple: int = PAD_MULTIPLE) -> int:
    """The width a batch whose longest row has `longest` tokens is padded to (`PAD_MULTIPLE`).

    Example: `padded_width(300)` -> 320; `padded_width(320)` -> 320; `padded_width(300, 1)` -> 300.
    """
    multiple = max(1, multiple)
    return -(-longest // multiple) * multiple


def _left_pad(rows: list[list[int]], pad_id: int, multiple: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack token rows into left-padded `input_ids` and `attention_mask` tensors, `multiple`
    tokens wide at a time (`padded_width`)."""
    width = padded_width(max(len(row) for row in rows), multiple)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row) :] = 1
    return ids, mask


def _end_token_ids(model, tokenizer) -> set[int]:
    """Token ids that end a reply: the generation config's EOS ids, the tokenizer's, and pad."""
    ids: set[int] = set()
    for value in (model.generation_config.eos_token_id, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif value:
            ids.update(value)
    if tokenizer.pad_token_id is not None:
        # Rows that finish early are padded; pad only ever follows a finished reply.
        ids.add(tokenizer.pad_token_id)
    return ids


@contextmanager
def _seeded(seed: int | None, device: torch.device) -> Iterator[None]:
    """Seed torch's RNG for one call without disturbing the caller's RNG state."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield


def _resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise LLMError(f"Device {device!r} was asked for but CUDA is not available; use device='cpu'.")
    return resolved


def _resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in _DTYPES:
        raise LLMError(f"Unknown dtype {dtype!r}; use one of auto, fp32, bf16, fp16.")
    return _DTYPES[dtype]


def _offline() -> bool:
    return any(
        os.environ.get(flag, "").strip().lower() in {"1", "true", "yes", "on"}
        for flag in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _resolve_source(model: str | Path, cache_dir: Path | None) -> tuple[str, str]:
    """Where to load `model` from, and its readable name.

    Returns a local folder or a hub id; `.gguf` files are converted first, once per machine
    (a finished copy in `cache_dir`, a data home's former model folder, is used as is).
    """
    text = str(model)
    path = Path(text).expanduser()
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise LLMError(f"GGUF file {path} does not exist; check the model path.")
        digest = hashlib.sha256(f"{path.resolve()}:{path.stat().st_size}".encode()).hexdigest()
        out_dir = cached_checkpoint(f"{path.stem}-{digest[:10]}", cache_dir)
        return str(convert_gguf(path, out_dir)), path.stem
    if path.is_dir():
        return str(path), path.resolve().name
    if path.exists():
        raise LLMError(f"Model {path} is a file; pass a checkpoint folder, a .gguf file or a hub id.")
    if path.is_absolute() or text.startswith((".", "~")) or text.count("/") > 1:
        raise LLMError(f"Model folder {path} does not exist; check the model path.")
    return text, text


def _load_tokenizer(source: str):
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=_offline())
    except (OSError, ValueError) as error:
        raise _not_found(source, error) from error
    if tokenizer.chat_template is None:
        raise LLMError(
            f"Model {source} has no chat template; use an instruct/chat model or add a "
            "chat_template to its tokenizer_config.json."
        )
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _load_model(source: str, dtype: torch.dtype):
    try:
        return AutoModelForCausalLM.from_pretrained(source, dtype=dtype, local_files_only=_offline())
    except OSError as error:
        raise _not_found(source, error) from error


def _not_found(source: str, error: Exception) -> LLMError:
    if Path(source).is_dir():
        return LLMError(f"Cannot load model folder {source}: {error}")
    if _offline():
        return LLMError(
            f"Model {source!r} is neither a local folder nor in the local hub cache, and "
            "HF_HUB_OFFLINE is set. "
            f"Download it where there is network (`hf download {source}`), or pass a local "
            f"folder or .gguf file."
        )
    return LLMError(f"Cannot load model {source!r}: {error}. Check the hub id or the path.")


def adapter_name(adapter: Path) -> str:
    """An adapter's name in model names: the registry id for a registered adapter, else its folder's."""
    from crl.finetune.registry import registered_adapter_id

    return registered_adapter_id(adapter) or Path(adapter).name


def _apply_adapter(model, adapter: Path):
    """Load the LoRA adapter at `adapter` and merge it in, so decoding costs no extra matmuls."""
    if not (adapter / "adapter_config.json").is_file():
        inner = adapter / "adapter"
        hint = (
            f"this is a registered adapter's folder: pass {inner}"
            if (inner / "adapter_config.json").is_file()
            else "check the adapter path, or give a registered id from `crl adapters ls`"
        )
        raise LLMError(f"No LoRA adapter at {adapter} (adapter_config.json missing); {hint}.")
    from peft import PeftModel

    try:
        peft_model = PeftModel.from_pretrained(model, str(adapter))
    except (OSError, ValueError, RuntimeError) as error:
        raise LLMError(
            f"Cannot load LoRA adapter {adapter} on this base model: {error}. Was it trained on a different base model?"
        ) from error
    return peft_model.merge_and_unload()
