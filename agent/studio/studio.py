"""What one studio process holds: the settings, the open experience banks (the default
namespace's first, with an embedded store's lock; each other namespace of the home opened when
first asked for, sharing that lock), the run stores, the adapter registry and the experiment
results folders."""

from __future__ import annotations

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
        self.max_rule_chars = reflect_config(settings).max_rule_chars
        self.memory = MemoryView(self.bank, self.max_rule_chars)
        self._views: dict[str, MemoryView] = {self.bank.namespace: self.memory}
        self._opened: list[Any] = []  # banks of other namespaces, opened on demand
        self._open_lock = threading.Lock()
        self._warm = False
        if self.embedded and self._own_bank:
            self._name_lock_owner()

    def _name_lock_owner(self) -> None:
        """Say in the embedded store's owner file that the studio holds it: a `crl run` refused
        the store names the studio in its error (which also says how to share it: server mode)."""
        owner = self.bank.root / "lock.owner"
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
        """List the episodes in the background (a large bank takes seconds; pages are read straight
        from the store meanwhile); namespaces opened later are listed as they open."""
        self._warm = True
        return self.memory.warm_up()

    def namespaces(self) -> dict[str, Any]:
        """The home's namespaces (`name`, `primary`, `in_store`, `open`: opened by this studio) and
        the namespaces the store holds for other homes (listed, never opened from here)."""
        from crl.memory.storage.namespaces_list import home_namespaces

        with self.memory.lock:
            infos, others = home_namespaces(self.bank.root, self.bank.view.client)
        rows = [
            {"name": i.name, "primary": i.primary, "in_store": i.in_store, "open": i.name in self._views} for i in infos
        ]
        return {"default": self.bank.namespace, "namespaces": rows, "other_homes": others}

    def memory_of(self, namespace: str | None) -> MemoryView:
        """The memory view of `namespace` of this home (None: the studio's default), its bank opened
        on first use (sharing the embedded store's lock) and kept open until the studio closes.

        Raises:
            LookupError: the home has no such namespace.
        """
        if not namespace or namespace == self.bank.namespace:
            return self.memory
        view = self._views.get(namespace)
        if view is not None:
            return view
        with self._open_lock:
            view = self._views.get(namespace)
            if view is None:
                view = self._open(namespace)
        return view

    def _open(self, namespace: str) -> MemoryView:
        from crl.memory.bank import ExperienceBank

        known = [n["name"] for n in self.namespaces()["namespaces"]]
        if namespace not in known:
            raise LookupError(
                f"no memory namespace {namespace!r} in {self.settings.home}; this home has {', '.join(known) or 'none'}"
            )
        bank = ExperienceBank(
            self.bank.root,
            runs_dir=self.bank.runs_dir,
            config=self.bank.config.model_copy(update={"namespace": namespace}),
            embedder=self.bank.embedder.inner,
            actor=STUDIO_ACTOR,
            lock=self.bank.store_lock,
        )
        view = MemoryView(bank, self.max_rule_chars)
        self._opened.append(bank)
        self._views[namespace] = view
        if self._warm:
            view.warm_up()
        return view

    def quarantined(self) -> set[str]:
        """Record ids now quarantined (to flag adapters trained on them), as `crl adapters ls` computes them."""
        from crl.finetune.source import quarantined_ids

        with self.memory.lock:
            return quarantined_ids(self.bank)

    def taints(self) -> dict[str, Any]:
        """Each adapter's contamination by records marked malicious, read from the journals as `crl adapters ls`."""
        from crl.finetune.contamination import adapter_taints, home_marks

        return adapter_taints(self.registry, home_marks(self.settings.memory_dir))

    def close(self) -> None:
        """Close the other namespaces' banks, then release the default one (and its lock) if the studio
        opened it; background listings still reading them are waited for first."""
        for view in (self.memory, *self._views.values()):
            view.settle()
        for bank in self._opened:
            bank.close()
        self._opened = []
        if self._own_bank:
            self.bank.close()
