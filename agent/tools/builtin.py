"""The tools every tool-using episode has: `final_answer` (ends the episode; its argument is
what the task checks) and, with memory in the loop, `recall` (the agent searches its own
experience on demand)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from crl.agent.tools.tool import Tool, ToolContext, as_tool

if TYPE_CHECKING:
    from crl.memory.retrieval.retriever import Retriever

FINAL_ANSWER = "final_answer"
RECALL = "recall"


def final_answer(answer: str) -> str:
    """Give your final answer to the task; this ends the episode.

    Args:
        answer: the answer, as short as the question allows
    """
    return answer


def final_answer_tool() -> Tool:
    """`final_answer(answer)`: the agent loop passes the answer to the task instead of calling it."""
    return as_tool(final_answer, source="built-in")


def recall_tool(retriever: "Retriever", family: str, timeout_s: float = 30.0) -> Tool:
    """`recall(query, k)` over the experience bank of `family`: the k most relevant stored
    episodes (successes and failures), step hints and rules for a query the agent writes.

    The memories it shows are added to the episode's `ToolContext.memory_ids`, so they are
    credited with the episode's outcome as the prompt's memories are (`memory.retrieval.credit`).
    """

    def recall(query: str, k: int = 3, context: ToolContext | None = None) -> str:
        """Search your own past experience: similar episodes (how they went), what was done in
        similar situations, and rules learned so far.

        Args:
            query: what to look for, e.g. the question or the step you are unsure about
            k: how many memories to return (1 to 10)
        """
        from crl.agent.advisor import case_view, step_hint
        from crl.memory.retrieval.retriever import RetrievalQuery
        from crl.prompts.memory_text import render_case

        context = context or ToolContext()
        k = max(1, min(int(k), 10))
        [pack] = retriever.retrieve(
            [RetrievalQuery(family=family, task=context.task or family, goal=context.goal, observation=query)]
        )
        found = [(m.score, m.id, render_case(case_view(m.record))) for m in pack.successes + pack.failures]
        found += [(m.score, m.id, step_hint(m.record)) for m in pack.hints]
        found += [(m.score, m.id, "Rule: " + m.record.text) for m in pack.rules]
        found.sort(key=lambda f: -f[0])
        shown = found[:k]
        context.memory_ids.extend(i for _, i, _ in shown)
        if not shown:
            return "No stored experience matches that yet."
        return "\n\n".join(text for _, _, text in shown)

    return as_tool(recall, timeout_s=timeout_s, source="built-in")
