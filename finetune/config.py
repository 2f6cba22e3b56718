"""Settings of fine-tuning rounds: dataset filters, LoRA training, the promotion gate, the scheduler.

`FinetuneConfig` is the `finetune` section of the global settings (`CRL_FINETUNE__LORA_RANK=8`,
`[finetune]` in `crl.toml`); CLI flags of `crl finetune` override single fields.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

EXAMPLES_PER_STEP = 8
"""Examples an optimizer step sees on each process when `gradient_accumulation` is unset."""
DEFAULT_TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class FinetuneConfig(BaseModel):
    """Fine-tuning rounds: which experience becomes training data, how LoRA trains, when it is promoted."""

    model_config = ConfigDict(extra="forbid")

    # ---- datasets ------------------------------------------------------------------------
    min_value: float = Field(
        0.0, description="Episodes whose value label is below this are left out of SFT data and DPO 'chosen' sides."
    )
    synthetic: Literal["accepted", "curated", "all", "none"] = Field(
        "accepted",
        description="Synthetic episodes used: 'accepted' (pinned golden, tagged with `accepted_tag`, or validated "
        "by replaying it to a success in the real environment, as the synthesizer validates every stitched and "
        "relabelled episode it stores), 'curated' (pinned golden or tagged only: a person accepts each), 'all' "
        "or 'none'.",
    )
    synthetic_weight: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Weight of a synthetic example against a real one's 1 (SFT states; DPO pairs whose chosen "
        "side is synthetic). TRL's SFTTrainer has no per-example loss weight, so it is realised as a share: "
        "round(w x n) of the n synthetic examples are kept, the ones with the lowest stable hash of their step "
        "ids (a rebuild keeps the same ones, a larger w a superset); nothing is duplicated, so the dataset never "
        "grows. 0 leaves synthetic experience out, 1 weighs it as real. Callers may pass a lower weight (the "
        "drift monitor's down-weighting); see finetune/synthetic_weight.py.",
    )
    max_source_share: float = Field(
        0.34,
        gt=0,
        le=1,
        description="Most share of a dataset's examples (SFT states, DPO pairs) that one capped source may hold "
        "(as `retrieval.max_source_share` caps an action value's support); examples over it are left out, the "
        "same ones on every rebuild, and counted as 'source-cap' in the card. With k < 1/share sources the "
        "share applied is 1/k. 1 turns the cap off; see finetune/source_cap.py.",
    )
    capped_sources: Literal["untrusted", "all"] = Field(
        "untrusted",
        description="Sources the cap applies to: 'untrusted' caps each import (curator-accepted ones included) "
        "and each synthesis kind, runs exempt; 'all' caps every run too (a memory many writers share).",
    )
    accepted_tag: str = Field(
        "accepted", description="The tag that marks a synthetic episode as accepted for training."
    )
    memory_prompts: Literal["keep", "strip", "skip"] = Field(
        "keep",
        description="Steps whose prompt held retrieved memories: 'keep' trains on the exact prompt the agent saw, "
        "memory section included (logged with the step, `agent.log_prompts`; older logs without it fall back to "
        "'strip'); 'strip' trains on the prompt without the memory section (the model internalises what memory "
        "gave it); 'skip' leaves them out.",
    )
    completion: Literal["action", "raw"] = Field(
        "action",
        description="SFT reply: 'action' is the canonical form of the action taken ('Action: take brass key'); 'raw' "
        "is the model's reply as generated (keeps fuzzy or loop-broken replies as they were).",
    )
    near_duplicate_similarity: float | None = Field(
        0.98,
        gt=0,
        le=1,
        description="SFT examples with the same reply whose state embeddings are at least this similar are kept "
        "once. Unset: only exact duplicates are removed.",
    )
    dpo_levels: list[Literal["trajectory", "step", "hard_negative"]] = Field(
        default_factory=lambda: ["trajectory", "step", "hard_negative"],
        description="DPO pair sources: 'trajectory' (success vs failure on the same task and seed, at the first "
        "step they act differently), 'step' (near-identical states in different episodes) and 'hard_negative' "
        "(an inadmissible, looping or known-losing reply of a failure against the action a success took from "
        "the nearest state, on the failure's prompt; see finetune/hard_negatives.py).",
    )
    dpo_state_similarity: float = Field(
        0.95,
        gt=0,
        le=1,
        description="Cosine similarity of state embeddings needed to pair two steps (step-level DPO and hard "
        "negatives, where the same game state, same seed and observation, matches without it).",
    )
    hard_negative_kinds: list[Literal["inadmissible", "looping", "known-losing"]] = Field(
        default_factory=lambda: ["inadmissible", "looping", "known-losing"],
        description="Hard negatives taken from failed episodes: 'inadmissible' (refused by the environment, or "
        "naming no action), 'looping' (repeated in the same situation, or replaced by the loop breaker), "
        "'known-losing' (taken near that state only in failed episodes, `hard_negative_min_losses` of them).",
    )
    hard_negative_min_losses: int = Field(
        2,
        ge=2,
        description="Known-losing hard negatives: failed episodes (and no successful one) that took the action "
        "in the same or a near-identical state before it counts as known to lose.",
    )
    sft_loop_erasure: bool = Field(
        True,
        description="SFT rows only from the loop-erased path of each won episode: a step the episode later came "
        "back around (the take of a bottle dropped again, `memory.ingest.loop_erased_detours`) is not taught. "
        "False teaches every step of a won episode, detours included.",
    )
    sft_minimal: bool = Field(
        False,
        description="SFT rows only from the steps a won episode needed: its actions are replayed in the real "
        "environment with one step, then two neighbouring steps, left out at a time (greedily, starting from the "
        "loop-erased path), and a step the game is still won without is not taught (the take of a vase carried to "
        "the end; `memory.synthesis.minimal`). Costs replays of each won episode at build time; an episode that does not "
        "win again on replay keeps every step.",
    )
    sft_targets: Literal["chosen", "soft"] = Field(
        "chosen",
        description="SFT targets: 'chosen' teaches the action each step took; 'soft' teaches, at steps the "
        "posterior policy decided, its top actions weighted by their renormalised posterior mass "
        "(`sft_soft_top_k`, `sft_soft_min_mass`), realised as `sft_soft_rows` rows per state (see finetune/README.md).",
    )
    sft_soft_top_k: int = Field(
        3, ge=1, description="Soft targets: most actions kept per state (the one taken always is)."
    )
    sft_soft_min_mass: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="Soft targets: an action is kept only with at least this share of the posterior mass "
        "(of the actions not already tried in that situation).",
    )
    sft_soft_rows: int = Field(
        4,
        ge=1,
        description="Soft targets: rows per state (every state, posterior-decided or not, so each state weighs "
        "the same); an action's weight is its number of identical rows / this. Epochs grow by this factor.",
    )
    dpo_q_pairs: bool = Field(
        True,
        description="DPO pairs from memory's values at posterior-policy steps: where memory confidently knows "
        "the model's argmax loses, the action it rates best is chosen and the argmax rejected.",
    )
    dpo_q_threshold: float = Field(
        0.2,
        gt=0,
        description="Q pairs: the model's argmax loses when memory's advantage on it is at most minus this "
        "(returns are in [-1, 1]). Provisional, not yet swept.",
    )
    dpo_q_min_support: float = Field(
        1.0,
        gt=0,
        description="Q pairs: the vote weight memory needs behind both the losing argmax and the preferred "
        "action (1.0 is where the posterior gives memory half weight at the default support scale).",
    )
    max_length: int = Field(
        1024,
        ge=64,
        description="Longest training sequence in tokens (prompt + reply). Longer examples are dropped and counted, "
        "never truncated: truncation would cut the reply off the end.",
    )

    # ---- training ------------------------------------------------------------------------
    epochs: float = Field(2.0, gt=0, description="Passes over the dataset (ignored when max_steps > 0).")
    max_steps: int = Field(-1, description="Optimizer steps to run; -1 runs `epochs` epochs.")
    learning_rate: float = Field(2e-4, gt=0, description="Peak learning rate of SFT (LoRA parameters only).")
    dpo_learning_rate: float = Field(2e-5, gt=0, description="Peak learning rate of DPO.")
    dpo_beta: float = Field(0.1, gt=0, description="DPO temperature: higher keeps the policy closer to the reference.")
    lora_rank: int = Field(16, ge=1, description="LoRA rank r.")
    lora_alpha: int = Field(32, ge=1, description="LoRA scaling alpha (the update is scaled by alpha / r).")
    lora_dropout: float = Field(0.05, ge=0, lt=1, description="Dropout on the LoRA input.")
    target_modules: list[str] = Field(
        default_factory=lambda: list(DEFAULT_TARGET_MODULES),
        description="Linear layers that get LoRA adapters (names inside the model), or ['all-linear'].",
    )
    batch_size: int | None = Field(
        None,
        ge=1,
        description="Examples per micro-step on each process. Unset: 1 on CPU (two 8-example SFT steps on ~900-token "
        "twc examples peaked at 4.7 GB RSS at 1 against 12.6 GB at 4, and ran 1.14x faster), 4 on CUDA.",
    )
    gradient_accumulation: int | None = Field(
        None,
        ge=1,
        description=f"Micro-steps accumulated per optimizer step. Unset: as many as make {EXAMPLES_PER_STEP} "
        "examples per optimizer step on each process (at least 1).",
    )
    warmup_ratio: float = Field(0.05, ge=0, lt=1, description="Share of steps spent warming the learning rate up.")
    cpu_precision: Literal["fp32", "bf16-autocast"] = Field(
        "bf16-autocast",
        description="CPU training: fp32 throughout, or fp32 weights with bf16 autocast (measured faster on "
        "SmolLM2-135M; see finetune/README.md). CUDA always trains in bf16.",
    )
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in the backward pass: saves memory, costs ~25% speed on small models."
    )
    save_steps: int = Field(50, ge=1, description="Checkpoint every this many optimizer steps (for --resume).")
    save_total_limit: int = Field(2, ge=1, description="Checkpoints kept per training job.")
    logging_steps: int = Field(
        5, ge=1, description="Log the loss every this many steps (fewer in a short round, so it logs at least 4 times)."
    )
    seed: int = Field(0, description="Seed of weight init, dropout and data order (resumes reproduce it).")
    device: str = Field("auto", description="auto (CUDA when available), cpu or cuda.")
    one_at_a_time: bool = Field(
        True,
        description="Wait for any other local training on this machine to finish before starting (an OS lock, "
        "`~/.cache/crl/locks/train.lock`): on CPU one training of even the 135M model peaks at several GB (4.7 GB "
        "at the default layout on ~900-token examples), and two at once can get killed for memory. A distributed launch never waits.",
    )

    # ---- promotion gate --------------------------------------------------------------------
    gate_episodes: int = Field(20, ge=1, description="Dev-fold episodes per task when gating an adapter.")
    gate_rule: Literal["not-worse", "better", "margin"] = Field(
        "not-worse",
        description="How the gate decides: not-worse (paired McNemar test on the same dev seeds: refuse only a "
        "significantly worse candidate), better (promote only a significantly better one), or margin "
        "(pooled rates: candidate >= current - gate_margin, unpaired). See finetune/gate.py.",
    )
    gate_alpha: float = Field(
        0.05, gt=0, lt=1, description="Significance level of the gate's paired test (rules not-worse and better)."
    )
    gate_margin: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Rule margin: a candidate is promoted when its dev success rate >= the current one's minus this.",
    )
    gate_memory: bool = Field(
        False,
        description="Evaluate with memory in the loop, as the agent is configured (True), or the model alone "
        "(False: memory off, the model picks every action), which judges what the weights learned.",
    )
    gate_tasks: list[str] | None = Field(
        None, description="Tasks the gate evaluates on; unset: every task in the adapter's dataset."
    )

    # ---- scheduler -------------------------------------------------------------------------
    auto_min_new_episodes: int = Field(
        50, ge=1, description="`crl finetune auto` starts a round once this many new qualifying episodes arrived."
    )
    auto_kind: Literal["sft", "dpo", "sft+dpo"] = Field(
        "sft", description="What a scheduled round trains: SFT, DPO on the promoted adapter, or SFT then DPO."
    )
    auto_family: str | None = Field(None, description="Task family scheduled rounds train on; unset: all families.")
    auto_interval_s: float = Field(300.0, gt=0, description="Seconds between checks of `crl finetune auto`.")
    auto_after_run: bool = Field(
        False,
        description="`crl run` checks the scheduler when it finishes and runs a round if one is due (`--finetune-auto`).",
    )

    def batch_layout(self, device: str) -> tuple[int, int]:
        """(examples per micro-step, micro-steps per optimizer step) on `device` ("cpu" or "cuda"),
        the unset ones filled in: a CPU trains one example at a time, which holds the activations of
        one sequence instead of four; the optimizer step sees the same examples either way.

        Example:
            >>> FinetuneConfig().batch_layout("cpu"), FinetuneConfig().batch_layout("cuda")
            ((1, 8), (4, 2))
        """
        batch = self.batch_size or (1 if device == "cpu" else 4)
        return batch, self.gradient_accumulation or max(1, EXAMPLES_PER_STEP // batch)
