"""The `crl` command line: typer + rich; nothing else imports it."""
