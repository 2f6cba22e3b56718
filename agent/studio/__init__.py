"""`crl studio`: a local web app over the same library functions the CLI uses — runs and their
learning curves, episodes with what memory offered at each step, the memory browser and map,
rules and adapters. FastAPI + uvicorn, server-rendered pages, static assets shipped here.

    from crl.agent.studio import Studio, create_app
    app = create_app(Studio(settings))               # loopback; create_app(..., host, token) beyond it
"""

from __future__ import annotations

from .app import create_app
from .memory_view import STUDIO_ACTOR
from .studio import Studio

__all__ = ["STUDIO_ACTOR", "Studio", "create_app"]
