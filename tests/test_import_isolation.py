"""Every module of the `crl` namespace imports on its own, in a fresh interpreter: no import cycle.

An import cycle often hides behind test order (an earlier test imported the other side
first), so each module is imported in a process of its own that has imported no `crl`
module before. To keep this fast, one parent interpreter loads the heavy third-party
libraries once (they cannot take part in a cycle of ours) and forks a child per module,
as many at a time as there are cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "agent": "crl.agent",
    "memory": "crl.memory",
    "prompts": "crl.prompts",
    "finetune": "crl.finetune",
    "tasks": "crl.tasks",
    "crl": "crl",
}
SKIP = {"crl.__main__"}

CHILD = r"""
import importlib, json, os, sys, traceback
HEAVY = (
    "torch", "transformers", "peft", "trl", "datasets", "chromadb", "sentence_transformers", "scipy.stats",
    "pydantic", "openai", "fastapi", "starlette", "typer", "rich", "aiohttp", "tiktoken",
)  # fmt: skip
for heavy in HEAVY if len(sys.argv) < 3 else json.loads(sys.argv[2]):
    try:
        importlib.import_module(heavy)
    except ImportError:
        pass
assert not [m for m in sys.modules if m == "crl" or m.startswith("crl.")], "parent imported crl"
failures, running = {}, {}


def reap():
    pid, _ = os.wait()
    name, r = running.pop(pid)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    if chunks:
        failures[name] = b"".join(chunks).decode()


for name in json.loads(sys.argv[1]):
    while len(running) >= max(1, os.cpu_count() or 1):
        reap()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            importlib.import_module(name)
            msg = ""
        except BaseException:
            msg = traceback.format_exc(limit=3)
        os.write(w, msg.encode()[:60000])
        os._exit(0)
    os.close(w)
    running[pid] = (name, r)
while running:
    reap()
print(json.dumps(failures))
"""


def crl_modules() -> list[str]:
    """Every module under the crl namespace, by walking the source folders it is installed from."""
    names = []
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            names.append(".".join([package, *parts]))
    return sorted(set(names) - SKIP)


def test_the_module_list_covers_every_package():
    names = crl_modules()
    assert "crl.agent.cli.main" in names and "crl.memory.storage.store" in names and "crl.tasks.keyroom" in names
    assert len(names) > 80


@pytest.mark.skipif(sys.platform == "win32", reason="uses fork")
def test_every_module_imports_alone_in_a_fresh_interpreter():
    names = crl_modules()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(names)], capture_output=True, text=True, timeout=600, cwd="/"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    failures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not failures, "\n\n".join(f"{name}:\n{tb}" for name, tb in failures.items())


def test_a_broken_module_is_reported(tmp_path):
    (tmp_path / "cycle_a.py").write_text("from cycle_b import B\nA = 1\n")
    (tmp_path / "cycle_b.py").write_text("from cycle_a import A\nB = 2\n")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(["cycle_a"]), "[]"],  # no third-party preload needed
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path)},
    )
    failures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "ImportError" in failures["cycle_a"]
