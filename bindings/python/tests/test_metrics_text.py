"""The metrics' gauges, and their Prometheus text as the Prometheus client's own parser reads it:
every family with its type, every series labelled with the store (escaped) and scope, the wait
histogram consistent (cumulative buckets, `_count` equal to the `+Inf` bucket)."""

from __future__ import annotations

import math
import os

import pytest
from prometheus_client.parser import text_string_to_metric_families

import fencelock
from fencelock import Store

# The families of the text and their types; the parser names a counter without its `_total`.
FAMILIES = {
    "fencelock_grants": "counter",
    "fencelock_releases": "counter",
    "fencelock_refusals": "counter",
    "fencelock_lease_ends": "counter",
    "fencelock_commits": "counter",
    "fencelock_committed_operations": "counter",
    "fencelock_history_dropped": "counter",
    "fencelock_start_time_seconds": "gauge",
    "fencelock_live_leases": "gauge",
    "fencelock_queued_waiters": "gauge",
    "fencelock_file_size_bytes": "gauge",
    "fencelock_build_info": "gauge",
    "fencelock_wait_seconds": "histogram",
}


def test_the_gauges_count_live_leases_by_kind_and_the_files_bytes(store):
    held = [
        store.acquire("job", ttl=60),
        store.acquire("config", ttl=60, shared=True),
        store.acquire("config", ttl=60, shared=True),
        store.acquire("pool", ttl=60, permits=3),
    ]
    store.acquire("done", ttl=60).close()
    m = store.metrics()
    assert (m.live_exclusive, m.live_shared, m.live_permits, m.queued_waiters) == (1, 2, 1, 0)
    assert m.file_bytes == os.path.getsize(store.path) > 0
    for holder in held:
        holder.close()
    m = store.metrics()
    assert (m.live_exclusive, m.live_shared, m.live_permits) == (0, 0, 0)


def test_the_prometheus_text_parses_with_its_types_labels_and_a_consistent_histogram(tmp_path):
    # A path whose label value needs escaping.
    directory = tmp_path / 'a "quoted" \\ dir'
    directory.mkdir()
    with Store(directory / "locks.db") as store, Store(directory / "locks.db") as other:
        holder = other.acquire("m", ttl=60)  # another open's: a wait for it waits
        with pytest.raises(fencelock.LockTimeoutError):
            store.acquire("m", timeout=0.02)
        with pytest.raises(fencelock.LockedError):
            store.acquire("m")
        reader = store.acquire("r", ttl=60, shared=True)
        text = store.metrics_prometheus()
        path = str(store.path)
        holder.close()
        reader.close()

    families = {family.name: family for family in text_string_to_metric_families(text)}
    assert {name: family.type for name, family in families.items()} == FAMILIES
    samples = [sample for family in families.values() for sample in family.samples]
    for sample in samples:
        assert sample.labels["store"] == path, sample
        assert sample.labels["scope"] == "store", sample

    def value(name: str, **labels: str) -> float:
        (found,) = [
            s.value
            for s in samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]
        return found

    assert value("fencelock_refusals_total", reason="timeout") == 1
    assert value("fencelock_refusals_total", reason="locked") == 1
    assert value("fencelock_live_leases", kind="exclusive") == 1
    assert value("fencelock_live_leases", kind="shared") == 1
    assert value("fencelock_live_leases", kind="semaphore") == 0
    assert value("fencelock_build_info", version=fencelock.__version__) == 1
    assert value("fencelock_file_size_bytes") > 0

    buckets = [s for s in families["fencelock_wait_seconds"].samples if s.name.endswith("_bucket")]
    bounds = [float(s.labels["le"]) for s in buckets]
    assert bounds == sorted(bounds) and bounds[-1] == math.inf
    counts = [s.value for s in buckets]
    assert counts == sorted(counts), "cumulative"
    assert value("fencelock_wait_seconds_count") == counts[-1] == 1
    assert value("fencelock_wait_seconds_sum") >= 0.02 - 0.001
