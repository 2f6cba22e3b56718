"""Where the bank's records live: run logs, the journal, the Chroma view, locks, embeddings,
export and import."""

from crl._lazy import lazy_exports

_EXPORTS = {
    "EpisodeLog": "crl.memory.storage.episode_log",
    "read_episodes": "crl.memory.storage.episode_log",
    "iter_events": "crl.memory.storage.episode_log",
    "repair_torn_tail": "crl.memory.storage.episode_log",
    "Journal": "crl.memory.storage.journal",
    "JournalEntry": "crl.memory.storage.journal",
    "JournalError": "crl.memory.storage.journal",
    "JournalState": "crl.memory.storage.journal_state",
    "ViewKeeper": "crl.memory.storage.keeper",
    "ChromaView": "crl.memory.storage.store",
    "Hit": "crl.memory.storage.store",
    "StoreError": "crl.memory.storage.store",
    "NewerSchemaError": "crl.memory.storage.store",
    "connect": "crl.memory.storage.store",
    "StoreLock": "crl.memory.storage.locks",
    "StoreLockedError": "crl.memory.storage.locks",
    "SentenceTransformerEmbedding": "crl.memory.storage.embeddings",
    "HashingEmbedding": "crl.memory.storage.embeddings",
    "TextEmbedder": "crl.memory.storage.embeddings",
    "EmbeddingModelError": "crl.memory.storage.embeddings",
    "resolve_model_path": "crl.memory.storage.embeddings",
    "read_import": "crl.memory.storage.transfer",
    "write_export": "crl.memory.storage.transfer",
    "ImportValidationError": "crl.memory.storage.transfer",
    "Materializer": "crl.memory.storage.apply",
    "MissingContentError": "crl.memory.storage.apply",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
