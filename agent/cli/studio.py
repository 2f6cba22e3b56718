"""`crl studio`: the local web app over runs, curves, episodes, memory, rules and adapters."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.markup import escape

from crl.agent.cli.common import MemoryUrlOpt, command, effective_settings, err, overrides, say

app = typer.Typer()

DEFAULT_RESULTS = (Path("experiments"), Path("docs/results"))


@command(app, "studio")
def studio(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; beyond loopback a token is required."),
    port: int = typer.Option(8750, "--port", help="Port to listen on."),
    token: str | None = typer.Option(
        None, "--token", help="Secret every request must carry (default $CRL_STUDIO_TOKEN); required beyond loopback."
    ),
    results: list[Path] | None = typer.Option(
        None,
        "--results",
        help="Folder of `crl experiment` results (repeatable; default ./experiments and ./docs/results).",
    ),
    namespace: str | None = typer.Option(
        None,
        "--namespace",
        help="The namespace the pages open on (memory.namespace); the memory browser picks any namespace of the home.",
    ),
    memory_url: str | None = MemoryUrlOpt,
) -> None:
    """Open the studio: watch runs and learning curves, inspect episodes, curate memories, rules and adapters."""
    import uvicorn

    from crl.agent.studio import Studio, create_app

    token = token or os.environ.get("CRL_STUDIO_TOKEN") or None
    settings = effective_settings(overrides(memory__url=memory_url, memory__namespace=namespace))
    from crl.agent.studio.security import required_token

    required_token(host, token)
    folders = list(results) if results else [p for p in DEFAULT_RESULTS if p.is_dir()]
    served = Studio(settings, results=folders)
    served.warm_up()
    for warning in served.bank.warnings:
        err.print(f"[yellow]note:[/] {escape(warning)}", highlight=False)
    about = served.about()
    shown_host = f"[{host}]" if ":" in host else host
    url = f"http://{shown_host}:{port}/" + (f"?token={token}" if token else "")
    names = [n["name"] for n in served.namespaces()["namespaces"]]
    say(
        f"crl studio on {url}  ({about['mode']}, namespace {about['namespace']}"
        + (f" of {', '.join(names)}" if len(names) > 1 else "")
        + "; Ctrl-C stops it)"
    )
    if about["holds_lock"]:
        err.print(f"[yellow]note:[/] {escape(about['lock_note'])}", highlight=False)
    uvicorn.run(create_app(served, host=host, token=token), host=host, port=port, log_level="warning")
