"""`python -m agent` runs the `crl` command line (the same as the `crl` script)."""

from agent.cli import app

app(prog_name="crl")
