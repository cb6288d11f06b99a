package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/fencelock/fencelock-go"
)

// A damaged store prints nothing on the host's stderr: every page but the header's zeroed in
// turn, opened and read with file descriptor 2 captured. The damage surfaces as errors.
func TestDamagedStorePrintsNothingOnStderr(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "locks.db")
	store, err := fencelock.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	holder, err := store.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if err := holder.Put(ctx, fmt.Sprintf("k%d", i), []byte("value")); err != nil {
			t.Fatal(err)
		}
	}
	if err := holder.Release(); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	pristine, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	captured := filepath.Join(dir, "stderr.txt")
	sink, err := os.Create(captured)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup2(int(sink.Fd()), 2); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for page := 1; page < len(pristine)/4096; page++ {
		data := append([]byte(nil), pristine...)
		copy(data[page*4096:(page+1)*4096], make([]byte, 4096))
		damaged := filepath.Join(dir, fmt.Sprintf("page%d.db", page))
		if err := os.WriteFile(damaged, data, 0o600); err != nil {
			failed = -1000
			break
		}
		s, err := fencelock.Open(damaged)
		if err != nil {
			failed++
			continue
		}
		_, _, errGet := s.Get(ctx, "k3")
		_, errLocks := s.Locks(ctx)
		_, errKeys := s.Keys(ctx, "")
		if (errGet != nil && !errors.Is(errGet, fencelock.ErrNotFound)) || errLocks != nil || errKeys != nil {
			failed++
		}
		_ = s.Close()
	}
	if err := syscall.Dup2(saved, 2); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Close(saved)
	_ = sink.Close()
	noise, err := os.ReadFile(captured)
	if err != nil {
		t.Fatal(err)
	}
	if len(noise) != 0 {
		t.Fatalf("the library printed %d bytes on stderr:\n%.500s", len(noise), noise)
	}
	if failed <= 0 {
		t.Fatalf("no damaged page was met (%d)", failed)
	}
}
