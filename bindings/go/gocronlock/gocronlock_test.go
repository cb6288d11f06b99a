package gocronlock_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencelock/fencelock-go"
	"github.com/fencelock/fencelock-go/gocronlock"
	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
)

var bg = context.Background()

// openStores opens n Stores of one file: as many processes, each with its own scheduler.
func openStores(t *testing.T, n int) []*fencelock.Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "locks.db")
	var stores []*fencelock.Store
	for range n {
		store, err := fencelock.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		stores = append(stores, store)
	}
	return stores
}

func TestARunHoldsTheJobsLockUntilItEnds(t *testing.T) {
	stores := openStores(t, 2)
	a, b := gocronlock.New(stores[0]), gocronlock.New(stores[1])
	run, err := a.Lock(bg, "export")
	if err != nil {
		t.Fatal(err)
	}
	holder, ok := a.Holder("export")
	if !ok || holder.Name() != "export" {
		t.Fatalf("Holder during the run: %v, %v", holder, ok)
	}
	if _, err := b.Lock(bg, "export"); !errors.Is(err, fencelock.ErrLocked) {
		t.Fatalf("the other scheduler's run: %v", err)
	}
	if err := run.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Holder("export"); ok {
		t.Fatal("Holder after the run ended")
	}
	next, err := b.Lock(bg, "export")
	if err != nil {
		t.Fatalf("the other scheduler's run once the first ended: %v", err)
	}
	if later, _ := b.Holder("export"); later.Token() <= holder.Token() {
		t.Fatalf("tokens %d then %d", holder.Token(), later.Token())
	}
	_ = next.Unlock(bg)
}

func TestTheLeaseIsRenewedWhileTheRunLasts(t *testing.T) {
	stores := openStores(t, 1)
	locker := gocronlock.New(stores[0], fencelock.WithTTL(300*time.Millisecond))
	run, err := locker.Lock(bg, "long")
	if err != nil {
		t.Fatal(err)
	}
	defer run.Unlock(bg)
	time.Sleep(time.Second) // three leases: without renewal it would have expired
	holder, _ := locker.Holder("long")
	if held, err := holder.Held(bg); err != nil || !held {
		t.Fatalf("held after three TTLs: %v, %v", held, err)
	}
}

// Two gocron schedulers, as in two processes, with the same job: while the first one's run
// goes on, the second one's is skipped with ErrLocked; the job fences its write with its
// run's token.
func TestTwoSchedulersRunAJobOneAtATime(t *testing.T) {
	stores := openStores(t, 2)
	started, finish, done := make(chan uint64, 1), make(chan struct{}), make(chan struct{})
	skipped := make(chan error, 1)
	newScheduler := func(store *fencelock.Store, job func(*gocronlock.Locker)) {
		locker := gocronlock.New(store)
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Shutdown() })
		_, err = s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
			gocron.NewTask(func() { job(locker) }),
			gocron.WithName("export"),
			gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) { skipped <- err })))
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
	}
	newScheduler(stores[0], func(locker *gocronlock.Locker) {
		defer close(done)
		holder, ok := locker.Holder("export")
		if !ok {
			t.Error("no Holder in the job")
			return
		}
		started <- holder.Token()
		<-finish
		if err := stores[0].PutWithFence(bg, "export.csv", []byte("first"), holder.Token()); err != nil {
			t.Error(err)
		}
	})
	token := <-started
	newScheduler(stores[1], func(*gocronlock.Locker) { t.Error("the second scheduler ran the job") })
	if err := <-skipped; !errors.Is(err, fencelock.ErrLocked) {
		t.Fatalf("the second scheduler's run: %v", err)
	}
	close(finish)
	<-done
	if _, fence, err := stores[1].Get(bg, "export.csv"); err != nil || fence != token {
		t.Fatalf("the job's write: token %d, %v", fence, err)
	}
	// The run's lease ends with the run: gocron unlocks after the job returns.
	for {
		holder, err := stores[1].Acquire(bg, "export")
		if err == nil {
			_ = holder.Release()
			break
		}
		if !errors.Is(err, fencelock.ErrLocked) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
