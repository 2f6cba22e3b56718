"""The map an episode draws of the places it has been in, and the shortest known way to one not seen.

Each time the player is in a place, the map keeps where that place's listed moves lead (as the task's
`Places` reads them). The frontier rule passes over moves back to places already seen; when every
move here goes back, the moves that start a shortest known way to a place not yet visited are the
way out (frontier exploration), so a dead end is left towards the unexplored part of the house, not
back and forth between two rooms already seen.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass
class PlaceMap:
    """`exits[place][action]`: the place a listed move leads to, as last seen from `place`."""

    exits: dict[str, dict[str, str]] = field(default_factory=dict)

    def record(self, place: str, moves: Mapping[str, str]) -> None:
        """Keep where `place`'s moves lead, as its latest observation says (a door opened since adds one)."""
        self.exits[place] = dict(moves)

    def steps_to_unvisited(self, start: str, visited: set[str]) -> int | None:
        """Moves from `start` to the nearest place not in `visited`, over the moves the map knows; None when
        no such place is known."""
        seen, queue = {start}, deque([(start, 0)])
        while queue:
            place, steps = queue.popleft()
            if place not in visited:
                return steps
            for nxt in self.exits.get(place, {}).values():
                if nxt not in seen:
                    seen.add(nxt)
                    queue.append((nxt, steps + 1))
        return None

    def ways_out(self, moves: Mapping[str, str], visited: set[str]) -> set[str]:
        """Of `moves` (action -> the place it leads to), those that start a shortest known way to a place
        not visited yet, when every one of them leads back to a visited place; empty when one leads
        straight to a new place or no way to one is known.

        Example:
            >>> m = PlaceMap({"hall": {"move west": "den", "move east": "kitchen"}, "den": {"move east": "hall"},
            ...               "kitchen": {"move west": "hall", "move south": "yard"}})
            >>> sorted(m.ways_out({"move east": "hall"}, {"hall", "den", "kitchen"}))
            ['move east']
            >>> sorted(m.ways_out({"move west": "den", "move east": "kitchen"}, {"hall", "den", "kitchen"}))
            ['move east']
        """
        if any(place not in visited for place in moves.values()):
            return set()
        steps = {a: self.steps_to_unvisited(place, visited) for a, place in moves.items()}
        known = {a: n for a, n in steps.items() if n is not None}
        if not known:
            return set()
        nearest = min(known.values())
        return {a for a, n in known.items() if n == nearest}
