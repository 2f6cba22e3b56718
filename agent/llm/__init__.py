"""LLM backends behind one chat protocol (`ChatModel`)."""

from crl.agent.llm.base import ChatModel, Completion, GenerationConfig, LLMError, Message

__all__ = ["ChatModel", "Completion", "GenerationConfig", "LLMError", "Message"]
