"""Scoring admissible actions through an OpenAI-compatible server: pi_model(a | s) without local weights.

Three methods, tried in the order of `ServedScoringOptions.methods`; the first a server
answers is kept for the rest of the session (probed once, on the first state it can take):

- `systemone`: transformers' `POST /v1/systemone` (`transformers serve`, the engine is
  `DecisionPipeline`). The actions become the options of one `choice` question about the
  state, answered with a probability per option from one forward pass (the next-token logits
  of the option labels A, B, C, ...). At most 26 options; a state with more goes to the next
  method. A small model's label choice leans on position: the 135M model put its argmax on
  option A in 78 of 78 keyroom/key states. With `systemone_rotations` r > 1 the question is
  asked r times with the options rotated, and each action's log-probability is averaged
  over the positions it took; with r >= n every action sits at every position once and a
  bias that depends on position alone cancels (permutation debiasing, "Large Language Models
  Are Not Robust Multiple Choice Selectors", ICLR 2024). It costs r requests per state and
  is off by default: on 8 keyroom/key episodes it spread the argmax over the positions
  but did not raise success (1/8 against 2/8).
- `prompt_logprobs`: vLLM's chat completions with `prompt_logprobs`. The conversation is
  primed with `Action: <candidate>` as an assistant message the server continues
  (`continue_final_message`), so the server renders its own chat template; the candidate's
  tokens are found at the end of the prompt by their decoded text and scored as the local
  backend scores them (TWOSOME: mean log-probability per token, `agent.llm.scoring`).
- `sampling`: k replies sampled at a temperature, each mapped onto an admissible action by the
  agent's parser; pi(a | s) = (count(a) + smoothing) / (mapped + n * smoothing), the k-sample
  estimate of an LLM's action prior (arXiv 2410.07927). Any chat server.

A server shows that it does not offer a method by answering its first try with 400, 404,
405, 422 or 501, or with a 200 that lacks the scores (some servers ignore fields they do not
know). Timeouts, connection errors, 429 and 5xx are retried by the SDK and then raised,
never taken as "not offered", so a server that is down is reported, not scored some other way.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from crl.agent.llm.base import BackendRefused, BatchError, Completion, GenerationConfig, LLMError, Message
from crl.agent.llm.scoring import ACTION_SEPARATOR, ActionDistribution, ActionScore, softmax_policy

log = logging.getLogger(__name__)

ScoringMethod = Literal["systemone", "prompt_logprobs", "sampling"]
SCORING_METHODS: tuple[ScoringMethod, ...] = ("systemone", "prompt_logprobs", "sampling")
NOT_OFFERED_STATUSES = frozenset({400, 404, 405, 422, 501})
SYSTEMONE_MAX_OPTIONS = 26
ACTION_PRIMING = "Action:"
"""The assistant text a candidate follows when the conversation has no priming of its own
(the openai backend is never primed), as the local backend primes its replies."""
MIN_PROB = 1e-45


class ServedEndpointError(LLMError):
    """A server answered a request with an HTTP error status.

    Attributes:
        status: the HTTP status code.
    """

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class MethodUnavailable(LLMError):
    """The server does not offer a scoring method (raised while probing it)."""


class ScoringServer(Protocol):
    """What the scorer needs from a backend (`OpenAIChatModel` provides it)."""

    name: str
    concurrency: int

    def post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST `body` to `path` under the API root; the JSON answer. Raises `ServedEndpointError`."""
        ...

    def complete(self, messages: list[Message], config: GenerationConfig) -> Completion:
        """One chat reply."""
        ...


@dataclass(frozen=True)
class ServedScoringOptions:
    """How a served model scores actions.

    Attributes:
        methods: the methods to try, in order (module docstring).
        samples: k, the replies sampled per state by `sampling`.
        sample_temperature: the sampling temperature of those replies.
        sample_max_tokens: the longest sampled reply, in tokens.
        smoothing: pseudo-count every candidate gets under `sampling`, so an action no sample
            named keeps some probability (> 0).
        instructions: the question `systemone` asks about each state.
        systemone_rotations: how many rotations of the options `systemone` asks about per
            state (1: the given order only; n or more for n options: every rotation).
        seed: seed of the first sampled reply; reply j uses seed + j.
    """

    methods: tuple[ScoringMethod, ...] = SCORING_METHODS
    samples: int = 8
    sample_temperature: float = 1.0
    sample_max_tokens: int = 24
    smoothing: float = 0.5
    instructions: str = "Which action should you take next?"
    systemone_rotations: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        unknown = [m for m in self.methods if m not in SCORING_METHODS]
        if not self.methods or unknown:
            raise ValueError(f"scoring methods must be a non-empty list from {SCORING_METHODS}, got {self.methods!r}")
        if self.samples < 1:
            raise ValueError(f"samples must be at least 1, got {self.samples}")
        if self.sample_temperature <= 0:
            raise ValueError(f"sample_temperature must be > 0 (sampling needs it), got {self.sample_temperature}")
        if self.systemone_rotations < 1:
            raise ValueError(f"systemone_rotations must be at least 1, got {self.systemone_rotations}")
        if self.smoothing <= 0:
            raise ValueError(f"smoothing must be > 0 so every candidate keeps some probability, got {self.smoothing}")


def state_text(messages: Sequence[Message]) -> str:
    """What `systemone` is asked about: the user turns of the conversation (goal, observation,
    admissible actions, history), without the system prompt's reply format or any priming."""
    return "\n\n".join(m["content"] for m in messages if m["role"] == "user")


def primed_messages(messages: Sequence[Message], action: str) -> list[Message]:
    """The conversation ending in an assistant message `... Action: <action>` for the server to continue.

    Example:
        `[user]` -> `[user, {"role": "assistant", "content": "Action: go north"}]`; a conversation
        already ending in an assistant message `"Action:"` gets `" go north"` appended to it.
    """
    out = [dict(m) for m in messages]
    if out and out[-1]["role"] == "assistant":
        out[-1]["content"] = out[-1]["content"] + ACTION_SEPARATOR + action
    else:
        out.append({"role": "assistant", "content": ACTION_PRIMING + ACTION_SEPARATOR + action})
    return out  # type: ignore[return-value]


def continuation_logprobs(entries: Sequence[Any], continuation: str) -> tuple[list[float], bool]:
    """The log-probabilities of the prompt tokens that spell `continuation` at the prompt's end.

    Args:
        entries: vLLM's `prompt_logprobs`: per prompt token None (the first) or a mapping of
            token id to `{"logprob", "rank", "decoded_token"}`, the prompt token's own first.
        continuation: the text the prompt ends with (separator + action).

    Returns:
        (log-probs, merged): merged is True when the first of those tokens also holds text
        before the continuation (a merge across the boundary); it is scored whole.

    Raises:
        ValueError: the entries carry no decoded text, or their text does not end with
            `continuation` (the server's chat template changed the final message).

    Example:
        entries decoding to `[..., "Action", ":", " go", " north"]` and continuation `" go north"`
        give the log-probs of `" go"` and `" north"`, merged False.
    """
    text, logprobs = "", []
    for entry in reversed(entries):
        if not entry:
            break
        token = next(iter(entry.values()))
        decoded, logprob = token.get("decoded_token"), token.get("logprob")
        if decoded is None or logprob is None:
            raise ValueError("prompt_logprobs entries carry no decoded_token/logprob; the server's format is unknown")
        text = decoded + text
        logprobs.insert(0, float(logprob))
        if len(text) >= len(continuation):
            break
    if not text.endswith(continuation):
        raise ValueError(
            f"the prompt ends with {text[-len(continuation) :]!r}, not the scored {continuation!r}; "
            "the server's chat template alters the final assistant message"
        )
    return logprobs, len(text) > len(continuation)


def sampled_scores(replies: Sequence[str], actions: Sequence[str], smoothing: float) -> tuple[list[ActionScore], int]:
    """Smoothed counts of the replies mapped onto `actions`, as log-probability scores.

    Returns:
        (scores, unmapped): one `ActionScore` per action (log of its smoothed share; tokens 0,
        since nothing was token-scored) and how many replies named no admissible action.

    Example:
        replies naming "go north" 3 times and "take key" once, over ["go north", "take key",
        "look"] with smoothing 0.5: probabilities (3.5, 1.5, 0.5) / 5.5.
    """
    from crl.agent.parsing import parse_reply

    admissible = list(dict.fromkeys(actions))
    mapped = [parse_reply(text, admissible).action for text in replies]
    counts = Counter(a for a in mapped if a is not None)
    total = sum(counts.values()) + smoothing * len(admissible)
    scores = [
        ActionScore(a, math.log((counts[a] + smoothing) / total), math.log((counts[a] + smoothing) / total), 0)
        for a in actions
    ]
    return scores, sum(a is None for a in mapped)


def rotations(actions: Sequence[str], count: int) -> list[list[str]]:
    """`count` evenly spaced rotations of the distinct actions (all of them when count >= n).

    Example:
        `rotations(["a", "b", "c"], 3)` -> `[["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]`;
        `rotations(["a", "b", "c", "d"], 2)` -> `[["a", "b", "c", "d"], ["c", "d", "a", "b"]]`.
    """
    options = list(dict.fromkeys(actions))
    n = len(options)
    shifts = sorted({(j * n) // min(count, n) for j in range(min(count, n))})
    return [options[k:] + options[:k] for k in shifts]


def label_scores(actions: Sequence[str], answers: Sequence[dict[str, Any]]) -> list[ActionScore]:
    """Each action's log-probability averaged over the `choice` answers (one per rotation).

    Raises:
        ValueError: an answer has no probability for some action.
    """
    logs: dict[str, list[float]] = {a: [] for a in actions}
    for answer in answers:
        probabilities = answer["answers"]["action"]["probabilities"]
        if not isinstance(probabilities, dict) or not set(actions) <= set(probabilities):
            raise ValueError(f"the answer has no probability for every action: {answer!r}")
        for a in logs:
            logs[a].append(math.log(max(float(probabilities[a]), MIN_PROB)))
    means = {a: sum(v) / len(v) for a, v in logs.items()}
    return [ActionScore(a, means[a], means[a], 1) for a in actions]


@dataclass
class _Scored:
    scores: list[ActionScore]
    prompt_tokens: int


@dataclass(frozen=True)
class _Failed:
    reason: str


class ServedScorer:
    """Scores candidate actions with a served model, by the first method the server offers.

    Args:
        server: the backend that sends requests (`ScoringServer`).
        options: methods, their order and the sampling settings.
    """

    def __init__(self, server: ScoringServer, options: ServedScoringOptions | None = None) -> None:
        self.server = server
        self.options = options or ServedScoringOptions()
        self._offered: dict[str, bool | None] = dict.fromkeys(self.options.methods)
        self._lock = threading.Lock()
        self.decisions: Counter[str] = Counter()
        self.unmapped_samples = 0

    @property
    def method(self) -> ScoringMethod | None:
        """The first method the server was found to offer (None before the first scoring call)."""
        return next((m for m in self.options.methods if self._offered[m]), None)

    def report(self) -> dict[str, Any]:
        """JSON-ready: the method used, what the probes found, decisions per method, unmapped samples."""
        out: dict[str, Any] = {
            "method": self.method,
            "offered": {m: v for m, v in self._offered.items() if v is not None},
            "decisions": dict(self.decisions),
        }
        if self.decisions.get("sampling"):
            out |= {"samples": self.options.samples, "unmapped_samples": self.unmapped_samples}
        return out

    def score(
        self, batch: Sequence[list[Message]], candidates: Sequence[Sequence[str]], temperature: float = 1.0
    ) -> list[ActionDistribution]:
        """pi_model(a | s) for each conversation's candidates, in order.

        Raises:
            LLMError: lengths differ or a candidate list is empty; a request failed; or no
                method in `options.methods` is offered by the server for some state.
            BatchError: some states' requests failed after the retries; it holds the
                distributions of the others (None where a state failed) and each failure's reason.
        """
        if len(batch) != len(candidates):
            raise LLMError(f"{len(batch)} prompts but {len(candidates)} candidate lists; give one list per prompt")
        if any(not c for c in candidates):
            raise LLMError("a prompt has no candidate actions; pass the admissible actions")
        started = time.perf_counter()
        done: dict[int, tuple[str, _Scored | str]] = {}
        with self._lock:
            for method in self.options.methods:
                todo = [i for i in range(len(batch)) if i not in done and _fits(method, candidates[i])]
                if not todo or self._offered[method] is False:
                    continue
                if self._offered[method] is None:
                    first = todo.pop(0)
                    scored = self._probe(method, batch[first], candidates[first])
                    if scored is None:
                        continue
                    done[first] = (method, scored)
                for i, scored in zip(todo, self._score_states(method, [(batch[i], candidates[i]) for i in todo])):
                    done[i] = (method, scored)
        missing = [i for i in range(len(batch)) if i not in done]
        if missing:
            raise LLMError(
                f"{self.server.name}: no scoring method among {self.options.methods} is offered for "
                f"{len(missing)} state(s) (found: {self._offered}); add 'sampling' to the methods, "
                "which any chat server supports"
            )
        latency = time.perf_counter() - started
        out: list[ActionDistribution | None] = []
        errors: list[str | None] = []
        for i in range(len(batch)):
            method, scored = done[i]
            if isinstance(scored, str):
                out.append(None)
                errors.append(scored)
                continue
            self.decisions[method] += 1
            dist = softmax_policy(scored.scores, temperature, "mean")
            out.append(replace(dist, prompt_tokens=scored.prompt_tokens, latency_s=latency))
            errors.append(None)
        failed = [e for e in errors if e is not None]
        if failed:
            if len(batch) == 1:
                raise LLMError(failed[0])
            raise BatchError(
                f"{len(failed)} of {len(batch)} states could not be scored; the first: {failed[0]}", out, errors
            )  # type: ignore[arg-type]
        return out  # type: ignore[return-value]

    def _probe(self, method: ScoringMethod, messages: list[Message], actions: Sequence[str]) -> _Scored | None:
        try:
            [scored] = self._score_states(method, [(messages, actions)], probing=True)
        except MethodUnavailable as exc:
            log.warning("%s does not offer %s scoring (%s); trying the next method", self.server.name, method, exc)
            self._offered[method] = False
            return None
        log.info("%s: scoring actions by %s", self.server.name, method)
        self._offered[method] = True
        return scored

    def _score_states(
        self, method: ScoringMethod, states: list[tuple[list[Message], Sequence[str]]], probing: bool = False
    ) -> list[_Scored | str]:
        """Every request of every state in one pool, then each state's scores from its answers.

        Probing, a failed request is raised (`MethodUnavailable` when it says the method is not
        offered); otherwise a state whose request failed after the retries gets the failure's
        reason in place of its scores, and the other states keep theirs."""
        jobs_per_state = [self._jobs(method, messages, actions) for messages, actions in states]
        flat = [job for jobs in jobs_per_state for job in jobs]

        def attempt(job: Callable[[], Any]) -> Any:
            try:
                return job()
            except ServedEndpointError as exc:
                if probing and exc.status in NOT_OFFERED_STATUSES:
                    raise MethodUnavailable(str(exc)) from None
                if probing:
                    raise
                return _Failed(str(exc))
            except BackendRefused:
                raise
            except LLMError as exc:
                if probing:
                    raise
                return _Failed(str(exc))

        if len(flat) <= 1:
            answers = [attempt(job) for job in flat]
        else:
            with ThreadPoolExecutor(min(self.server.concurrency, len(flat)), "served-scoring") as pool:
                answers = list(pool.map(attempt, flat))
        out: list[_Scored | str] = []
        at = 0
        for (_, actions), jobs in zip(states, jobs_per_state):
            mine, at = answers[at : at + len(jobs)], at + len(jobs)
            failure = next((a for a in mine if isinstance(a, _Failed)), None)
            if failure is not None:
                out.append(failure.reason)
                continue
            try:
                out.append(self._combine(method, actions, mine))
            except (ValueError, KeyError, TypeError) as exc:
                if probing:
                    raise MethodUnavailable(str(exc)) from None
                out.append(f"{self.server.name}: {method} scoring failed: {exc}")
        return out

    def _jobs(self, method: ScoringMethod, messages: list[Message], actions: Sequence[str]) -> list[Callable[[], Any]]:
        post = self.server.post_json
        if method == "systemone":
            return [
                (lambda body: lambda: post("/systemone", body))(self._systemone_request(messages, order))
                for order in rotations(actions, self.options.systemone_rotations)
            ]
        if method == "prompt_logprobs":
            return [
                (lambda body: lambda: post("/chat/completions", body))(self._prompt_logprobs_request(messages, action))
                for action in actions
            ]
        o = self.options
        configs = [
            GenerationConfig(o.sample_max_tokens, o.sample_temperature, 1.0, ["\n\n"], o.seed + j)
            for j in range(o.samples)
        ]
        return [(lambda config: lambda: self.server.complete(messages, config))(c) for c in configs]

    def _systemone_request(self, messages: list[Message], options: list[str]) -> dict[str, Any]:
        question = {"type": "choice", "instructions": self.options.instructions, "criteria": dict.fromkeys(options)}
        return {"model": self.server.name, "state": state_text(messages), "questions": {"action": question}}

    def _prompt_logprobs_request(self, messages: list[Message], action: str) -> dict[str, Any]:
        return {
            "model": self.server.name,
            "messages": primed_messages(messages, action),
            "max_tokens": 1,
            "temperature": 0.0,
            "prompt_logprobs": 0,
            "add_generation_prompt": False,
            "continue_final_message": True,
        }

    def _combine(self, method: ScoringMethod, actions: Sequence[str], answers: list[Any]) -> _Scored:
        if method == "systemone":
            tokens = int(answers[0].get("usage", {}).get("input_tokens", 0))
            return _Scored(label_scores(actions, answers), tokens)
        if method == "prompt_logprobs":
            scores, prompt_tokens = [], []
            for action, answer in zip(actions, answers):
                entries = answer.get("prompt_logprobs")
                if not isinstance(entries, list) or not entries:
                    raise ValueError("the answer holds no prompt_logprobs (the server ignored the field)")
                logprobs, merged = continuation_logprobs(entries, ACTION_SEPARATOR + action)
                total = sum(logprobs)
                scores.append(ActionScore(action, total / len(logprobs), total, len(logprobs), merged))
                prompt_tokens.append(len(entries) - len(logprobs))
            return _Scored(scores, min(prompt_tokens))
        scores, unmapped = sampled_scores([c.text for c in answers], actions, self.options.smoothing)
        self.unmapped_samples += unmapped
        return _Scored(scores, answers[0].prompt_tokens)


def _fits(method: ScoringMethod, actions: Sequence[str]) -> bool:
    return method != "systemone" or len(set(actions)) <= SYSTEMONE_MAX_OPTIONS
