// Command payment-export is the seed's snippet as a program: it takes the "payment-export"
// lock, writes today's export fenced by the lock's token, and shows that a write with an older
// token is refused.
//
//	go run ./examples/payment-export [store-path]
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/fencelock/fencelock-go"
)

func main() {
	path := filepath.Join(os.TempDir(), "fencelock-payment-export.db")
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	store, err := fencelock.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	if err := export(ctx, store, store, []byte("id,amount\n1,100\n2,250\n")); err != nil {
		log.Fatal(err)
	}
}

func export(ctx context.Context, locks fencelock.Locker, s3 *fencelock.Store, data []byte) error {
	holder, err := locks.Acquire(ctx, "payment-export", fencelock.Wait())
	if err != nil {
		return err
	}
	defer holder.Release()
	fence := holder.Token() // monotonic uint64
	if err := s3.PutWithFence(ctx, "payments/today.csv", data, fence); err != nil {
		return err
	}
	fmt.Printf("wrote payments/today.csv with fence %d\n", fence)

	// A process that paused and woke up late still has the previous token: refused.
	if fence > 1 {
		err := s3.PutWithFence(ctx, "payments/today.csv", []byte("stale"), fence-1)
		var stale *fencelock.StaleTokenError
		if errors.As(err, &stale) {
			fmt.Printf("a write with the older token %d was refused: the key accepted %d\n", stale.Token, stale.Highest)
		} else {
			return fmt.Errorf("a stale write was not refused: %v", err)
		}
	}
	return nil
}
