// Command user-gocron is a user's program with a gocron scheduler whose distributed locker is
// fencelock's (tests/packaging/go.sh copies it into a fresh module): a one-time job runs under
// the job's lock, writes fenced by its run's token, and the lock is free once the run ended.
// Exits 0 only if all of that holds.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fencelock/fencelock-go"
	"github.com/fencelock/fencelock-go/gocronlock"
	"github.com/go-co-op/gocron/v2"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "FAILED:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.MkdirTemp("", "fencelock-go-user-gocron-")
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
	locker := gocronlock.New(store)
	scheduler, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		return err
	}
	ran := make(chan error, 1)
	_, err = scheduler.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
		gocron.NewTask(func() {
			holder, ok := locker.Holder("nightly-export")
			if !ok {
				ran <- errors.New("the job runs without its lock")
				return
			}
			ran <- store.PutWithFence(ctx, "export.csv", []byte("rows"), holder.Token())
		}),
		gocron.WithName("nightly-export"))
	if err != nil {
		return err
	}
	scheduler.Start()
	if err := <-ran; err != nil {
		return err
	}
	if err := scheduler.Shutdown(); err != nil {
		return err
	}
	_, token, err := store.Get(ctx, "export.csv")
	if err != nil {
		return err
	}
	// gocron unlocks after the job returns; wait for that, with a generous bound.
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	holder, err := store.Acquire(wait, "nightly-export", fencelock.Wait())
	if err != nil {
		return fmt.Errorf("the job's lock after its run: %w", err)
	}
	defer holder.Release()
	fmt.Printf("gocron ok: the job wrote with token %d, the next grant has %d\n", token, holder.Token())
	return nil
}
