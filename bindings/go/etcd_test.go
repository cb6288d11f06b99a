package fencelock_test

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock-go"
)

// The seed walkthrough on an etcd store, when the library is built with the etcd feature
// (FENCELOCK_FEATURES=etcd, as make test-go builds it, which also starts an etcd node through
// scripts/with-etcd.sh and passes it in FENCELOCK_ETCD_URL). A library built without it must
// refuse the etcd string with a clear error.
func TestTheWalkthroughRunsOnEtcd(t *testing.T) {
	if !slices.Contains(strings.Split(os.Getenv("FENCELOCK_FEATURES"), ","), "etcd") {
		_, err := fencelock.Open("etcd://127.0.0.1:2379/app")
		if !errors.Is(err, fencelock.ErrInvalidArgument) || !strings.Contains(err.Error(), "built without etcd support") {
			t.Fatalf("an etcd string without etcd support: %v", err)
		}
		return
	}
	url := os.Getenv("FENCELOCK_ETCD_URL")
	if url == "" {
		t.Fatal("FENCELOCK_ETCD_URL is not set: run through scripts/with-etcd.sh (make test-go)")
	}
	store, err := fencelock.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := store.Acquire(bg, "payment-export", fencelock.WithTTL(500*time.Millisecond)); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("a TTL below etcd's minimum: %v", err)
	}
	a, err := store.Acquire(bg, "payment-export", fencelock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	n := a.Token()
	// A is paused: it renews nothing, and etcd ends its lease; B waits for it.
	b, err := store.Acquire(bg, "payment-export", fencelock.WithTTL(30*time.Second), fencelock.Wait())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	if b.Token() <= n {
		t.Fatalf("B's token %d is not above A's %d", b.Token(), n)
	}
	const key = "payments/today.csv"
	if err := store.PutWithFence(bg, key, []byte("B's fresh export"), b.Token()); err != nil {
		t.Fatal(err)
	}
	if err := store.PutWithFence(bg, key, []byte("A's stale export"), n); !errors.Is(err, fencelock.ErrStaleToken) {
		t.Fatalf("A's write with token %d: %v", n, err)
	}
	if err := a.Put(bg, key, []byte("A's stale export")); !errors.Is(err, fencelock.ErrLockLost) {
		t.Fatalf("A's lease-checked write: %v", err)
	}
	value, token, err := store.Get(bg, key)
	if err != nil || string(value) != "B's fresh export" || token != b.Token() {
		t.Fatalf("the key holds %q with token %d (%v)", value, token, err)
	}
}
