package fencelock_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock-go"
)

func kindOf(t *testing.T, h fencelock.Holder) (fencelock.Kind, uint32) {
	t.Helper()
	k, ok := h.(fencelock.KindHolder)
	if !ok {
		t.Fatalf("%T is not a KindHolder", h)
	}
	return k.Kind(), k.Permits()
}

func TestASemaphoreGrantsNPermitsEachWithAHigherToken(t *testing.T) {
	store := openStore(t)
	a := acquire(t, store, "pool", fencelock.Permits(2))
	b := acquire(t, store, "pool", fencelock.Permits(2))
	if b.Token() <= a.Token() {
		t.Fatalf("tokens %d then %d", a.Token(), b.Token())
	}
	if kind, permits := kindOf(t, a); kind != fencelock.KindSemaphore || permits != 2 {
		t.Fatalf("kind %v permits %d", kind, permits)
	}
	if _, err := store.Acquire(bg, "pool", fencelock.Permits(2)); !errors.Is(err, fencelock.ErrLocked) {
		t.Fatalf("a third permit of two: %v", err)
	}
	_, err := store.Acquire(bg, "pool", fencelock.Permits(3))
	var mismatch *fencelock.PermitsMismatchError
	if !errors.Is(err, fencelock.ErrPermitsMismatch) || !errors.As(err, &mismatch) ||
		mismatch.Permits != 2 || mismatch.Requested != 3 {
		t.Fatalf("another count: %v (%+v)", err, mismatch)
	}
	if err := b.Put(bg, "k", []byte("v")); err != nil {
		t.Fatalf("a permit's checked write: %v", err)
	}
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	c := acquire(t, store, "pool", fencelock.Permits(2), fencelock.Wait())
	if c.Token() <= b.Token() {
		t.Fatalf("token %d after %d", c.Token(), b.Token())
	}
	locks, err := store.Locks(bg)
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, info := range locks {
		if info.Name == "pool" && info.State == fencelock.LockHeld {
			if info.Kind != fencelock.KindSemaphore || info.Permits != 2 {
				t.Fatalf("%+v", info)
			}
			held++
		}
	}
	if held != 2 {
		t.Fatalf("%d held permits listed: %+v", held, locks)
	}
	if _, err := store.Acquire(bg, "other", fencelock.Permits(2), fencelock.Shared()); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("Shared and Permits: %v", err)
	}
	if _, err := store.Acquire(bg, "other", fencelock.Permits(fencelock.MaxHolders+1)); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("too many permits: %v", err)
	}
}

func TestSharedHoldersShareAndExcludeAnExclusiveOne(t *testing.T) {
	store := openStore(t)
	r1 := acquire(t, store, "config", fencelock.Shared())
	r2 := acquire(t, store, "config", fencelock.Shared())
	if kind, _ := kindOf(t, r2); kind != fencelock.KindShared || r2.Token() <= r1.Token() {
		t.Fatalf("kind %v tokens %d %d", kind, r1.Token(), r2.Token())
	}
	if _, err := store.Acquire(bg, "config"); !errors.Is(err, fencelock.ErrLocked) {
		t.Fatalf("exclusive while shared: %v", err)
	}
	if err := r1.Put(bg, "k", []byte("v")); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("a shared holder's checked write: %v", err)
	}
	_ = r1.Release()
	_ = r2.Release()
	w := acquire(t, store, "config")
	if kind, _ := kindOf(t, w); kind != fencelock.KindExclusive {
		t.Fatalf("kind %v", kind)
	}
	if _, err := store.Acquire(bg, "config", fencelock.Shared()); !errors.Is(err, fencelock.ErrLocked) {
		t.Fatalf("shared while exclusive: %v", err)
	}
}

func TestAWaitingExclusiveAcquireIsNotStarvedBySharedOnes(t *testing.T) {
	store := openStore(t)
	reader := acquire(t, store, "config", fencelock.Shared())
	done := make(chan fencelock.Holder)
	go func() {
		h, err := store.Acquire(bg, "config", fencelock.Wait())
		if err != nil {
			t.Error(err)
		}
		done <- h
	}()
	// Shared acquires join the reader until the writer is queued.
	for {
		h, err := store.Acquire(bg, "config", fencelock.Shared())
		if errors.Is(err, fencelock.ErrLocked) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		_ = h.Release()
		time.Sleep(time.Millisecond)
	}
	_ = reader.Release()
	writer := <-done
	if writer == nil {
		t.FailNow()
	}
	defer writer.Release()
	if writer.Token() <= reader.Token() {
		t.Fatalf("writer %d after reader %d", writer.Token(), reader.Token())
	}
}

func TestAcquireAllIsAllOrNoneWithATokenPerName(t *testing.T) {
	store := openStore(t)
	b := acquire(t, store, "b")
	if _, err := store.AcquireAll(bg, []string{"a", "b"}); !errors.Is(err, fencelock.ErrLocked) {
		t.Fatalf("with b held: %v", err)
	}
	if locks, _ := store.Locks(bg); len(locks) != 1 {
		t.Fatalf("all or none: %+v", locks)
	}
	done := make(chan []fencelock.Holder)
	go func() {
		hs, err := store.AcquireAll(bg, []string{"a", "b", "c"}, fencelock.Wait())
		if err != nil {
			t.Error(err)
		}
		done <- hs
	}()
	_ = b.Release()
	holders := <-done
	if len(holders) != 3 {
		t.FailNow()
	}
	for i, h := range holders {
		defer h.Release()
		if h.Name() != []string{"a", "b", "c"}[i] || h.Token() != holders[0].Token()+uint64(i) {
			t.Fatalf("holder %d: %s %d", i, h.Name(), h.Token())
		}
	}
	_ = holders[1].Release()
	if held, _ := holders[0].Held(bg); !held {
		t.Fatal("releasing b released a")
	}
	for _, bad := range [][]string{nil, {"a", "a"}, {"a", ""}, {"a\x00"}} {
		if _, err := store.AcquireAll(bg, bad); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
}

// runPermit holds one permit of a semaphore of two until killed.
func runPermit(path string) int {
	store, err := fencelock.Open(path)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer store.Close()
	holder, err := store.Acquire(bg, "pool", fencelock.Permits(2), fencelock.WithTTL(10*time.Minute))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer holder.Release()
	fmt.Println("token", holder.Token())
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

func TestAKilledProcessFreesItsPermit(t *testing.T) {
	path := t.TempDir() + "/locks.db"
	first, _, firstOut := child(t, "permit", path)
	t1 := readToken(t, "first", firstOut)
	_, _, secondOut := child(t, "permit", path)
	t2 := readToken(t, "second", secondOut)
	store, err := fencelock.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := store.Acquire(bg, "pool", fencelock.Permits(2)); !errors.Is(err, fencelock.ErrLocked) {
		t.Fatalf("both permits held by children: %v", err)
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	mine := acquire(t, store, "pool", fencelock.Permits(2))
	if mine.Token() <= t1 || mine.Token() <= t2 {
		t.Fatalf("token %d after %d and %d", mine.Token(), t1, t2)
	}
	if _, err := store.Acquire(bg, "pool", fencelock.Permits(2)); !errors.Is(err, fencelock.ErrLocked) {
		t.Fatalf("the second child's permit must still count: %v", err)
	}
}
