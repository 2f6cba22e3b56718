"""One live episode: builds the prompt for the next step, applies the model's reply, enforces
the guards. The runner drives many sessions at once."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from crl.agent.llm.base import Completion, GenerationConfig, Message
from crl.agent.parsing import normalise, parse_reply
from crl.agent.place_map import PlaceMap
from crl.memory.purpose import given_subgoals, reached_subgoals
from crl.memory.retrieval.analogy import action_frame
from crl.memory.trajectory import Episode, LoopBreak, MemoryOffer, PolicyDecision, Step, StepExtra
from crl.prompts.agent_prompt import MessageCount, PromptBudget, PromptFormat, PromptReport, assemble_prompt
from crl.prompts.budget import BudgetItem, TokenCount
from crl.prompts.state import PromptHistory
from crl.tasks.actions import normalise_action
from crl.tasks.base import Observation, TextEnv
from crl.tasks.game_identity import game_identity
from crl.tasks.places import places_of
from crl.tasks.situations import (
    declared_idle_actions,
    declared_no_ops,
    last_paragraph,
    repeat_undoes_reward,
    situation_of,
)
from crl.tasks.toggles import declared_toggles, undo_never_rewarded

if TYPE_CHECKING:
    from crl.agent.tools.toolbox import Toolbox

HELD_TOLERANCE = 1e-9
"""Slack when comparing an episode's return with what it was after a rewarded action (float sums)."""
DEFAULT_STOP = ["\n\n", "\nThought:", "\nObservation", "\nGoal:", "\n>"]


@dataclass
class LoopConfig:
    """Guards and prompt shape of the agent loop (see `AgentSettings` for the meaning)."""

    max_steps: int = 20
    max_episode_tokens: int = 200_000
    max_episode_seconds: float = 600.0
    history_window: int = 4
    max_prompt_tokens: int = 1024
    max_observation_tokens: int = 400
    fuzzy_threshold: float = 0.75
    loop_breaker: bool = True
    held_rewards: bool = True
    idle_actions: bool = True
    frontier: bool = True
    undos: bool = True
    punished: bool = True
    follow_through: bool = True
    log_prompts: str = "memory"
    react: bool = True
    prefill: bool = True
    tool_choice: str = "auto"
    generation: GenerationConfig = field(
        default_factory=lambda: GenerationConfig(max_new_tokens=48, stop=list(DEFAULT_STOP))
    )


class EpisodeSession:
    """Plays one episode on `env`; `episode` accumulates the trajectory as it goes.

    With `tools`, the episode is tool-using (`agent.tool_turns`): each reply is one tool call,
    run by the toolbox and logged as a step; `final_answer`'s argument goes to `env.step`.
    """

    def __init__(
        self,
        env: TextEnv,
        episode: Episode,
        config: LoopConfig,
        count: TokenCount,
        count_messages: MessageCount,
        tools: Toolbox | None = None,
    ):
        self.env = env
        self.tools = tools
        self.episode = episode
        self._situation = situation_of(episode.task)
        self._undo_rule = config.loop_breaker and config.held_rewards and repeat_undoes_reward(episode.task)
        self.config = config
        self._count = count
        self._count_messages = count_messages
        self.last_prompt: PromptReport | None = None
        self.used_memory: list[str] = []
        self.plan = None
        try:
            self.observation: Observation = env.reset(episode.seed)
            self.episode.game = game_identity(env)
        except Exception as exc:  # an engine that cannot start ends this episode, not the run
            self.observation = Observation(text="", goal="")
            self._finish("error", f"environment error on reset: {exc!r}")
        self.episode.goal = self.observation.goal
        self.task_text = self.observation.text
        self.history = PromptHistory(window=config.history_window)
        self.tokens_used = 0
        self._reached: set[str] = set()
        self._reached_upto = 0
        self._started = time.monotonic()
        self._seen: dict[tuple[str, str], int] = {}
        self._tried: dict[str, set[str]] = {}
        self._no_ops: dict[tuple[str, tuple[str, ...]], set[str]] = {}
        self._earned: dict[str, float] = {}
        self._listed_throughout = set(self.observation.admissible_actions or [])
        self._changed_something: dict[str, bool] = {}
        self._declared_idle = declared_idle_actions(episode.task)
        self._declared_no_ops = declared_no_ops(episode.task) if config.idle_actions else None
        self._places = places_of(episode.task) if config.loop_breaker and config.frontier else None
        self._toggles = declared_toggles(episode.task) if config.loop_breaker and config.undos else None
        self._undos_outlast_rewards = self._toggles is not None and undo_never_rewarded(episode.task)
        self._set_to: dict[str, str] = {}
        self._changed_since_reward: set[str] = set()
        self._visited: set[str] = set()
        self._place_here: str | None = None
        self._acted_here = False
        self._moves_here: dict[str, str] = {}
        self._opened_ways: dict[str, str] = {}
        self._map = PlaceMap()
        self._visit(self.observation)

    def replay(self, steps: list[Step]) -> None:
        """Re-apply logged steps (for `--resume`): the environment is deterministic per seed,
        so stepping the logged actions restores the state the run was killed in. A logged tool
        call is not run again: its logged result is what the agent saw."""
        for step in steps:
            if step.extra.tool is not None:
                from crl.agent.tool_turns import replay_tool_step

                replay_tool_step(self, step)
            elif step.valid and step.action:
                self._tried.setdefault(self.here(), set()).add(step.action)
                obs, _, _, info = self.env.step(step.action)
                self._advance(step.action, obs, step, info)
            elif step.action:  # the environment refused it: stepping again reproduces that
                self._tried.setdefault(self.here(), set()).add(step.action)
                obs, _, _, info = self.env.step(step.action)
                self._advance(step.action, obs, step, info)
            else:
                raw_action = step.extra.raw_action or ""
                self._tried.setdefault(self.here(), set()).add("invalid: " + normalise(raw_action))
                self.history.unusable(raw_action, step.extra.feedback)
            self.episode.steps.append(step)
            self.tokens_used += step.prompt_tokens + step.completion_tokens
        if steps:
            self._check_guards(steps[-1])

    def messages(self, memory_items: Sequence[BudgetItem] = ()) -> list[Message]:
        """The chat prompt for the next step, fitted into the prompt budget; how it was fitted
        is kept for the step record (`last_prompt`)."""
        obs = self.observation
        if self.tools is not None:
            state = self.history.state(obs.goal, self.task_text)
            fmt = PromptFormat(self.config.react, self.reply_prefix, self.tools.definitions(), self.tools.native)
        else:
            state = self.history.state(obs.goal, obs.text, obs.admissible_actions)
            fmt = PromptFormat(react=self.config.react, reply_prefix=self.reply_prefix)
        messages, report = assemble_prompt(
            state,
            fmt,
            PromptBudget(
                tokens=self.config.max_prompt_tokens,
                max_observation_tokens=self.config.max_observation_tokens,
                count_text=self._count,
                count_messages=self._count_messages,
            ),
            memory_items,
        )
        mode = self.config.log_prompts
        # A tool-using prompt cannot be rebuilt from the log (it lists the run's tools): keep it.
        if mode == "all" or (mode == "memory" and report.memory_keys) or (self.tools is not None and mode != "off"):
            report.messages = [dict(m) for m in messages]
        self.last_prompt = report
        return messages

    @property
    def reply_prefix(self) -> str:
        """What the reply is primed with: the first marker of the format, when the backend
        continues a partial assistant message."""
        if not self.config.prefill or (self.tools is not None and self.tools.native):
            return ""
        return "Thought:" if self.config.react else "Action:"

    def here(self) -> str:
        """The current situation (`crl.tasks.situations`): the observation, less what the task says
        does not fix the state (keyroom's line on what the last action did)."""
        return self._situation(self.observation.text)

    def tried_here(self) -> set[str]:
        """Actions (and unusable replies) already tried in the current situation: after an
        observation of this same situation (`here`); with `agent.loop_breaker` where the task lists
        its actions, also the known no-ops (`no_ops_here`); where the task declares that repeating a
        rewarded action undoes it, the actions whose reward is still held (`held_rewards`); and moves
        back to places seen since the last reward (`revisits`); where the task declares what its
        actions set, the setting back of a thing changed since the last reward (`undoes`); and the
        actions that lost points earlier in the episode (`punished`)."""
        tried = self._tried.get(self.here(), set())
        extra = self.no_ops_here() | self.held_rewards() | self.revisits() | self.undoes() | self.punished()
        return tried | extra if extra else tried

    def no_ops_here(self) -> set[str]:
        """Listed actions known to change nothing here: taken in this same situation with this same list of
        actions and nothing changed by them (`examine door` twice: the second can only repeat the first;
        TextWorldExpress lists "move south" behind a closed door and after it was opened alike, so the
        list alone does not say it is a no-op); with `agent.idle_actions`, the episode's idle actions
        (`idle_actions`) and those the task says this observation shows would change nothing
        (`TaskSpec.no_ops`: opening a door described as open); and with `agent.undos`, on tasks that
        declare `TaskSpec.toggles`, setting a thing to the state this episode already set it to (opening
        the door it opened, from either side). Empty without the loop breaker or a list of actions."""
        listed = self.observation.admissible_actions if self.config.loop_breaker else None
        if not listed:
            return set()
        no_ops = self._no_ops.get((self.here(), tuple(sorted(listed))), set())
        if self.config.idle_actions:
            no_ops = no_ops | (self.idle_actions() & set(listed))
        if self._declared_no_ops is not None:
            no_ops = no_ops | self._declared_no_ops(self.observation.text, listed)
        if self._toggles is not None:
            no_ops = no_ops | {a for a, (thing, state) in self._toggled(listed).items() if self._set_to[thing] == state}
        return no_ops

    def undoes(self) -> set[str]:
        """Listed actions that set back a thing this episode changed since its last reward (closing the
        door it opened, from either side, on tasks that declare `TaskSpec.toggles`, with the loop breaker
        and `agent.undos` on): the loop rules pass over them while another choice remains, as they only
        return to where the episode was. On a task that declares `TaskSpec.undo_never_rewarded`, a change
        made before the last reward counts too. A thing changed back anyway no longer counts."""
        if self._toggles is None:
            return set()
        toggled = self._toggled(self.observation.admissible_actions or [])
        return {
            a
            for a, (thing, state) in toggled.items()
            if thing in self._changed_since_reward and self._set_to[thing] != state
        }

    def _toggled(self, listed: Sequence[str]) -> dict[str, tuple[str, str]]:
        """The listed actions that set a thing this episode has set, with the thing and the state."""
        found = {}
        for action in listed:
            toggle = self._toggles(self.observation.text, action)
            if toggle is not None and toggle[0] in self._set_to:
                found[action] = toggle
        return found

    def _record_toggle(self, action: str, after: Observation) -> None:
        """Keep the state `action` set its thing to, named from before the action or else from after it
        (a door's far room is named once it is open); a thing changed twice counts as back where it was."""
        toggle = self._toggles(self.observation.text, action) or self._toggles(after.text, action)
        if toggle is None:
            return
        thing, state = toggle
        self._set_to[thing] = state
        self._changed_since_reward ^= {thing}

    def punished(self) -> set[str]:
        """Listed actions that lost points when this episode took them before, wherever that was (twc's
        put in the wrong place: taking the item again and putting it back there loses the point again),
        with the loop breaker and `agent.punished` on: the loop rules pass over them while another
        choice remains. Empty while most steps so far lost points, as on a task that charges for every
        step, where a loss says nothing about the action."""
        if not (self.config.loop_breaker and self.config.punished):
            return set()
        lost = [step.action for step in self.episode.steps if step.reward < 0]
        if not lost or 2 * len(lost) > len(self.episode.steps):
            return set()
        return set(lost) & set(self.observation.admissible_actions or [])

    def revisits(self) -> set[str]:
        """Listed moves that lead, as the observation names it, to a place this episode has been in since
        its last reward (on tasks that declare `TaskSpec.places`, with the loop breaker and
        `agent.frontier` on): the loop rules pass over them while another choice remains. Where every
        move here leads back, those that start the shortest known way to a place not visited yet
        (`ways_out`) are not counted. Where no such way is known (every place mapped was visited) and
        the agent has already acted once in this place, none is: going back is then the only way on
        (keyroom's dead end behind a locked door, the key left two rooms back). The first action in
        a place still comes before a move back (the coin the agent has just found)."""
        if self._places is None or not self._visited:
            return set()
        moves = self._moves_here
        back = {a for a, place in moves.items() if place in self._visited}
        if not back:
            return back
        out = self._map.ways_out(moves, self._visited)
        return set() if back == set(moves) and not out and self._acted_here else back - out

    def ways_out(self) -> set[str]:
        """Where every listed move leads back to a place visited since the last reward, the moves that
        start a shortest way, over the places this episode has mapped, to one not visited yet
        (`crl.agent.place_map`); empty otherwise, and without `TaskSpec.places` or `agent.frontier`."""
        if self._places is None or not self._visited:
            return set()
        return self._map.ways_out(self._moves_here, self._visited)

    def listed_moves(self) -> set[str]:
        """The listed actions that lead to a place the observation names (`TaskSpec.places`); empty
        without it or `agent.frontier`."""
        return set(self._moves_here)

    def ahead(self) -> set[str]:
        """Listed moves the last action opened where the agent stands, to a place not visited since the
        last reward (opening a door lists the room behind it), with `agent.follow_through`: the policy
        goes through one of them before taking any other move."""
        return {a for a, place in self._opened_ways.items() if place not in self._visited}

    def _moves(self, observation: Observation) -> dict[str, str]:
        leads_to = self._places.leads_to
        return {a: place for a in observation.admissible_actions or [] if (place := leads_to(observation.text, a))}

    def _visit(self, observation: Observation) -> None:
        """Take in the place `observation` shows and where its listed moves lead (read once per
        observation); with `agent.follow_through`, keep the moves it names a place for that the one
        before did not (or named another), when the last action left the agent where it was."""
        if self._places is None:
            return
        place = self._places.here(observation.text)
        moves = self._moves(observation)
        self._acted_here = place is not None and place == self._place_here
        stayed = self.config.follow_through and self._acted_here
        self._opened_ways = {a: p for a, p in moves.items() if self._moves_here.get(a) != p} if stayed else {}
        self._place_here, self._moves_here = place, moves
        if place is not None:
            self._visited.add(place)
            self._map.record(place, moves)

    def idle_actions(self) -> set[str]:
        """Actions listed at every step of this episode so far that changed nothing each time they
        were taken, and those the task declares idle (`TaskSpec.idle_actions`: TextWorldExpress's
        "look around" and "inventory", whose replies the observation already holds): the loop rules
        pass over them everywhere, not only where they were tried."""
        learned = {a for a, changed in self._changed_something.items() if not changed and a in self._listed_throughout}
        return learned | self._declared_idle

    def held_rewards(self) -> set[str]:
        """Actions that earned a reward this episode which the episode still holds (its return has
        not dropped below what it was right after them), on tasks that declare
        `TaskSpec.repeat_undoes_reward`, with the loop breaker and `agent.held_rewards` on. In
        TextWorldExpress's twc, taking an item back out of the basket it was put away in loses the
        point its put earned, while taking it again from a wrong place (whose put lost the take's
        point) earns it again. A step that lost points gives back the reward of the actions on the same
        thing (`thing_acted_on`): after "put the bra in the basket" lost the bra's point, "take the bra"
        is open again even where the dress's point, earned since, kept the return up."""
        if not self._undo_rule:
            return set()
        now = self.episode.total_return + HELD_TOLERANCE
        return {action for action, after in self._earned.items() if now >= after}

    def tries_here(self) -> dict[str, int]:
        """`tried_here` with how often each was taken in the current situation (at least 1 each, and one
        more for a known no-op): where everything was tried, the least-taken action is the one not yet
        looped on, and an action that changes nothing comes after one that at least goes somewhere."""
        here = self.here()
        no_ops = self.no_ops_here()
        return {a: max(1, self._seen.get((here, a), 0)) + (a in no_ops) for a in self.tried_here()}

    def reached_so_far(self) -> set[str]:
        """Every sub-goal reached at any step so far, as stored steps' purposes count them (a resumed
        episode's earlier steps included); each step is read once."""
        steps = self.episode.steps
        for step in steps[self._reached_upto :]:
            self._reached |= reached_subgoals(step.info)
        self._reached_upto = len(steps)
        return self._reached

    def recent_actions(self) -> list[str]:
        """The actions of the history window, oldest first."""
        return [h.action for h in self.history.recent()]

    def apply(
        self,
        completion: Completion | None,
        choose: Callable[[str | None], tuple] | None = None,
        memory: MemoryOffer | None = None,
    ) -> Step:
        """Parse the reply, act on the environment, record the step and check the guards.

        Args:
            completion: the model's reply, or None when the policy decided without the model.
            choose: the policy: maps the model's action (None if unusable) to
                `(action, decided_by, reason)`, optionally followed by the decision's detail
                (the posterior policy's per-action numbers, logged in `extra.policy.posterior`);
                without it the model's action is taken.
            memory: what memory offered at this step (logged for `crl explain`).

        With the loop breaker on, a model reply already given in this same situation (greedy
        decoding on a deterministic game repeats itself forever) is replaced by an action not
        yet tried here; the step records the replacement and `decided_by`. Other policies
        keep their choice (the memory policy avoids repeats itself; random stays random).
        """
        if self.tools is not None:
            from crl.agent.tool_turns import apply_tool_reply

            return apply_tool_reply(self, completion or Completion(text="", finish_reason="none"), memory)
        asked_model = completion is not None
        completion = completion or Completion(text="", finish_reason="none")
        raw = self.reply_prefix + completion.text if asked_model else ""
        parsed = parse_reply(raw, self.observation.admissible_actions, self.config.fuzzy_threshold)
        step = Step(
            index=len(self.episode.steps),
            observation=self.observation.text,
            admissible_actions=self.observation.admissible_actions,
            raw_output=raw,
            thought=parsed.thought,
            action=parsed.action or "",
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
            latency_s=completion.latency_s,
            extra=StepExtra(match=parsed.match, raw_action=parsed.raw_action),
        )
        if asked_model and self.last_prompt is not None:
            step.extra.prompt = self.last_prompt
            self.used_memory.extend(self.last_prompt.memory_keys)
        step.extra.memory = memory
        self.tokens_used += completion.prompt_tokens + completion.completion_tokens
        action = parsed.action
        reply_key = action if action is not None else "invalid: " + normalise(parsed.raw_action)
        scored = False
        if choose is not None:
            action, step.decided_by, reason, *detail = choose(parsed.action)
            scored = bool(detail and detail[0])
            step.extra.policy = PolicyDecision(
                step.decided_by, reason, parsed.action, posterior=detail[0] if detail else None
            )
            step.action = action or ""
        tried = self._tried.setdefault(self.here(), set())
        held = self.held_rewards()
        if self.config.loop_breaker and step.decided_by == "llm" and (reply_key in tried or reply_key in held):
            alternative = self._less_tried_action(reply_key, step.index)
            if alternative is not None:
                step.extra.loop_break = LoopBreak(replaced=action or parsed.raw_action)
                step.decided_by = "loop-breaker"
                step.action = action = alternative
        if not scored:  # a reply is tried once given; a scored argmax the posterior passed over was not taken
            tried.add(reply_key)
        if action is None:
            step.valid = False
            step.extra.feedback = parsed.error
            if asked_model and completion.finish_reason == "length":
                step.extra.feedback = f"{parsed.error} (the reply was cut off at the token limit: keep it short)"
            self.history.unusable(parsed.raw_action, step.extra.feedback)
        else:
            try:
                obs, reward, done, info = self.env.step(action)
            except Exception as exc:  # an engine crash ends this episode, not the run
                step.valid = False
                step.info = {"error": repr(exc)}
                self.episode.steps.append(step)
                self._finish("error", f"environment error: {exc!r}")
                return step
            step.reward, step.done, step.info = float(reward), bool(done), dict(info)
            step.valid = not info.get("invalid", False)
            tried.add(action)
            self._advance(action, obs, step, info)
        self.episode.steps.append(step)
        self._check_guards(step)
        return step

    def model_failed(self, reason: str, memory: MemoryOffer | None = None) -> Step:
        """Record a step whose model call failed (no reply after the backend's retries) and end
        the episode in an error: it is neither a success nor a failure of the agent's, and the
        runner retries it once. The step says why (`info["error"]`, `extra.feedback`)."""
        why = f"model error: {reason}"
        step = Step(
            index=len(self.episode.steps),
            observation=self.observation.text,
            admissible_actions=self.observation.admissible_actions,
            action="",
            valid=False,
            info={"error": why},
            extra=StepExtra(feedback=why, memory=memory),
        )
        if self.last_prompt is not None:
            step.extra.prompt = self.last_prompt
        self.episode.steps.append(step)
        self._finish("error", why)
        return step

    def _less_tried_action(self, repeated: str, index: int) -> str | None:
        """A random admissible action tried here less often than `repeated`, by `tries_here` (untried
        first; a known no-op counts one more, so a move back beats looking again), among the least
        tried; seeded by task, seed and step so runs are reproducible. None when there is none."""
        tries = self.tries_here()
        limit = tries.get(repeated, 1)
        options = [a for a in self.observation.admissible_actions or [] if tries.get(a, 0) < limit]
        if not options:
            return None
        fewest = min(tries.get(a, 0) for a in options)
        least = [a for a in options if tries.get(a, 0) == fewest]
        return random.Random(f"{self.episode.task}:{self.episode.seed}:{index}").choice(least)

    def _advance(self, action: str, obs: Observation, step: Step, info: dict, call: dict | None = None) -> None:
        idle = self._changed_nothing(obs, step, info)
        if idle:
            key = (self.here(), tuple(sorted(self.observation.admissible_actions)))
            self._no_ops.setdefault(key, set()).add(action)
        elif self._toggles is not None:
            self._record_toggle(action, obs)
        self._changed_something[action] = self._changed_something.get(action, False) or not idle
        self._listed_throughout &= set(obs.admissible_actions or [])
        key = (self.here(), action)
        repeats = self._seen.get(key, 0)
        self._seen[key] = repeats + 1
        if repeats:
            step.extra.repeat = repeats
        self.history.acted(action, obs.text, repeated=bool(repeats), call=call)
        self.observation = obs
        self.episode.total_return += float(step.reward)
        if step.reward > 0:
            self._earned[action] = self.episode.total_return
            self._visited.clear()  # progress: what the task needs next may be in a room already seen
            if not self._undos_outlast_rewards:
                self._changed_since_reward.clear()
        elif step.reward < 0:
            thing = thing_acted_on(action)
            for earned in [a for a in self._earned if thing_acted_on(a) == thing]:
                del self._earned[earned]
        if step.reward <= 0 and self._new_subgoals(info):
            self._visited.clear()  # a sub-goal reached is progress too (keyroom: the key, then the door)
        self._visit(obs)
        subgoals = info.get("subgoals")
        if isinstance(subgoals, dict):
            self.episode.subgoals = {k: bool(v) for k, v in subgoals.items()}
        if step.done:
            self.episode.success = bool(info.get("success", step.reward > 0))

    def _changed_nothing(self, obs: Observation, step: Step, info: dict) -> bool:
        """Whether a step left everything as it was: the same listed actions, the same last paragraph
        of the observation (the room as described, not the feedback above it), no reward, no new
        sub-goal. Only a task that lists its actions can tell."""
        before, after = self.observation.admissible_actions, obs.admissible_actions
        if not before or not after or sorted(before) != sorted(after) or step.reward or step.done:
            return False
        if last_paragraph(obs.text) != last_paragraph(self.observation.text):
            return False
        return not self._new_subgoals(info)

    def _new_subgoals(self, info: dict) -> set[str]:
        """Sub-goals a step's `info` reports reached that were neither reached before it nor given
        by the task (`keyroom/door` starts with the key)."""
        before_step = reached_subgoals({"subgoals": self.episode.subgoals}) | set(given_subgoals(self.episode.task))
        return reached_subgoals(info) - before_step

    def _check_guards(self, step: Step) -> None:
        if step.done:
            self._finish("done", "success" if self.episode.success else "environment ended the episode")
        elif len(self.episode.steps) >= self.config.max_steps:
            self._finish("truncated", f"max_steps ({self.config.max_steps})")
        elif self.tokens_used >= self.config.max_episode_tokens:
            self._finish("truncated", f"token budget ({self.config.max_episode_tokens})")
        elif time.monotonic() - self._started >= self.config.max_episode_seconds:
            self._finish("truncated", f"wall clock ({self.config.max_episode_seconds:.0f}s)")

    def _finish(self, status: str, reason: str) -> None:
        self.episode.status = status
        self.episode.end_reason = reason
        self.episode.ended_at = time.time()

    @property
    def finished(self) -> bool:
        return self.episode.finished


def thing_acted_on(action: str) -> str:
    """What an action acts on, in normalised words: the object of "VERB OBJECT PREP TARGET"
    (`action_frame`), else the words after the verb ("take wet gray bra" -> "wet gray bra")."""
    frame = action_frame(action)
    return frame.object if frame else " ".join(normalise_action(action).split()[1:])
