"""The agent: loop, LLM backends, action parsing, parallel runner and the `crl` CLI."""
