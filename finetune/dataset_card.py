"""Datasets on disk: `data.jsonl` (TRL-ready rows) beside `card.json` (what went in and why) and a README.

    <home>/datasets/<name>/data.jsonl   one example per line
                          /card.json    counts, filters, drops by reason, source ids, sha256 of data.jsonl
                          /README.md    the card for humans

The hash ties an adapter to the exact bytes it was trained on; loading checks it.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from crl.finetune.sft_data import BuiltDataset
from crl.finetune.source_cap import SourceCap

DATA_FILE = "data.jsonl"
CARD_FILE = "card.json"
README_FILE = "README.md"
FORMATS = {"sft": "conversational prompt-completion", "dpo": "conversational preference (prompt/chosen/rejected)"}
TRL_COLUMNS = {"sft": ["prompt", "completion"], "dpo": ["prompt", "chosen", "rejected"]}
TRL_OPTIONAL_COLUMNS = ["tools"]  # tool definitions of native tool-call rows (TRL hands them to the chat template)


class DatasetCard(BaseModel):
    """What a dataset holds and how it was made."""

    model_config = ConfigDict(extra="forbid")

    name: str
    kind: str = Field(description="sft or dpo.")
    format: str
    created_at: float
    sha256: str = Field(description="sha256 of data.jsonl.")
    examples: int
    tasks: list[str]
    families: list[str]
    filters: dict[str, Any] = Field(description="The filters and options the builder applied.")
    dropped: dict[str, int] = Field(description="What was left out, by reason.")
    stats: dict[str, Any] = Field(default_factory=dict)
    tokens: dict[str, Any] | None = Field(None, description="Token lengths under the base model's tokenizer.")
    max_length: int | None = Field(None, description="The training max_length chosen from the measured lengths.")
    base_model: str | None = None
    namespace: str | None = Field(None, description="The memory namespace the rows were read from.")
    source_episode_ids: list[str] = Field(default_factory=list)
    source_step_ids: list[str] = Field(default_factory=list)
    prompt_memory_ids: list[str] = Field(
        default_factory=list,
        description="Memory records (episodes, steps, rules) retrieved into the prompts the rows train on.",
    )


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def new_dataset_name(kind: str) -> str:
    """A sortable, unique dataset name such as `sft-20261129-221530-3fa2`."""
    return f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def _nothing_found(built: BuiltDataset) -> str:
    if built.kind != "dpo" or not (built.stats.get("successes") or built.stats.get("failures")):
        return "no episodes in the bank"
    return (
        f"{built.stats.get('successes', 0)} successes and {built.stats.get('failures', 0)} failures gave no pair: "
        "trajectory pairs need both outcomes on one task and seed, step pairs a failed step in a state "
        "near one of a success, hard negatives an inadmissible, looping or known-losing step of a failure "
        "near a success's state, q pairs a posterior-policy step where memory confidently knew the model's "
        "argmax loses"
    )


def write_dataset(
    out_dir: str | Path,
    built: BuiltDataset,
    filters: dict[str, Any],
    tokens: dict[str, Any] | None = None,
    max_length: int | None = None,
    base_model: str | None = None,
    namespace: str | None = None,
) -> DatasetCard:
    """Write `built` as `data.jsonl` plus its card into `out_dir` (created; must be empty or absent).

    Raises:
        ValueError: nothing to write, or `out_dir` already holds a dataset.
    """
    out = Path(out_dir)
    if not built.rows:
        reasons = ", ".join(f"{k}: {v}" for k, v in built.dropped.most_common(6)) or _nothing_found(built)
        raise ValueError(
            f"no {built.kind} examples qualify ({reasons}); play more episodes (`crl run`) or relax the filters"
        )
    if (out / CARD_FILE).exists() or (out / DATA_FILE).exists():
        raise ValueError(f"{out} already holds a dataset; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (DATA_FILE + ".tmp")
    with open(tmp, "w") as f:
        for row in built.rows:
            f.write(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")
    os.replace(tmp, out / DATA_FILE)
    card = DatasetCard(
        name=out.name,
        kind=built.kind,
        format=FORMATS[built.kind],
        created_at=time.time(),
        sha256=file_sha256(out / DATA_FILE),
        examples=len(built.rows),
        tasks=built.tasks,
        families=sorted({t.split("/", 1)[0] for t in built.tasks}),
        filters=filters,
        dropped=dict(sorted(built.dropped.items())),
        stats=built.stats,
        tokens=tokens,
        max_length=max_length,
        base_model=base_model,
        namespace=namespace,
        source_episode_ids=built.source_episode_ids,
        source_step_ids=built.source_step_ids,
        prompt_memory_ids=built.prompt_memory_ids,
    )
    (out / CARD_FILE).write_text(card.model_dump_json(indent=2) + "\n")
    (out / README_FILE).write_text(render_card(card))
    return card


def read_card(dataset_dir: str | Path) -> DatasetCard:
    """The card of the dataset in `dataset_dir`.

    Raises:
        FileNotFoundError: no dataset there.
    """
    path = Path(dataset_dir) / CARD_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no dataset at {dataset_dir} (card.json missing); build one with `crl dataset build`")
    return DatasetCard.model_validate_json(path.read_text())


def load_rows(dataset_dir: str | Path, trl_only: bool = False):
    """The dataset as a `datasets.Dataset`, after checking its bytes against the card's hash.

    Args:
        trl_only: keep only the columns TRL trains on (provenance columns dropped).
    """
    import datasets

    card = read_card(dataset_dir)
    data = Path(dataset_dir) / DATA_FILE
    actual = file_sha256(data)
    if actual != card.sha256:
        raise ValueError(
            f"{data} changed after its card was written (sha256 {actual[:12]} != {card.sha256[:12]}); rebuild the dataset"
        )
    rows = datasets.load_dataset("json", data_files=str(data), split="train")
    if not trl_only:
        return rows
    optional = [c for c in TRL_OPTIONAL_COLUMNS if c in rows.column_names]
    return rows.select_columns(TRL_COLUMNS[card.kind] + optional)


def resolve_dataset(datasets_dir: str | Path, ref: str | Path) -> Path:
    """A dataset folder from a path or a name under `datasets_dir` (a unique prefix is enough)."""
    path = Path(ref)
    if (path / CARD_FILE).is_file():
        return path
    base = Path(datasets_dir)
    if (base / str(ref) / CARD_FILE).is_file():
        return base / str(ref)
    matches = sorted(p for p in base.glob(f"{ref}*") if (p / CARD_FILE).is_file()) if base.is_dir() else []
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ValueError(f"{ref!r} matches {len(matches)} datasets; give more of the name")
    raise FileNotFoundError(f"no dataset {str(ref)!r} (see `crl dataset ls`, or pass its folder)")


def list_datasets(datasets_dir: str | Path) -> list[DatasetCard]:
    """Cards of every dataset under `datasets_dir`, oldest first."""
    base = Path(datasets_dir)
    if not base.is_dir():
        return []
    cards = [read_card(p) for p in sorted(base.iterdir()) if (p / CARD_FILE).is_file()]
    return sorted(cards, key=lambda c: c.created_at)


def render_card(card: DatasetCard) -> str:
    """The card as Markdown."""
    lines = [
        f"# {card.name}",
        "",
        f"- kind: {card.kind} ({card.format})",
        f"- examples: {card.examples}",
        f"- tasks: {', '.join(card.tasks)}",
        f"- source episodes: {len(card.source_episode_ids)}",
        *([f"- memory namespace: {card.namespace}"] if card.namespace else []),
        *([f"- memories in the prompts: {len(card.prompt_memory_ids)}"] if card.prompt_memory_ids else []),
        f"- sha256 of {DATA_FILE}: `{card.sha256}`",
        f"- created: {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(card.created_at))}",
    ]
    if card.max_length:
        lines.append(f"- max_length: {card.max_length} tokens (longest example, rounded up)")
    lines += ["", "## Filters", ""] + [f"- {k}: {v}" for k, v in card.filters.items()]
    lines += ["", "## Left out", ""] + ([f"- {k}: {v}" for k, v in card.dropped.items()] or ["- nothing"])
    made = {k: v for k, v in card.stats.items() if k != "source_cap"}
    if made:
        lines += ["", "## How the examples were made", ""] + [f"- {k}: {v}" for k, v in made.items()]
    lines += _synthesis_lines(card.stats)
    if card.stats.get("source_cap"):
        lines += ["", "## One source's share", ""] + SourceCap(**card.stats["source_cap"]).describe()
    if card.tokens:
        lines += ["", "## Token lengths", ""] + [f"- {k}: {v}" for k, v in card.tokens.items() if k != "too_long"]
    lines += ["", "Load it with `datasets.load_dataset('json', data_files='data.jsonl', split='train')`.", ""]
    return "\n".join(lines)


def _synthesis_lines(stats: dict[str, Any]) -> list[str]:
    """The card's words on hard negatives and on how synthetic experience was weighed."""
    lines = []
    negatives = stats.get("hard_negatives") or {}
    if negatives.get("enabled"):
        found, pairs = negatives.get("found") or {}, negatives.get("pairs") or {}
        lines += ["", "## Hard negatives", ""]
        lines += [f"- {k}: {pairs.get(k, 0)} pairs of {found.get(k, 0)} found" for k in negatives.get("kinds", [])]
    share = stats.get("synthetic")
    if share and share.get("synthetic"):
        lines += [
            "",
            "## Synthetic experience",
            "",
            f"- weight {share['weight']}: {share['kept']} of {share['synthetic']} synthetic examples kept "
            f"beside {share['real']} real ones",
            f"- scheme: {share['scheme']}",
        ]
    return lines
