"""Per-machine cache folders shared by every data home (converted models, ONNX exports)."""

from __future__ import annotations

import os
from pathlib import Path


def machine_cache_dir(name: str) -> Path:
    """`$XDG_CACHE_HOME/crl/<name>`, else `~/.cache/crl/<name>`."""
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "crl" / name
