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
// (eight goroutines, each on a lock of its own, lock+unlock); all share one client and one
// session (one lease, kept alive), as the threads of one fencelock process share its store.
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
	workload := flag.String("workload", "one-thread", "one-thread, acquire-write or eight-threads")
	secs := flag.Float64("secs", 2, "how long to measure")
	lock := flag.String("lock", "", "the one worker's lock (default lock-0, lock-1, ...)")
	startAt := flag.Int64("start-unix-ns", 0, "when to start measuring (default at once)")
	flag.Parse()
	workers, write := 1, false
	switch *workload {
	case "one-thread":
	case "acquire-write":
		write = true
	case "eight-threads":
		workers = 8
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
			lockName := fmt.Sprintf("lock-%d", w)
			if *lock != "" {
				lockName = *lock
			}
			name := fmt.Sprintf("/%s/%s", *prefix, lockName)
			key := fmt.Sprintf("/%s/key-%s", *prefix, lockName)
			for {
				begin := time.Now()
				if !begin.Before(until) {
					return
				}
				mutex := concurrency.NewMutex(session, name)
				if err := mutex.Lock(ctx); err != nil {
					log.Fatalf("lock: %v", err)
				}
				if write {
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
				if err := mutex.Unlock(ctx); err != nil {
					log.Fatalf("unlock: %v", err)
				}
				latencies[w] = append(latencies[w], time.Since(begin))
			}
		}(w)
	}
	group.Wait()
	elapsed := time.Since(start)

	out := make([]string, 0, 1)
	out = append(out, fmt.Sprint(elapsed.Nanoseconds()))
	for _, list := range latencies {
		for _, latency := range list {
			out = append(out, fmt.Sprint(latency.Nanoseconds()))
		}
	}
	fmt.Fprintln(os.Stdout, strings.Join(out, "\n"))
}
