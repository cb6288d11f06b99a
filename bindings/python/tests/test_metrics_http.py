"""A real scrape: `fencelock serve --metrics-listen` ($FENCELOCK_CLI, which make test sets)
answers GET /metrics over HTTP, and the Prometheus client's own parser reads the page: the
store's families, and the per-lock series of the locks held longest, with their waiters.
The library's own waiter listing (`Store.waiters`) agrees with the page."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

import fencelock


@pytest.fixture
def served(store_path: Path) -> Iterator[str]:
    """A server of the store with its metrics on a free loopback port; yields the page's URL."""
    cli = os.environ.get("FENCELOCK_CLI")
    if not cli:
        pytest.skip("needs $FENCELOCK_CLI, the fencelock program (make test sets it)")
    process = subprocess.Popen(
        [cli, "--db", str(store_path), "serve", "--metrics-listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        url = ""
        while not url:
            line = process.stderr.readline()
            assert line, "the server ended before it listened"
            if "metrics on " in line:
                url = line.split("metrics on ", 1)[1].strip()
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(url, timeout=30) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = answer.read().decode()
    return {
        family.name: [(dict(s.labels), s.value) for s in family.samples]
        for family in text_string_to_metric_families(text)
    }


def test_a_scrape_over_http_parses_with_the_per_lock_series_and_their_waiters(
    served: str, store_path: Path
) -> None:
    with fencelock.Store(store_path) as store, fencelock.Store(store_path) as other:
        holder = store.acquire("export", ttl=60)
        waiting = threading.Thread(
            target=lambda: other.acquire("export", ttl=60, timeout=60).close(), daemon=True
        )
        waiting.start()
        deadline = time.monotonic() + 60
        while not store.waiters("export"):
            assert time.monotonic() < deadline, "the waiter never queued"
            time.sleep(0.01)
        (waiter,) = store.waiters("export")
        assert waiter.name == "export" and waiter.pid == os.getpid()
        assert waiter.waited >= 0 and waiter.waiting_since.timestamp() > 0

        families = scrape(served)
        holder.close()
        waiting.join(timeout=60)

    assert families["fencelock_grants"][0][1] >= 1
    assert families["fencelock_lock_held_seconds"][0][0]["lock"] == "export"
    assert families["fencelock_lock_held_seconds"][0][1] >= 0
    (labels, value), = families["fencelock_lock_waiters"]
    assert (labels["lock"], labels["store"], value) == ("export", str(store_path), 1)
