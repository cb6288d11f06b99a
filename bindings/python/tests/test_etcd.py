"""The seed walkthrough on an etcd store, when the library is built with the etcd feature
($FENCELOCK_FEATURES=etcd, as make test-python builds it, which also starts an etcd node through
scripts/with-etcd.sh and passes it in $FENCELOCK_ETCD_URL). A library built without it must
refuse the etcd string with a clear error."""

from __future__ import annotations

import os
import time

import pytest

import fencelock

KEY = b"payments/today.csv"


def built_with_etcd() -> bool:
    return "etcd" in os.environ.get("FENCELOCK_FEATURES", "").split(",")


def test_the_walkthrough_runs_on_etcd() -> None:
    if not built_with_etcd():
        with pytest.raises(fencelock.InvalidArgumentError, match="built without etcd support"):
            fencelock.Store("etcd://127.0.0.1:2379/app")
        return
    url = os.environ.get("FENCELOCK_ETCD_URL")
    assert url, "FENCELOCK_ETCD_URL is not set: run through scripts/with-etcd.sh (make test-python)"
    with fencelock.Store(url) as store:
        with pytest.raises(fencelock.InvalidArgumentError, match="ttl"):
            store.acquire("payment-export", ttl=0.5)
        a = store.acquire("payment-export", ttl=2)
        n = a.token
        # A is paused: it renews nothing, and etcd ends its lease.
        while a.held():
            time.sleep(0.1)
        b = store.acquire("payment-export", ttl=30, timeout=30)
        assert b.token > n
        store.put(KEY, b"B's fresh export", b.token)
        with pytest.raises(fencelock.StaleTokenError) as stale:
            store.put(KEY, b"A's stale export", n)
        assert (stale.value.token, stale.value.highest) == (n, b.token)
        with pytest.raises(fencelock.LockLostError):
            a.put(KEY, b"A's stale export")
        got = store.get(KEY)
        assert got is not None
        assert (got.value, got.token) == (b"B's fresh export", b.token)
        b.release()
        a.close()


def test_an_etcd_store_keeps_no_metrics_history_or_observer() -> None:
    if not built_with_etcd():
        pytest.skip("the library is built without the etcd feature")
    url = os.environ.get("FENCELOCK_ETCD_URL")
    assert url, "FENCELOCK_ETCD_URL is not set: run through scripts/with-etcd.sh (make test-python)"
    with fencelock.Store(url) as store:
        for call in (
            store.metrics,
            store.metrics_prometheus,
            lambda: store.history("payment-export"),
            lambda: store.set_observer(print),
            lambda: store.set_observer(None),
        ):
            with pytest.raises(fencelock.InvalidArgumentError):
                call()
