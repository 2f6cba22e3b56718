"""The studio's FastAPI application: the guard (token, Host, CSRF), the error answers, the API,
the pages and the packaged static files.

    studio = Studio(settings)
    app = create_app(studio, host="127.0.0.1")      # a token is required beyond loopback
    uvicorn.run(app, host="127.0.0.1", port=8750)
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from crl.memory.errors import BankError

from . import api, pages
from .security import Guard, required_token
from .studio import Studio

HERE = Path(__file__).parent


def status_of(exc: Exception) -> int:
    """The HTTP status of a library error: unknown ids and files 404, refused values 400, a busy store 503."""
    if isinstance(exc, (LookupError, FileNotFoundError)):
        return 404
    if isinstance(exc, ValueError):
        return 400
    return 503


def validation_message(exc: RequestValidationError) -> str:
    """A request's validation errors as one line: `per_page: Input should be less than or equal to 200`."""
    parts = []
    for e in exc.errors():
        where = ".".join(str(p) for p in e.get("loc", ()) if p not in ("query", "body", "path"))
        parts.append(f"{where or 'request'}: {e.get('msg')}")
    return "bad request: " + "; ".join(parts)


def answer(request: Request, status: int, message: str):
    """An error as JSON for the API, as a page for people."""
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": message}, status_code=status)
    about = request.app.state.studio.about()
    return pages.templates.TemplateResponse(
        request,
        "error.html",
        {"about": about, "csrf": request.app.state.guard.csrf, "section": "", "status": status, "message": message},
        status_code=status,
    )


def create_app(studio: Studio, host: str = "127.0.0.1", token: str | None = None) -> FastAPI:
    """The studio app over `studio`, for a server bound to `host`.

    Args:
        studio: the open studio (closed when the app shuts down).
        host: the address the server binds; anything but loopback requires `token`.
        token: the secret every request must carry (bearer header, cookie, or `?token=` once).

    Raises:
        ValueError: `host` is beyond loopback and no token was given.
    """
    guard = Guard(token=required_token(host, token))

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        try:
            yield
        finally:
            studio.close()

    app = FastAPI(title="crl studio", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.studio = studio
    app.state.guard = guard

    @app.middleware("http")
    async def guarded(request: Request, call_next):
        refused = guard.check(request)
        response = refused if refused is not None else await call_next(request)
        return guard.finish(request, response)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError):
        return answer(request, 422, validation_message(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        message = "no such page" if exc.status_code == 404 else str(exc.detail)
        return answer(request, exc.status_code, message)

    for kind in (LookupError, FileNotFoundError, ValueError, BankError):

        @app.exception_handler(kind)
        async def library_error(request: Request, exc: Exception):
            return answer(request, status_of(exc), str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

    app.include_router(api.router)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon():
        return HTMLResponse(status_code=204)

    return app
