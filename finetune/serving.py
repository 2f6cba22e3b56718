"""Serving registered adapters with a real OpenAI-compatible server (vLLM).

`vllm serve BASE --enable-lora --lora-modules NAME=PATH` serves the base model and each
adapter under its own model name; the `openai` backend then selects an adapter by setting
`llm.model` to its id (`crl run ... --base-url http://HOST:8000/v1 --model ADAPTER_ID`).
"""

from __future__ import annotations

from pathlib import Path

from crl.finetune.registry import AdapterRegistry

VLLM_MAX_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


def vllm_max_lora_rank(rank: int) -> int:
    """The smallest `--max-lora-rank` vLLM accepts that fits `rank` (vLLM allows a fixed set).

    >>> vllm_max_lora_rank(12)
    16
    """
    return next((allowed for allowed in VLLM_MAX_LORA_RANKS if rank <= allowed), rank)


def lora_args(registry: AdapterRegistry, base_model: str, adapter_ids: list[str] | None = None) -> list[str]:
    """vLLM arguments that serve adapters by name: `--enable-lora --max-lora-rank R --lora-modules ID=PATH ...`.

    Args:
        registry: where the adapters are registered.
        base_model: the key they are registered under (`registry.base_model_key`).
        adapter_ids: adapters to serve (ids or unique prefixes); default: the promoted one.

    Raises:
        ValueError: no ids were given and no adapter is promoted for `base_model`.
    """
    ids = (
        [registry.resolve(i) for i in adapter_ids] if adapter_ids else [a for a in [registry.promoted(base_model)] if a]
    )
    if not ids:
        raise ValueError(
            f"no adapter is promoted for {base_model}; name the adapters to serve (`crl adapters ls` lists them)"
        )
    lineages = [registry.get(i) for i in ids]
    rank = max(int(lineage.config.get("lora_rank", 16)) for lineage in lineages)
    args = ["--enable-lora", "--max-lora-rank", str(vllm_max_lora_rank(rank)), "--lora-modules"]
    args += [f"{lineage.id}={registry.adapter_dir(lineage.id).resolve()}" for lineage in lineages]
    return args


def vllm_serve_command(
    registry: AdapterRegistry, base_model: str, base_path: str | Path, adapter_ids: list[str] | None = None
) -> list[str]:
    """The whole `vllm serve` command line (as argv) for the base model and its adapters.

    Args:
        registry: where the adapters are registered.
        base_model: the key the adapters are registered under.
        base_path: what vLLM loads: the base model's checkpoint folder (for the embedded model,
            its converted checkpoint) or a hub id.
        adapter_ids: adapters to serve; default: the promoted one.

    Example: `["vllm", "serve", "/home/u/.crl/models/smollm2", "--enable-lora", "--max-lora-rank",
    "16", "--lora-modules", "sft-1a2b=/home/u/.crl/adapters/sft-1a2b/adapter"]`.
    """
    base = Path(base_path)
    target = str(base.resolve()) if base.exists() else str(base_path)
    return ["vllm", "serve", target, *lora_args(registry, base_model, adapter_ids)]
