package gocronlock_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/fencelock/fencelock-go"
	"github.com/fencelock/fencelock-go/gocronlock"
	"github.com/go-co-op/gocron/v2"
)

// A scheduler whose jobs run under fencelock's locks; the job fences its write with its run's
// token.
func Example() {
	dir, err := os.MkdirTemp("", "gocronlock-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := fencelock.Open(filepath.Join(dir, "locks.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	locker := gocronlock.New(store)
	scheduler, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	_, err = scheduler.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
		gocron.NewTask(func() {
			defer close(done)
			holder, _ := locker.Holder("nightly-export")
			err := store.PutWithFence(context.Background(), "export.csv", []byte("rows"), holder.Token())
			fmt.Println("ran with token", holder.Token(), err)
		}),
		gocron.WithName("nightly-export"))
	if err != nil {
		log.Fatal(err)
	}
	scheduler.Start()
	<-done
	_ = scheduler.Shutdown()
	// Output: ran with token 1 <nil>
}
