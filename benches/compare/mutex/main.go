// The anchor of the etcd rows of benches/compare.rs: etcd's own Go concurrency.Mutex, used
// as a careful user would use it for a lock with a fence. Each cycle locks, writes a value
// only while it owns the mutex (a Txn guarded by IsOwner, the compare a fenced write needs),
// and unlocks.
//
//	mutex -endpoint 127.0.0.1:2379 -prefix cell-1 -workload acquire-write -secs 2
//	mutex -endpoint 127.0.0.1:2379 -prefix cell-2 -lock hot -start-unix-ns 1764000000000000000
//
// Prints the nanoseconds it measured for, then the nanoseconds of every cycle, one a line.
// Workloads: one-thread (lock+unlock), acquire-write (lock+guarded put+unlock), eight-threads
// (eight goroutines, each on a lock of its own, lock+unlock), fenced-put (the lock taken and
// the key put once before measuring, then guarded puts alone, unlocked at the end); all share
// one client and one session (one lease, kept alive), as the threads of one fencelock process
// share its store.
// The process workloads start one program a process: -lock names its lock (hot for the
// processes taking turns on one lock, whose Lock waits in the Mutex's queue), and
// -start-unix-ns the wall-clock time at which every process starts to measure.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// The value of the write workload, as the Rust side's VALUE: 100 bytes.
var value = strings.Repeat("v", 100)

func main() {
	endpoint := flag.String("endpoint", "", "the etcd client address, host:port")
	prefix := flag.String("prefix", "mutex", "the key prefix of this run")
	workload := flag.String("workload", "one-thread", "one-thread, acquire-write, eight-threads or fenced-put")
	secs := flag.Float64("secs", 2, "how long to measure")
	lock := flag.String("lock", "", "the one worker's lock (default lock-0, lock-1, ...)")
	startAt := flag.Int64("start-unix-ns", 0, "when to start measuring (default at once)")
	flag.Parse()
	workers, write, held := 1, false, false
	switch *workload {
	case "one-thread":
	case "acquire-write":
		write = true
	case "eight-threads":
		workers = 8
	case "fenced-put":
		held = true
	default:
		log.Fatalf("unknown workload %q", *workload)
	}

	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{*endpoint},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatalf("connect: %v", err)
	}
	defer client.Close()
	// The same TTL as the bench's other systems grant.
	session, err := concurrency.NewSession(client, concurrency.WithTTL(30))
	if err != nil {
		log.Fatalf("session: %v", err)
	}
	defer session.Close()

	ctx := context.Background()
	names := func(w int) (name, key string) {
		lockName := fmt.Sprintf("lock-%d", w)
		if *lock != "" {
			lockName = *lock
		}
		return fmt.Sprintf("/%s/%s", *prefix, lockName), fmt.Sprintf("/%s/key-%s", *prefix, lockName)
	}
	guardedPut := func(mutex *concurrency.Mutex, key string) {
		put, err := client.Txn(ctx).
			If(mutex.IsOwner()).
			Then(clientv3.OpPut(key, value)).
			Commit()
		if err != nil {
			log.Fatalf("guarded put: %v", err)
		}
		if !put.Succeeded {
			log.Fatalf("guarded put refused while the mutex is held")
		}
	}
	// fenced-put: the one worker's mutex, held through the run, its key written once.
	var holding *concurrency.Mutex
	if held {
		name, key := names(0)
		holding = concurrency.NewMutex(session, name)
		if err := holding.Lock(ctx); err != nil {
			log.Fatalf("lock: %v", err)
		}
		guardedPut(holding, key)
	}
	latencies := make([][]time.Duration, workers)
	var group sync.WaitGroup
	if *startAt > 0 {
		time.Sleep(time.Until(time.Unix(0, *startAt)))
	}
	start := time.Now()
	until := start.Add(time.Duration(*secs * float64(time.Second)))
	for w := 0; w < workers; w++ {
		group.Add(1)
		go func(w int) {
			defer group.Done()
			name, key := names(w)
			for {
				begin := time.Now()
				if !begin.Before(until) {
					return
				}
				if holding != nil {
					guardedPut(holding, key)
					latencies[w] = append(latencies[w], time.Since(begin))
					continue
				}
				mutex := concurrency.NewMutex(session, name)
				if err := mutex.Lock(ctx); err != nil {
					log.Fatalf("lock: %v", err)
				}
				if write {
					guardedPut(mutex, key)
				}
				if err := mutex.Unlock(ctx); err != nil {
					log.Fatalf("unlock: %v", err)
				}
				latencies[w] = append(latencies[w], time.Since(begin))
			}
		}(w)
	}
	group.Wait()
	elapsed := time.Since(start)
	if holding != nil {
		if err := holding.Unlock(ctx); err != nil {
			log.Fatalf("unlock: %v", err)
		}
	}

	out := make([]string, 0, 1)
	out = append(out, fmt.Sprint(elapsed.Nanoseconds()))
	for _, list := range latencies {
		for _, latency := range list {
			out = append(out, fmt.Sprint(latency.Nanoseconds()))
		}
	}
	fmt.Fprintln(os.Stdout, strings.Join(out, "\n"))
}
