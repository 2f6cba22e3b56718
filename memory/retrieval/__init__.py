"""Finding what helps: the retriever, reranking, the cross-encoder, utility credit and episodic
control (action values from the nearest stored states)."""

from crl._lazy import lazy_exports

_EXPORTS = {
    "Retriever": "crl.memory.retrieval.retriever",
    "RetrievalQuery": "crl.memory.retrieval.retriever",
    "ContextPack": "crl.memory.retrieval.retriever",
    "RetrievalConfig": "crl.memory.retrieval.config",
    "RerankWeights": "crl.memory.retrieval.config",
    "ScoredMemory": "crl.memory.retrieval.rerank",
    "Candidate": "crl.memory.retrieval.rerank",
    "rank": "crl.memory.retrieval.rerank",
    "mmr_select": "crl.memory.retrieval.rerank",
    "PairScorer": "crl.memory.retrieval.cross_encoder",
    "load_cross_encoder": "crl.memory.retrieval.cross_encoder",
    "CrossEncoderError": "crl.memory.retrieval.cross_encoder",
    "credit_episode": "crl.memory.retrieval.credit",
    "CreditReport": "crl.memory.retrieval.credit",
    "ActionValue": "crl.memory.retrieval.episodic_control",
    "action_values": "crl.memory.retrieval.episodic_control",
    "choose_mixed": "crl.memory.retrieval.episodic_control",
    "choose_memory": "crl.memory.retrieval.episodic_control",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
