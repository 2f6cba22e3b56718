"""Suite-wide guards: no network beyond loopback, offline model hubs, no telemetry."""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ["ANONYMIZED_TELEMETRY"] = "False"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
for _var in list(os.environ):
    if _var.startswith("CRL_"):
        del os.environ[_var]

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _is_local(address) -> bool:
    if not isinstance(address, tuple):
        return True  # unix sockets
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _guarded(real):
    def connect(self, address):
        if not _is_local(address):
            raise RuntimeError(f"test tried to reach {address!r}: only loopback is allowed in tests")
        return real(self, address)

    return connect


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Fail any test that opens a connection to something other than this machine."""
    monkeypatch.setattr(socket.socket, "connect", _guarded(_real_connect))
    monkeypatch.setattr(socket.socket, "connect_ex", _guarded(_real_connect_ex))


REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def embedded_models_dir() -> Path:
    """Where slow tests find the converted embedded model: the same cache `make run` fills
    (`.crl/models`), or `$CRL_TEST_MODELS_DIR`; converted once (about 20 s) when empty."""
    return Path(os.environ.get("CRL_TEST_MODELS_DIR", REPO_ROOT / ".crl" / "models"))


@pytest.fixture
def crl_home(tmp_path, monkeypatch):
    """A fresh data directory, with the working directory moved next to it (no stray crl.toml)."""
    monkeypatch.chdir(tmp_path)
    home = tmp_path / ".crl"
    monkeypatch.setenv("CRL_HOME", str(home))
    return home
