"""`finetune.serving`: the `vllm serve` command line for a base model and its registered adapters."""

from __future__ import annotations

import pytest

from crl.finetune.registry import AdapterRegistry
from crl.finetune.serving import lora_args, vllm_max_lora_rank, vllm_serve_command
from tests.finetune_fixtures import BASE, register_fake


@pytest.fixture
def registry(tmp_path) -> AdapterRegistry:
    return AdapterRegistry(tmp_path / "adapters")


def test_the_command_names_the_base_folder_and_each_adapter(registry, tmp_path):
    register_fake(registry, tmp_path, "sft-1")
    register_fake(registry, tmp_path, "sft-2")
    base = tmp_path / "converted" / "smollm2"
    base.mkdir(parents=True)
    argv = vllm_serve_command(registry, BASE, base, ["sft-1", "sft-2"])
    assert argv[:3] == ["vllm", "serve", str(base.resolve())]
    assert argv[3:7] == ["--enable-lora", "--max-lora-rank", "8", "--lora-modules"]
    assert argv[7:] == [f"{i}={registry.adapter_dir(i).resolve()}" for i in ("sft-1", "sft-2")]


def test_default_is_the_promoted_adapter_and_none_promoted_says_what_to_do(registry, tmp_path):
    register_fake(registry, tmp_path, "sft-1")
    with pytest.raises(ValueError, match="name the adapters"):
        lora_args(registry, BASE)
    registry.promote("sft-1", reason="test", actor="test")
    assert lora_args(registry, BASE)[-1].startswith("sft-1=")


def test_a_hub_id_base_is_passed_through(registry, tmp_path):
    register_fake(registry, tmp_path, "sft-1")
    assert vllm_serve_command(registry, BASE, "HuggingFaceTB/SmolLM2-135M-Instruct", ["sft-1"])[2] == (
        "HuggingFaceTB/SmolLM2-135M-Instruct"
    )


@pytest.mark.parametrize(("rank", "allowed"), [(4, 8), (8, 8), (12, 16), (300, 320), (1024, 1024)])
def test_max_lora_rank_is_the_smallest_vllm_accepts(rank, allowed):
    assert vllm_max_lora_rank(rank) == allowed
