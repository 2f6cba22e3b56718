"""Acting by scoring: the model's probability of each admissible action, not free text.

For a prompt s and candidate actions a_1..a_n, each candidate is scored by the log-likelihood
of its tokens after the prompt (TWOSOME, Tan et al. 2024):

    sum(a)  = sum_t log p(x_t | s, x_<t)        over the candidate's tokens x_1..x_T
    mean(a) = sum(a) / T                         (token-normalised, the default)
    pi_model(a | s) = softmax_a(score(a) / temperature)

A candidate is tokenised as the model would generate it: the tokens of `prompt + separator +
action` after the prompt's own tokens. When the two tokenisations disagree at the boundary (a
BPE merge across it), the continuation is tokenised on its own instead, which is what the
model emits when it continues the prompt's tokens, and the score says so (`merged_boundary`).

Cost: one forward pass over each prompt (all prompts of a batch together, left-padded), then
one pass over the candidates' tokens: each prompt's candidates ride one after another in that
prompt's row after its KV cache, a 4D attention mask letting each see the prompt and its own
earlier tokens only (the cache is read in place, never copied). The last token of a candidate is
never fed (nothing is read after it), so single-token candidates cost nothing beyond the prompt
pass, and candidates whose fed tokens begin another's ("go north" / "go south" both feed " go")
share them. A model that refuses a 4D mask gets the older pass: the prompt's cache repeated for
each candidate row.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from crl.agent.llm.base import Message
    from crl.agent.llm.local import LocalChatModel

Normalisation = Literal["mean", "sum"]

ACTION_SEPARATOR = " "
"""What joins the prompt (ending with the `Action:` priming) and an action: the model writes
`Action: go north`, so the space belongs to the action's first token, never to the prompt."""


@dataclass(frozen=True)
class ActionScore:
    """The model's log-likelihood of one candidate action after a prompt.

    Attributes:
        action: the candidate, as given.
        mean_logprob: log-likelihood per token (the TWOSOME-normalised score).
        sum_logprob: log-likelihood of the whole continuation.
        tokens: how many tokens the continuation has.
        merged_boundary: the prompt's last tokens merged with the action's first when the
            two texts were tokenised together; the action was tokenised on its own.
    """

    action: str
    mean_logprob: float
    sum_logprob: float
    tokens: int
    merged_boundary: bool = False

    def score(self, normalisation: Normalisation) -> float:
        """The score the softmax reads: `mean_logprob` or `sum_logprob`."""
        return self.mean_logprob if normalisation == "mean" else self.sum_logprob


@dataclass(frozen=True)
class ActionDistribution:
    """pi_model(a | s) over one state's candidates, with the scores it came from.

    Attributes:
        scores: one per candidate, in the order given.
        probs: softmax of the scores divided by `temperature`, same order.
        temperature: the softmax temperature.
        normalisation: "mean" (per token) or "sum".
        prompt_tokens: the prompt's length in tokens (for the run's accounting).
        latency_s: wall time of the scoring call this distribution came from (shared by its batch).
    """

    scores: list[ActionScore]
    probs: list[float]
    temperature: float
    normalisation: Normalisation
    prompt_tokens: int = 0
    latency_s: float = 0.0

    @property
    def actions(self) -> list[str]:
        """The candidates, in order."""
        return [s.action for s in self.scores]

    @property
    def best(self) -> str:
        """The candidate the model likes most (the first on ties)."""
        return self.actions[max(range(len(self.probs)), key=self.probs.__getitem__)]

    def as_mapping(self) -> dict[str, float]:
        """Action -> probability, in the order scored (what `agent.posterior.decide` reads)."""
        return {s.action: p for s, p in zip(self.scores, self.probs)}

    def prob(self, action: str) -> float:
        """pi_model(action | s); 0 for an action that was not a candidate."""
        return sum(p for s, p in zip(self.scores, self.probs) if s.action == action)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: per action its probability, scores and token count."""
        return {
            "temperature": self.temperature,
            "normalisation": self.normalisation,
            "actions": {
                s.action: {
                    "prob": round(p, 6),
                    "mean_logprob": round(s.mean_logprob, 4),
                    "sum_logprob": round(s.sum_logprob, 4),
                    "tokens": s.tokens,
                    **({"merged_boundary": True} if s.merged_boundary else {}),
                }
                for s, p in zip(self.scores, self.probs)
            },
        }


def softmax_policy(
    scores: Sequence[ActionScore], temperature: float = 1.0, normalisation: Normalisation = "mean"
) -> ActionDistribution:
    """pi_model over `scores`: softmax(score / temperature).

    Example: mean log-probs -1 and -2 at temperature 1 give probabilities 0.731 and 0.269;
    at temperature 0.5 they give 0.881 and 0.119.

    Raises:
        ValueError: no scores, a temperature <= 0, or an unknown normalisation.
    """
    if not scores:
        raise ValueError("softmax_policy needs at least one scored action")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}; use a small value such as 0.05 for near-greedy")
    if normalisation not in ("mean", "sum"):
        raise ValueError(f"normalisation must be 'mean' or 'sum', got {normalisation!r}")
    logits = [s.score(normalisation) / temperature for s in scores]
    top = max(logits)
    weights = [math.exp(x - top) for x in logits]
    total = sum(weights)
    return ActionDistribution(list(scores), [w / total for w in weights], temperature, normalisation)


def continuation_ids(
    encode: Callable[[str], list[int]], prompt: str, prompt_ids: list[int], continuation: str
) -> tuple[list[int], bool]:
    """The token ids the model would emit for `continuation` after `prompt`.

    Args:
        encode: text to token ids, without special tokens.
        prompt: the prompt text; `prompt_ids` are its tokens.
        continuation: the text after the prompt (separator + action).

    Returns:
        (ids, merged): the tokens of `prompt + continuation` after `prompt_ids` when those
        start with `prompt_ids`; otherwise (a merge across the boundary) the tokens of
        `continuation` on its own, with merged True.

    Raises:
        ValueError: the continuation has no tokens.
    """
    full = encode(prompt + continuation)
    if full[: len(prompt_ids)] == prompt_ids:
        ids, merged = full[len(prompt_ids) :], False
    else:
        ids, merged = encode(continuation), True
    if not ids:
        raise ValueError(f"action {continuation!r} has no tokens after the prompt; candidates must be non-empty")
    return ids, merged


class ActionScorer:
    """Scores candidate actions with a transformers causal LM (module docstring).

    Args:
        model: a causal LM (`AutoModelForCausalLM`), in eval mode, on its device.
        tokenizer: its tokenizer; prompts are encoded without special tokens, since a rendered
            chat template already holds them.
        separator: put between the prompt and each action.
        max_cache_tokens: bound on (candidate rows x prompt width) in one candidate pass, so
            the repeated KV cache stays small; more rows are scored in several passes.
        pad_multiple: the prompts' padded width is a multiple of this many tokens, so a long run
            meets few distinct shapes (`agent.llm.local.PAD_MULTIPLE`); 1 pads to the longest.
        packed: score a prompt's candidates in its own row after its cache, with a mask that keeps
            them apart (the cache is never copied); False repeats the cache once per candidate row
            (also the fallback for a model that refuses 4D masks).
    """

    def __init__(
        self,
        model,
        tokenizer,
        separator: str = ACTION_SEPARATOR,
        max_cache_tokens: int = 8192,
        pad_multiple: int = 1,
        packed: bool = True,
    ):
        if max_cache_tokens < 1:
            raise ValueError("max_cache_tokens must be >= 1")
        self.model = model
        self.tokenizer = tokenizer
        self.separator = separator
        self.max_cache_tokens = max_cache_tokens
        self.pad_multiple = pad_multiple
        self.packed = packed
        params = inspect.signature(model.forward).parameters
        # transformers renamed `past_key_values` to `cache` during 5.x; take whichever this one has
        self._cache_arg = "cache" if "cache" in params else "past_key_values"

    @classmethod
    def for_chat_model(cls, chat: LocalChatModel, **options: Any) -> ActionScorer:
        """A scorer over a loaded `LocalChatModel`'s model and tokenizer (nothing is copied), padding
        prompts as the model's own generation does."""
        options.setdefault("pad_multiple", getattr(chat, "pad_multiple", 1))
        return cls(chat.model, chat._tokenizer(), **options)

    def log_likelihoods(self, prompts: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[list[ActionScore]]:
        """Each candidate's log-likelihood after its prompt.

        Args:
            prompts: K prompt texts, exactly as the model would continue them.
            candidates: K lists of actions; list k is scored after prompt k.

        Returns:
            K lists of `ActionScore`, in the order of `candidates`.

        Raises:
            ValueError: lengths differ, a prompt is empty, or a candidate list is empty.
        """
        import torch

        if len(prompts) != len(candidates):
            raise ValueError(f"{len(prompts)} prompts but {len(candidates)} candidate lists; give one list per prompt")
        if not prompts:
            return []
        prompt_ids = [self._encode(p) for p in prompts]
        for k, (ids, actions) in enumerate(zip(prompt_ids, candidates)):
            if not ids:
                raise ValueError(f"prompt {k} is empty; score actions after a rendered prompt")
            if not actions:
                raise ValueError(f"prompt {k} has no candidate actions; pass the admissible actions")
        rows = [
            (k, action, *continuation_ids(self._encode, prompts[k], prompt_ids[k], self.separator + action))
            for k, actions in enumerate(candidates)
            for action in actions
        ]
        with torch.inference_mode():
            first, cache, mask = self._prefill(prompt_ids)
            rest = self._continuations(rows, prompt_ids, cache, mask)
        out: list[list[ActionScore]] = [[] for _ in prompts]
        for r, (k, action, ids, merged) in enumerate(rows):
            token_logprobs = [float(first[k, ids[0]])] + rest[r]
            total = sum(token_logprobs)
            out[k].append(ActionScore(action, total / len(ids), total, len(ids), merged))
        return out

    def score(
        self,
        prompts: Sequence[str],
        candidates: Sequence[Sequence[str]],
        temperature: float = 1.0,
        normalisation: Normalisation = "mean",
    ) -> list[ActionDistribution]:
        """pi_model(a | s) for each prompt's candidates (`log_likelihoods` + `softmax_policy`)."""
        return [
            softmax_policy(scores, temperature, normalisation) for scores in self.log_likelihoods(prompts, candidates)
        ]

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _device(self):
        return next(self.model.parameters()).device

    def _prefill(self, prompt_ids: list[list[int]]):
        """One pass over the left-padded prompts: log-probs of the next token, the KV cache, the mask."""
        import torch

        from crl.agent.llm.local import padded_width

        width = padded_width(max(len(ids) for ids in prompt_ids), self.pad_multiple)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        input_ids = torch.full((len(prompt_ids), width), pad, dtype=torch.long)
        mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
        for i, ids in enumerate(prompt_ids):
            input_ids[i, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            mask[i, width - len(ids) :] = 1
        device = self._device()
        input_ids, mask = input_ids.to(device), mask.to(device)
        # positions count real tokens only, so a left-padded prompt sees the positions it would alone
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(
            input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1
        )
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        return out.logits[:, -1].float().log_softmax(-1), cache, mask

    def _continuations(self, rows, prompt_ids, cache, mask) -> list[list[float]]:
        """Log-probs of each row's tokens after its first, reusing the prompts' KV cache.

        Candidates of one prompt that share their fed tokens share one row of the pass: a row
        whose fed tokens begin another's reads its log-probs from the longer one ("go north" and
        "go south" both feed " go"; "take key" feeds a prefix of what "take key from chest" does).
        """
        result: list[list[float]] = [[] for _ in rows]
        units, reads = shared_prefix_units([(k, tuple(ids[:-1])) for k, _, ids, _ in rows])
        if not units:
            return result
        logprobs = self._packed(units, prompt_ids, cache, mask) if self.packed else None
        if logprobs is None:
            width = mask.shape[1]
            per_chunk = max(1, self.max_cache_tokens // width)
            logprobs = []
            for start in range(0, len(units), per_chunk):
                logprobs += self._continuation_chunk(units[start : start + per_chunk], prompt_ids, cache, mask)
        for r, unit in reads.items():
            ids = rows[r][2]
            result[r] = [float(logprobs[unit][j, ids[j + 1]]) for j in range(len(ids) - 1)]
        return result

    def _packed(self, units, prompt_ids, cache, mask) -> list | None:
        """Per unit, the [len(fed), vocab] log-probs after each fed token, from passes in which every
        unit of one prompt rides in that prompt's own row after its cached prompt, each attending to the
        prompt and to its own earlier tokens only (a 4D mask), so the prompt's cache is never copied.

        None when the model refuses a 4D mask (the caller then repeats the cache per unit)."""
        import torch

        from crl.agent.llm.local import padded_width

        device = mask.device
        width = mask.shape[1]
        prompts = mask.shape[0]
        per_prompt: list[list[int]] = [[] for _ in range(prompts)]
        for u, (k, _) in enumerate(units):
            per_prompt[k].append(u)
        budget = max(1, self.max_cache_tokens // max(1, prompts))
        passes: list[list[list[int]]] = []  # per pass, per prompt, the units it carries
        for k, owned in enumerate(per_prompt):
            pass_index, used = 0, 0
            for u in owned:
                n = len(units[u][1])
                if used and used + n > budget:
                    pass_index, used = pass_index + 1, 0
                while len(passes) <= pass_index:
                    passes.append([[] for _ in range(prompts)])
                passes[pass_index][k].append(u)
                used += n
        out: list = [None] * len(units)
        sdpa = getattr(getattr(self.model, "config", None), "_attn_implementation", "sdpa") == "sdpa"
        try:
            for carried in passes:
                # padded like the prompts, so a long run meets few distinct shapes (per-shape kernels)
                length = padded_width(max(sum(len(units[u][1]) for u in row) for row in carried), self.pad_multiple)
                input_ids = torch.zeros((prompts, length), dtype=torch.long, device=device)
                positions = torch.zeros((prompts, length), dtype=torch.long, device=device)
                allowed = torch.zeros((prompts, 1, length, width + length), dtype=torch.bool, device=device)
                allowed[:, 0, :, :width] = mask[:, None, :].bool()
                spans: list[tuple[int, int, int, int]] = []  # unit, prompt, start, length
                for k, row in enumerate(carried):
                    at = 0
                    for u in row:
                        fed = units[u][1]
                        n = len(fed)
                        input_ids[k, at : at + n] = torch.tensor(fed, dtype=torch.long)
                        positions[k, at : at + n] = len(prompt_ids[k]) + torch.arange(n)
                        allowed[k, 0, at : at + n, width + at : width + at + n] = torch.tril(
                            torch.ones((n, n), dtype=torch.bool)
                        )
                        spans.append((u, k, at, n))
                        at += n
                    for j in range(at, length):  # padding attends to itself only, so it stays finite
                        allowed[k, 0, j, :] = False
                        allowed[k, 0, j, width + j] = True
                attention = (
                    allowed
                    if sdpa
                    else torch.zeros(allowed.shape, dtype=self.model.dtype).masked_fill(
                        ~allowed, torch.finfo(self.model.dtype).min
                    )
                )
                result = self.model(
                    input_ids=input_ids,
                    attention_mask=attention,
                    position_ids=positions,
                    use_cache=True,
                    **{self._cache_arg: cache},
                )
                _trim(cache, width)
                logprobs = result.logits.float().log_softmax(-1)
                for u, k, at, n in spans:
                    out[u] = logprobs[k, at : at + n]
        except (TypeError, ValueError, RuntimeError, AttributeError):
            _trim(cache, width)
            return None
        return out

    def _continuation_chunk(self, units, prompt_ids, cache, mask) -> list:
        """Per (prompt index, fed token ids) unit, the [len(fed), vocab] log-probs after each fed
        token, one batched pass over the repeated prompt caches."""
        import torch
        from transformers import DynamicCache

        device = mask.device
        owners = torch.tensor([k for k, _ in units], dtype=torch.long, device=device)
        length = max(len(fed) for _, fed in units)
        input_ids = torch.zeros((len(units), length), dtype=torch.long, device=device)
        suffix_mask = torch.zeros((len(units), length), dtype=torch.long, device=device)
        positions = torch.zeros((len(units), length), dtype=torch.long, device=device)
        for i, (k, fed) in enumerate(units):
            input_ids[i, : len(fed)] = torch.tensor(fed, dtype=torch.long)
            suffix_mask[i, : len(fed)] = 1
            positions[i] = len(prompt_ids[k]) + torch.arange(length)
        repeated = DynamicCache()
        for layer, (keys, values) in enumerate(_cache_tensors(cache)):
            repeated.update(keys.index_select(0, owners), values.index_select(0, owners), layer)
        out = self.model(
            input_ids=input_ids,
            attention_mask=torch.cat([mask.index_select(0, owners), suffix_mask], dim=1),
            position_ids=positions,
            use_cache=True,
            **{self._cache_arg: repeated},
        )
        logprobs = out.logits.float().log_softmax(-1)
        return [logprobs[i, : len(fed)] for i, (_, fed) in enumerate(units)]


def shared_prefix_units(
    fed: Sequence[tuple[int, tuple[int, ...]]],
) -> tuple[list[tuple[int, tuple[int, ...]]], dict[int, int]]:
    """The distinct passes a candidate pass needs, and which one each row reads.

    Args:
        fed: per row, (prompt index, the token ids fed after the prompt); rows with none need no pass.

    Returns:
        (units, reads): units are (prompt index, fed ids) none of which begins a longer one of the
        same prompt; `reads[row]` is the unit whose first len(fed) positions give that row's log-probs.
    """
    by_owner: dict[int, list[tuple[int, ...]]] = {}
    for k, ids in fed:
        if ids and ids not in by_owner.setdefault(k, []):
            by_owner[k].append(ids)
    units: list[tuple[int, tuple[int, ...]]] = []
    covering: dict[tuple[int, tuple[int, ...]], int] = {}
    for k, seqs in by_owner.items():
        longest_first = sorted(seqs, key=len, reverse=True)
        for seq in longest_first:
            home = next((covering[(k, u)] for u in longest_first if len(u) > len(seq) and u[: len(seq)] == seq), None)
            if home is None:
                home = len(units)
                units.append((k, seq))
            covering[(k, seq)] = home
    reads = {r: covering[(k, ids)] for r, (k, ids) in enumerate(fed) if ids}
    return units, reads


class ChoiceScorer:
    """Scores candidates with transformers' `DecisionPipeline` (the engine of `/v1/systemone`).

    The actions become the options of one `choice` question about the state; the pipeline shows
    them labelled A, B, C, ... and reads the next-token logits of the labels after the prompt, in
    one forward pass per state (it does not batch states). At most 26 options.

    Args:
        model: a causal LM with a chat template.
        tokenizer: its tokenizer; copied, since the pipeline adds its sentinel tokens to it.
        instructions: the question asked about each state.
    """

    def __init__(self, model, tokenizer, instructions: str = "Which action should you take next?"):
        import copy

        from transformers import pipeline
        from transformers.decision import DecisionConfig

        self.instructions = instructions
        self.pipe = pipeline(
            "decision", model=model, tokenizer=copy.deepcopy(tokenizer), decision_config=DecisionConfig()
        )

    @classmethod
    def for_chat_model(cls, chat: LocalChatModel, **options: Any) -> ChoiceScorer:
        """A scorer over a loaded `LocalChatModel`'s model and (a copy of its) tokenizer."""
        return cls(chat.model, chat._tokenizer(), **options)

    def score(
        self, states: Sequence[str], candidates: Sequence[Sequence[str]], temperature: float = 1.0
    ) -> list[ActionDistribution]:
        """pi_model(a | s) for each state's candidates.

        Args:
            states: K state texts (goal and observation); the pipeline writes its own prompt.
            candidates: K lists of distinct actions, at most 26 each.
            temperature: applied to the label log-probabilities before the softmax.

        Raises:
            ValueError: lengths differ, a list is empty, holds duplicates or more than 26 actions.
        """
        if len(states) != len(candidates):
            raise ValueError(f"{len(states)} states but {len(candidates)} candidate lists; give one list per state")
        out = []
        for state, actions in zip(states, candidates):
            if not actions or len(set(actions)) != len(actions) or len(actions) > 26:
                raise ValueError(f"a choice question needs 1 to 26 distinct actions, got {list(actions)!r}")
            question = {"type": "choice", "instructions": self.instructions, "criteria": dict.fromkeys(actions)}
            answer = self.pipe({"state": state, "questions": {"action": question}})["action"]
            scores = [
                ActionScore(a, math.log(max(p, 1e-45)), math.log(max(p, 1e-45)), 1)
                for a, p in answer["probabilities"].items()
            ]
            out.append(softmax_policy(scores, temperature, "mean"))
        return out


def _trim(cache, width: int) -> None:
    """Cut a transformers cache back to its first `width` positions (what a pass appended goes)."""
    extra = cache.get_seq_length() - width
    if extra > 0:
        cache.crop(-extra)


def _cache_tensors(cache) -> list[tuple[Any, Any]]:
    """(keys, values) per layer of a transformers cache, each [batch, heads, length, dim]."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return [(cache.key_cache[i], cache.value_cache[i]) for i in range(len(cache.key_cache))]


def score_actions(
    chat: LocalChatModel,
    batch: Sequence[list[Message]],
    candidates: Sequence[Sequence[str]],
    temperature: float = 1.0,
    normalisation: Normalisation = "mean",
) -> list[ActionDistribution]:
    """pi_model(a | s) for each conversation's candidate actions, with a `LocalChatModel`.

    Each conversation is rendered as `LocalChatModel.generate` renders it (a trailing assistant
    message such as "Action:" primes the reply), and each action is scored as its continuation
    after `ACTION_SEPARATOR`.

    Example:
        `score_actions(chat, [messages], [["go north", "take key"]])[0].probs` -> `[0.31, 0.69]`
    """
    import time
    from dataclasses import replace

    t0 = time.perf_counter()
    scorer = ActionScorer.for_chat_model(chat)
    dists = scorer.score([chat.render(list(m)) for m in batch], candidates, temperature, normalisation)
    latency = time.perf_counter() - t0
    return [replace(d, prompt_tokens=chat.count_tokens(list(m)), latency_s=latency) for d, m in zip(dists, batch)]
