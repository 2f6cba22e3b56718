"""The retriever: for each agent step, a context pack of cases, hints, rules and action values.

    retriever = Retriever(bank, settings.retrieval, seed=run_seed)
    packs = retriever.retrieve([RetrievalQuery(...) for each of the K running episodes])
    prompt_ids = packs[i].used_ids()       # credit them when episode i ends (memory.credit)

One call per lock-step serves all K parallel episodes: one embedding call for the K query
states (built with `state_text`, exactly as stored steps were embedded), then per task
family one batched Chroma query per kind and outcome (the independent ones at the same time on
`query_threads` threads, `memory.retrieval.fanout`). Candidates come only from the
query's family and never from quarantine. Each kind's pool (`pool`, default 50) is reranked
(`memory.rerank`: similarity, outcome, utility, value, recency, then MMR), and with
probability epsilon one slot goes to a novel or rarely used memory. Successes and failures
are ranked separately so the prompt always shows the contrast. When the task lists its
admissible actions, episodic control (`memory.episodic_control`) values them from the
`ec_neighbours` nearest stored steps.

Synthetic episodes and steps (made by `memory.synthesis`) count with their family's
`synthetic_weight` from the drift monitor (`memory.synthesis.drift`): 1 normally,
`memory.drift.drifted_synthetic_weight` while the family's synthetic experience has drifted
from the real one; it multiplies their rerank score and their episodic-control votes, and
the pack records it (`ContextPack.synthetic_weight`). It is looked up only for a family
whose candidates include a synthetic record.

Records are not cached between calls: each call reads the bank as it is now, so an episode
flushed into the bank at its end is retrievable by every call after that. Only the drift
verdict is cached, until the family's number of searchable steps changes.

Poisoning defences (on unless `retrieval.defences = false`; `memory.retrieval.influence`): with
`verified_only`, an episode or step that claims success without the environment having verified
it is no success case and no hint (and does not vote in episodic control): such claims live in a
bucket of their own (`u`, `memory.storage.store`) that these queries do not search, so a crowd of
them can neither push out the experience that counts nor change what an approximate search finds
near them; a query is still widened past any that reach it (`past_untrusted`); with
`sanitise_memory`, the records of a pack come back with their instruction-like spans replaced
(`scrubbed`), so no stored command reaches a prompt or the memory tools.

What is left out and why: unfinished episodes (a killed run; how they would have ended is
unknown) are neither failure cases nor hints; invalid actions are not shown as hints (they
still count against their action in episodic control).
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from crl.memory.records import RULE_SCOPE_ALL, StepRecord, state_text
from crl.memory.retrieval.action_roles import ActionRoles, roles_for
from crl.memory.retrieval.analogous_values import FrameSteps, analogous_values
from crl.memory.retrieval.analogy import PhraseSimilarity, action_frame
from crl.memory.retrieval.config import RetrievalConfig
from crl.memory.retrieval.credit import family_success_rate
from crl.memory.retrieval.cross_encoder import document_of, load_cross_encoder, relevance
from crl.memory.retrieval.episodic_control import ActionValue, VoteWeights, action_values, merge_analogous
from crl.memory.retrieval.fanout import Fanout
from crl.memory.retrieval.influence import claims_success, counts_as_success
from crl.memory.retrieval.rerank import Candidate, ScoredMemory, explore, rank
from crl.memory.storage.store import Hit, Located, bucket_of
from crl.memory.synthesis.drift import synthetic_weight
from crl.prompts.untrusted import is_instruction_like, strip_instructions

SLOTS = ("successes", "failures", "hints")


@dataclass
class RetrievalQuery:
    """The state of one running episode.

    Attributes:
        family: task family; candidates come from this family only.
        task: family/variant (recorded, not filtered on: skills transfer between variants).
        goal: the episode's goal text.
        observation: the current observation text.
        history: previous actions, oldest first (the bank's `history_steps` last are used).
        admissible: the actions the task accepts now, or None when it does not say.
        seed: the game's seed, when known: rules written for one game (a self-critique
            after a failure) reach only retries of that game.
        purpose: the sub-goal the episode works toward now (`memory.purpose.purpose_now`): with
            admissible actions, the pack's `purpose_neighbours` are the nearest steps stored while
            working toward it, in any task of the family.
    """

    family: str
    task: str
    goal: str
    observation: str
    history: list[str] = field(default_factory=list)
    admissible: list[str] | None = None
    seed: int | None = None
    purpose: str | None = None

    @property
    def variant(self) -> str | None:
        """The task variant (`key` of `keyroom/key`), None when the task names none."""
        name = self.task.split("?", 1)[0]
        return name.split("/", 1)[1] if "/" in name else None


@dataclass
class ContextPack:
    """What memory offers one episode at one step.

    Attributes:
        query_text: the state text the query was embedded by.
        successes / failures: episode records (with trajectories), best first.
        hints: step records: what was done in the most similar stored states.
        rules: rules in scope (family or 'all').
        action_values: admissible action -> `ActionValue`, best first (only when the
            admissible actions are known and memory has votes for some).
        explored: the slot list that got the epsilon slot this time, if any.
        baseline: the family's success rate the utility terms were relative to.
        neighbours: the nearest stored steps with their similarity, the evidence behind
            `action_values` (the posterior policy reads them; not logged).
        synthetic_weight: the factor synthetic records in this pack counted with (pass it to
            `memory_advantages` along with `neighbours`); 1 when none was retrieved.
        purpose / purpose_neighbours: the query's purpose and the nearest steps stored while
            working toward it (None when the query named none), for skill-conditioned values.
        roles: the task's action roles in the query's state (`memory.retrieval.action_roles`),
            None when the task declares none; pass it to `memory_advantages` with `neighbours`.
        analogous: with `ec_analogy`, the admissible actions' family-wide analogical values
            (`memory.retrieval.analogous_values`), already merged into `action_values`; pass them
            to `memory_advantages` with `neighbours`.
    """

    query_text: str
    successes: list[ScoredMemory] = field(default_factory=list)
    failures: list[ScoredMemory] = field(default_factory=list)
    hints: list[ScoredMemory] = field(default_factory=list)
    rules: list[ScoredMemory] = field(default_factory=list)
    action_values: dict[str, ActionValue] = field(default_factory=dict)
    explored: str | None = None
    baseline: float = 0.5
    neighbours: list[tuple[StepRecord, float]] = field(default_factory=list, repr=False)
    synthetic_weight: float = 1.0
    purpose: str | None = None
    purpose_neighbours: list[tuple[StepRecord, float]] | None = field(default=None, repr=False)
    roles: ActionRoles | None = field(default=None, repr=False)
    analogous: dict[str, ActionValue] = field(default_factory=dict, repr=False)

    def used_ids(self) -> list[str]:
        """Ids of the memories put into the prompt: successes, failures, hints and rules."""
        return [m.id for m in self.successes + self.failures + self.hints + self.rules]

    def to_dict(self) -> dict[str, Any]:
        """What was retrieved and why, JSON-ready, to log with the step (`crl explain` reads it);
        `synthetic_weight` only when synthetic records were down-weighted."""
        out = {
            "memories": [
                dict(m.to_dict(), slot=slot)
                for slot, items in (
                    ("success", self.successes),
                    ("failure", self.failures),
                    ("hint", self.hints),
                    ("rule", self.rules),
                )
                for m in items
            ],
            "action_values": {a: v.to_dict() for a, v in self.action_values.items()},
            "explored": self.explored,
            "baseline": round(self.baseline, 4),
        }
        if self.synthetic_weight != 1.0:
            out["synthetic_weight"] = self.synthetic_weight
        return out

    def is_empty(self) -> bool:
        """True when memory had nothing for this state."""
        return not (self.successes or self.failures or self.hints or self.rules or self.action_values)


@dataclass
class _FamilyHits:
    """What one family's batched queries brought back, one list per query."""

    by_slot: dict[str, list[list[Hit]]]  # candidates of successes, failures, hints, rules
    neighbours: list[list[Hit]]  # nearest steps, for episodic control
    embeddings: dict[str, np.ndarray]  # stored vectors of candidates, for MMR
    baseline: float  # the family's success rate
    synthetic_weight: float = 1.0  # the factor on synthetic candidates (the drift monitor's)


def slot_sizes(config: RetrievalConfig) -> dict[str, int]:
    """How many memories each slot list of a pack holds at most."""
    return {
        "successes": config.k_success,
        "failures": config.k_failure,
        "hints": config.k_hints,
        "rules": config.k_rules,
    }


def stored_embeddings(bank, hits: Sequence[Hit]) -> dict[str, np.ndarray]:
    """The stored vectors of retrieved records, for MMR: those the query returned, plus one read per
    collection for any hit without its vector."""
    out: dict[str, np.ndarray] = {}
    located: dict[str, Located] = {}
    for h in hits:
        vec = getattr(h, "embedding", None)
        if vec is not None:
            out[h.id] = np.asarray(vec, dtype=np.float32)
        elif h.id not in located:
            r = h.record
            located[h.id] = Located(r, bank.view.name_of(r.kind, r.family, bucket_of(r)), -1)
    if located:
        out.update(bank.view.embeddings_of(list(located.values())))
    return out


def rule_hits(
    bank, family: str, embeddings: np.ndarray, k: int, games: Sequence[tuple[str | None, int | None]] | None = None
) -> list[list[Hit]]:
    """The k rules of `family` (or 'all') nearest to each query vector; exact search, rules are few.

    `games` gives each query's (variant, seed): rules limited to a variant or one game
    (`RuleRecord.applies_to`) reach only queries about it; without `games`, only rules not
    limited that way are candidates.
    """
    rules = [
        (r, v)
        for r, v in bank.view.scan("rule", embeddings=True)
        if r.tier != "quarantine" and r.family in (family, RULE_SCOPE_ALL) and v is not None
    ]
    if not rules or k <= 0:
        return [[] for _ in range(len(embeddings))]
    sims = np.asarray(embeddings, dtype=np.float32) @ np.stack([v for _, v in rules]).T
    out = []
    for q, row in enumerate(sims):
        variant, seed = games[q] if games is not None else (None, None)
        allowed = np.array([r.applies_to(family, variant, seed) for r, _ in rules])
        order = [i for i in np.argsort(-row, kind="stable") if allowed[i]][:k]
        out.append([Hit(rules[i][0].id, float(row[i]), rules[i][0]) for i in order])
    return out


SCRUB_MEMO_SIZE = 4096
"""Retrieved records whose scrubbed copy a retriever remembers."""

MAX_WIDENING = 16
"""How many times its size a query is widened at most to see past unverified success claims."""


def usable(record, verified_only: bool) -> bool:
    """With `verified_only`, a success the environment did not verify is no case, no hint and no vote."""
    return not (verified_only and claims_success(record) and not counts_as_success(record))


def past_untrusted(fetch: Callable[[int], list[list[Hit]]], k: int, trusted: Callable[[Any], bool]) -> list[list[Hit]]:
    """Rows of up to `k` trusted hits: `fetch(k)`, widened (doubling, up to `MAX_WIDENING * k`) while a
    full row holds fewer than `k` trusted hits, the untrusted dropped. So records that cannot vote
    (unverified success claims crowding a state, as AgentPoison's do) do not push out the ones that
    can; one fetch when every hit is trusted."""
    wide = k
    rows = fetch(wide)
    while wide < k * MAX_WIDENING and any(
        len(row) >= wide and sum(1 for h in row if trusted(h.record)) < k for row in rows
    ):
        wide = min(wide * 2, k * MAX_WIDENING)
        rows = fetch(wide)
    return [[h for h in row if trusted(h.record)][:k] for row in rows]


def scrubbed(record):
    """A copy of a retrieved record whose shown text (goal, observation, action, thought, rule text,
    the trajectory's observations and actions) has its instruction-like spans replaced
    (`prompts.untrusted.strip_instructions`); the record itself when it holds none."""
    fields = [
        f for f in ("goal", "observation", "action", "thought", "text") if isinstance(getattr(record, f, None), str)
    ]
    update = {f: strip_instructions(getattr(record, f)) for f in fields if is_instruction_like(getattr(record, f))}
    trajectory = getattr(record, "trajectory", None)
    if trajectory and any(is_instruction_like(f"{s.observation}\n{s.action}") for s in trajectory):
        update["trajectory"] = [
            s.model_copy(
                update={"observation": strip_instructions(s.observation), "action": strip_instructions(s.action)}
            )
            for s in trajectory
        ]
    return record.model_copy(update=update) if update else record


class Retriever:
    """Builds context packs from an `ExperienceBank` (see the module docstring).

    Args:
        bank: the experience bank.
        config: `settings.retrieval` (defaults when None).
        seed: seeds the exploration RNG; the same seed and calls give the same packs.
        cross_encoder: a scorer with `predict(pairs)` for rerank='cross-encoder'; loaded from
            `config.cross_encoder_model` on first use when not given.
        clock: the time recency is measured from (tests pass a fixed one).
    """

    def __init__(
        self,
        bank,
        config: RetrievalConfig | None = None,
        seed: int = 0,
        cross_encoder: Any = None,
        clock: Callable[[], float] = time.time,
    ):
        self.bank = bank
        self.config = config or RetrievalConfig()
        self.rng = random.Random(seed)
        self.clock = clock
        self._cross_encoder = cross_encoder
        self.last_timing: dict[str, float] = {}
        self._scrub_memo: OrderedDict[int, tuple[Any, Any]] = OrderedDict()
        self.fanout = Fanout(self.config.query_threads)
        self.analogy = PhraseSimilarity(lambda texts: self.bank.embed(texts), self.config.ec_analogy_min_similarity)
        self.frames = FrameSteps(bank, self._trusted())

    @property
    def cross_encoder(self) -> Any:
        """The cross-encoder in use (loaded on first use)."""
        if self._cross_encoder is None:
            if not self.config.cross_encoder_model:
                raise ValueError(
                    "rerank = 'cross-encoder' needs retrieval.cross_encoder_model (a local CrossEncoder folder)"
                )
            self._cross_encoder = load_cross_encoder(self.config.cross_encoder_model)
        return self._cross_encoder

    def query_text(self, query: RetrievalQuery) -> str:
        """The state text of a query, as `ingest` embeds stored steps (same history length)."""
        h = self.bank.config.history_steps
        history = list(query.history[-h:]) if h else []
        return state_text(query.goal, query.observation, history)

    def retrieve(self, queries: Sequence[RetrievalQuery]) -> list[ContextPack]:
        """One context pack per query, in order (batched: one embedding call for all).

        `last_timing` afterwards holds the milliseconds spent embedding, querying the bank
        and ranking.
        """
        cfg = self.config
        t0 = time.perf_counter()
        texts = [self.query_text(q) for q in queries]
        if not texts:
            return []
        vectors = self.bank.embed(texts)
        t1 = time.perf_counter()
        by_family: dict[str, list[int]] = {}
        for i, q in enumerate(queries):
            by_family.setdefault(q.family, []).append(i)
        fetched = {
            family: self._fetch(
                family,
                vectors[idx],
                any(queries[i].admissible for i in idx),
                [(queries[i].variant, queries[i].seed) for i in idx],
            )
            for family, idx in by_family.items()
        }
        purposeful = self._purpose_neighbours(queries, vectors, by_family, fetched)
        t2 = time.perf_counter()
        now = self.clock()
        k_of = slot_sizes(cfg)
        packs = [ContextPack(t) for t in texts]
        for family, idx in by_family.items():
            got = fetched[family]
            valuing = cfg.ec_analogy and any(action_frame(a) for i in idx for a in queries[i].admissible or ())
            frames = self.frames.of(family) if valuing else None
            relevance_of = self._cross_encode([texts[i] for i in idx], got) if cfg.rerank == "cross-encoder" else None
            for row, i in enumerate(idx):
                pools: dict[str, list[ScoredMemory]] = {}
                chosen: dict[str, list[ScoredMemory]] = {}
                for slot, k in k_of.items():
                    cands = self._candidates(got, slot, row, relevance_of)
                    chosen[slot], pools[slot] = rank(cands, k, cfg, got.baseline, now, got.synthetic_weight)
                pack = packs[i]
                pack.rules = chosen.pop("rules")
                pack.explored = explore(chosen, pools, self.rng, cfg.epsilon)
                pack.successes, pack.failures, pack.hints = chosen["successes"], chosen["failures"], chosen["hints"]
                pack.baseline = got.baseline
                pack.synthetic_weight = got.synthetic_weight
                if queries[i].admissible:
                    near = [(h.record, h.similarity) for h in got.neighbours[row] if isinstance(h.record, StepRecord)]
                    pack.neighbours = near
                    pack.roles = roles_for(queries[i].task, queries[i].observation)
                    pack.action_values = action_values(
                        near,
                        queries[i].admissible,
                        cfg,
                        VoteWeights(synthetic=got.synthetic_weight),
                        roles=pack.roles,
                        analogy=self.analogy,
                    )
                    if frames is not None:
                        pack.analogous = analogous_values(
                            frames,
                            queries[i].admissible,
                            cfg,
                            self.analogy,
                            task=queries[i].task,
                            synthetic_weight=got.synthetic_weight,
                        )
                        pack.action_values = merge_analogous(pack.action_values, pack.analogous, cfg)
                    if queries[i].purpose:
                        pack.purpose = queries[i].purpose
                        pack.purpose_neighbours = purposeful[i]
        self._attach_trajectories([m for p in packs for m in p.successes + p.failures])
        if cfg.defence("sanitise_memory"):
            for pack in packs:
                for m in pack.successes + pack.failures + pack.hints + pack.rules:
                    m.record = self._scrubbed(m.record)
        t3 = time.perf_counter()
        self.last_timing = {
            "embed_ms": (t1 - t0) * 1e3,
            "bank_ms": (t2 - t1) * 1e3,
            "rank_ms": (t3 - t2) * 1e3,
            "total_ms": (t3 - t0) * 1e3,
        }
        return packs

    # ---- internals ----------------------------------------------------------------------

    def _trusted(self) -> Callable[[Any], bool]:
        """Whether a retrieved record may be a case, a hint or a vote (`usable` under this config)."""
        verified_only = self.config.defence("verified_only")
        return lambda record: usable(record, verified_only)

    def _scrubbed(self, record):
        """`scrubbed(record)`, remembered for the record object (a store's record cache hands the same
        object out again until the record is written)."""
        key = id(record)
        seen = self._scrub_memo.get(key)
        if seen is not None and seen[0] is record:
            self._scrub_memo.move_to_end(key)
            return seen[1]
        clean = scrubbed(record)
        self._scrub_memo[key] = (record, clean)
        if len(self._scrub_memo) > SCRUB_MEMO_SIZE:
            self._scrub_memo.popitem(last=False)
        return clean

    def _fetch(
        self,
        family: str,
        vectors: np.ndarray,
        valuing: bool,
        games: Sequence[tuple[str | None, int | None]] | None = None,
    ) -> "_FamilyHits":
        """Candidate hits of one family for a batch of query vectors, with their embeddings
        (`games`: each query's variant and seed, which decide the rules in scope)."""
        cfg, bank = self.config, self.bank
        empty: list[list[Hit]] = [[] for _ in range(len(vectors))]
        pool = min(cfg.pool, cfg.cross_encoder_pool) if cfg.rerank == "cross-encoder" else cfg.pool

        trusted = self._trusted()
        verified_only = cfg.defence("verified_only")
        mmr = cfg.mmr_lambda < 1.0
        wide_k = {slot: k >= 2 for slot, k in slot_sizes(cfg).items()}  # MMR only reorders a pick of two or more

        def episodes(outcome: str, k: int, slot: str) -> list[list[Hit]]:
            if not k:
                return empty
            rows = past_untrusted(
                lambda n: bank.query_episodes(
                    family,
                    embeddings=vectors,
                    k=n,
                    where_outcome=outcome,
                    with_embeddings=mmr and wide_k[slot],
                    verified_only=verified_only,
                ),
                pool,
                trusted,
            )
            return [[h for h in row if h.record.outcome == outcome] for row in rows]

        k_steps = max(pool if cfg.k_hints else 0, cfg.ec_neighbours if valuing else 0)

        def nearest_steps() -> list[list[Hit]]:
            if not k_steps:
                return empty
            return past_untrusted(
                lambda n: bank.query_steps(
                    family,
                    embeddings=vectors,
                    k=n,
                    with_embeddings=mmr and wide_k["hints"],
                    verified_only=verified_only,
                ),
                k_steps,
                trusted,
            )

        steps, successes, failures, rules = self.fanout.run(
            [
                nearest_steps,
                lambda: episodes("success", cfg.k_success, "successes"),
                lambda: episodes("failure", cfg.k_failure, "failures"),
                lambda: rule_hits(bank, family, vectors, pool, games) if cfg.k_rules else empty,
            ]
        )
        by_slot = {
            "successes": successes,
            "failures": failures,
            "hints": [
                [
                    h
                    for h in row[:pool]
                    if h.record.episode_outcome != "unfinished" and h.record.valid and trusted(h.record)
                ]
                for row in steps
            ]
            if cfg.k_hints
            else empty,
            "rules": rules,
        }
        wide = [slot for slot, is_wide in wide_k.items() if is_wide and slot != "rules"]
        diverse = [h for slot in wide for row in by_slot[slot] for h in row]
        embeddings = stored_embeddings(bank, diverse) if mmr and diverse else {}
        baseline = family_success_rate(bank, family) if cfg.use_utility else 0.5
        experience = (by_slot["successes"], by_slot["failures"], steps)
        synthetic = any(h.record.source == "synthetic" for lists in experience for row in lists for h in row)
        weight = synthetic_weight(bank, family) if synthetic else 1.0
        return _FamilyHits(by_slot, steps, embeddings, baseline, weight)

    def _purpose_neighbours(
        self,
        queries: Sequence[RetrievalQuery],
        vectors: np.ndarray,
        by_family: dict[str, list[int]],
        fetched: dict[str, _FamilyHits],
    ) -> dict[int, list[tuple[StepRecord, float]]]:
        """Per query with a purpose and admissible actions, its `ec_neighbours` nearest steps stored while
        working toward that purpose, so the steps of other skills never crowd them out; unverified success
        claims are passed over as in `_fetch`.

        The family's nearest steps (already fetched, trusted, nearest first) answer exactly when
        `ec_neighbours` of them have the purpose; the other queries ask the bank, one batched query per
        family and purpose (steps less similar than `ec_min_similarity` do not vote, so are not sought).
        """
        cfg = self.config
        k = cfg.ec_neighbours
        out: dict[int, list[tuple[StepRecord, float]]] = {}
        groups: dict[tuple[str, str], list[int]] = {}
        for family, idx in by_family.items():
            for row, i in enumerate(idx):
                q = queries[i]
                if not (q.purpose and q.admissible):
                    continue
                near = [
                    (h.record, h.similarity)
                    for h in fetched[family].neighbours[row]
                    if isinstance(h.record, StepRecord) and h.record.purpose == q.purpose
                ]
                if len(near) >= k:
                    out[i] = near[:k]
                else:
                    groups.setdefault((family, q.purpose), []).append(i)
        trusted = self._trusted()
        verified_only = cfg.defence("verified_only")
        for (family, purpose), idx in groups.items():
            rows = past_untrusted(
                lambda n, family=family, purpose=purpose, idx=idx: self.bank.query_steps(
                    family,
                    embeddings=vectors[idx],
                    k=n,
                    purpose=purpose,
                    min_similarity=cfg.ec_min_similarity,
                    verified_only=verified_only,
                ),
                k,
                trusted,
            )
            for i, row in zip(idx, rows):
                out[i] = [(h.record, h.similarity) for h in row if isinstance(h.record, StepRecord)]
        return out

    def _candidates(self, got: "_FamilyHits", slot: str, row: int, relevance_of) -> list[Candidate]:
        out = []
        for h in got.by_slot[slot][row]:
            sim = h.similarity if relevance_of is None or slot == "rules" else relevance_of[(row, h.id)]
            out.append(Candidate(h.record, sim, got.embeddings.get(h.id)))
        return out

    def _cross_encode(self, texts: list[str], got: "_FamilyHits") -> dict[tuple[int, str], float]:
        """Cross-encoder relevance of every (query, candidate) pair of one family, one batch."""
        keys: list[tuple[int, str]] = []
        pairs: list[tuple[str, str]] = []
        for row, text in enumerate(texts):
            seen: set[str] = set()
            for slot in SLOTS:
                for h in got.by_slot[slot][row]:
                    if h.id not in seen:
                        seen.add(h.id)
                        keys.append((row, h.id))
                        pairs.append((text, document_of(h.record)))
        scores = relevance(self.cross_encoder, pairs)
        return {k: float(s) for k, s in zip(keys, scores)}

    def _attach_trajectories(self, chosen: list[ScoredMemory]) -> None:
        """Swap the chosen episodes' records for full ones (with trajectories), one read."""
        ids = list(dict.fromkeys(m.id for m in chosen))
        if not ids:
            return
        full = self.bank.view.locate(ids, documents=True)
        for m in chosen:
            found = full.get(m.id)
            if found is not None:
                m.record = found.record
