"""Render the prompt templates in `prompts/templates/` with Jinja2 and `StrictUndefined`."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

TEMPLATES_DIR = Path(__file__).parent / "templates"


@lru_cache(maxsize=1)
def _env() -> Environment:
    return Environment(
        loader=FileSystemLoader(TEMPLATES_DIR),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        autoescape=False,
    )


def render(template: str, **variables) -> str:
    """Render `templates/<template>` with `variables`; a missing variable raises.

    Example: `render("system.j2")` returns the agent's system prompt.
    """
    return _env().get_template(template).render(**variables).strip()
