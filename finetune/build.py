"""Build a dataset from the bank end to end: read, filter, rebuild prompts, pair, check tokens, write.

card = build_dataset("sft", bank, config, out_dir, family="keyroom", tokenizer=tok, base_model="smollm2-135m-instruct")
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from crl.finetune.config import FinetuneConfig
from crl.finetune.dataset_card import DatasetCard, write_dataset
from crl.finetune.dpo_data import build_dpo
from crl.finetune.sft_data import BuiltDataset, build_sft
from crl.finetune.source import EpisodeSource, LoadedEpisodes, load_episodes
from crl.finetune.source_cap import cap_sources, is_capped, source_key
from crl.finetune.tokens import TokenizerCounter, measure_rows, training_max_length
from crl.memory.records import parse_record_id

KINDS = ("sft", "dpo")


def collect(
    kind: str,
    bank: EpisodeSource,
    config: FinetuneConfig,
    family: str | None = None,
    tasks: Iterable[str] | None = None,
    counter: TokenizerCounter | None = None,
    synthetic_weight: float | None = None,
) -> BuiltDataset:
    """The rows of an SFT or DPO dataset from the bank (not yet length-checked), no source over
    `config.max_source_share` (`finetune.source_cap`).

    `synthetic_weight` overrides `config.synthetic_weight` (e.g. scaled down where synthetic
    experience drifted from real experience).
    """
    if kind not in KINDS:
        raise ValueError(f"dataset kind must be sft or dpo, not {kind!r}")
    loaded = load_episodes(bank, config, family=family, tasks=tasks, successes_only=kind == "sft")
    build = build_sft if kind == "sft" else build_dpo
    built = build(loaded, config, counter=counter, embed=bank.embed, synthetic_weight=synthetic_weight)
    if config.memory_prompts == "keep":
        built.prompt_memory = prompt_memory(loaded)
    return cap_dataset(built, loaded, config)


def prompt_memory(loaded: LoadedEpisodes) -> dict[str, list[str]]:
    """Step id -> the memory records its logged prompt showed, for steps whose prompt is trained on
    as logged (`memory_prompts = "keep"`; a prompt that was not logged is rebuilt without memories)."""
    out: dict[str, list[str]] = {}
    for episode in loaded.episodes:
        for step in episode.steps:
            report = step.extra.prompt
            if report is None or report.messages is None:
                continue
            ids = [key for key in report.memory_keys if _is_record_id(key)]  # not action-value hints (av:...)
            if ids:
                out[episode.step_id(step.index)] = ids
    return out


def _is_record_id(key: str) -> bool:
    try:
        parse_record_id(key)
    except ValueError:
        return False
    return True


def cap_dataset(built: BuiltDataset, loaded: LoadedEpisodes, config: FinetuneConfig) -> BuiltDataset:
    """Leave out the examples over a source's share (`finetune.source_cap`), counted as 'source-cap',
    the cap's report in `built.stats["source_cap"]`."""
    sources = {e.id: source_key(e.record) for e in loaded.episodes}
    keys: list[str] = []
    units: dict[str, str] = {}  # an SFT state's soft-target rows share its step id: one example
    for row in built.rows:
        if built.kind == "sft":
            key, source = row["step_id"], sources.get(row["episode_id"], "run:?")
        else:
            sides = [sources.get(row[k], "run:?") for k in ("chosen_episode_id", "rejected_episode_id")]
            source = next((s for s in sides if is_capped(s, config.capped_sources)), sides[0])
            key = f"{row['chosen_step_id']}|{row['rejected_step_id']}|{row['rejected'][0]['content']}"
        keys.append(key)
        units.setdefault(key, source)
    order = list(units)
    kept, report = cap_sources([(k, units[k]) for k in order], config.max_source_share, config.capped_sources)
    built.stats["source_cap"] = report.to_dict()
    if report.dropped:
        keep = {order[j] for j in kept}
        built.keep({i for i, key in enumerate(keys) if key in keep}, "source-cap")
    return built


def build_dataset(
    kind: str,
    bank: EpisodeSource,
    config: FinetuneConfig,
    out_dir: str | Path,
    family: str | None = None,
    tasks: Iterable[str] | None = None,
    tokenizer=None,
    base_model: str | None = None,
    synthetic_weight: float | None = None,
) -> DatasetCard:
    """Build and write a dataset; with `tokenizer`, every example is checked and measured first.

    `synthetic_weight` overrides `config.synthetic_weight`; the card records the weight applied.

    Examples longer than `config.max_length` tokens are dropped (counted as 'too-long') and
    the card's `max_length` is the longest remaining example, rounded up, so the trainer
    never truncates a reply.

    Raises:
        ValueError: no example qualifies (the message lists why episodes were left out).
        finetune.tokens.TokenizationError: an example would train on the wrong context or on nothing.
    """
    counter = TokenizerCounter(tokenizer, base_model or "") if tokenizer is not None else None
    weight = config.synthetic_weight if synthetic_weight is None else synthetic_weight
    built = collect(kind, bank, config, family, tasks, counter, synthetic_weight=weight)
    tokens, max_length = None, None
    if tokenizer is not None and built.rows:
        report = measure_rows(tokenizer, built.rows, config.max_length, name=base_model or "")
        if report.too_long:
            built.keep(set(range(len(built.rows))) - set(report.too_long), "too-long")
            report = measure_rows(tokenizer, built.rows, config.max_length, name=base_model or "")
        tokens = report.to_dict()
        tokens.pop("too_long")
        max_length = training_max_length(report.total_max, config.max_length)
    filters = {
        "family": family,
        "tasks": sorted(tasks) if tasks else None,
        "min_value": config.min_value,
        "synthetic": config.synthetic,
        "synthetic_weight": weight,
        "max_source_share": config.max_source_share,
        "capped_sources": config.capped_sources,
        "quarantined": "excluded",
        "memory_prompts": config.memory_prompts,
        "completion": config.completion,
        "near_duplicate_similarity": config.near_duplicate_similarity,
        "max_length": config.max_length,
    }
    if kind == "sft":
        filters["outcome"] = "success"
        filters["sft_targets"] = config.sft_targets
        if config.sft_targets == "soft":
            filters |= {
                "sft_soft_top_k": config.sft_soft_top_k,
                "sft_soft_min_mass": config.sft_soft_min_mass,
                "sft_soft_rows": config.sft_soft_rows,
            }
    else:
        filters["dpo_levels"] = list(config.dpo_levels)
        filters["dpo_state_similarity"] = config.dpo_state_similarity
        if "hard_negative" in config.dpo_levels:
            filters["hard_negative_kinds"] = list(config.hard_negative_kinds)
            filters["hard_negative_min_losses"] = config.hard_negative_min_losses
        filters |= {
            "dpo_q_pairs": config.dpo_q_pairs,
            "dpo_q_threshold": config.dpo_q_threshold,
            "dpo_q_min_support": config.dpo_q_min_support,
        }
    namespace = getattr(bank, "namespace", None)
    return write_dataset(
        out_dir,
        built,
        filters,
        tokens=tokens,
        max_length=max_length,
        base_model=base_model,
        namespace=namespace if isinstance(namespace, str) else None,
    )
