"""One step of a tool-using episode: read the reply as a tool call, run it (or hand
`final_answer`'s argument to the task), and log it as a step.

The step's action is the call's canonical text (`calculator {"expression": "2+3"}`), its
observation what the agent saw when it called, and `extra.tool` the call and its outcome; the
tool's result is the next observation. Nothing a model writes crashes the run: an unreadable
reply, an unknown tool, arguments that do not fit the schema (all `valid=False`, like an
inadmissible action), a tool that raises or times out (valid, its error is the result) all
come back to the model as the reason, in the next prompt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crl.agent.llm.base import Completion
from crl.agent.tools.builtin import FINAL_ANSWER
from crl.agent.tools.executor import call_key
from crl.agent.tools.reply import ToolReply, read_reply
from crl.agent.tools.tool import ToolContext
from crl.agent.tools.toolbox import native_call
from crl.agent.tools.validate import argument_errors
from crl.memory.trajectory import MemoryOffer, Step, StepExtra, ToolCallRecord
from crl.prompts.budget import truncate_middle
from crl.tasks.base import Observation

if TYPE_CHECKING:
    from crl.agent.session import EpisodeSession


def _history_call(session: EpisodeSession, reply: ToolReply) -> dict[str, str] | None:
    """The call as the native prompt history shows it (None in ReAct mode or without a tool name)."""
    if not session.tools.native or reply.name is None:
        return None
    return native_call(reply.name, reply.arguments, reply.call_id)


def apply_tool_reply(session: EpisodeSession, completion: Completion, memory: MemoryOffer | None) -> Step:
    """Apply one reply of a tool-using episode to `session` and return the logged step."""
    toolbox = session.tools
    index = len(session.episode.steps)
    reply = read_reply(completion, session.reply_prefix, toolbox.parameters(), index)
    step = Step(
        index=index,
        observation=session.observation.text,
        action=reply.action,
        raw_output=reply.raw,
        thought=reply.thought,
        prompt_tokens=completion.prompt_tokens,
        completion_tokens=completion.completion_tokens,
        latency_s=completion.latency_s,
        extra=StepExtra(match="tool", raw_action=reply.action or reply.raw.strip()[:200]),
    )
    if session.last_prompt is not None:
        step.extra.prompt = session.last_prompt
        session.used_memory.extend(session.last_prompt.memory_keys)
    step.extra.memory = memory
    session.tokens_used += completion.prompt_tokens + completion.completion_tokens
    record = ToolCallRecord(
        name=reply.name or "",
        arguments=reply.arguments,
        mode="native" if toolbox.native else "react",
        call_id=reply.call_id,
    )
    step.extra.tool = record
    call = _history_call(session, reply)
    error = reply.error
    if error is None and reply.name == FINAL_ANSWER:
        errors = argument_errors(toolbox.parameters()[FINAL_ANSWER], reply.arguments)
        error = f"{FINAL_ANSWER} was not accepted: " + "; ".join(errors) if errors else None
        record.status = "invalid" if errors else record.status
    if error is not None:
        if record.status == "ok":
            record.status = "unknown" if reply.name and reply.name not in toolbox.parameters() else "unreadable"
        return _unusable(session, step, record, error, call)
    if reply.name == FINAL_ANSWER:
        return _answer(session, step, record, str(reply.arguments["answer"]), call)
    context = ToolContext(session.episode.episode_id, session.episode.task, session.episode.goal, index)
    outcome = toolbox.executor.call(
        reply.name, reply.arguments, call_key(context.episode_id, index, step.action), context
    )
    session.used_memory.extend(context.memory_ids)
    record.memory_ids = list(context.memory_ids) or None
    record.status, record.seconds, record.cached = outcome.status, round(outcome.seconds, 4), outcome.cached
    text = outcome.text + (f"\n(Note: {reply.note})" if reply.note else "")
    if outcome.status in ("invalid", "unknown"):
        return _unusable(session, step, record, text, call)
    text = truncate_middle(text, session.config.max_observation_tokens, session._count)
    record.result = text
    step.info = {"tool": reply.name, "status": outcome.status}
    session._advance(step.action, Observation(text, session.observation.goal), step, step.info, call)
    session.episode.steps.append(step)
    session._check_guards(step)
    return step


def _unusable(session: EpisodeSession, step: Step, record: ToolCallRecord, error: str, call: dict | None) -> Step:
    step.valid = False
    step.extra.feedback = error
    record.result = error
    session.history.unusable(step.extra.raw_action or "", error, call)
    session.episode.steps.append(step)
    session._check_guards(step)
    return step


def _answer(session: EpisodeSession, step: Step, record: ToolCallRecord, answer: str, call: dict | None) -> Step:
    """`final_answer`: the answer goes to the task, which checks it and (normally) ends the episode."""
    record.status = "answer"
    try:
        obs, reward, done, info = session.env.step(answer)
    except Exception as exc:  # a checker that crashes ends this episode, not the run
        step.valid = False
        step.info = {"error": repr(exc)}
        record.status, record.result = "error", f"the task could not check the answer: {exc!r}"
        session.episode.steps.append(step)
        session._finish("error", f"environment error: {exc!r}")
        return step
    step.reward, step.done, step.info = float(reward), bool(done), dict(info)
    step.valid = not info.get("invalid", False)
    record.result = obs.text
    session._advance(step.action, obs, step, info, call)
    session.episode.steps.append(step)
    session._check_guards(step)
    return step


def replay_tool_step(session: EpisodeSession, step: Step) -> None:
    """Restore a logged tool step on resume without running the tool again: the agent sees the
    logged result; a logged final answer is checked by the task again (checking has no side effects)."""
    record = step.extra.tool
    call = None
    if session.tools is not None and session.tools.native and record.name:
        call = native_call(record.name, record.arguments, record.call_id or f"call_{step.index}")
    if record.status == "answer" and record.arguments is not None:
        obs, _, _, info = session.env.step(str(record.arguments.get("answer", "")))
        session._advance(step.action, obs, step, info, call)
    elif not step.valid:
        session.history.unusable(step.extra.raw_action or "", step.extra.feedback or record.result, call)
    else:
        session._advance(step.action, Observation(record.result, session.observation.goal), step, step.info, call)
