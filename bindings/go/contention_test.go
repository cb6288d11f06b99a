package fencelock_test

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock-go"
)

// 2000 goroutines wait on 4 locks. At most one holds each lock at a time, every lock's tokens
// strictly increase, and the waiters do not each hold an OS thread.
func TestThousandsOfWaitersKeepMutualExclusion(t *testing.T) {
	const goroutines, lockCount = 2000, 4
	if testing.Short() {
		t.Skip("2000 acquisitions take a few seconds")
	}
	store := openStore(t)
	names := make([]string, lockCount)
	for i := range names {
		names[i] = "lock-" + strconv.Itoa(i)
	}
	var inUse [lockCount]atomic.Int32
	var lastToken [lockCount]uint64 // written only by the lock's holder
	var granted atomic.Int64
	var maxThreads atomic.Int64
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
				n := int64(threadCount(t))
				for old := maxThreads.Load(); n > old && !maxThreads.CompareAndSwap(old, n); old = maxThreads.Load() {
				}
			}
		}
	}()

	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			<-start
			lock := g % lockCount
			holder, err := store.Acquire(bg, names[lock], fencelock.Wait(), fencelock.WithTTL(time.Hour))
			if err != nil {
				t.Errorf("goroutine %d: %v", g, err)
				return
			}
			if !inUse[lock].CompareAndSwap(0, 1) {
				t.Errorf("two holders of %s at once", names[lock])
			}
			if holder.Token() <= lastToken[lock] {
				t.Errorf("%s: token %d after %d", names[lock], holder.Token(), lastToken[lock])
			}
			lastToken[lock] = holder.Token()
			granted.Add(1)
			inUse[lock].Store(0)
			if err := holder.Release(); err != nil {
				t.Errorf("release: %v", err)
			}
		}(g)
	}
	close(start)
	wg.Wait()
	close(done)
	if granted.Load() != goroutines {
		t.Fatalf("%d grants for %d goroutines", granted.Load(), goroutines)
	}
	// Waiters beyond one per lock wait on a Go channel, so the process keeps a small number of
	// threads; one thread per waiter would be over 2000.
	t.Logf("most OS threads seen: %d", maxThreads.Load())
	if maxThreads.Load() >= 200 {
		t.Fatalf("%d OS threads for %d waiters on %d locks", maxThreads.Load(), goroutines, lockCount)
	}
}

func threadCount(t testing.TB) int {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		if rest, ok := strings.CutPrefix(scanner.Text(), "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(rest))
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}
