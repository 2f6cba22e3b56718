"""Experience synthesis: skill segments, hindsight relabelling and stitching validated by replay.

- `segments`: cut an episode into labelled skill segments by the sub-goals its steps report.
- `relabel`: a failure that reached a sub-goal becomes a success of that sub-goal's sub-task.
- `stitch`: join segments into a demonstration of a compound goal; keep it only if it replays.
- `replay`: play actions in the real environment (every synthetic episode is made of replayed steps).
- `provenance`: where a synthetic episode came from (kind, parents, validation).
- `pipeline`: one pass over played episodes: segment, relabel, stitch (`synthesize`).
- `report`: a pass's results and counts (`SynthesisResult`, `SynthesisReport`).
- `bank_io`: read episodes from the bank, store synthetic ones.
"""

from crl.memory.synthesis.pipeline import synthesize
from crl.memory.synthesis.provenance import Provenance, provenance_of
from crl.memory.synthesis.relabel import relabel_episode, relabel_episodes
from crl.memory.synthesis.replay import ReplayResult, replay
from crl.memory.synthesis.report import Rejection, SynthesisReport, SynthesisResult
from crl.memory.synthesis.segments import Segment, segment_episode, segment_episodes
from crl.memory.synthesis.similarity import (
    EMBEDDING_THRESHOLD,
    LEXICAL_THRESHOLD,
    embedding_similarity,
    lexical_similarity,
    similarity_named,
)
from crl.memory.synthesis.stitch import StitchPlan, plan_stitch, stitch, validate_stitch

__all__ = [
    "EMBEDDING_THRESHOLD",
    "LEXICAL_THRESHOLD",
    "Provenance",
    "Rejection",
    "ReplayResult",
    "Segment",
    "StitchPlan",
    "SynthesisReport",
    "SynthesisResult",
    "embedding_similarity",
    "lexical_similarity",
    "plan_stitch",
    "provenance_of",
    "relabel_episode",
    "relabel_episodes",
    "replay",
    "segment_episode",
    "segment_episodes",
    "similarity_named",
    "stitch",
    "synthesize",
    "validate_stitch",
]
