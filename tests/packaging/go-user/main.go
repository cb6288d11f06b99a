// Command user is the seed walkthrough as a user's program outside the repository builds it
// (tests/packaging/go.sh copies it into a fresh module): A acquires payment-export (token N)
// with a short lease that runs out, B acquires it (N+1) and writes, A's write with N is refused,
// and B's data stays. Exits 0 only if all of that holds.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fencelock/fencelock-go"
)

const key = "payments/today.csv"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "FAILED:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.MkdirTemp("", "fencelock-go-user-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := fencelock.Open(filepath.Join(dir, "locks.db"))
	if err != nil {
		return err
	}
	defer store.Close()
	ctx := context.Background()

	a, err := store.Acquire(ctx, "payment-export", fencelock.WithTTL(300*time.Millisecond))
	if err != nil {
		return err
	}
	n := a.Token()
	fmt.Printf("A holds payment-export with token %d\n", n)
	// B waits until A's lease has run out.
	b, err := store.Acquire(ctx, "payment-export", fencelock.WithTTL(30*time.Second), fencelock.Wait())
	if err != nil {
		return err
	}
	defer b.Release()
	if b.Token() != n+1 {
		return fmt.Errorf("B's token is %d, expected %d", b.Token(), n+1)
	}
	if err := store.PutWithFence(ctx, key, []byte("B's fresh export"), b.Token()); err != nil {
		return err
	}
	fmt.Printf("B holds it with token %d and wrote %s\n", b.Token(), key)
	err = store.PutWithFence(ctx, key, []byte("A's stale export"), n)
	if !errors.Is(err, fencelock.ErrStaleToken) {
		return fmt.Errorf("A's write with token %d: got %v, expected ErrStaleToken", n, err)
	}
	fmt.Printf("A's write with token %d: refused (%v)\n", n, err)
	value, token, err := store.Get(ctx, key)
	if err != nil {
		return err
	}
	if string(value) != "B's fresh export" || token != n+1 {
		return fmt.Errorf("%s holds %q with token %d", key, value, token)
	}
	fmt.Printf("walkthrough ok with fencelock %s: %s holds %q (token %d)\n", fencelock.Version(), key, value, token)
	return nil
}
