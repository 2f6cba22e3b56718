"""A tiny MCP server for the tests, spoken to over stdio: `python tests/mcp_server.py`."""

from mcp.server.fastmcp import FastMCP

server = FastMCP("crl-test-tools")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first
        b: the second
    """
    return a + b


@server.tool()
def fail(reason: str) -> str:
    """Always fail.

    Args:
        reason: what to say
    """
    raise ValueError(f"refused: {reason}")


if __name__ == "__main__":
    server.run()
