"""Settings of experience synthesis: the `synthesis` section (`[synthesis]` in `crl.toml`,
`CRL_SYNTHESIS__AUTO=true`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from crl.memory.synthesis.similarity import EMBEDDING_THRESHOLD, LEXICAL_THRESHOLD, SimilarityName


class SynthesisConfig(BaseModel):
    """When and how synthetic experience is made from played experience."""

    model_config = ConfigDict(extra="forbid")

    auto: bool = Field(
        False,
        description="Synthesize during training runs: every `every` finished episodes (and at the run's end), "
        "relabel the new failures of the run's family and stitch demonstrations of the run's task when it "
        "declares sub-goals; every synthetic episode is validated by replay before it is stored.",
    )
    every: int = Field(8, ge=1, description="Finished episodes between two automatic synthesis passes.")
    relabel: bool = Field(True, description="Make sub-task successes of failures that reached sub-goals.")
    stitch: bool = Field(True, description="Stitch validated demonstrations of compound tasks from skill segments.")
    mine: bool = Field(
        False,
        description="Also mine precondition, ordering and dead-end rules from the family's statistics on each "
        "pass (with the `reflect.mine` settings), as `crl synth mine` does.",
    )
    similarity: SimilarityName = Field(
        "lexical",
        description="How a segment from another world is matched to where the stitch has got to: `lexical` "
        "(word overlap) or `embedding` (cosine of the bank's sentence embeddings).",
    )
    threshold: float | None = Field(
        None,
        gt=0,
        le=1,
        description=f"Similarity a segment from another world needs between its start and where the stitch has "
        f"got to (segments from the same world need none). Unset: the measured default of `similarity` "
        f"({LEXICAL_THRESHOLD} lexical, {EMBEDDING_THRESHOLD} embedding).",
    )
    max_steps: int | None = Field(
        None,
        ge=1,
        description="The step limit a stitched demonstration must fit; unset: the task's own. Set it to the "
        "limit the agent plays under when that is tighter (a longer demonstration is no success there).",
    )
