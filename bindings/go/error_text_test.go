package fencelock_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock-go"
)

// A failed open reads as package os's: "open PATH: ..." with the path once, the system's error
// as syscall.Errno words it, and no Rust "(os error N)".
func TestAFailedOpenReadsAsOsOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-such-dir", "locks.db")
	store, err := fencelock.Open(path)
	if err == nil {
		store.Close()
		t.Fatal("Open of a path in a missing directory succeeded")
	}
	want := "open " + path + ": fencelock: I/O error: no such file or directory"
	if err.Error() != want {
		t.Errorf("Open: %q, want %q", err.Error(), want)
	}
}

// A held lock names the lock, in the text and in LockedError.Lock.
func TestAHeldLockNamesTheLock(t *testing.T) {
	store := openStore(t)
	holder := acquire(t, store, "payment-export")
	defer holder.Release()
	_, err := store.Acquire(context.Background(), "payment-export")
	var locked *fencelock.LockedError
	if !errors.As(err, &locked) || locked.Lock != "payment-export" {
		t.Fatalf("%v is not a *LockedError for lock payment-export", err)
	}
	if !strings.HasPrefix(err.Error(), `fencelock: lock "payment-export" is held by pid `) {
		t.Errorf("%q does not name the lock", err.Error())
	}
}

// A wait that times out names the lock and how long it waited.
func TestATimedOutWaitNamesTheLockAndTheWait(t *testing.T) {
	store := openStore(t)
	holder := acquire(t, store, "payment-export")
	defer holder.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := store.Acquire(ctx, "payment-export", fencelock.Wait())
	var waitErr *fencelock.WaitError
	if !errors.As(err, &waitErr) || waitErr.Waited <= 0 {
		t.Fatalf("%v is not a *WaitError with the time it waited", err)
	}
	want := "fencelock: timed out after " + waitErr.Waited.String() + ` waiting for lock "payment-export" (context deadline exceeded)`
	if err.Error() != want {
		t.Errorf("%q, want %q", err.Error(), want)
	}
}
