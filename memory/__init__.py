"""The experience bank: trajectories, the append-only logs they live in, and (on Chroma) the
queryable view used for retrieval and curation.

Sub-packages: `storage` (logs, journal, Chroma view, locks, embeddings, export/import),
`retrieval` (retriever, rerank, credit, episodic control), `reflection` (reflector and rules)."""

from crl._lazy import lazy_exports

_EXPORTS = {
    "ExperienceBank": "crl.memory.bank",
    "BankError": "crl.memory.errors",
    "MemoryConfig": "crl.memory.config",
    "Episode": "crl.memory.trajectory",
    "Step": "crl.memory.trajectory",
    "StepExtra": "crl.memory.trajectory",
    "EpisodeRecord": "crl.memory.records",
    "StepRecord": "crl.memory.records",
    "RuleRecord": "crl.memory.records",
    "state_text": "crl.memory.records",
    "RecordNotFoundError": "crl.memory.results",
    "IngestError": "crl.memory.results",
    "MemoryStats": "crl.memory.results",
    "SyncReport": "crl.memory.results",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
