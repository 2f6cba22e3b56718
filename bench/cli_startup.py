"""How fast the `crl` command line starts (a benchmark, not a test).

Each figure comes from a fresh interpreter: the import time of the CLI and of each of its
modules (`python -X importtime`, cumulative), which heavy libraries that import pulled in,
and the wall time of the commands a user types first.

    python -m bench.cli_startup [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import pkgutil
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAVY = (
    "torch",
    "transformers",
    "peft",
    "trl",
    "sentence_transformers",
    "chromadb",
    "datasets",
    "accelerate",
    "scipy",
    "matplotlib",
    "openai",
    "tiktoken",
    "jinja2",
)
COMMANDS = (["--help"], ["tasks"], ["config"], ["runs"], ["memory", "--help"])
QUIET_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False", "COLUMNS": "120"}


def cli_modules() -> list[str]:
    """`crl.agent.cli` and every module in it, `main` (the whole app) first."""
    import crl.agent.cli as package

    names = sorted(m.name for m in pkgutil.iter_modules(package.__path__))
    names.sort(key=lambda n: n != "main")
    return [f"{package.__name__}.{n}" for n in names]


def import_profile(module: str) -> dict:
    """Cumulative import time of `module` (seconds) and the heavy libraries it loaded, in a fresh interpreter."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        env=os.environ | QUIET_ENV,
    )
    if proc.returncode != 0:
        return {"module": module, "seconds": None, "heavy": [], "error": proc.stderr.strip().splitlines()[-1]}
    cumulative: dict[str, int] = {}
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, total, name = (part.strip() for part in line.split(":", 1)[1].split("|"))
        if total.isdigit():
            cumulative[name] = int(total)
    heavy = sorted({name.split(".")[0] for name in cumulative} & set(HEAVY))
    return {"module": module, "seconds": cumulative.get(module, 0) / 1e6, "heavy": heavy}


def command_time(args: list[str], home: Path, repeats: int) -> dict:
    """Median wall and CPU time (user + system) of `python -m crl ARGS`, a fresh interpreter each time.

    CPU time is the steadier figure on a shared machine: it does not count waiting for a core.
    """
    walls, cpus, code = [], [], 0
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "crl", "--home", str(home), *args],
            capture_output=True,
            env=os.environ | QUIET_ENV,
            cwd=home,
        )
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        code = code or proc.returncode
    return {
        "command": "crl " + " ".join(args),
        "seconds": statistics.median(walls),
        "cpu_seconds": statistics.median(cpus),
        "exit": code,
    }


def baseline(repeats: int) -> float:
    """Median wall time of a bare `python -c pass`: what no command can go below."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="runs per command (the median is reported)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = ap.parse_args()

    imports = [import_profile(m) for m in cli_modules()]
    with tempfile.TemporaryDirectory() as home:
        commands = [command_time(c, Path(home), args.repeats) for c in COMMANDS]
    report = {"python": baseline(args.repeats), "imports": imports, "commands": commands}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"bare python start-up: {report['python']:.2f} s\n")
    print(f"{'module':32} {'import s':>9}  heavy libraries loaded")
    for row in imports:
        seconds = "failed" if row["seconds"] is None else f"{row['seconds']:.2f}"
        print(f"{row['module']:32} {seconds:>9}  {row.get('error') or ', '.join(row['heavy']) or '-'}")
    print(f"\n{'command':32} {'wall s':>9} {'cpu s':>9}  exit")
    for row in commands:
        print(f"{row['command']:32} {row['seconds']:>9.2f} {row['cpu_seconds']:>9.2f}  {row['exit']}")


if __name__ == "__main__":
    main()
