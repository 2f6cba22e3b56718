"""`python -m crl` runs the `crl` command line (the same as the `crl` script)."""

from crl.agent.cli.main import app

app(prog_name="crl")
