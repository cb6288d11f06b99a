package fencelock_test

import (
	"bufio"
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
