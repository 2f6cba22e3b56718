"""Render the prompt templates in `prompts/templates/` with Jinja2 and `StrictUndefined`."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from crl.prompts.untrusted import neutralise

if TYPE_CHECKING:
    from jinja2 import Environment

TEMPLATES_DIR = Path(__file__).parent / "templates"

# The templates of the agent's step prompt: what a run's template hash covers (the reflector's
# prompt does not shape what the agent saw, so changing it leaves replay exact).
AGENT_TEMPLATES = (
    "system.j2",
    "step.j2",
    "memory.j2",
    "case.j2",
    "hint.j2",
    "action_value.j2",
    "feedback.j2",
    "tool_system.j2",
    "tool_step.j2",
)


def shorten(text: str, limit: int) -> str:
    """`text` on one line, cut to `limit` characters with "..." when longer.

    Example: `shorten("a  b\\nc", 90)` is "a b c"; `shorten("x" * 100, 10)` is "xxxxxxx...".
    """
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@lru_cache(maxsize=1)
def _env() -> "Environment":
    from jinja2 import Environment, FileSystemLoader, StrictUndefined  # on first render: keeps `crl --help` fast

    env = Environment(
        loader=FileSystemLoader(TEMPLATES_DIR),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        autoescape=False,
    )
    env.filters["shorten"] = shorten
    env.filters["data"] = neutralise
    return env


def render(template: str, **variables) -> str:
    """Render `templates/<template>` with `variables`; a missing variable raises.

    Example: `render("system.j2", react=False)` returns the agent's system prompt.
    """
    return _env().get_template(template).render(**variables).strip()


@lru_cache(maxsize=1)
def templates_hash() -> str:
    """A short hash of the agent's prompt templates (`AGENT_TEMPLATES`), recorded with each run
    so prompt replay can tell when the templates changed since the run."""
    digest = hashlib.sha256()
    for name in AGENT_TEMPLATES:
        digest.update(name.encode() + b"\0" + (TEMPLATES_DIR / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]
