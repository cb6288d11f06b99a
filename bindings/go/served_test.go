package fencelock_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock-go"
)

// startServer runs `fencelock serve` ($FENCELOCK_CLI, which make test sets) for path until the
// test ends. While it serves, it holds the file alone: every call can only go through it.
func startServer(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	cli := os.Getenv("FENCELOCK_CLI")
	if cli == "" {
		t.Skip("needs $FENCELOCK_CLI, the fencelock program (make test sets it)")
	}
	server := exec.Command(cli, "--db", path, "serve")
	stderr, err := server.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stderr).ReadString('\n')
	if !strings.Contains(line, "serving") {
		_ = server.Process.Kill()
		t.Fatalf("the server did not start: %q", line)
	}
	t.Cleanup(func() {
		_ = server.Process.Signal(syscall.SIGTERM)
		_ = server.Wait()
	})
	return server
}

func TestAPausedHoldersWriteIsRefusedThroughAServer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.db")
	server := startServer(t, path)
	aStore, err := fencelock.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer aStore.Close()
	bStore, err := fencelock.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer bStore.Close()

	a := acquire(t, aStore, "payment-export", fencelock.WithTTL(100*time.Millisecond))
	time.Sleep(300 * time.Millisecond) // A is paused past its lease
	b := acquire(t, bStore, "payment-export")
	if b.Token() <= a.Token() {
		t.Fatalf("B's token %d is not above A's %d", b.Token(), a.Token())
	}
	if err := b.Put(bg, "payments/today.csv", []byte("B")); err != nil {
		t.Fatal(err)
	}
	if err := a.Put(bg, "payments/today.csv", []byte("A")); !errors.Is(err, fencelock.ErrLockLost) {
		t.Fatalf("A's holder-checked write: %v", err)
	}
	if err := aStore.PutWithFence(bg, "payments/today.csv", []byte("A"), a.Token()); !errors.Is(err, fencelock.ErrStaleToken) {
		t.Fatalf("A's fenced write: %v", err)
	}
	if pid, ok := aStore.ServerPID(); !ok || pid != server.Process.Pid {
		t.Fatalf("ServerPID = %d, %v; the server is %d", pid, ok, server.Process.Pid)
	}
	value, token, err := aStore.Get(bg, "payments/today.csv")
	if err != nil || string(value) != "B" || token != b.Token() {
		t.Fatalf("Get = %q, %d, %v", value, token, err)
	}
}

// A write behind a server paused in the middle of its work (SIGSTOP) honours its ctx as a
// waiting Acquire does: it ends with context.DeadlineExceeded at ctx's deadline, well before
// the store's busy timeout, or with context.Canceled once ctx is cancelled, and changes nothing.
func TestAWriteBehindAPausedServerEndsWithItsContextChangingNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.db")
	server := startServer(t, path)
	// Far longer than the ctx deadlines below: a write that waits it out did not honour its ctx.
	const busy = 30 * time.Second
	store, err := fencelock.Open(path, fencelock.WithBusyTimeout(busy))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	holder := acquire(t, store, "job")
	if err := store.PutWithFence(bg, "probe", []byte("through the server"), holder.Token()); err != nil {
		t.Fatal(err)
	}
	if pid, ok := store.ServerPID(); !ok || pid != server.Process.Pid {
		t.Fatalf("ServerPID = %d, %v; the server is %d", pid, ok, server.Process.Pid)
	}
	if err := server.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = server.Process.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(resume) // before the server's own cleanup, which a stopped server would not obey

	writes := []struct {
		name  string
		write func(ctx context.Context) error
	}{
		{"PutWithFence", func(ctx context.Context) error {
			return store.PutWithFence(ctx, "put", []byte("late"), holder.Token())
		}},
		{"Delete", func(ctx context.Context) error {
			_, err := store.Delete(ctx, "probe", holder.Token())
			return err
		}},
		{"Fence", func(ctx context.Context) error { return store.Fence(ctx, "s3://bucket/x", holder.Token()) }},
		{"Holder.Put", func(ctx context.Context) error { return holder.Put(ctx, "holder-put", []byte("late")) }},
		{"Holder.Delete", func(ctx context.Context) error {
			_, err := holder.Delete(ctx, "probe")
			return err
		}},
		{"AcquireAndPut", func(ctx context.Context) error {
			h, err := store.AcquireAndPut(ctx, "other", "acquire-and-put", []byte("late"))
			if err == nil {
				_ = h.Release()
			}
			return err
		}},
	}
	// within runs write, failing the test when it is still waiting at half the busy timeout: a
	// bound far above any ctx deadline here, and below the busy timeout that a write ignoring
	// its ctx would wait out (its timeout would then come after the deadline, and be reported as
	// the deadline's).
	within := func(name string, write func() error) error {
		done := make(chan error, 1)
		go func() { done <- write() }()
		select {
		case err := <-done:
			return err
		case <-time.After(busy / 2):
			t.Fatalf("%s still waits behind the paused server, past its ctx", name)
			return nil
		}
	}
	for _, w := range writes {
		err := within(w.name, func() error {
			ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
			defer cancel()
			return w.write(ctx)
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s past its ctx deadline: %v, want context.DeadlineExceeded", w.name, err)
		}
		err = within(w.name, func() error {
			ctx, cancel := context.WithCancel(bg)
			time.AfterFunc(100*time.Millisecond, cancel)
			return w.write(ctx)
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with its ctx cancelled: %v, want context.Canceled", w.name, err)
		}
	}

	resume()
	if value, _, err := store.Get(bg, "probe"); err != nil || string(value) != "through the server" {
		t.Errorf("probe = %q, %v: a delete given up on was applied", value, err)
	}
	for _, key := range []string{"put", "holder-put", "acquire-and-put"} {
		if _, _, err := store.Get(bg, key); !errors.Is(err, fencelock.ErrNotFound) {
			t.Errorf("Get(%q) = %v: a write given up on was applied", key, err)
		}
	}
	if token, err := store.FenceToken(bg, "s3://bucket/x"); err != nil || token != 0 {
		t.Errorf("FenceToken = %d, %v: a fence given up on was applied", token, err)
	}
	acquire(t, store, "other") // no grant of AcquireAndPut was left behind
}
