package fencelock_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock-go"
)

// mustPanic runs fn and returns what it panicked with; the test fails if it did not panic.
func mustPanic(t *testing.T, fn func()) (value any) {
	t.Helper()
	panicked := true
	defer func() {
		value = recover()
		if !panicked {
			t.Fatal("no panic")
		}
	}()
	fn()
	panicked = false
	return nil
}

func TestSyncLockerLocksTheStoreLockWithANewLeaseEachTime(t *testing.T) {
	store := openStore(t)
	var l sync.Locker = fencelock.NewSyncLocker(store, "job")
	sl := l.(*fencelock.SyncLocker)
	if sl.Holder() != nil {
		t.Fatal("a holder before Lock")
	}
	l.Lock()
	first := sl.Holder()
	if first == nil || first.Name() != "job" {
		t.Fatalf("holder while locked: %v", first)
	}
	if _, err := store.Acquire(bg, "job"); !errors.Is(err, fencelock.ErrLocked) {
		t.Fatalf("the store's lock while the SyncLocker holds it: %v", err)
	}
	l.Unlock()
	if sl.Holder() != nil {
		t.Fatal("a holder after Unlock")
	}
	acquire(t, store, "job").Release() // free again
	l.Lock()
	if second := sl.Holder(); second.Token() <= first.Token() {
		t.Fatalf("tokens %d then %d", first.Token(), second.Token())
	}
	l.Unlock()
}

// Goroutines sharing one SyncLocker take turns, as on a sync.Mutex.
func TestSyncLockerExcludesTheGoroutinesThatShareIt(t *testing.T) {
	l := fencelock.NewSyncLocker(openStore(t), "counter")
	var inside, most atomic.Int32
	count := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				l.Lock()
				enter(&inside, &most)
				count++
				time.Sleep(time.Millisecond) // stay inside, so that an overlap would be seen
				inside.Add(-1)
				l.Unlock()
			}
		}()
	}
	wg.Wait()
	if count != 40 || most.Load() != 1 {
		t.Fatalf("%d entries, at most %d inside at once", count, most.Load())
	}
}

// enter counts one more goroutine inside and records the most there have been.
func enter(inside, most *atomic.Int32) {
	n := inside.Add(1)
	for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
	}
}

// Two Stores of one file stand for two processes: only the lease excludes their SyncLockers.
func TestSyncLockersOfTwoStoresExcludeEachOther(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.db")
	var lockers []*fencelock.SyncLocker
	for range 2 {
		store, err := fencelock.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		lockers = append(lockers, fencelock.NewSyncLocker(store, "shared-file"))
	}
	var inside, most atomic.Int32
	var last atomic.Uint64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lockers[g%2]
			for range 5 {
				l.Lock()
				enter(&inside, &most)
				if token, prev := l.Holder().Token(), last.Swap(l.Holder().Token()); token <= prev {
					t.Errorf("token %d after %d", token, prev)
				}
				time.Sleep(time.Millisecond) // stay inside, so that an overlap would be seen
				inside.Add(-1)
				l.Unlock()
			}
		}()
	}
	wg.Wait()
	if most.Load() != 1 {
		t.Fatalf("%d holders inside at once", most.Load())
	}
}

func TestSyncLockerRenewsItsLeaseWhileLocked(t *testing.T) {
	store := openStore(t)
	l := fencelock.NewSyncLocker(store, "kept", fencelock.WithTTL(300*time.Millisecond))
	l.Lock()
	defer l.Unlock()
	time.Sleep(time.Second) // three leases: without renewal it would have expired
	if held, err := l.Holder().Held(bg); err != nil || !held {
		t.Fatalf("held after three TTLs: %v, %v", held, err)
	}
	if _, err := store.Acquire(bg, "kept"); !errors.Is(err, fencelock.ErrLocked) {
		t.Fatalf("another acquire while the SyncLocker holds the lock: %v", err)
	}
}

// sync.Locker cannot return errors: Lock and Unlock panic with them, as etcd's NewLocker does.
func TestSyncLockerPanicsWithTheError(t *testing.T) {
	store := openStore(t)
	l := fencelock.NewSyncLocker(store, "job")
	if value := mustPanic(t, l.Unlock); value == nil {
		t.Fatal("Unlock of an unlocked SyncLocker panicked with nil")
	}
	_ = store.Close()
	value := mustPanic(t, l.Lock)
	if err, ok := value.(error); !ok || !errors.Is(err, fencelock.ErrClosed) {
		t.Fatalf("Lock on a closed store panicked with %v", value)
	}
	mustPanic(t, func() { fencelock.NewSyncLocker(store, "job", fencelock.Shared()) })
	mustPanic(t, func() { fencelock.NewSyncLocker(store, "job", fencelock.Permits(2)) })
}

func TestSyncLockerWaitsAndKeepsAliveWithTheGivenTTL(t *testing.T) {
	fake := &fakeLocker{}
	l := fencelock.NewSyncLocker(fake, "job", fencelock.WithTTL(time.Minute))
	l.Lock()
	l.Unlock()
	if got := fake.settings[0]; !got.Wait || !got.KeepAlive || got.TTL != time.Minute {
		t.Fatalf("settings of the acquire: %+v", got)
	}
	if !fake.holders[0].released {
		t.Fatal("Unlock did not release the holder")
	}
}

// pausedFirst is a Locker whose first grant is not renewed and lasts only ttl, as the lease of
// a process paused past its TTL; later grants are the store's, as asked.
type pausedFirst struct {
	store   *fencelock.Store
	ttl     time.Duration
	granted atomic.Int32
	grants  chan fencelock.Holder // every grant after the first
}

func (p *pausedFirst) Acquire(ctx context.Context, name string, opts ...fencelock.AcquireOption) (fencelock.Holder, error) {
	if p.granted.Add(1) == 1 {
		paused := func(s *fencelock.AcquireSettings) { s.KeepAlive, s.TTL = false, p.ttl }
		return p.store.Acquire(ctx, name, append(opts, paused)...)
	}
	holder, err := p.store.Acquire(ctx, name, opts...)
	if err == nil {
		p.grants <- holder
	}
	return holder, err
}

// Goroutine A holds the lock and its lease runs out unrenewed (the process paused past the
// TTL) while goroutine B waits in Lock. A's late Unlock must not release B's lease, and B's
// own Unlock must work.
func TestALateUnlockOfALostLeaseLeavesTheNextLockersLease(t *testing.T) {
	store := openStore(t)
	locks := &pausedFirst{store: store, ttl: 100 * time.Millisecond, grants: make(chan fencelock.Holder, 1)}
	l := fencelock.NewSyncLocker(locks, "job", fencelock.WithTTL(time.Minute))
	l.Lock()
	a := l.Holder()

	bLocked := make(chan fencelock.Holder)
	bUnlock := make(chan struct{})
	bUnlocked := make(chan any)
	go func() {
		l.Lock()
		bLocked <- l.Holder()
		<-bUnlock
		defer func() { bUnlocked <- recover() }()
		l.Unlock()
	}()
	<-a.Lost() // A's lease ran out: another process could take the lock over now
	// Room for B to take the lock over first, were it to wait for the lease alone; a Lock that
	// waits for A's Unlock is never granted here, and the test goes on after a second.
	select {
	case <-locks.grants:
		waitFor(t, "B's Lock took the lock over", func() bool { return l.Holder() != a })
	case <-time.After(time.Second):
	}
	l.Unlock() // A's, late

	b := <-bLocked
	if b == a {
		t.Fatal("B locked with A's lease")
	}
	if held, err := b.Held(bg); err != nil || !held {
		t.Fatalf("B's lease after A's late Unlock: held %v, %v", held, err)
	}
	if _, err := store.Acquire(bg, "job"); !errors.Is(err, fencelock.ErrLocked) {
		t.Fatalf("another acquire while B is locked: %v", err)
	}
	close(bUnlock)
	if value := <-bUnlocked; value != nil {
		t.Fatalf("B's Unlock panicked: %v", value)
	}
	if held, err := b.Held(bg); err != nil || held {
		t.Fatalf("B's lease after B's Unlock: held %v, %v", held, err)
	}
}
