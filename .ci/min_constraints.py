"""Print pip constraints that pin every dependency of pyproject.toml to its floor.

`make test-min` installs the project with these constraints, so the fast tests run on the
oldest releases pyproject.toml claims to support. A requirement without a `>=` floor is an
error: every dependency must state the oldest version it was tested with.

    python .ci/min_constraints.py --extra test --skip torch > constraints-min.txt
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(\[[^\]]*\])?\s*(.*)$")
_FLOOR = re.compile(r">=\s*([0-9][^,;\s]*)")


def floors(requirements: list[str], skip: set[str]) -> list[str]:
    """`name==floor` for each requirement, in order.

    Args:
        requirements: PEP 508 strings such as "transformers>=5.0,<6".
        skip: names left out (their version is installed another way).

    Raises:
        SystemExit: a requirement has no `>=` floor.

    >>> floors(["trl>=0.29,<2", "torch>=2.4"], {"torch"})
    ['trl==0.29']
    """
    pins = []
    for requirement in requirements:
        match = _REQUIREMENT.match(requirement)
        if match is None:
            raise SystemExit(f"cannot parse requirement {requirement!r} in pyproject.toml")
        name, _, spec = match.groups()
        if name.lower() in skip:
            continue
        floor = _FLOOR.search(spec)
        if floor is None:
            raise SystemExit(f"{requirement!r} in pyproject.toml has no '>=' floor; give it the oldest version tested")
        pins.append(f"{name}=={floor.group(1)}")
    return pins


def main(argv: list[str] | None = None) -> int:
    """Print the constraints for the project's dependencies and the extras asked for."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyproject", type=Path, default=Path(__file__).resolve().parent.parent / "pyproject.toml")
    parser.add_argument("--extra", action="append", default=[], help="an optional-dependencies group to include")
    parser.add_argument("--skip", action="append", default=[], help="a dependency to leave unpinned")
    args = parser.parse_args(argv)
    project = tomllib.loads(args.pyproject.read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in args.extra:
        requirements += project["optional-dependencies"][extra]
    sys.stdout.write("\n".join(floors(requirements, {s.lower() for s in args.skip})) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
