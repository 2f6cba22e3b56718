"""Which seeds start the same game.

A seed picks a game, but two seeds may pick the same one: TextWorldExpress's twc with one room and
two objects has 78 distinct games among dev seeds 10000-10095, one of them six times. Comparing
two settings seed by seed then counts that game six times, and a paired test treats six copies
of one outcome as six independent trials. An environment that can say which game it started
offers `game_id() -> str | None` after `reset`: equal for seeds that start the same game, None
when it cannot tell. The agent logs it with each episode (`Episode.game`), and `crl compare`
counts each distinct game once beside the seed-level figures.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def digest(*parts: Any) -> str:
    """A short stable hash of JSON-serialisable parts (16 hex digits)."""
    text = json.dumps(parts, ensure_ascii=False, sort_keys=True, default=repr)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def game_identity(env: Any) -> str | None:
    """The game `env` started at its last `reset`, or None when the environment cannot say (it
    offers no `game_id`, or asking fails)."""
    ask = getattr(env, "game_id", None)
    if not callable(ask):
        return None
    try:
        game = ask()
    except Exception:  # an identity is a nicety: never let it end an episode
        return None
    return game if isinstance(game, str) and game else None


def game_at(env: Any, seed: int) -> str | None:
    """Reset `env` on `seed` and name the game it started; None when the game will not start or the
    environment cannot say (the seed then counts as a game of its own)."""
    try:
        env.reset(seed)
    except Exception:  # a seed whose game will not start is still a seed to compare
        return None
    return game_identity(env)
