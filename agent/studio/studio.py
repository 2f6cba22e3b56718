"""What one studio process holds: the settings, the open experience bank (an embedded store's
lock with it), the run stores, the adapter registry and the experiment results folders."""

from __future__ import annotations

import logging
import os
import socket
import threading
from pathlib import Path
from typing import Any

from .memory_view import STUDIO_ACTOR, MemoryView


class Studio:
    """The library objects the studio's pages and API read and change.

    Args:
        settings: the effective settings (`crl.agent.config.load_settings`).
        bank: an open bank to use (default: the data directory's, opened with the studio as actor);
            a bank given here is not closed by `close`.
        results: folders searched for `crl experiment` results (`*/results.json`).
    """

    def __init__(self, settings: Any, bank: Any | None = None, results: list[Path] | tuple[Path, ...] = ()):
        from crl.agent.app import open_bank
        from crl.agent.reflect import reflect_config
        from crl.agent.runs import run_stores
        from crl.finetune.registry import AdapterRegistry

        self.settings = settings
        self.bank = bank if bank is not None else open_bank(settings, actor=STUDIO_ACTOR)
        self._own_bank = bank is None
        self.stores = run_stores(settings)
        self.registry = AdapterRegistry.of(settings)
        self.results = [Path(r) for r in results]
        self.memory = MemoryView(self.bank, reflect_config(settings).max_rule_chars)
        if self.embedded and self._own_bank:
            self._name_lock_owner()

    def _name_lock_owner(self) -> None:
        """Say in the embedded store's owner file that the studio holds it: a `crl run` refused
        the store names the studio in its error (which also says how to share it: server mode)."""
        owner = self.bank.dir / "lock.owner"
        if owner.exists():
            owner.write_text(f"crl studio (pid {os.getpid()} on {socket.gethostname()})\n")

    @property
    def embedded(self) -> bool:
        return not self.bank.config.server_mode

    def about(self) -> dict[str, Any]:
        """What the header of every page says: where the memory is and who owns it."""
        lock_note = (
            f"This studio holds the lock of the embedded memory {self.bank.dir}: `crl run` and other crl commands "
            "cannot open it while the studio runs. To run agents meanwhile, serve the memory with "
            f"`chroma run --path {self.bank.dir / 'chroma'} --host 127.0.0.1 --port 8000` and pass "
            "--memory-url http://127.0.0.1:8000 to the studio and to every crl command."
            if self.embedded
            else f"Memory on the Chroma server {self.bank.config.url}: runs may write to it while the studio reads it."
        )
        return {
            "home": str(self.settings.home),
            "mode": self.bank.mode,
            "namespace": self.bank.config.namespace,
            "holds_lock": self.embedded,
            "lock_note": lock_note,
            "actor": STUDIO_ACTOR,
            "results": [str(r) for r in self.results],
        }

    def warm_up(self) -> threading.Thread:
        """Scan the episodes in the background (a large bank takes seconds), so the first page is quick."""
        from .memory_view import RecordFilter

        def scan() -> None:
            try:
                self.memory.listing(RecordFilter(), "recent")
            except Exception as exc:  # the first page asks again and shows the error
                logging.getLogger(__name__).warning("warming up the memory listing failed: %s", exc)

        thread = threading.Thread(target=scan, name="studio-warm-up", daemon=True)
        thread.start()
        return thread

    def quarantined(self) -> set[str]:
        """Record ids now quarantined (to flag adapters trained on them), as `crl adapters ls` computes them."""
        from crl.finetune.source import quarantined_ids

        with self.memory.lock:
            return quarantined_ids(self.bank)

    def close(self) -> None:
        """Release the bank (and its lock) if the studio opened it."""
        if self._own_bank:
            self.bank.close()
