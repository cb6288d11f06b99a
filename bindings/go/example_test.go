package fencelock_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	fencelock "github.com/fencelock/fencelock/bindings/go"
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
	locks, s3 := store, store

	holder, err := locks.Acquire(ctx, "payment-export")
	if err != nil {
		log.Fatal(err)
	}
	defer holder.Release()
	fence := holder.Token() // monotonic uint64
	if err := s3.PutWithFence(ctx, "payments/today.csv", []byte("id,amount\n1,100\n"), fence); err != nil {
		log.Fatal(err)
	}

	data, token, err := store.Get(ctx, "payments/today.csv")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("fence %d wrote %d bytes (token %d)\n", fence, len(data), token)
	// Output: fence 1 wrote 16 bytes (token 1)
}
