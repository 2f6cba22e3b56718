"""The `crl` command line: assembles the command groups into one app (`crl = crl.agent.cli.main:app`).

Each group lives in its own module and imports only `common` and the library; heavy
libraries load inside the commands that need them, so `crl --help` answers at once.
"""

from __future__ import annotations

import typer

from crl.agent.cli import experiment, finetune, info, memory, rules, run, runs, studio, synth
from crl.agent.cli.common import global_options

app = typer.Typer(
    help="Complementary RL: LLM agents that get better by reusing their own experience.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.callback()(global_options)
app.add_typer(run.app)
app.add_typer(info.app)
app.add_typer(runs.app)
app.add_typer(rules.reflect_app)
app.add_typer(experiment.app, name="experiment")
memory.app.add_typer(rules.app, name="rules")
app.add_typer(memory.app, name="memory")
app.add_typer(synth.app, name="synth")
app.add_typer(finetune.dataset_app, name="dataset")
app.add_typer(finetune.finetune_app, name="finetune")
app.add_typer(finetune.adapters_app, name="adapters")
app.add_typer(studio.app)
