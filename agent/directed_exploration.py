"""Directed exploration: open what is closed before another use of a held object that memory saw fail.

On TextWorldExpress's twc, where an object belongs is often a closed container ("open shoe
cabinet" listed, no "put flip flops in shoe cabinet"). Memory rarely holds evidence about those
places, because training seldom opened them, so the posterior keeps choosing among the open
places. At stop 53, over four dev evaluations, a put decision at which memory had seen some listed
put of the held object fail and none succeed had the right place closed in 63 of 73 cases
(`docs/results/twc-levers/explore/`).

With `agent.posterior.explore_enabling` on (the default since stop 53), where memory has seen no
listed use of a held object succeed (uses on places exploration opened aside), the agent tries
first, in order:

1. a use of the object on a place directed exploration opened this episode, unless the episode
   already made that very use (memory may know nothing of the state the opening led to);
2. where memory has also seen some listed use fail: "open PLACE" for a place no listed action
   targets and exploration has not opened ("open door to north" has a target itself, so it is a
   use, never an opening), unless it was tried in this situation.

The episode's own lost points count too (`refuted`: the uses `EpisodeSession.punished` lists,
stop 61). A use this episode tried and lost points on has failed, whatever memory's analogues say
of it: on twc's fresh test seeds, "put hiking boots in hat rack" kept its "similar actions: success
5 of 15" after the game took the point back, so the rule never fired, and the agent tried the
four open places in turn while the boots belonged in the closed shoe cabinet. Where only the
episode's refutations (not memory's failures) hold the condition, an opening is offered only while
the untried listed places are at most `UNTRIED_PER_CLOSED` times the closed ones: in the dev logs of
stop 60, at such decisions the right place was closed in 147 of 170 under that bound, and in 183 of
245 without it (a kitchen with seven open places and one closed drawer is not yet worth a step).

Places the model opened on its own are listed places like any other: the first measurement,
which also tried first every place the episode had opened, put a magazine into the wastepaper
basket the model had opened at the first step, then looped on opening and closing it.

A "use" is a listed action with an object and a target (`action_frame`): the actions sharing a
verb and an object, at least two of them, form the decision about where that object goes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from crl.memory.retrieval.analogy import action_frame
from crl.memory.retrieval.episodic_control import MemoryAdvantage
from crl.tasks.actions import normalise_action

if TYPE_CHECKING:
    from crl.memory.trajectory import Step

ENABLING_VERB = "open"
"""The verb of the actions that can make new places usable."""

UNTRIED_PER_CLOSED = 2
"""Where only the episode's refutations ask for exploration: the most untried listed places per
closed place at which an opening is still offered (module docstring)."""


def opened_places(taken: Iterable[str]) -> set[str]:
    """The places these actions opened ("open shoe cabinet" -> "shoe cabinet")."""
    return {place for a in taken if (place := _opens(a))}


def explored_openings(steps: Iterable[Step]) -> set[str]:
    """The places directed exploration opened in these steps: those it decided (its offer was
    neither the model's argmax nor the posterior's). A place the model or the posterior chose to
    open, offered or not, is the model's own opening, a listed place like any other."""
    return opened_places(s.action for s in steps if s.decided_by == "exploration")


def explore_first(
    actions: Sequence[str],
    memory: Mapping[str, MemoryAdvantage],
    opened: Collection[str],
    tried: Collection[str] = (),
    taken: Collection[str] = (),
    refuted: Collection[str] = (),
) -> list[str]:
    """The actions to choose among first (module docstring), or [] to leave the choice to the posterior.

    Args:
        actions: the admissible actions.
        memory: memory's evidence per action (`memory_advantages`); an action counts as seen to
            fail when its stored votes (n > 0) hold no success.
        opened: the places directed exploration opened this episode (`explored_openings`).
        tried: actions already taken in this situation; no opening among them is offered again.
        taken: the episode's actions so far, normalised (`normalise_action`); no use among them
            is offered again.
        refuted: listed actions this episode took and lost points on (`EpisodeSession.punished`);
            each counts as seen to fail, and memory's successes for it no longer count.
    """
    frames = {a: f for a in actions if (f := action_frame(a)) is not None}
    targets = {f.target for f in frames.values()}
    uses: dict[tuple[str, str], list[str]] = {}
    for action, frame in frames.items():
        uses.setdefault((frame.verb, frame.object), []).append(action)
    for (_, obj), group in uses.items():
        fresh = [a for a in group if frames[a].target in opened and normalise_action(a) not in taken]
        lost = [a for a in group if a in refuted and a not in fresh]
        seen = {a: memory[a] for a in group if a in memory and memory[a].n > 0 and a not in fresh}
        if len(group) < 2 or any(e.successes > 0 for a, e in seen.items() if a not in lost):
            continue
        if fresh:
            return fresh
        by_memory = bool(seen) and not any(e.successes > 0 for e in seen.values())
        if not (by_memory or lost):
            continue
        known = targets | set(opened) | {obj}
        closed = [
            a for a in actions if a not in frames and a not in tried and (place := _opens(a)) and place not in known
        ]
        untried = len(group) - len(lost) - len(fresh)
        if closed and (by_memory or untried <= UNTRIED_PER_CLOSED * len(closed)):
            return closed
    return []


def _opens(action: str) -> str | None:
    words = normalise_action(action).split(maxsplit=1)
    return words[1] if len(words) == 2 and words[0] == ENABLING_VERB else None
