package fencelock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock-go"
)

var bg = context.Background()

func openStore(t testing.TB, opts ...fencelock.OpenOption) *fencelock.Store {
	t.Helper()
	store, err := fencelock.Open(filepath.Join(t.TempDir(), "locks.db"), opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

func acquire(t testing.TB, locks fencelock.Locker, name string, opts ...fencelock.AcquireOption) fencelock.Holder {
	t.Helper()
	holder, err := locks.Acquire(bg, name, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", name, err)
	}
	t.Cleanup(func() { _ = holder.Release() })
	return holder
}

// waitFor polls cond until it holds. It has no time limit on purpose: the events it waits for
// (a lease running out, a renewal) always come, and `go test -timeout` catches a hang.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		time.Sleep(2 * time.Millisecond)
	}
	t.Logf("observed: %s", what)
}

func TestVersion(t *testing.T) {
	v := fencelock.Version()
	var major, minor, patch int
	if _, err := fmt.Sscanf(v, "%d.%d.%d", &major, &minor, &patch); err != nil {
		t.Fatalf("Version() = %q: %v", v, err)
	}
	if n := fencelock.VersionNumber(); n != major*1000000+minor*1000+patch || n != fencelock.HeaderVersionNumber {
		t.Errorf("VersionNumber() = %d for Version() %q, HeaderVersionNumber %d", n, v, fencelock.HeaderVersionNumber)
	}
}

func TestAcquireGrantsIncreasingTokensAndRefusesContention(t *testing.T) {
	store := openStore(t)
	first := acquire(t, store, "payment-export")
	if first.Name() != "payment-export" || first.Token() == 0 {
		t.Fatalf("holder %q token %d", first.Name(), first.Token())
	}

	_, err := store.Acquire(bg, "payment-export", fencelock.WithTTL(time.Minute))
	if !errors.Is(err, fencelock.ErrLocked) {
		t.Fatalf("second Acquire: %v, want ErrLocked", err)
	}
	var locked *fencelock.LockedError
	if !errors.As(err, &locked) {
		t.Fatalf("%T is not a *LockedError", err)
	}
	if locked.Token != first.Token() || locked.PID != uint32(os.Getpid()) ||
		locked.Remaining <= 0 || locked.Remaining > fencelock.DefaultTTL {
		t.Fatalf("LockedError %+v, holder token %d, pid %d", locked, first.Token(), os.Getpid())
	}

	other := acquire(t, store, "another-lock")
	if other.Token() <= first.Token() {
		t.Fatalf("token %d after %d", other.Token(), first.Token())
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	again := acquire(t, store, "payment-export")
	if again.Token() <= other.Token() {
		t.Fatalf("token %d after %d", again.Token(), other.Token())
	}
}

func TestReleaseIsIdempotentAndEndsTheHolder(t *testing.T) {
	store := openStore(t)
	holder := acquire(t, store, "job")
	lost := holder.Lost()
	for i := 0; i < 3; i++ {
		if err := holder.Release(); err != nil {
			t.Fatalf("Release #%d: %v", i+1, err)
		}
	}
	<-lost // closed by Release
	if held, err := holder.Held(bg); held || err != nil {
		t.Fatalf("Held after Release: %v, %v", held, err)
	}
	var lostErr *fencelock.LockLostError
	if err := holder.Put(bg, "k", []byte("v")); !errors.As(err, &lostErr) || lostErr.Token != holder.Token() {
		t.Fatalf("Put after Release: %v", err)
	}
	if _, err := holder.Delete(bg, "k"); !errors.Is(err, fencelock.ErrLockLost) {
		t.Fatalf("Delete after Release: %v", err)
	}
	if err := holder.Extend(bg, time.Minute); !errors.Is(err, fencelock.ErrLockLost) {
		t.Fatalf("Extend after Release: %v", err)
	}
	if holder.Token() == 0 || holder.Name() != "job" {
		t.Fatal("Token and Name must survive Release")
	}
	acquire(t, store, "job")
}

func TestPutWithFenceRefusesStaleTokens(t *testing.T) {
	store := openStore(t)
	old := acquire(t, store, "export")
	if err := old.Release(); err != nil {
		t.Fatal(err)
	}
	current := acquire(t, store, "export")

	if err := store.PutWithFence(bg, "payments/today.csv", []byte("new"), current.Token()); err != nil {
		t.Fatal(err)
	}
	// An equal token is accepted: one holder writes many times.
	if err := store.PutWithFence(bg, "payments/today.csv", []byte("newer"), current.Token()); err != nil {
		t.Fatal(err)
	}
	err := store.PutWithFence(bg, "payments/today.csv", []byte("stale"), old.Token())
	var stale *fencelock.StaleTokenError
	if !errors.Is(err, fencelock.ErrStaleToken) || !errors.As(err, &stale) {
		t.Fatalf("stale put: %v", err)
	}
	if stale.Token != old.Token() || stale.Highest != current.Token() {
		t.Fatalf("StaleTokenError %+v, want token %d highest %d", stale, old.Token(), current.Token())
	}
	value, token, err := store.Get(bg, "payments/today.csv")
	if err != nil || string(value) != "newer" || token != current.Token() {
		t.Fatalf("Get = %q, %d, %v", value, token, err)
	}
}

func TestGetDistinguishesMissingFromEmpty(t *testing.T) {
	store := openStore(t)
	holder := acquire(t, store, "w")
	if _, _, err := store.Get(bg, "missing"); !errors.Is(err, fencelock.ErrNotFound) {
		t.Fatalf("Get missing: %v", err)
	}
	if err := store.PutWithFence(bg, "empty", nil, holder.Token()); err != nil {
		t.Fatal(err)
	}
	value, token, err := store.Get(bg, "empty")
	if err != nil || value == nil || len(value) != 0 || token != holder.Token() {
		t.Fatalf("Get empty = %#v, %d, %v", value, token, err)
	}
}

func TestKeysAreBinarySafe(t *testing.T) {
	store := openStore(t)
	holder := acquire(t, store, "w")
	keys := []string{"a\x00b", "a\x00c", "a\xff", "b"}
	for i, key := range keys {
		value := bytes.Repeat([]byte{byte(i), 0}, i+1)
		if err := store.PutWithFence(bg, key, value, holder.Token()); err != nil {
			t.Fatalf("put %q: %v", key, err)
		}
		got, _, err := store.Get(bg, key)
		if err != nil || !bytes.Equal(got, value) {
			t.Fatalf("get %q = %v, %v; want %v", key, got, err, value)
		}
	}
	all, err := store.Keys(bg, "")
	if err != nil || !reflect.DeepEqual(all, keys) {
		t.Fatalf("Keys(\"\") = %q, %v", all, err)
	}
	prefixed, err := store.Keys(bg, "a\x00")
	if err != nil || !reflect.DeepEqual(prefixed, keys[:2]) {
		t.Fatalf("Keys(\"a\\x00\") = %q, %v", prefixed, err)
	}
}

func TestDeleteIsFenced(t *testing.T) {
	store := openStore(t)
	old := acquire(t, store, "w")
	_ = old.Release()
	current := acquire(t, store, "w")
	if err := store.PutWithFence(bg, "k", []byte("v"), current.Token()); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Delete(bg, "k", old.Token()); !errors.Is(err, fencelock.ErrStaleToken) {
		t.Fatalf("stale Delete: %v", err)
	}
	if existed, err := store.Delete(bg, "k", current.Token()); !existed || err != nil {
		t.Fatalf("Delete = %v, %v", existed, err)
	}
	if existed, err := store.Delete(bg, "k", current.Token()); existed || err != nil {
		t.Fatalf("second Delete = %v, %v", existed, err)
	}
	if _, _, err := store.Get(bg, "k"); !errors.Is(err, fencelock.ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
}

func TestHolderWritesAreCheckedAgainstItsLease(t *testing.T) {
	store := openStore(t)
	holder := acquire(t, store, "w")
	if err := holder.Put(bg, "k", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	value, token, err := store.Get(bg, "k")
	if err != nil || string(value) != "v1" || token != holder.Token() {
		t.Fatalf("Get = %q, %d, %v", value, token, err)
	}
	if existed, err := holder.Delete(bg, "k"); !existed || err != nil {
		t.Fatalf("holder Delete = %v, %v", existed, err)
	}
	if held, err := holder.Held(bg); !held || err != nil {
		t.Fatalf("Held = %v, %v", held, err)
	}
}

func TestExpiredHolderIsRefusedAfterTakeover(t *testing.T) {
	store := openStore(t)
	stale := acquire(t, store, "w", fencelock.WithTTL(20*time.Millisecond))
	lost := stale.Lost()
	waitFor(t, "the short lease ran out", func() bool {
		held, err := stale.Held(bg)
		if err != nil {
			t.Fatal(err)
		}
		return !held
	})
	<-lost // closed when the TTL passed without renewal
	fresh := acquire(t, store, "w")

	err := stale.Put(bg, "k", []byte("late"))
	var lostErr *fencelock.LockLostError
	if !errors.As(err, &lostErr) || !errors.Is(err, fencelock.ErrLockLost) {
		t.Fatalf("stale Put: %v", err)
	}
	if lostErr.Token != stale.Token() || lostErr.Current != fresh.Token() {
		t.Fatalf("LockLostError %+v, want token %d current %d", lostErr, stale.Token(), fresh.Token())
	}
	if err := stale.Extend(bg, time.Minute); !errors.Is(err, fencelock.ErrLockLost) {
		t.Fatalf("stale Extend: %v", err)
	}
	if _, _, err := store.Get(bg, "k"); !errors.Is(err, fencelock.ErrNotFound) {
		t.Fatalf("the stale write landed: %v", err)
	}

	// The stale holder's first Release says the lease was lost; the second is a no-op, and
	// neither touches the successor's lease, whose own Release is quiet.
	err = stale.Release()
	if !errors.As(err, &lostErr) || lostErr.Token != stale.Token() || lostErr.Current != fresh.Token() {
		t.Fatalf("stale Release: %v, want a LockLostError of token %d current %d", err, stale.Token(), fresh.Token())
	}
	if err := stale.Release(); err != nil {
		t.Fatalf("second stale Release: %v", err)
	}
	if held, err := fresh.Held(bg); !held || err != nil {
		t.Fatalf("the successor after the stale release: Held = %v, %v", held, err)
	}
	if err := fresh.Release(); err != nil {
		t.Fatalf("live Release: %v", err)
	}
}

func TestExtendMovesTheExpiry(t *testing.T) {
	store := openStore(t)
	holder := acquire(t, store, "w", fencelock.WithTTL(time.Minute))
	before := lockInfo(t, store, "w").ExpiresAt
	if err := holder.Extend(bg, time.Hour); err != nil {
		t.Fatal(err)
	}
	after := lockInfo(t, store, "w").ExpiresAt
	if after.Sub(before) < 50*time.Minute {
		t.Fatalf("expiry moved from %v to %v", before, after)
	}
}

func TestRemainingIsTheTimeLeftOnTheLease(t *testing.T) {
	store := openStore(t)
	holder := acquire(t, store, "rem", fencelock.WithTTL(time.Minute)).(fencelock.RemainingHolder)
	if left := holder.Remaining(); left <= 0 || left > time.Minute {
		t.Fatalf("Remaining right after the acquire = %v, want in (0, 1m]", left)
	}
	brief := acquire(t, store, "rem-brief", fencelock.WithTTL(50*time.Millisecond)).(fencelock.RemainingHolder)
	time.Sleep(150 * time.Millisecond) // the 50 ms lease runs out
	if left := brief.Remaining(); left != 0 {
		t.Fatalf("Remaining after expiry = %v, want 0", left)
	}
	if err := holder.Release(); err != nil {
		t.Fatal(err)
	}
	if left := holder.Remaining(); left != 0 {
		t.Fatalf("Remaining after Release = %v, want 0", left)
	}
}

func lockInfo(t testing.TB, store *fencelock.Store, name string) fencelock.LockInfo {
	t.Helper()
	locks, err := store.Locks(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range locks {
		if info.Name == name {
			return info
		}
	}
	t.Fatalf("no lock %q in %+v", name, locks)
	return fencelock.LockInfo{}
}

func TestKeepAliveRenewsUntilRelease(t *testing.T) {
	store := openStore(t)
	holder := acquire(t, store, "w", fencelock.WithTTL(3*time.Second), fencelock.KeepAlive())
	first := lockInfo(t, store, "w").ExpiresAt
	waitFor(t, "a background renewal", func() bool {
		return lockInfo(t, store, "w").ExpiresAt.After(first)
	})
	select {
	case <-holder.Lost():
		t.Fatal("Lost closed while the keep-alive renews")
	default:
	}
	if err := holder.Release(); err != nil {
		t.Fatal(err)
	}
	<-holder.Lost()
	if info := lockInfo(t, store, "w"); info.State != fencelock.LockReleased {
		t.Fatalf("state after Release: %v", info.State)
	}
}

func TestKeepAliveRefusesTooShortTTLAndLeavesTheLockFree(t *testing.T) {
	store := openStore(t)
	_, err := store.Acquire(bg, "w", fencelock.WithTTL(time.Millisecond), fencelock.KeepAlive())
	if !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("KeepAlive with 1ms TTL: %v", err)
	}
	acquire(t, store, "w")
}

func TestWaitingAcquireGetsTheLockOnRelease(t *testing.T) {
	store := openStore(t)
	first := acquire(t, store, "w", fencelock.WithTTL(time.Hour))
	got := make(chan fencelock.Holder)
	go func() {
		holder, err := store.Acquire(bg, "w", fencelock.Wait())
		if err != nil {
			t.Error(err)
		}
		got <- holder
	}()
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if second == nil || second.Token() <= first.Token() {
		t.Fatalf("waiter got %v after token %d", second, first.Token())
	}
	_ = second.Release()
}

func TestWaitingAcquireHonoursDeadlineAndCancel(t *testing.T) {
	store := openStore(t)
	acquire(t, store, "w", fencelock.WithTTL(time.Hour))

	ctx, cancel := context.WithTimeout(bg, 30*time.Millisecond)
	defer cancel()
	_, err := store.Acquire(ctx, "w", fencelock.Wait())
	if !errors.Is(err, fencelock.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v", err)
	}

	// Many waiters: one waits in C, the rest at the gate; cancel reaches all of them.
	ctx, cancel = context.WithCancel(bg)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := store.Acquire(ctx, "w", fencelock.Wait())
			errs <- err
		}()
	}
	time.Sleep(20 * time.Millisecond)
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, context.Canceled) || errors.Is(err, fencelock.ErrTimeout) {
			t.Fatalf("canceled waiter: %v", err)
		}
	}

	if _, err := store.Acquire(ctx, "free", fencelock.Wait()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a done ctx: %v", err)
	}
	if err := store.PutWithFence(ctx, "k", nil, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("PutWithFence with a done ctx: %v", err)
	}
}

// passedDeadline is a ctx whose deadline has passed but whose timer has not fired yet, as a
// context.WithTimeout's is for a moment (longer on a loaded machine): Err is still nil.
type passedDeadline struct{ context.Context }

func (passedDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// A call that does not wait, a write above all, refuses to start once its ctx is canceled or
// its deadline passed, also before ctx's timer fired, and then writes nothing.
func TestCallsRefuseToStartPastTheirDeadline(t *testing.T) {
	store := openStore(t)
	holder := acquire(t, store, "job")
	if err := holder.Put(bg, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(bg)
	cancel()
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"PutWithFence", func(ctx context.Context) error {
			return store.PutWithFence(ctx, "k", []byte("late"), holder.Token())
		}},
		{"Delete", func(ctx context.Context) error { _, err := store.Delete(ctx, "k", holder.Token()); return err }},
		{"Fence", func(ctx context.Context) error { return store.Fence(ctx, "printer", holder.Token()) }},
		{"Acquire", func(ctx context.Context) error { _, err := store.Acquire(ctx, "other"); return err }},
		{"AcquireAll", func(ctx context.Context) error { _, err := store.AcquireAll(ctx, []string{"other"}); return err }},
		{"AcquireAndPut", func(ctx context.Context) error {
			_, err := store.AcquireAndPut(ctx, "other", "k2", []byte("late"))
			return err
		}},
		{"Holder.Put", func(ctx context.Context) error { return holder.Put(ctx, "k", []byte("late")) }},
		{"Holder.Delete", func(ctx context.Context) error { _, err := holder.Delete(ctx, "k"); return err }},
		{"Holder.Extend", func(ctx context.Context) error { return holder.Extend(ctx, time.Hour) }},
		{"Get", func(ctx context.Context) error { _, _, err := store.Get(ctx, "k"); return err }},
		{"Holder.Held", func(ctx context.Context) error { _, err := holder.Held(ctx); return err }},
	}
	for _, done := range []struct {
		ctx  context.Context
		want error
	}{{passedDeadline{bg}, context.DeadlineExceeded}, {canceled, context.Canceled}} {
		for _, c := range calls {
			if err := c.call(done.ctx); !errors.Is(err, done.want) {
				t.Errorf("%s with a ctx that is %v: %v", c.name, done.want, err)
			}
		}
	}
	if value, token, err := store.Get(bg, "k"); err != nil || string(value) != "v" || token != holder.Token() {
		t.Errorf("Get = %q, %d, %v: want v at token %d", value, token, err, holder.Token())
	}
	if token, err := store.FenceToken(bg, "printer"); err != nil || token != 0 {
		t.Errorf("FenceToken = %d, %v: want none", token, err)
	}
	if other := acquire(t, store, "other"); other.Token() != holder.Token()+1 {
		t.Errorf("a grant was made: the next token is %d after %d", other.Token(), holder.Token())
	}
}

// A deadline always gives an error that matches both ErrTimeout and context.DeadlineExceeded,
// including when the C wait ends a hair before ctx's own timer fires (the sliced wait of an
// earlier version then gave "%!w(<nil>)" about a third of the time).
func TestWaitingAcquireDeadlineAlwaysMatchesBoth(t *testing.T) {
	store := openStore(t)
	holder := acquire(t, store, "w", fencelock.WithTTL(time.Hour))
	for i := 0; i < 50; i++ {
		ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
		_, err := store.Acquire(ctx, "w", fencelock.Wait())
		cancel()
		if !errors.Is(err, fencelock.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) ||
			strings.Contains(err.Error(), "%!") {
			t.Fatalf("try %d: %v", i+1, err)
		}
	}
	if held, err := holder.Held(bg); err != nil || !held {
		t.Fatalf("holder after the timed-out waits: held %v, %v", held, err)
	}
}

// A cancel ends the one C call of a waiting Acquire at once and grants nothing.
func TestCancelEndsAWaitingAcquireAndGrantsNothing(t *testing.T) {
	store := openStore(t)
	holder := acquire(t, store, "w", fencelock.WithTTL(time.Hour))
	for _, deadline := range []bool{false, true} {
		ctx, cancel := context.WithCancel(bg)
		if deadline {
			ctx, cancel = context.WithTimeout(bg, time.Hour)
		}
		var cancelled time.Time
		time.AfterFunc(50*time.Millisecond, func() { cancelled = time.Now(); cancel() })
		_, err := store.Acquire(ctx, "w", fencelock.Wait())
		ended := time.Since(cancelled)
		if !errors.Is(err, context.Canceled) || errors.Is(err, fencelock.ErrTimeout) {
			t.Fatalf("deadline %v: %v", deadline, err)
		}
		t.Logf("deadline %v: the wait ended %v after the cancel", deadline, ended)
	}
	if err := holder.Release(); err != nil {
		t.Fatal(err)
	}
	next := acquire(t, store, "w")
	if next.Token() != holder.Token()+1 {
		t.Fatalf("token %d after %d: a cancelled wait was granted the lock", next.Token(), holder.Token())
	}
}

// Close ends a waiting Acquire at once instead of waiting for it.
func TestCloseEndsAWaitingAcquire(t *testing.T) {
	store := openStore(t)
	acquire(t, store, "w", fencelock.WithTTL(time.Hour))
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ { // one waits in C, one at the gate
		go func() {
			_, err := store.Acquire(bg, "w", fencelock.Wait())
			errs <- err
		}()
	}
	time.Sleep(50 * time.Millisecond)
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; !errors.Is(err, fencelock.ErrClosed) {
			t.Fatalf("waiter after Close: %v", err)
		}
	}
}

func TestBusyTimeoutOption(t *testing.T) {
	if _, err := fencelock.Open(filepath.Join(t.TempDir(), "x.db"), fencelock.WithBusyTimeout(-time.Second)); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("negative busy timeout: %v", err)
	}
	store := openStore(t, fencelock.WithBusyTimeout(time.Second))
	acquire(t, store, "w")
}

func TestAcquireAndPutIsAtomic(t *testing.T) {
	store := openStore(t)
	holder, err := store.AcquireAndPut(bg, "w", "k", []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	value, token, err := store.Get(bg, "k")
	if err != nil || string(value) != "v" || token != holder.Token() {
		t.Fatalf("Get = %q, %d, %v", value, token, err)
	}
	if _, err := store.AcquireAndPut(bg, "w", "k", []byte("other")); !errors.Is(err, fencelock.ErrLocked) {
		t.Fatalf("contended AcquireAndPut: %v", err)
	}
	if value, _, _ := store.Get(bg, "k"); string(value) != "v" {
		t.Fatalf("a refused AcquireAndPut wrote %q", value)
	}
	// With Wait it waits its turn, and writes nothing while it waits.
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	if _, err := store.AcquireAndPut(ctx, "w", "k", []byte("late"), fencelock.Wait()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireAndPut with Wait on a held lock: %v", err)
	}
	if value, _, _ := store.Get(bg, "k"); string(value) != "v" {
		t.Fatalf("a timed-out AcquireAndPut wrote %q", value)
	}
	_ = holder.Release()
	next, err := store.AcquireAndPut(bg, "w", "k", []byte("next"), fencelock.Wait())
	if err != nil {
		t.Fatal(err)
	}
	if value, token, _ := store.Get(bg, "k"); string(value) != "next" || token != next.Token() {
		t.Fatalf("Get after a waiting AcquireAndPut = %q, %d", value, token)
	}
	_ = next.Release()
	if _, err := store.AcquireAndPut(bg, "w", "k", nil, fencelock.Shared()); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("AcquireAndPut Shared: %v", err)
	}
}

func TestFenceGuardsAnExternalResource(t *testing.T) {
	store := openStore(t)
	old := acquire(t, store, "w")
	_ = old.Release()
	current := acquire(t, store, "w")
	if err := store.Fence(bg, "s3://bucket", current.Token()); err != nil {
		t.Fatal(err)
	}
	if err := store.Fence(bg, "s3://bucket", current.Token()); err != nil {
		t.Fatalf("equal token: %v", err)
	}
	var stale *fencelock.StaleTokenError
	if err := store.Fence(bg, "s3://bucket", old.Token()); !errors.As(err, &stale) || stale.Highest != current.Token() {
		t.Fatalf("stale Fence: %v", err)
	}
}

func TestLocksReportsState(t *testing.T) {
	store := openStore(t)
	holder := acquire(t, store, "w", fencelock.WithTTL(time.Hour))
	info := lockInfo(t, store, "w")
	if info.Token != holder.Token() || info.PID != uint32(os.Getpid()) || info.State != fencelock.LockHeld ||
		info.Remaining <= 0 || !info.ExpiresAt.After(info.GrantedAt) {
		t.Fatalf("held lock: %+v", info)
	}
	if info.State.String() != "held" {
		t.Fatalf("State.String() = %q", info.State.String())
	}
	_ = holder.Release()
	if info := lockInfo(t, store, "w"); info.State != fencelock.LockReleased {
		t.Fatalf("released lock: %+v", info)
	}
}

func TestBadInputGivesInvalidArgument(t *testing.T) {
	store := openStore(t, fencelock.WithMaxValueLen(8))
	holder := acquire(t, store, "w")
	cases := map[string]error{}
	_, cases["empty name"] = store.Acquire(bg, "")
	_, cases["NUL in name"] = store.Acquire(bg, "a\x00b")
	_, cases["negative ttl"] = store.Acquire(bg, "x", fencelock.WithTTL(-time.Second))
	_, cases["ttl over 30 days"] = store.Acquire(bg, "x", fencelock.WithTTL(31*24*time.Hour))
	cases["empty key"] = store.PutWithFence(bg, "", []byte("v"), holder.Token())
	cases["value over the limit"] = store.PutWithFence(bg, "k", make([]byte, 9), holder.Token())
	cases["token 0"] = store.PutWithFence(bg, "k", []byte("v"), 0)
	cases["token never granted"] = store.Fence(bg, "r", holder.Token()+1000)
	cases["holder put over the limit"] = holder.Put(bg, "k", make([]byte, 9))
	cases["NUL in fence resource"] = store.Fence(bg, "r\x00", holder.Token())
	for what, err := range cases {
		var typed *fencelock.Error
		if !errors.Is(err, fencelock.ErrInvalidArgument) || !errors.As(err, &typed) || typed.Message == "" {
			t.Errorf("%s: %v, want ErrInvalidArgument", what, err)
		}
	}
	if err := store.PutWithFence(bg, "k", make([]byte, 8), holder.Token()); err != nil {
		t.Fatalf("value at the limit: %v", err)
	}
}

func TestOpenRefusesForeignFilesAndDirectories(t *testing.T) {
	dir := t.TempDir()
	foreign := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(foreign, []byte("not a database, just some text"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := fencelock.Open(foreign); !errors.Is(err, fencelock.ErrNotAStore) {
		t.Fatalf("Open(text file): %v", err)
	}
	if content, _ := os.ReadFile(foreign); string(content) != "not a database, just some text" {
		t.Fatal("Open modified a foreign file")
	}
	if _, err := fencelock.Open(dir); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("Open(directory): %v", err)
	}
	if _, err := fencelock.Open(filepath.Join(dir, "a\x00b")); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("Open(NUL path): %v", err)
	}
	if _, err := fencelock.Open(filepath.Join(dir, "missing-dir", "locks.db")); !errors.Is(err, fencelock.ErrIO) {
		t.Fatalf("Open in a missing directory: %v", err)
	}
}

func TestClosedStoreRefusesCallsAndHoldersOutliveIt(t *testing.T) {
	store := openStore(t)
	holder := acquire(t, store, "w")
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, err1 := store.Acquire(bg, "x")
	_, err2 := store.Acquire(bg, "x", fencelock.Wait())
	_, err3 := store.AcquireAndPut(bg, "x", "k", nil)
	err4 := store.PutWithFence(bg, "k", nil, 1)
	_, _, err5 := store.Get(bg, "k")
	_, err6 := store.Delete(bg, "k", 1)
	err7 := store.Fence(bg, "r", 1)
	_, err8 := store.Locks(bg)
	_, err9 := store.Keys(bg, "")
	for i, err := range []error{err1, err2, err3, err4, err5, err6, err7, err8, err9} {
		if !errors.Is(err, fencelock.ErrClosed) {
			t.Errorf("call %d after Close: %v", i+1, err)
		}
	}
	if err := holder.Put(bg, "k", []byte("v")); err != nil {
		t.Fatalf("holder Put after store Close: %v", err)
	}
	if err := holder.Release(); err != nil {
		t.Fatalf("holder Release after store Close: %v", err)
	}
}

func TestSingleProcessModeExcludesASecondOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.db")
	store, err := fencelock.Open(path, fencelock.WithMode(fencelock.SingleProcess))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fencelock.Open(path, fencelock.WithMode(fencelock.SingleProcess)); !errors.Is(err, fencelock.ErrInUse) {
		t.Fatalf("second open: %v", err)
	}
	_ = store.Close()
	again, err := fencelock.Open(path, fencelock.WithMode(fencelock.SingleProcess))
	if err != nil {
		t.Fatalf("open after Close: %v", err)
	}
	_ = again.Close()
}

func TestReadOnlyStoreReadsAndRefusesWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "locks.db")
	store, err := fencelock.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	holder := acquire(t, store, "job")
	if err := holder.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	reader, err := fencelock.Open(path, fencelock.WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	value, token, err := reader.Get(ctx, "k")
	if err != nil || string(value) != "v" || token != holder.Token() {
		t.Fatalf("Get = %q, %d, %v", value, token, err)
	}
	if _, err := reader.Acquire(ctx, "other"); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("Acquire on a read-only store: %v", err)
	}
	if err := reader.PutWithFence(ctx, "k", []byte("w"), holder.Token()); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("PutWithFence on a read-only store: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "missing.db")
	if _, err := fencelock.Open(missing, fencelock.WithReadOnly()); err == nil {
		t.Fatal("a read-only open of a missing store succeeded")
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("a read-only open created %s", missing)
	}
}

// Goroutines are not OS threads: a waiting Acquire of a lock that the same goroutine holds is
// not refused as a self-deadlock (the library's FENCELOCK_WOULD_DEADLOCK is for threads); it
// waits as any waiter does, here until its deadline, and another goroutine's wait is granted
// at the release.
func TestAWaitForALockThisGoroutineHoldsWaitsAsAnyWaiter(t *testing.T) {
	store := openStore(t)
	holder := acquire(t, store, "job")
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	_, err := store.Acquire(ctx, "job", fencelock.Wait())
	if !errors.Is(err, fencelock.ErrTimeout) || errors.Is(err, fencelock.ErrWouldDeadlock) {
		t.Fatalf("a wait for the goroutine's own lease: %v, want ErrTimeout", err)
	}
	granted := make(chan error, 1)
	go func() {
		h, err := store.Acquire(bg, "job", fencelock.Wait())
		if err == nil {
			err = h.Release()
		}
		granted <- err
	}()
	if err := holder.Release(); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatalf("another goroutine's wait: %v", err)
	}
}
