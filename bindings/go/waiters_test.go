package fencelock_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencelock/fencelock-go"
)

// A wait through a second open of the store is queued; Waiters lists it with this process's
// pid, and it leaves the queue once granted.
func TestWaitersListsAQueuedAcquireOldestFirst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.db")
	store, err := fencelock.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	other, err := fencelock.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	holder := acquire(t, store, "export", fencelock.WithTTL(time.Hour))
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	granted := make(chan error, 1)
	go func() {
		h, err := other.Acquire(ctx, "export", fencelock.Wait())
		if err == nil {
			err = h.Release()
		}
		granted <- err
	}()
	var waiters []fencelock.WaiterInfo
	waitFor(t, "a queued waiter", func() bool {
		waiters, err = store.Waiters(bg, "export")
		if err != nil {
			t.Fatal(err)
		}
		return len(waiters) == 1
	})
	w := waiters[0]
	if w.Name != "export" || w.PID != uint32(os.Getpid()) || w.Ticket == 0 || w.Waited < 0 ||
		w.WaitingSince.After(time.Now()) {
		t.Fatalf("waiter: %+v", w)
	}
	if err := holder.Release(); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	if waiters, err := store.Waiters(bg, "export"); err != nil || len(waiters) != 0 {
		t.Fatalf("after the grant: %+v, %v", waiters, err)
	}
	if _, err := store.Waiters(bg, ""); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("empty name: %v", err)
	}
}
