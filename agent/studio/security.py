"""Who may talk to the studio: loopback only without a token (the Host header is checked too, so a
web page cannot reach it by DNS rebinding), a token compared in constant time when it is bound
beyond loopback, and a CSRF token on every request that changes something.

The CSRF token is random per process; pages carry it in a `<meta>` tag and in a `SameSite=Strict`
cookie, and a mutating request must send it back in the `X-CSRF-Token` header (or a `csrf`
form field) matching both. Another site's page can neither read it nor make the browser send it.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field
from urllib.parse import urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response

TOKEN_COOKIE = "crl_studio_token"
CSRF_COOKIE = "crl_studio_csrf"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
LOOPBACK_NAMES = ("localhost",)
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "frame-ancestors 'none'; form-action 'self'",
}


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or address, without port) is this machine only."""
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_of(header: str) -> str:
    """The host part of a Host header value (`127.0.0.1:8000` -> `127.0.0.1`, `[::1]:80` -> `::1`)."""
    return urlsplit(f"//{header}").hostname or ""


def same(given: str | None, expected: str) -> bool:
    """Constant-time comparison of a presented secret with the expected one."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def required_token(host: str, token: str | None) -> str | None:
    """The token a studio bound to `host` must demand: `token`; loopback may go without one.

    Raises:
        ValueError: bound beyond loopback without a token.
    """
    if token is not None and not token.strip():
        raise ValueError("the studio token is empty: pass a real secret with --token or $CRL_STUDIO_TOKEN")
    if token is None and not is_loopback(host):
        raise ValueError(
            f"binding the studio to {host} lets other machines reach your memory: pass --token SECRET "
            "(or set $CRL_STUDIO_TOKEN), or bind to 127.0.0.1 and use an SSH tunnel"
        )
    return token


@dataclass
class Guard:
    """The checks every request passes before a route sees it (see the module docstring)."""

    token: str | None = None
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    def refuse(self, request: Request, status: int, message: str) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": message}, status_code=status)
        return PlainTextResponse(message, status_code=status)

    def presented_token(self, request: Request) -> tuple[str | None, bool]:
        """The token a request carries (header, cookie, or `?token=`), and whether it came in the URL."""
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            return auth[7:].strip(), False
        if TOKEN_COOKIE in request.cookies:
            return request.cookies[TOKEN_COOKIE], False
        if "token" in request.query_params:
            return request.query_params["token"], True
        return None, False

    def check(self, request: Request) -> Response | None:
        """A refusal for a request that may not pass, or a redirect that moves a URL token into a cookie."""
        if self.token is None:
            if not is_loopback(host_of(request.headers.get("host", ""))):
                return self.refuse(request, 403, "this studio answers only on loopback addresses (Host header refused)")
        else:
            given, in_url = self.presented_token(request)
            if given is None:
                return self.refuse(
                    request,
                    401,
                    "this studio needs its token: open the URL `crl studio` printed, or send it as a bearer token",
                )
            if not same(given, self.token):
                return self.refuse(request, 401, "wrong studio token")
            if in_url and request.method in SAFE_METHODS:
                params = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
                target = request.url.path + ("?" + urlencode(params) if params else "")
                response = RedirectResponse(target, status_code=303)
                response.set_cookie(TOKEN_COOKIE, self.token, httponly=True, samesite="strict")
                return response
        if request.method not in SAFE_METHODS:
            origin = request.headers.get("origin")
            if origin and urlsplit(origin).netloc != request.headers.get("host", ""):
                return self.refuse(request, 403, f"cross-origin request from {origin} refused")
            sent = request.headers.get(CSRF_HEADER)
            if not (same(sent, self.csrf) and same(request.cookies.get(CSRF_COOKIE), self.csrf)):
                return self.refuse(request, 403, "missing or wrong CSRF token: reload the page and try again")
        return None

    def finish(self, request: Request, response: Response) -> Response:
        """Security headers, and the CSRF cookie for a browser that does not hold it yet."""
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        if request.cookies.get(CSRF_COOKIE) != self.csrf:
            response.set_cookie(CSRF_COOKIE, self.csrf, samesite="strict", httponly=False)
        return response
