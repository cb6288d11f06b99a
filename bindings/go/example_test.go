package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"

	"github.com/fencelock/fencelock-go"
)

func Example() {
	dir, err := os.MkdirTemp("", "fencelock-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := fencelock.Open(filepath.Join(dir, "locks.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()

	holder, err := store.Acquire(ctx, "payment-export", fencelock.Wait())
	if err != nil {
		log.Fatal(err)
	}
	defer holder.Release()
	fence := holder.Token() // monotonic uint64
	if err := store.PutWithFence(ctx, "payments/today.csv", []byte("id,amount\n1,100\n"), fence); err != nil {
		log.Fatal(err)
	}

	data, token, err := store.Get(ctx, "payments/today.csv")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("fence %d wrote %d bytes (token %d)\n", fence, len(data), token)
	// Output: fence 1 wrote 16 bytes (token 1)
}

// A store whose directory is missing fails to open as a file would: with a *fs.PathError that
// matches fs.ErrNotExist.
func ExampleOpen_missingDirectory() {
	dir, err := os.MkdirTemp("", "fencelock-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	_, err = fencelock.Open(filepath.Join(dir, "no-such-dir", "locks.db"))
	var pathErr *fs.PathError
	fmt.Println(errors.Is(err, fs.ErrNotExist), errors.As(err, &pathErr), errors.Is(err, fencelock.ErrIO))
	fmt.Println(pathErr.Op, filepath.Base(pathErr.Path))
	// Output:
	// true true true
	// open locks.db
}

// FenceToken reads what Fence recorded for a resource of your own.
func ExampleStore_FenceToken() {
	dir, err := os.MkdirTemp("", "fencelock-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := fencelock.Open(filepath.Join(dir, "locks.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	holder, err := store.Acquire(ctx, "exports")
	if err != nil {
		log.Fatal(err)
	}
	defer holder.Release()
	before, _ := store.FenceToken(ctx, "s3://bucket/exports")
	if err := store.Fence(ctx, "s3://bucket/exports", holder.Token()); err != nil {
		log.Fatal(err)
	}
	after, _ := store.FenceToken(ctx, "s3://bucket/exports")
	fmt.Println(before, after)
	// Output: 0 1
}

// WithLock runs a function under a lock and releases it afterwards, whatever the function
// returns; the lease is renewed meanwhile, and the function's ctx ends if it is lost.
func ExampleStore_WithLock() {
	dir, err := os.MkdirTemp("", "fencelock-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := fencelock.Open(filepath.Join(dir, "locks.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()

	err = store.WithLock(ctx, "payment-export", func(ctx context.Context, h fencelock.Holder) error {
		// A write checked against the lease: refused once the lease is lost.
		return h.Put(ctx, "payments/today.csv", []byte("id,amount\n1,100\n"))
	}, fencelock.Wait())
	if err != nil {
		log.Fatal(err)
	}
	_, token, _ := store.Get(ctx, "payments/today.csv")
	again, err := store.Acquire(ctx, "payment-export") // free again
	if err != nil {
		log.Fatal(err)
	}
	defer again.Release()
	fmt.Println(token, again.Token())
	// Output: 1 2
}

// History tells who held a lock, with which token, and how each lease ended.
func ExampleStore_History() {
	dir, err := os.MkdirTemp("", "fencelock-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := fencelock.Open(filepath.Join(dir, "locks.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()

	first, err := store.Acquire(ctx, "nightly")
	if err != nil {
		log.Fatal(err)
	}
	first.Release()
	second, err := store.Acquire(ctx, "nightly")
	if err != nil {
		log.Fatal(err)
	}
	defer second.Release()

	entries, err := store.History("nightly")
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range entries {
		fmt.Println(e.Token, e.Ending, e.PID == uint32(os.Getpid()), !e.EndedAt.IsZero())
	}
	// Output:
	// 1 released true true
	// 2 held true false
}

// A sync.Locker over one lock name: each Lock takes a new lease, renewed until Unlock, and
// Holder's token fences the writes made under it.
func ExampleNewSyncLocker() {
	dir, err := os.MkdirTemp("", "fencelock-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := fencelock.Open(filepath.Join(dir, "locks.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()

	mu := fencelock.NewSyncLocker(store, "payment-export")
	for range 2 {
		mu.Lock()
		token := mu.Holder().Token()
		if err := store.PutWithFence(ctx, "payments/today.csv", []byte("id,amount\n"), token); err != nil {
			log.Fatal(err)
		}
		mu.Unlock()
		fmt.Println("wrote with token", token)
	}
	// Output:
	// wrote with token 1
	// wrote with token 2
}
