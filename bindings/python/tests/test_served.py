"""The seed's walkthrough through a server: `fencelock serve` ($FENCELOCK_CLI, which make test
sets) holds the store file alone, so every call here can only go through it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import fencelock


@pytest.fixture
def server(store_path: Path):
    cli = os.environ.get("FENCELOCK_CLI")
    if not cli:
        pytest.skip("needs $FENCELOCK_CLI, the fencelock program (make test sets it)")
    process = subprocess.Popen([cli, "--db", str(store_path), "serve"], stderr=subprocess.PIPE, text=True)
    try:
        assert "serving" in process.stderr.readline()
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def test_a_paused_holders_write_is_refused_through_a_server(server, store_path: Path):
    with fencelock.Store(store_path) as a_store, fencelock.Store(store_path) as b_store:
        a = a_store.acquire("payment-export", ttl=0.1)
        time.sleep(0.3)  # A is paused past its lease
        b = b_store.acquire("payment-export", ttl=30)
        assert b.token > a.token
        b.put(b"payments/today.csv", b"B")
        with pytest.raises(fencelock.LockLostError):
            a.put(b"payments/today.csv", b"A")
        with pytest.raises(fencelock.StaleTokenError):
            a_store.put(b"payments/today.csv", b"A", a.token)
        kept = a_store.get(b"payments/today.csv")
        assert kept.value == b"B" and kept.token == b.token
        assert server.poll() is None  # it served all along
        assert a_store.server_pid == server.pid
        b.release()
