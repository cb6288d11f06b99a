package fencelock_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/fencelock/fencelock-go"
)

// Stores and holders dropped without Close or Release are cleaned up by the garbage collector:
// their leases are released and their files closed.
func TestDroppedHandlesAreCleanedUpByTheGC(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "locks.db")
	baseline := fdCount(t)

	const rounds = 200
	for i := 0; i < rounds; i++ {
		store, err := fencelock.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		holder, err := store.Acquire(bg, "dropped-"+strconv.Itoa(i%10), fencelock.WithTTL(time.Hour))
		if errors.Is(err, fencelock.ErrLocked) {
			continue // an earlier round's holder is not collected yet
		}
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			_ = holder.Lost() // a watcher goroutine must not keep the holder alive
		}
		if err := holder.Put(bg, "k"+strconv.Itoa(i), []byte("v")); err != nil {
			t.Fatal(err)
		}
		runtime.GC()
	}

	// Every dropped lease becomes free once its holder is collected (the TTL is an hour, so
	// nothing else frees it), and the file descriptors go back to the baseline.
	check, err := fencelock.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	for i := 0; i < 10; i++ {
		name := "dropped-" + strconv.Itoa(i)
		collected := false
		for cycle := 0; cycle < 10000 && !collected; cycle++ {
			runtime.GC()
			runtime.Gosched()
			holder, err := check.Acquire(bg, name)
			if err == nil {
				collected = true
				_ = holder.Release()
			} else if !errors.Is(err, fencelock.ErrLocked) {
				t.Fatal(err)
			}
		}
		if !collected {
			t.Fatalf("%s is still held after 10000 GC cycles", name)
		}
	}
	_ = check.Close()
	for cycle := 0; fdCount(t) > baseline; cycle++ {
		if cycle == 10000 {
			t.Fatalf("%d file descriptors open, %d before", fdCount(t), baseline)
		}
		runtime.GC()
		runtime.Gosched()
	}
}

func fdCount(t testing.TB) int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}
