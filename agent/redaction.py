"""What may be printed or saved: credentials taken out of URLs, settings, messages and log records.

Secrets reach `crl` three ways: an API key (`llm.api_key`, or the variable `llm.api_key_env`
names, `OPENAI_API_KEY` by default), a password in a URL's userinfo
(`http://user:SECRET@host/v1`), and a key in a URL's query (`?api_key=SECRET`). Every error
line, log record, `run.json` and `crl config` row goes through `redact_text` or
`redact_settings`, which replace them with `***`.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

MASK = "***"
SECRET_WORDS = ("key", "apikey", "token", "secret", "password", "passwd", "authorization")
KEY_VARIABLES = ("OPENAI_API_KEY", "CRL_LLM__API_KEY", "CRL_REFLECT__API_KEY", "CHROMA_TOKEN")
MIN_SECRET_CHARS = 6

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s?#]+)@")
_QUERY_SECRET = re.compile(
    r"(?P<name>[?&;](?:api[_-]?key|key|token|access[_-]?token|secret|password|sig)=)(?P<value>[^&#\s]+)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?P<scheme>\bBearer\s+)(?P<value>[A-Za-z0-9._~+/=-]{6,})", re.IGNORECASE)


def redact_url(url: str | None) -> str | None:
    """`url` with its userinfo and secret query values masked (None stays None).

    Example: `redact_url("http://user:pw@127.0.0.1:9/v1?api_key=k")` is
    `"http://***@127.0.0.1:9/v1?api_key=***"`.
    """
    if url is None:
        return None
    return redact_text(url, ())


def redact_text(text: str, secrets: Iterable[str] | None = None) -> str:
    """`text` with URL userinfo, secret query values, bearer tokens and each of `secrets` masked.

    Args:
        secrets: exact values to mask; None means the keys in the environment (`environment_secrets`).
    """
    if not text:
        return text
    for value in sorted(environment_secrets() if secrets is None else secrets, key=len, reverse=True):
        if value and len(value) >= MIN_SECRET_CHARS:
            text = text.replace(value, MASK)
    text = _USERINFO.sub(lambda m: m["scheme"] + MASK + "@", text)
    text = _QUERY_SECRET.sub(lambda m: m["name"] + MASK, text)
    return _BEARER.sub(lambda m: m["scheme"] + MASK, text)


def environment_secrets() -> list[str]:
    """The API keys and tokens set in the environment: the usual key variables, any variable
    whose name says it holds a key or token, and the passwords of URLs in `CRL_*` variables."""
    found = []
    for name, value in os.environ.items():
        upper = name.upper()
        if upper in KEY_VARIABLES or is_secret_key(name):
            found.append(value)
        elif upper.startswith("CRL_") and "://" in value:
            found.extend(url_secrets(value))
    return [v for v in found if v and len(v) >= MIN_SECRET_CHARS]


def url_secrets(url: str) -> list[str]:
    """The password (and user) a URL carries in its userinfo, for masking elsewhere."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    return [v for v in (parts.password, parts.username) if v]


def is_secret_key(name: str) -> bool:
    """Whether a settings key or variable name holds a secret value (`api_key`, `HF_TOKEN`), not the
    name of one (`api_key_env`) nor a count (`max_new_tokens`)."""
    words = re.split(r"[_\W]+", name.lower())
    return bool(words) and words[-1] != "env" and any(w in SECRET_WORDS for w in words)


def redact_settings(data: Any) -> Any:
    """Settings as JSON-ready data with secret values masked and every string redacted (`redact_text`)."""
    if isinstance(data, dict):
        return {k: (MASK if v and is_secret_key(str(k)) else redact_settings(v)) for k, v in data.items()}
    if isinstance(data, list):
        return [redact_settings(v) for v in data]
    if isinstance(data, str):
        return redact_text(data)
    return data


def redact_strings(data: Any) -> Any:
    """`data` (JSON-ready) with every string redacted (`redact_text`) and its keys kept as they are
    (for records whose keys are names, such as tool definitions)."""
    if isinstance(data, dict):
        return {k: redact_strings(v) for k, v in data.items()}
    if isinstance(data, list):
        return [redact_strings(v) for v in data]
    return redact_text(data) if isinstance(data, str) else data


class RedactingFilter(logging.Filter):
    """A logging filter that masks secrets in each record's formatted message (httpx logs request URLs)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True
        cleaned = redact_text(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def guard_logging(handler: logging.Handler | None = None) -> None:
    """Add a `RedactingFilter` to `handler` and to Python's last-resort handler (once each)."""
    for h in (handler, logging.lastResort):
        if h is not None and not any(isinstance(f, RedactingFilter) for f in h.filters):
            h.addFilter(RedactingFilter())
