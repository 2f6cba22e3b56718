"""What the `crl` commands do, as plain functions that tests call directly."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from crl.agent.advisor import MemoryAdvisor
from crl.agent.auto_synthesis import make_auto_synthesis
from crl.agent.config import Settings
from crl.agent.llm.base import ChatModel, GenerationConfig
from crl.agent.llm.deferred import DeferredModel
from crl.agent.llm.embedded import EMBEDDED_MODEL_NAME
from crl.agent.llm.factory import EMBEDDED_LABEL, build_chat_model, choose_model
from crl.agent.preflight import check_run_request, needs_bank, see_added_tasks, uses_memory_in_loop
from crl.agent.random_actor import RandomActor
from crl.agent.redaction import redact_settings, redact_strings, redact_text
from crl.agent.reflect import make_reflector
from crl.agent.runner import EpisodePlan, Progress, Runner, RunnerStats
from crl.agent.runs import RunInfo, RunStore, RunSummary, find_run, new_run_id, run_stores, summarise
from crl.agent.session import DEFAULT_STOP, LoopConfig
from crl.agent.tool_setup import toolbox_for
from crl.memory.retrieval.retriever import Retriever
from crl.memory.storage.episode_log import EpisodeLog
from crl.memory.trajectory import Episode
from crl.prompts.render import templates_hash
from crl.tasks.evaluation import wilson_interval
from crl.tasks.registry import fold_seeds, get_task, make_env


@dataclass
class RunResult:
    """A finished (or interrupted-and-resumed) run: what was asked, what happened."""

    info: RunInfo
    episodes: list[Episode]
    stats: RunnerStats

    @property
    def summary(self) -> RunSummary:
        return summarise(self.episodes)

    def report(self) -> dict:
        """Success rate with a 95% interval, mean steps, invalid-action rate, throughput."""
        s = self.summary
        lo, hi = wilson_interval(s.successes, s.finished)
        steps = [len(e.steps) for e in self.episodes if e.finished]
        scores = [
            float(e.steps[-1].info["score"])
            for e in self.episodes
            if e.finished and e.steps and isinstance(e.steps[-1].info.get("score"), (int, float))
        ]
        wall = max(self.stats.wall_seconds, 1e-9)
        return {
            "run_id": self.info.run_id,
            "task": self.info.task,
            "model": self.info.model,
            "episodes": s.finished,
            "errored": s.errored,
            "error_reasons": dict(Counter(e.end_reason for e in self.episodes if e.status == "error").most_common(3)),
            "successes": s.successes,
            "success_rate": s.success_rate,
            "ci95": [lo, hi],
            "mean_steps": sum(steps) / len(steps) if steps else 0.0,
            "mean_score": sum(scores) / len(scores) if scores else None,
            "invalid_action_rate": s.invalid_steps / s.steps if s.steps else 0.0,
            "loop_breaks": sum(1 for e in self.episodes for st in e.steps if st.extra.loop_break is not None),
            "decided_by": dict(Counter(st.decided_by for e in self.episodes for st in e.steps)),
            **override_report(self.episodes),
            "prompt_tokens_per_call": self.stats.prompt_tokens / self.stats.model_calls
            if self.stats.model_calls
            else 0.0,
            "retrieval_ms_per_step": 1000 * self.stats.retrieval_seconds / self.stats.steps
            if self.stats.steps
            else 0.0,
            "steps_per_s": self.stats.steps / wall,
            "generated_tokens_per_s": self.stats.generated_tokens / wall,
            "wall_seconds": self.stats.wall_seconds,
        }


def override_report(episodes: list[Episode]) -> dict:
    """How often memory changed the posterior policy's choice away from the model's argmax, and how
    often the episodes where it did went on to succeed (its win rate); empty without such steps."""
    scored = [
        (e, st)
        for e in episodes
        if e.finished
        for st in e.steps
        if st.extra.policy is not None and st.extra.policy.posterior
    ]
    if not scored:
        return {}
    overrides = [(e, st) for e, st in scored if st.extra.policy.posterior.get("memory_changed_argmax")]
    episodes_overridden = {e.episode_id: e.success for e, _ in overrides}
    wins = sum(episodes_overridden.values())
    return {
        "scored_steps": len(scored),
        "memory_overrides": len(overrides),
        "override_rate": len(overrides) / len(scored),
        "override_win_rate": wins / len(episodes_overridden) if episodes_overridden else None,
    }


def uses_react(settings: Settings) -> bool:
    """Whether replies are `Thought:` + `Action:` (see `AgentSettings.reply_format`)."""
    fmt = settings.agent.reply_format
    if settings.agent.policy == "posterior":
        return False  # actions are scored right after the `Action:` priming, with no thought first
    if fmt == "auto":
        return choose_model(settings.llm).model != EMBEDDED_LABEL
    return fmt == "react"


def loop_config(settings: Settings, task: str, model: ChatModel | None = None) -> LoopConfig:
    """The loop's guards for `task` (the task's own step limit unless the settings set one)
    and the reply format, primed when `model` continues partial assistant messages."""
    spec = get_task(task)
    a, llm = settings.agent, settings.llm
    return LoopConfig(
        max_steps=a.max_steps or spec.max_steps,
        max_episode_tokens=a.max_episode_tokens,
        max_episode_seconds=a.max_episode_seconds,
        history_window=a.history_window,
        max_prompt_tokens=a.max_prompt_tokens,
        max_observation_tokens=a.max_observation_tokens,
        fuzzy_threshold=a.fuzzy_threshold,
        loop_breaker=a.loop_breaker,
        held_rewards=a.held_rewards,
        idle_actions=a.idle_actions,
        frontier=a.frontier,
        undos=a.undos,
        punished=a.punished,
        follow_through=a.follow_through,
        log_prompts=a.log_prompts,
        react=uses_react(settings),
        prefill=bool(getattr(model, "supports_prefill", False)),
        tool_choice=a.tool_choice,
        generation=GenerationConfig(
            max_new_tokens=llm.max_new_tokens,
            temperature=llm.temperature,
            top_p=llm.top_p,
            stop=list(DEFAULT_STOP),
            seed=llm.seed,
        ),
    )


def env_options(settings: Settings, task: str) -> dict:
    """Arguments the settings give a task's factory: where generated games live (under the data
    directory), and for a task an LLM judges, the judging model (the run's `llm` settings)."""
    spec = get_task(task)
    options = {"cache_dir": settings.home / "games"} if spec.uses_cache_dir else {}
    if spec.uses_judge:
        from crl.agent.judge import judge_options

        options |= judge_options(settings)
    return options


def settings_snapshot(settings: Settings) -> dict:
    """The settings as JSON-safe data with secrets masked (API keys, URL passwords: `agent.redaction`)."""
    return redact_settings(settings.model_dump(mode="json"))


def open_bank(settings: Settings, actor: str | None = None):
    """The experience bank of this data directory (embedded, or the server at memory.url)."""
    from crl.memory.bank import ExperienceBank

    return ExperienceBank(settings.memory_dir, runs_dir=settings.runs_dir, config=settings.memory, actor=actor)


def retrieval_for(settings: Settings):
    """The retrieval settings of a run: with no memory in prompts (`agent.memory = "off"`) only the
    nearest steps are fetched (for action values), not the cases, hints and rules nobody reads."""
    if settings.agent.memory != "off":
        return settings.retrieval
    return settings.retrieval.model_copy(update={"k_success": 0, "k_failure": 0, "k_hints": 0, "k_rules": 0})


def scoring_report(model: ChatModel) -> dict:
    """How `model` scored actions: a served model's method and counts, or the local log-likelihoods."""
    report = getattr(model, "scoring_report", None)
    return report() if callable(report) else {"method": "log-likelihood", "where": type(model).__name__}


def realign_memory(settings: Settings, bank) -> None:
    """Decay the credit that actors older than the promoted one left in the bank (once per
    promotion or rollback; `memory.actor_decay`), so experience credited under a weaker actor
    does not dominate the one now playing."""
    from crl.finetune.registry import AdapterRegistry, base_model_key
    from crl.memory.retrieval.actor_decay import decay_older_actors

    change = AdapterRegistry.of(settings.home).last_change(base_model_key(settings.llm.model))
    if change is not None and bank.config.actor_decay > 0:
        decay_older_actors(bank, change.key, change.model_actor, actor=f"{change.op}:{change.adapter or 'base'}")


def loaded_adapter(model: ChatModel) -> str | None:
    """The folder of the LoRA adapter `model` runs with (a local model, explicit or promoted), if any."""
    adapter = getattr(model, "adapter", None)
    return str(adapter) if adapter else None


def check_task(settings: Settings, task: str) -> None:
    """Build (and close) one environment of `task`, so a bad knob (`keyroom/key?n_rooms=x`) or a
    missing suite is reported before a model loads or a run is recorded."""
    env = make_env(task, **env_options(settings, task))
    try:
        env.close()
    except Exception:
        pass


def acting_model(settings: Settings) -> ChatModel:
    """The model a run acts with: built now, except under the random policy, which plays listed
    actions without one (`DeferredModel`: built only if a step or the reflector asks it)."""
    if settings.agent.policy != "random":
        return build_chat_model(settings)
    choice = choose_model(settings.llm)
    name = EMBEDDED_MODEL_NAME if choice.model == EMBEDDED_LABEL else choice.model
    openai = choice.backend == "openai"
    return DeferredModel(
        lambda: build_chat_model(settings),
        name,
        supports_prefill=not openai,
        supports_tools=openai,
        primes_tool_calls=not openai,
    )


def run_bank(settings: Settings, kind: str, run_id: str):
    """The bank a run of `kind` writes to or reads from (None when it uses none), opened before the
    model loads so a locked store or an unreachable server is refused at once."""
    return open_bank(settings, actor=f"run:{run_id}") if needs_bank(settings, kind) else None


def start_run(
    settings: Settings,
    task: str,
    episodes: int,
    fold: str = "train",
    seed_start: int = 0,
    kind: str = "run",
    model: ChatModel | None = None,
    progress: Progress | None = None,
    on_episode_end: Callable[[Episode], None] | None = None,
    seeds: Sequence[int] | None = None,
) -> RunResult:
    """Play `episodes` episodes of `task` on seeds of `fold` and log them as a new run
    (`seeds`: these seeds of the fold instead of `episodes` from `seed_start` on).

    Everything that can refuse the run is checked before the model loads: the counts, the task
    and its knobs, the bank (lock, server). A run that fails once recorded is marked "failed"
    in its `run.json`, with the reason.
    """
    check_run_request(episodes, seed_start)
    see_added_tasks(settings)
    get_task(task)
    seeds = list(seeds) if seeds is not None else fold_seeds(task, fold, episodes, seed_start)
    check_task(settings, task)
    run_id = new_run_id()
    bank = run_bank(settings, kind, run_id)
    try:
        model = model or acting_model(settings)
        info = RunInfo(
            run_id=run_id,
            kind=kind,
            task=task,
            seeds=seeds,
            model=getattr(model, "name", ""),
            adapter=loaded_adapter(model) or settings.llm.adapter,
            settings=settings_snapshot(settings) | {"fold": fold},
            prompt_templates=templates_hash(),
        )
        store = RunStore(settings.evals_dir if kind == "eval" else settings.runs_dir)
        store.create(info)
    except BaseException:
        if bank is not None:
            bank.close()
        raise
    plans = [EpisodePlan(f"{info.run_id}-{i:04d}", seed) for i, seed in enumerate(seeds)]
    return _execute(settings, store, info, plans, model, progress, on_episode_end, bank)


def resume_run(
    settings: Settings,
    run_id: str,
    model: ChatModel | None = None,
    progress: Progress | None = None,
    on_episode_end: Callable[[Episode], None] | None = None,
) -> RunResult:
    """Continue run `run_id`: finished episodes are kept, an interrupted one is replayed from
    its logged steps and continued, the rest are played, under the agent and retrieval
    settings the run started with. The bank is opened (and its lock taken) before the model loads."""
    store = find_run(run_stores(settings), run_id)
    info = store.load(run_id)
    store.check_free(info)
    started_in = ((info.settings or {}).get("memory") or {}).get("namespace")
    if started_in and started_in != settings.memory.namespace:
        raise ValueError(
            f"run {run_id} learns into memory namespace {started_in!r}: resume it with --namespace {started_in}"
        )
    settings = _as_started(settings, info)
    if model is None and info.adapter and not settings.llm.adapter:
        settings = settings.model_copy(update={"llm": settings.llm.model_copy(update={"adapter": info.adapter})})
    logged = {e.episode_id: e for e in store.episodes(run_id)}
    check_task(settings, info.task)
    bank = run_bank(settings, info.kind, run_id)
    try:
        model = model or acting_model(settings)
    except BaseException:
        if bank is not None:
            bank.close()
        raise
    plans = []
    for i, seed in enumerate(info.seeds):
        eid = f"{run_id}-{i:04d}"
        ep = logged.get(eid)
        if ep is None:
            plans.append(EpisodePlan(eid, seed))
        elif not ep.finished:
            plans.append(EpisodePlan(eid, seed, logged=ep))
        elif ep.status == "error":
            retry = EpisodePlan(eid, seed).retry()
            logged_retry = logged.get(retry.episode_id)
            if logged_retry is None:
                plans.append(retry)
            elif not logged_retry.finished:
                retry.logged = logged_retry
                plans.append(retry)
    info.status, info.error = "running", None
    try:
        store.claim(info)
    except BaseException:
        if bank is not None:
            bank.close()
        raise
    return _execute(settings, store, info, plans, model, progress, on_episode_end, bank)


def _as_started(settings: Settings, info: RunInfo) -> Settings:
    """The settings a run was started with, for what shapes its episodes (the agent loop's
    guards and format, retrieval), so a resumed run plays by the same rules."""
    started = info.settings or {}
    update = {
        key: type(getattr(settings, key)).model_validate(started[key])
        for key in ("agent", "retrieval")
        if key in started
    }
    return settings.model_copy(update=update)


def mark_ended(store: RunStore, info: RunInfo, exc: BaseException) -> None:
    """Record in `run.json` why a run stopped early: "interrupted" (Ctrl-C: `--resume` continues
    it) or "failed" with the reason (secrets masked)."""
    if isinstance(exc, KeyboardInterrupt):
        info.status, info.error = "interrupted", None
    else:
        info.status = "failed"
        info.error = redact_text(f"{type(exc).__name__}: {exc}")[:ERROR_CHARS]
    info.finished_at = time.time()
    try:
        store.save(info)
    except OSError:
        pass


ERROR_CHARS = 2000


def _execute(
    settings: Settings,
    store: RunStore,
    info: RunInfo,
    plans: list[EpisodePlan],
    model: ChatModel,
    progress: Progress | None,
    on_episode_end: Callable[[Episode], None] | None,
    bank=None,
) -> RunResult:
    try:
        stats = _play(settings, store, info, plans, model, progress, on_episode_end, bank)
    except BaseException as exc:
        mark_ended(store, info, exc)
        raise
    info.status = "finished"
    info.finished_at = time.time()
    store.save(info)
    return RunResult(info, store.episodes(info.run_id), stats)


def _play(
    settings: Settings,
    store: RunStore,
    info: RunInfo,
    plans: list[EpisodePlan],
    model: ChatModel,
    progress: Progress | None,
    on_episode_end: Callable[[Episode], None] | None,
    bank,
) -> RunnerStats:
    learns = info.kind != "eval"
    in_loop = uses_memory_in_loop(settings)
    toolbox = None
    try:
        advisor = None
        if bank is not None and learns:
            bank.sync()
            realign_memory(settings, bank)
        if bank is not None and in_loop:
            advisor = MemoryAdvisor(
                bank,
                Retriever(bank, retrieval_for(settings), seed=info.seeds[0] if info.seeds else 0),
                mode=settings.agent.memory,
                policy=settings.agent.policy,
                learn=learns,
            )
        if settings.agent.policy == "random":
            first_seed = info.seeds[0] if info.seeds else 0
            advisor = RandomActor(bank if learns else None, seed=(settings.llm.seed or 0) * 1_000_003 + first_seed)
        submit = bank.submit if bank is not None and learns and advisor is None else None
        reflector = make_reflector(settings, bank, model) if bank is not None and learns else None
        reflect = reflector.on_episode_end if reflector is not None else None
        synth = make_auto_synthesis(settings, bank, info.task) if learns else None
        synthesize = synth.on_episode_end if synth is not None else None
        hooks = [h for h in (submit, reflect, synthesize, on_episode_end) if h is not None]
        memory_advisor = advisor if isinstance(advisor, MemoryAdvisor) else None
        toolbox = toolbox_for(settings, info.task, model, store.path(info.run_id), memory_advisor)
        if toolbox is not None:
            info.tools = redact_strings(toolbox.report())  # an MCP URL may carry a token
            store.save(info)
        with EpisodeLog(store.log_path(info.run_id)) as log:
            runner = Runner(
                model=model,
                make_env=lambda: make_env(info.task, **env_options(settings, info.task)),
                log=log,
                config=loop_config(settings, info.task, model),
                run_id=info.run_id,
                task=info.task,
                adapter=info.adapter,
                on_episode_end=lambda ep: [h(ep) for h in hooks],
                advisor=advisor,
                posterior=settings.agent.posterior.policy() if settings.agent.policy == "posterior" else None,
                candidate_cap=settings.agent.posterior.candidates,
                tools=toolbox,
            )
            stats = runner.run(plans, parallel=settings.agent.parallel, progress=progress)
        if synth is not None:
            synth.finish()
            info.synthesis = synth.summary()
        info.scoring = scoring_report(model) if stats.scored_decisions else None
    finally:
        if toolbox is not None:
            toolbox.close()
        if bank is not None:
            bank.close()
    return stats
