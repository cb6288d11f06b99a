package fencelock_test

import (
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fencelock-go"
)

// reportMedian adds the median of the per-iteration times as a metric: the mean that
// `go test -bench` prints is pulled up by the occasional slow commit.
func reportMedian(b *testing.B, samples []time.Duration) {
	slices.Sort(samples)
	if len(samples) > 0 {
		b.ReportMetric(float64(samples[len(samples)/2].Microseconds()), "median-us")
	}
}

// One Acquire + Release of one lock from Go, through the C ABI.
//
//	go test -run '^$' -bench AcquireRelease -benchtime 2000x
func BenchmarkAcquireRelease(b *testing.B) {
	store := openStore(b)
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		holder, err := store.Acquire(bg, "bench")
		if err != nil {
			b.Fatal(err)
		}
		if err := holder.Release(); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
	}
	b.StopTimer()
	reportMedian(b, samples)
}

// Time from a Release in this process to the return of a waiting Acquire in another
// goroutine: the waiter's wake-up plus its grant (one commit).
//
//	go test -run '^$' -bench WakeUp -benchtime 300x
func BenchmarkWakeUpAfterRelease(b *testing.B) {
	store := openStore(b)
	samples := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		holder, err := store.Acquire(bg, "bench", fencelock.WithTTL(time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		got := make(chan time.Time)
		go func() {
			waiter, err := store.Acquire(bg, "bench", fencelock.Wait())
			if err != nil {
				b.Error(err)
			}
			woke := time.Now()
			_ = waiter.Release()
			got <- woke
		}()
		time.Sleep(3 * time.Millisecond) // let the waiter reach its wait
		released := time.Now()
		if err := holder.Release(); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, (<-got).Sub(released))
	}
	reportMedian(b, samples)
}

// Time from a Release in this process to the return of a waiting Acquire in another process.
//
//	go test -run '^$' -bench WakeUpAcross -benchtime 200x
func BenchmarkWakeUpAcrossProcesses(b *testing.B) {
	path := b.TempDir() + "/locks.db"
	store, err := fencelock.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	_, in, out := child(b, "waiter", path)
	samples := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		holder, err := store.Acquire(bg, "bench", fencelock.Wait(), fencelock.WithTTL(time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := in.Write([]byte("go\n")); err != nil {
			b.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // let the waiter reach its wait
		released := time.Now()
		if err := holder.Release(); err != nil {
			b.Fatal(err)
		}
		woke := readToken(b, "waiter", out) // the waiter's wall clock, in ns
		samples = append(samples, time.Unix(0, int64(woke)).Sub(released))
	}
	reportMedian(b, samples)
}

// One Get of a 100-byte value (a read transaction, no commit): the cost of crossing the
// binding shows here more than in Acquire, which a commit dominates.
//
//	go test -run '^$' -bench Get -benchtime 40000x
func BenchmarkGet(b *testing.B) {
	store := openStore(b)
	holder, err := store.Acquire(bg, "w")
	if err != nil {
		b.Fatal(err)
	}
	defer holder.Release()
	if err := store.PutWithFence(bg, "payments/today.csv", make([]byte, 100), holder.Token()); err != nil {
		b.Fatal(err)
	}
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, _, err := store.Get(bg, "payments/today.csv"); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds())/1000, "median-us")
}
