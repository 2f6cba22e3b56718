"""Play many episodes at once: K environments in lock-step, their prompts sent to the model
as one batch, every step appended to the run's episode log as it happens."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from crl.agent.advisor import MemoryAdvisor
from crl.agent.candidates import DEFAULT_CAP, CandidateSet, ListsValidActions, build_candidates
from crl.agent.directed_exploration import explore_first, explored_openings
from crl.agent.llm.base import BackendRefused, BatchError, ChatModel, Completion, LLMError, Message
from crl.agent.parsing import parse_reply
from crl.agent.posterior import PosteriorPolicy, decide, decision_rng
from crl.agent.random_actor import RandomActor
from crl.agent.redaction import redact_text
from crl.agent.session import EpisodeSession, LoopConfig
from crl.agent.tool_choice import ToolPrime, by_tool_name, call_opening, choose_tool, primed, tools_tried_here
from crl.memory.actors import actor_key
from crl.memory.purpose import purpose_now
from crl.memory.retrieval.episodic_control import VoteWeights, memory_advantages
from crl.memory.retrieval.retriever import RetrievalQuery
from crl.memory.storage.episode_log import EpisodeLog
from crl.memory.trajectory import Episode, MemoryOffer, Step
from crl.tasks.actions import normalise_action
from crl.tasks.base import TextEnv

if TYPE_CHECKING:
    from crl.agent.llm.scoring import ActionDistribution
    from crl.agent.tools.toolbox import Toolbox

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelFailure:
    """A prompt the model gave no reply or scores for (after its backend's retries): the step
    is recorded as failed with `reason` and the episode ends in an error (retried once)."""

    reason: str


class Progress(Protocol):
    """What the runner reports while it works (the CLI draws a progress bar from it)."""

    def episode_done(self, episode: Episode) -> None: ...

    def steps_done(self, n: int) -> None: ...


@dataclass
class EpisodePlan:
    """One episode to play: its id and seed, and the steps already logged when resuming."""

    episode_id: str
    seed: int
    logged: Episode | None = None
    is_retry: bool = False

    def retry(self) -> "EpisodePlan":
        """The one retry of an episode that ended in an environment error."""
        return EpisodePlan(self.episode_id + RETRY_SUFFIX, self.seed, is_retry=True)


RETRY_SUFFIX = "-retry"
MAX_FAILED_CALLS = 3


@dataclass
class RunnerStats:
    """Totals of one `Runner.run` call."""

    steps: int = 0
    generated_tokens: int = 0
    prompt_tokens: int = 0
    model_calls: int = 0
    model_seconds: float = 0.0
    retrieval_seconds: float = 0.0
    scored_decisions: int = 0
    wall_seconds: float = 0.0
    episodes: list[Episode] = field(default_factory=list)


class Runner:
    """Runs episodes of one task with one model, `parallel` at a time.

    Args:
        model: the chat model; one `generate` call per lock-step for all active episodes.
        make_env: builds an environment; called at most `parallel` times and reused.
        log: the run's episode log; every start, step and end is appended and flushed.
        config: the loop's guards and prompt shape.
        run_id, task, model_name, adapter: copied onto every episode record.
        on_episode_end: called with each finished episode (memory ingestion hooks in here).
        advisor: memory in the loop (retrieval, prompt items, policy, credit); None for none.
        posterior: act by scoring the listed actions and choosing from the posterior over the
            model's probabilities and memory's advantages (`agent.posterior`); None generates.
            Where the observation lists no actions but the environment lists its valid ones
            (`ListsValidActions`, ScienceWorld), the model's free reply is generated first and
            the scored actions are a candidate set built from it and memory (`agent.candidates`).
        candidate_cap: the most candidates in such a set (`agent.posterior.candidates`).
        tools: the run's tools: every episode is tool-using (`agent.tool_turns`); with native
            calling their definitions go with every generation request.
    """

    def __init__(
        self,
        model: ChatModel,
        make_env: Callable[[], TextEnv],
        log: EpisodeLog,
        config: LoopConfig,
        run_id: str,
        task: str,
        model_name: str = "",
        adapter: str | None = None,
        on_episode_end: Callable[[Episode], None] | None = None,
        advisor: MemoryAdvisor | RandomActor | None = None,
        posterior: PosteriorPolicy | None = None,
        candidate_cap: int = DEFAULT_CAP,
        tools: Toolbox | None = None,
    ):
        if tools is not None and tools.native:
            generation = replace(config.generation, tools=list(tools.definitions()), stop=[])
            config = replace(config, generation=generation)
        self.tools = tools
        self.model = model
        self.make_env = make_env
        self.log = log
        self.config = config
        self.run_id = run_id
        self.task = task
        self.model_name = model_name or getattr(model, "name", "")
        self.adapter = adapter
        self.actor = actor_key(self.model_name, adapter)
        self.on_episode_end = on_episode_end
        self.advisor = advisor
        self.posterior = posterior
        self.candidate_cap = candidate_cap
        self._failed_calls = 0

    def count_text_tokens(self, text: str) -> int:
        """Tokens of `text` as the model counts them (without chat overhead)."""
        return self.model.count_tokens([{"role": "user", "content": text}])

    def _start(self, env: TextEnv, plan: EpisodePlan) -> EpisodeSession:
        fresh = plan.logged is None
        episode = Episode(
            episode_id=plan.episode_id,
            run_id=self.run_id,
            task=self.task,
            seed=plan.seed,
            goal="",
            model=self.model_name,
            adapter=self.adapter,
        )
        if not fresh:
            episode.started_at = plan.logged.started_at
        session = EpisodeSession(
            env, episode, self.config, self.count_text_tokens, self.model.count_tokens, tools=self.tools
        )
        session.plan = plan
        if fresh:
            self.log.start(episode)
        elif not session.finished:
            session.replay(plan.logged.steps)
        return session

    def run(self, plans: Iterable[EpisodePlan], parallel: int = 1, progress: Progress | None = None) -> RunnerStats:
        """Play every planned episode; returns the finished episodes in completion order."""
        stats = RunnerStats()
        t0 = time.monotonic()
        pending = list(plans)
        pending.reverse()
        envs = [self.make_env() for _ in range(max(1, min(parallel, len(pending))))]
        active: list[EpisodeSession | None] = [None] * len(envs)
        try:
            while True:
                for slot, env in enumerate(envs):
                    while active[slot] is None and pending:
                        session = self._start(env, pending.pop())
                        if session.finished:
                            self._end(session, stats, progress, pending)
                        else:
                            active[slot] = session
                live = [(i, s) for i, s in enumerate(active) if s is not None]
                if not live:
                    break
                valid = [self._valid_now(s) for _, s in live]
                tool_names = [s.tools.names() if self._scores_tools(s) else None for _, s in live]
                packs = self._retrieve([s for _, s in live], stats, [v or t for v, t in zip(valid, tool_names)])
                listed = [self._actions(s) for _, s in live]
                asks = [self.advisor is None or self.advisor.wants_model(actions) for actions in listed]
                scored = [ask and self.scores(actions) for ask, actions in zip(asks, listed)]
                prompts = [
                    s.messages(self.advisor.prompt_items(pack) if self.advisor else ()) if ask else None
                    for (_, s), pack, ask in zip(live, packs, asks)
                ]
                primes = self._prime_tools([s for _, s in live], prompts, packs, stats)
                prompts = [p if pr is None else pr.messages for p, pr in zip(prompts, primes)]
                generating = [ask and not sc for ask, sc in zip(asks, scored)]
                replies = iter(self._generate([p for p, g in zip(prompts, generating) if g], stats))
                generated = [next(replies) if g else None for g in generating]
                generated = [
                    pr.completed(g) if pr is not None and isinstance(g, Completion) else g
                    for g, pr in zip(generated, primes)
                ]
                candidates = [
                    self._candidate_set(s, pack, v, reply) if v is not None and isinstance(reply, Completion) else None
                    for (_, s), pack, v, reply in zip(live, packs, valid, generated)
                ]
                listed = [c.actions if c is not None else a for c, a in zip(candidates, listed)]
                scored = [sc or c is not None for sc, c in zip(scored, candidates)]
                to_score = [(p, a) for p, a, sc in zip(prompts, listed, scored) if sc]
                dists = iter(self._score([p for p, _ in to_score], [a for _, a in to_score], stats))
                for (slot, session), pack, sc, admissible, reply, cands, prime in zip(
                    live, packs, scored, listed, generated, candidates, primes
                ):
                    choose = memory = None
                    completion = reply
                    if sc:
                        dist = next(dists)
                        if isinstance(dist, ModelFailure):
                            completion = dist
                        else:
                            completion, choose = self._posterior_step(
                                session, pack, admissible, dist, reply if cands else None, cands
                            )
                    if self.advisor is not None and pack is not None:
                        memory = MemoryOffer.from_dict(pack.to_dict())
                    if isinstance(completion, ModelFailure):
                        step = session.model_failed(completion.reason, memory=memory)
                        completion = None
                    else:
                        if self.advisor is not None and choose is None:
                            choose = self.advisor.chooser(pack, admissible, session.tried_here())
                        step = session.apply(completion, choose=choose, memory=memory)
                        if prime is not None:
                            step.extra.policy, step.decided_by = prime.decision, prime.decision.decided_by
                    self._record(session, step, completion, stats)
                    if session.finished:
                        self._end(session, stats, progress, pending)
                        active[slot] = None
                if progress is not None:
                    progress.steps_done(len(live))
        finally:
            for env in envs:
                try:
                    env.close()
                except Exception:
                    pass
            stats.wall_seconds = time.monotonic() - t0
        return stats

    def _scores_tools(self, session: EpisodeSession) -> bool:
        """Whether this tool step's tool is chosen by scoring the tool names (`agent.tool_choice`)."""
        return bool(
            session.tools is not None
            and not session.tools.native
            and session.config.prefill
            and not session.config.react
            and callable(getattr(self.model, "score_actions", None))
            and (
                session.config.tool_choice == "score"
                or (session.config.tool_choice == "auto" and getattr(self.model, "primes_tool_calls", False))
            )
        )

    def _prime_tools(
        self, sessions: list[EpisodeSession], prompts: list, packs: list, stats: RunnerStats
    ) -> list[ToolPrime | None]:
        """For each tool step that scores its tools: the tool chosen (the model's argmax, or the
        posterior with memory's advantages of each tool) and the prompt primed with its opening;
        None for the other sessions, and where scoring failed (`_score`: the model then writes the
        call; a refused backend stops the run as it does for games)."""
        out: list[ToolPrime | None] = [None] * len(sessions)
        rows = [i for i, (s, p) in enumerate(zip(sessions, prompts)) if p is not None and self._scores_tools(s)]
        if not rows:
            return out
        temperature = self.posterior.temperature if self.posterior is not None else 1.0
        dists = self._score([prompts[i] for i in rows], [sessions[i].tools.names() for i in rows], stats, temperature)
        advisor = self.advisor if isinstance(self.advisor, MemoryAdvisor) else None
        for i, dist in zip(rows, dists):
            if isinstance(dist, ModelFailure):
                continue
            session, pack = sessions[i], packs[i]
            advantages: dict = {}
            near = by_tool_name(pack.neighbours) if pack is not None and pack.neighbours else []
            if self.posterior is not None and advisor is not None and near:
                config = self.posterior.config
                advantages = memory_advantages(
                    near,
                    list(dist.actions),
                    advisor.retriever.config,
                    task=session.episode.task if config.same_task else None,
                    untried=config.untried,
                    weights=self._vote_weights(session, pack.synthetic_weight),
                    analogy=advisor.analogy,
                )
            draw = self.posterior.config.draw if self.posterior is not None else 0
            rng = decision_rng(
                session.episode.task, session.episode.seed, len(session.episode.steps), "tool", draw=draw
            )
            avoid = (
                tools_tried_here(session.episode.steps, session.observation.text)
                if session.config.loop_breaker
                else set()
            )
            tool, decision = choose_tool(dist.as_mapping(), advantages, self.posterior, rng, avoid)
            if decision.decided_by == "memory":
                session.used_memory.extend(step.id for step, _ in near if step.action == tool)
            parameters = session.tools.parameters()[tool]
            opening = call_opening(tool, parameters)
            only = len(parameters.get("properties") or {}) == 1
            out[i] = ToolPrime(tool, opening, primed(prompts[i], opening), decision, only)
            session.tokens_used += dist.prompt_tokens
        return out

    def _actions(self, session: EpisodeSession) -> list[str] | None:
        """The actions the policy may choose from: those the observation lists, or for the
        random baseline, those a task keeps out of the prompt (`valid_actions`, ScienceWorld)."""
        listed = session.observation.admissible_actions
        if listed or getattr(self.advisor, "policy", None) != "random":
            return listed
        hidden = getattr(session.env, "valid_actions", None)
        return hidden() if callable(hidden) else None

    def _valid_now(self, session: EpisodeSession) -> list[str] | None:
        """The environment's valid actions when this step is scored over a candidate set (the
        posterior policy, a model that scores, no admissible list, an environment that lists
        its valid actions), else None."""
        if self.posterior is None or session.observation.admissible_actions or session.tools is not None:
            return None
        if not callable(getattr(self.model, "score_actions", None)) or not isinstance(session.env, ListsValidActions):
            return None
        if self.advisor is not None and not self.advisor.wants_model(None):
            return None
        return session.env.valid_actions() or None

    def _candidate_set(self, session: EpisodeSession, pack, valid: list[str], reply: Completion) -> CandidateSet:
        """The actions to score: the free reply's nearest valid actions plus memory's (`agent.candidates`)."""
        parsed = parse_reply(session.reply_prefix + reply.text)
        memory: list[str] = []
        if isinstance(self.advisor, MemoryAdvisor) and pack is not None:
            config = self.posterior.config
            values = self.advisor.advantages(
                pack, valid, session.episode.task, config.same_task, None, self._vote_weights(session)
            )
            memory = sorted(values, key=lambda a: (-values[a].advantage, -values[a].support, a))
        return build_candidates(
            valid, parsed.action or parsed.raw_action, memory, session.tried_here(), self.candidate_cap
        )

    def _retrieve(
        self, sessions: list[EpisodeSession], stats: RunnerStats, valid: Sequence[list[str] | None] = ()
    ) -> list:
        """One batched retrieval for every running episode (None each without memory); `valid`
        stands in for a missing admissible list, so memory's nearest steps are fetched there too."""
        if self.advisor is None:
            return [None] * len(sessions)
        t = time.monotonic()
        packs = self.advisor.packs(
            [
                RetrievalQuery(
                    family=s.episode.family,
                    task=s.episode.task,
                    goal=s.observation.goal,
                    observation=s.observation.text,
                    history=s.recent_actions(),
                    admissible=s.observation.admissible_actions or v,
                    seed=s.episode.seed,
                    purpose=self._purpose(s),
                )
                for s, v in zip(sessions, list(valid) or [None] * len(sessions))
            ]
        )
        stats.retrieval_seconds += time.monotonic() - t
        return packs

    def _vote_weights(self, session: EpisodeSession, synthetic: float = 1.0) -> VoteWeights:
        """The factors on memory's votes in this episode: by actor and world, as the posterior's
        settings say (`VoteWeights`)."""
        world = (session.episode.task, session.episode.seed)
        return self.posterior.config.vote_weights(self.actor, world, synthetic)

    def _purpose(self, session: EpisodeSession) -> str | None:
        """The sub-goal the episode works toward now, when the posterior conditions memory on it
        (`agent.posterior.condition = "purpose"` with `same_task`), else None."""
        config = self.posterior.config if self.posterior is not None else None
        if config is None or not config.same_task or config.condition != "purpose":
            return None
        return purpose_now(session.episode.task, session.reached_so_far())

    def scores(self, actions: Sequence[str] | None) -> bool:
        """Whether this step is decided by scoring the listed actions (the posterior policy,
        a task that lists its actions, a model that can score them)."""
        return bool(self.posterior is not None and actions and callable(getattr(self.model, "score_actions", None)))

    def _score(
        self,
        batch: list[list[Message]],
        candidates: list[Sequence[str]],
        stats: RunnerStats,
        temperature: float | None = None,
    ) -> list[ActionDistribution | ModelFailure]:
        """The model's distribution over each prompt's candidates (softmax at `temperature`, by
        default the posterior's); a `ModelFailure` for each prompt of a batch whose scoring failed
        after the backend's retries."""
        if not batch:
            return []
        temperature = self.posterior.temperature if temperature is None else temperature
        t = time.monotonic()
        try:
            dists = self.model.score_actions(batch, [list(c) for c in candidates], temperature)
        except BackendRefused:
            raise
        except BatchError as exc:
            log.warning("%s", redact_text(str(exc)))
            partial = [
                d if d is not None else ModelFailure(redact_text(e or str(exc)))
                for d, e in zip(exc.results, exc.errors)
            ]
            if all(isinstance(d, ModelFailure) for d in partial):
                self._count_failure(partial[0].reason)
            else:
                self._failed_calls = 0
                stats.scored_decisions += sum(not isinstance(d, ModelFailure) for d in partial)
            return partial
        except LLMError as exc:
            log.warning("scoring failed for %d prompt(s): %s", len(batch), redact_text(str(exc)))
            self._count_failure(redact_text(str(exc)))
            return [ModelFailure(redact_text(str(exc)))] * len(batch)
        finally:
            stats.model_seconds += time.monotonic() - t
        self._failed_calls = 0
        stats.scored_decisions += len(batch)
        if len(dists) != len(batch):
            raise RuntimeError(f"model scored {len(dists)} prompts for a batch of {len(batch)}")
        return dists

    def _posterior_step(
        self,
        session: EpisodeSession,
        pack,
        admissible: Sequence[str],
        dist: ActionDistribution,
        reply: Completion | None = None,
        candidates: CandidateSet | None = None,
    ) -> tuple[Completion, Callable]:
        """The model's scored distribution as a reply (its argmax, valid by construction) and the
        posterior policy that combines it with memory's advantages in this state.

        Over a candidate set, the reply is the free reply the set was built from (its tokens and
        the scoring's counted together), and the decision's record gains a "candidates" entry."""
        advisor = self.advisor if isinstance(self.advisor, MemoryAdvisor) else None
        config = self.posterior.config
        advantages = (
            advisor.advantages(
                pack,
                admissible,
                session.episode.task,
                config.same_task,
                config.untried,
                self._vote_weights(session),
            )
            if advisor
            else {}
        )
        prefix = "" if session.reply_prefix else "Action:"
        completion = Completion(
            text=f"{prefix} {dist.best}",
            prompt_tokens=dist.prompt_tokens,
            latency_s=dist.latency_s,
            finish_reason="scored",
        )
        if reply is not None:
            completion = Completion(
                text=reply.text,
                prompt_tokens=reply.prompt_tokens + dist.prompt_tokens,
                completion_tokens=reply.completion_tokens,
                latency_s=reply.latency_s + dist.latency_s,
                finish_reason="scored",
            )
        tried = session.tries_here()
        held = session.held_rewards()
        revisits = session.revisits()
        ways_out = session.ways_out()
        undoes = session.undoes()
        punished = session.punished()
        ahead = session.ahead()
        moves = session.listed_moves() if ahead else set()
        rng = self.posterior.config.rng(session.episode.task, session.episode.seed, len(session.episode.steps))

        first = (
            self._explore_first(session, dist.actions, advantages, tried, punished) if config.explore_enabling else []
        )

        def choose(_model_action: str | None) -> tuple[str, str, str, dict]:
            decision = decide(
                dist.as_mapping(),
                advantages,
                self.posterior.config,
                rng,
                avoid=tried,
                held=held,
                first=first,
                revisits=revisits,
                ways_out=ways_out,
                undoes=undoes,
                ahead=ahead,
                moves=moves,
                punished=punished,
            )
            if advisor is not None and decision.chosen in advantages:
                session.used_memory.extend(
                    advisor.evidence_ids(pack, decision.chosen, session.episode.task, self._vote_weights(session))
                )
            record = decision.to_dict()
            if candidates is not None:
                record["candidates"] = candidates.to_dict()
            return decision.chosen, decision.decided_by, decision.reason, record

        return completion, choose

    @staticmethod
    def _explore_first(session: EpisodeSession, actions, advantages, tried, punished) -> list[str]:
        """What directed exploration offers first in this state (`agent.directed_exploration`)."""
        if not advantages:
            return []
        steps = session.episode.steps
        taken = {normalise_action(s.action) for s in steps}
        return explore_first(actions, advantages, explored_openings(steps), tried, taken, punished)

    def _generate(self, batch: list[list[Message]], stats: RunnerStats) -> list[Completion | ModelFailure]:
        """One reply per prompt; a `ModelFailure` for each prompt that got none after the
        backend's retries (a `BatchError` keeps the replies that did come back)."""
        if not batch:
            return []
        t = time.monotonic()
        try:
            completions: list = self.model.generate(batch, self.config.generation)
        except BackendRefused:
            raise
        except BatchError as exc:
            log.warning("%s", redact_text(str(exc)))
            completions = [
                c if c is not None else ModelFailure(redact_text(e or str(exc)))
                for c, e in zip(exc.results, exc.errors)
            ]
        except LLMError as exc:
            log.warning("generation failed for %d prompt(s): %s", len(batch), redact_text(str(exc)))
            completions = [ModelFailure(redact_text(str(exc)))] * len(batch)
        finally:
            stats.model_seconds += time.monotonic() - t
        if all(isinstance(c, ModelFailure) for c in completions):
            self._count_failure(completions[0].reason)
        else:
            self._failed_calls = 0
        if len(completions) != len(batch):
            raise RuntimeError(f"model returned {len(completions)} replies for a batch of {len(batch)}")
        return completions

    def _count_failure(self, reason: str) -> None:
        """Count a model call in which no prompt got an answer; stop the run (resumable) after
        `MAX_FAILED_CALLS` in a row, rather than erroring every remaining episode."""
        self._failed_calls += 1
        if self._failed_calls >= MAX_FAILED_CALLS:
            raise LLMError(
                f"the model failed {self._failed_calls} calls in a row, so the run stopped; the last: {reason}. "
                f"Continue it with `crl run --resume {self.run_id}` once the model answers again"
            )

    def _record(self, session: EpisodeSession, step: Step, completion: Completion | None, stats: RunnerStats) -> None:
        self.log.step(session.episode.episode_id, step)
        stats.steps += 1
        if completion is not None:
            stats.model_calls += 1
            stats.generated_tokens += completion.completion_tokens
            stats.prompt_tokens += completion.prompt_tokens

    def _end(
        self, session: EpisodeSession, stats: RunnerStats, progress: Progress | None, pending: list[EpisodePlan]
    ) -> None:
        self.log.end(session.episode)
        if self.advisor is not None:
            self.advisor.episode_end(session.episode, session.used_memory)
        if session.episode.status == "error" and not session.plan.is_retry:
            pending.append(session.plan.retry())
            return
        stats.episodes.append(session.episode)
        if self.on_episode_end is not None:
            self.on_episode_end(session.episode)
        if progress is not None:
            progress.episode_done(session.episode)
