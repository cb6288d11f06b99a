package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock-go"
)

func history(t *testing.T, store *fencelock.Store, name string) []fencelock.HistoryEntry {
	t.Helper()
	entries, err := store.History(name)
	if err != nil {
		t.Fatalf("History(%q): %v", name, err)
	}
	return entries
}

// endings is the (token, ending) of each entry, as one comparable string.
func endings(entries []fencelock.HistoryEntry) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		parts[i] = fmt.Sprintf("%d:%v", e.Token, e.Ending)
	}
	return strings.Join(parts, " ")
}

func metrics(t *testing.T, store *fencelock.Store) fencelock.Metrics {
	t.Helper()
	m, err := store.Metrics()
	if err != nil {
		t.Fatalf("Metrics: %v", err)
	}
	return m
}

// The walkthrough on record: A pauses past its lease, B takes the lock over and writes, A's
// writes are refused; A's entry says taken over, B's held. B releases and C takes the lock:
// B's entry says released, with the release's time.
func TestHistoryTellsThePausedHolderTakenOverThenTheRelease(t *testing.T) {
	store := openStore(t)
	before := time.Now()
	a := acquire(t, store, "payment-export", fencelock.WithTTL(150*time.Millisecond))
	time.Sleep(250 * time.Millisecond) // A is paused past its lease, still holding on
	b := acquire(t, store, "payment-export", fencelock.WithTTL(time.Minute))
	if err := store.PutWithFence(bg, "payments/today.csv", []byte("B's export"), b.Token()); err != nil {
		t.Fatal(err)
	}
	if err := store.PutWithFence(bg, "payments/today.csv", []byte("A's export"), a.Token()); !errors.Is(err, fencelock.ErrStaleToken) {
		t.Fatalf("A's fenced write: %v, want ErrStaleToken", err)
	}
	if err := a.Put(bg, "payments/today.csv", []byte("A again")); !errors.Is(err, fencelock.ErrLockLost) {
		t.Fatalf("A's checked write: %v, want ErrLockLost", err)
	}

	entries := history(t, store, "payment-export")
	want := fmt.Sprintf("%d:taken-over %d:held", a.Token(), b.Token())
	if got := endings(entries); got != want {
		t.Fatalf("history %s, want %s", got, want)
	}
	first, second := entries[0], entries[1]
	if first.Name != "payment-export" || first.PID != uint32(os.Getpid()) || first.Kind != fencelock.KindExclusive {
		t.Errorf("A's entry %+v", first)
	}
	if first.GrantedAt.Before(before.Add(-time.Second)) || first.ExpiresAt.IsZero() || first.RecordedAt.IsZero() {
		t.Errorf("A's entry times %+v", first)
	}
	if !first.ExpiresAt.Before(first.EndedAt) {
		t.Errorf("A was taken over at %v, not after its expiry %v", first.EndedAt, first.ExpiresAt)
	}
	if !second.RecordedAt.IsZero() || !second.EndedAt.IsZero() {
		t.Errorf("a current grant is not on record yet: %+v", second)
	}

	released := time.Now()
	if err := b.Release(); err != nil {
		t.Fatal(err)
	}
	c := acquire(t, store, "payment-export", fencelock.WithTTL(time.Minute))
	entries = history(t, store, "payment-export")
	want = fmt.Sprintf("%d:taken-over %d:released %d:held", a.Token(), b.Token(), c.Token())
	if got := endings(entries); got != want {
		t.Fatalf("history %s, want %s", got, want)
	}
	// Milliseconds on record: the release's time may read up to 1ms before the clock here.
	if ended := entries[1].EndedAt; ended.IsZero() || ended.Before(released.Add(-time.Millisecond)) || ended.After(time.Now()) {
		t.Errorf("B's release at %v, released at %v", ended, released)
	}
	if entries[1].RecordedAt.IsZero() {
		t.Errorf("B's entry is not on record: %+v", entries[1])
	}
	if got := history(t, store, "never-granted"); len(got) != 0 {
		t.Errorf("a lock the store knows nothing of has history %+v", got)
	}
}

func TestMetricsCountGrantsRefusalsWaitsAndStaleWrites(t *testing.T) {
	store := openStore(t)
	start := metrics(t, store)
	if start.Scope != fencelock.ScopeStore || start.Scope.String() != "store" {
		t.Fatalf("scope %v of a multi-process store", start.Scope)
	}
	if start.Since.IsZero() || start.Since.After(time.Now()) {
		t.Errorf("counting since %v", start.Since)
	}

	holder := acquire(t, store, "m", fencelock.WithTTL(time.Minute))
	if _, err := store.Acquire(bg, "m"); !errors.Is(err, fencelock.ErrLocked) {
		t.Fatalf("a second Acquire: %v", err)
	}
	const timeout = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(bg, timeout)
	_, err := store.Acquire(ctx, "m", fencelock.Wait())
	cancel()
	if !errors.Is(err, fencelock.ErrTimeout) {
		t.Fatalf("a wait for a held lock: %v", err)
	}
	if err := holder.Put(bg, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := holder.Release(); err != nil {
		t.Fatal(err)
	}
	newer := acquire(t, store, "m", fencelock.WithTTL(time.Minute))
	if err := newer.Put(bg, "k", []byte("newer")); err != nil {
		t.Fatal(err)
	}
	if err := store.PutWithFence(bg, "k", []byte("stale"), holder.Token()); !errors.Is(err, fencelock.ErrStaleToken) {
		t.Fatalf("a stale write: %v", err)
	}

	m := metrics(t, store)
	deltas := map[string][2]uint64{
		"grants":          {m.Grants - start.Grants, 2},
		"releases":        {m.Releases - start.Releases, 1},
		"refused locked":  {m.RefusedLocked - start.RefusedLocked, 1},
		"refused timeout": {m.RefusedTimeout - start.RefusedTimeout, 1},
		"refused other":   {m.RefusedOther - start.RefusedOther, 0},
		"stale writes":    {m.StaleWrites - start.StaleWrites, 1},
		"ended released":  {m.EndedReleased - start.EndedReleased, 1},
		"leases lost":     {m.LeasesLost() - start.LeasesLost(), 0},
		"waits":           {m.Waits - start.Waits, 1}, // the timed-out one; no other waited
	}
	for what, d := range deltas {
		if d[0] != d[1] {
			t.Errorf("%s: %d more, want %d", what, d[0], d[1])
		}
	}
	// The wait ran to the C timeout, what was left of ctx's deadline as the wait began.
	if waited := m.WaitTime - start.WaitTime; waited < timeout-10*time.Millisecond {
		t.Errorf("the timed-out wait waited %v, its timeout %v", waited, timeout)
	}
	var buckets uint64
	for i := range m.WaitBuckets {
		buckets += m.WaitBuckets[i] - start.WaitBuckets[i]
	}
	if buckets != 1 {
		t.Errorf("%d more waits in the buckets %v, want 1", buckets, m.WaitBuckets)
	}
	// The two writes, in as many commits or fewer (grants commit nothing: the leases are in
	// the store's shared memory).
	if ops := m.CommittedOps - start.CommittedOps; ops < 2 || m.Commits <= start.Commits {
		t.Errorf("%d commits carrying %d operations", m.Commits-start.Commits, ops)
	}

	text, err := store.MetricsPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "fencelock_grants_total{") || !strings.Contains(text, store.Path()) {
		t.Errorf("Prometheus text without fencelock_grants_total{ and the path:\n%s", text)
	}
}

// The gauges count the live leases of each kind, as the store holds them when asked.
func TestMetricsGaugesCountLiveLeasesByKindAndTheFilesBytes(t *testing.T) {
	store := openStore(t)
	held := []fencelock.Holder{
		acquire(t, store, "job", fencelock.WithTTL(time.Minute)),
		acquire(t, store, "config", fencelock.Shared()),
		acquire(t, store, "config", fencelock.Shared()),
		acquire(t, store, "pool", fencelock.Permits(3)),
		acquire(t, store, "pool", fencelock.Permits(3)),
	}
	if err := acquire(t, store, "done").Release(); err != nil {
		t.Fatal(err)
	}
	m := metrics(t, store)
	if m.LiveExclusive != 1 || m.LiveShared != 2 || m.LivePermits != 2 || m.QueuedWaiters != 0 {
		t.Errorf("live %d exclusive, %d shared, %d permits, %d queued; want 1, 2, 2, 0",
			m.LiveExclusive, m.LiveShared, m.LivePermits, m.QueuedWaiters)
	}
	if info, err := os.Stat(store.Path()); err != nil || m.FileBytes != uint64(info.Size()) {
		t.Errorf("FileBytes %d, the file: %v %v", m.FileBytes, info, err)
	}
	for _, h := range held {
		if err := h.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if m := metrics(t, store); m.LiveExclusive+m.LiveShared+m.LivePermits != 0 {
		t.Errorf("live leases after every release: %+v", m)
	}
}

func TestAStoreOfOneProcessCountsItsOwnOperations(t *testing.T) {
	store := openStore(t, fencelock.WithMode(fencelock.SingleProcess))
	if err := acquire(t, store, "x").Release(); err != nil {
		t.Fatal(err)
	}
	m := metrics(t, store)
	if m.Scope != fencelock.ScopeProcess || m.Scope.String() != "process" || m.Grants != 1 || m.Releases != 1 {
		t.Errorf("%+v", m)
	}
}

func TestHistoryAndMetricsRefuseBadInputAndAClosedStore(t *testing.T) {
	store := openStore(t)
	for _, name := range []string{"", "nul\x00name"} {
		if _, err := store.History(name); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Errorf("History(%q): %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := store.History(strings.Repeat("n", 1025)); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Errorf("History of a name too long: %v", err)
	}
	log := &eventLog{}
	if err := store.SetMetricsRecorder(log); err != nil {
		t.Fatal(err)
	}
	outliving := acquire(t, store, "outlives")
	store.Close()
	// Close removed the recorder: a holder that outlives its store reports nothing more.
	if err := outliving.Release(); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, log, "attempt outlives true", "delta outlives +1")
	if _, err := store.History("a"); !errors.Is(err, fencelock.ErrClosed) {
		t.Errorf("History after Close: %v", err)
	}
	if _, err := store.Metrics(); !errors.Is(err, fencelock.ErrClosed) {
		t.Errorf("Metrics after Close: %v", err)
	}
	if _, err := store.MetricsPrometheus(); !errors.Is(err, fencelock.ErrClosed) {
		t.Errorf("MetricsPrometheus after Close: %v", err)
	}
	if err := store.SetMetricsRecorder(nil); !errors.Is(err, fencelock.ErrClosed) {
		t.Errorf("SetMetricsRecorder after Close: %v", err)
	}
	if err := store.WithLock(bg, "a", func(context.Context, fencelock.Holder) error {
		t.Error("fn ran on a closed store")
		return nil
	}); !errors.Is(err, fencelock.ErrClosed) {
		t.Errorf("WithLock after Close: %v", err)
	}
}

func TestEndingAndScopeNames(t *testing.T) {
	names := map[fmt.Stringer]string{
		fencelock.EndingHeld:       "held",
		fencelock.EndingReleased:   "released",
		fencelock.EndingExpired:    "expired",
		fencelock.EndingTakenOver:  "taken-over",
		fencelock.EndingHolderDied: "holder-died",
		fencelock.Ending(99):       "Ending(99)",
		fencelock.Scope(7):         "Scope(7)",
	}
	for value, want := range names {
		if got := value.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", value, got, want)
		}
	}
}

// eventLog is a MetricsRecorder that writes down what it is told, in order.
type eventLog struct {
	mu     sync.Mutex
	events []string
	waits  []time.Duration
	helds  []time.Duration
}

func (l *eventLog) add(event string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, event)
}

func (l *eventLog) AcquireAttempt(name string, acquired bool, wait time.Duration) {
	l.add(fmt.Sprintf("attempt %s %v", name, acquired))
	l.mu.Lock()
	l.waits = append(l.waits, wait)
	l.mu.Unlock()
}

func (l *eventLog) HoldDuration(name string, held time.Duration) {
	l.add("held " + name)
	l.mu.Lock()
	l.helds = append(l.helds, held)
	l.mu.Unlock()
}

func (l *eventLog) ActiveLocksDelta(name string, delta int) {
	l.add(fmt.Sprintf("delta %s %+d", name, delta))
}

func (l *eventLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	events := l.events
	l.events = nil
	return events
}

func expectEvents(t *testing.T, log *eventLog, want ...string) {
	t.Helper()
	got := log.take()
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("events\n  %s\nwant\n  %s", strings.Join(got, "; "), strings.Join(want, "; "))
	}
}

func TestAMetricsRecorderHearsAttemptsHoldsAndDeltasInOrder(t *testing.T) {
	store := openStore(t)
	log := &eventLog{}
	if err := store.SetMetricsRecorder(log); err != nil {
		t.Fatal(err)
	}

	a := acquire(t, store, "r", fencelock.WithTTL(100*time.Millisecond))
	expectEvents(t, log, "attempt r true", "delta r +1")
	if _, err := store.Acquire(bg, "r"); !errors.Is(err, fencelock.ErrLocked) {
		t.Fatal(err)
	}
	expectEvents(t, log, "attempt r false")
	ctx, cancel := context.WithTimeout(bg, 30*time.Millisecond)
	_, err := store.Acquire(ctx, "r", fencelock.Wait())
	cancel()
	if !errors.Is(err, fencelock.ErrTimeout) {
		t.Fatal(err)
	}
	expectEvents(t, log, "attempt r false")
	log.mu.Lock()
	if len(log.waits) != 3 || log.waits[0] != 0 || log.waits[1] != 0 || log.waits[2] <= 0 {
		t.Errorf("waits %v: want two try-once attempts and one that waited", log.waits)
	}
	log.mu.Unlock()

	// A is taken over past its lease; its write finds it lost, which ends it, once: its
	// Release then reports the loss and tells the recorder nothing more.
	time.Sleep(150 * time.Millisecond)
	b := acquire(t, store, "r", fencelock.WithTTL(time.Minute))
	expectEvents(t, log, "attempt r true", "delta r +1")
	if err := a.Put(bg, "k", []byte("v")); !errors.Is(err, fencelock.ErrLockLost) {
		t.Fatal(err)
	}
	expectEvents(t, log, "held r", "delta r -1")
	if err := a.Release(); !errors.Is(err, fencelock.ErrLockLost) {
		t.Fatalf("the release of a lost lease: %v, want ErrLockLost", err)
	}
	expectEvents(t, log)
	if err := b.Release(); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, log, "held r", "delta r -1")
	log.mu.Lock()
	if len(log.helds) != 2 || log.helds[0] < 100*time.Millisecond || log.helds[1] <= 0 {
		t.Errorf("held %v: A past its TTL of 100ms, then B", log.helds)
	}
	log.mu.Unlock()

	holders, err := store.AcquireAll(bg, []string{"p", "q"})
	if err != nil {
		t.Fatal(err)
	}
	expectEvents(t, log, "attempt p true", "delta p +1", "attempt q true", "delta q +1")

	// Replaced: the new recorder hears what follows, the old one nothing.
	other := &eventLog{}
	if err := store.SetMetricsRecorder(other); err != nil {
		t.Fatal(err)
	}
	for _, h := range holders {
		if err := h.Release(); err != nil {
			t.Fatal(err)
		}
	}
	expectEvents(t, log)
	expectEvents(t, other, "held p", "delta p -1", "held q", "delta q -1")

	// Removed: nobody hears anything.
	if err := store.SetMetricsRecorder(nil); err != nil {
		t.Fatal(err)
	}
	if err := store.SetMetricsRecorder(nil); err != nil {
		t.Fatal(err)
	}
	if err := acquire(t, store, "r").Release(); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, log)
	expectEvents(t, other)
}

func TestARecorderHearsTheStoresHoldersFromEveryGoroutine(t *testing.T) {
	store := openStore(t)
	count := &deltaSum{}
	if err := store.SetMetricsRecorder(count); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				name := fmt.Sprintf("g%d", (i+j)%3)
				h, err := store.Acquire(bg, name, fencelock.Wait())
				if err != nil {
					t.Error(err)
					return
				}
				_ = h.Release()
			}
		}()
	}
	wg.Wait()
	count.mu.Lock()
	defer count.mu.Unlock()
	if count.attempts != 160 || count.sum != 0 || count.most < 1 || count.most > 3 {
		t.Errorf("%d attempts, deltas summing to %d, at most %d at once; want 160, 0, 1 to 3",
			count.attempts, count.sum, count.most)
	}
}

// Recorders replaced and removed while other goroutines acquire and release: an event the
// library began to report to a recorder just replaced is dropped or delivered, never a crash.
func TestReplacingTheRecorderWhileLocksAreTakenIsSafe(t *testing.T) {
	store := openStore(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				h, err := store.Acquire(bg, fmt.Sprintf("s%d", i))
				if err != nil {
					t.Error(err)
					return
				}
				_ = h.Release()
			}
		}()
	}
	for i := range 200 {
		var r fencelock.MetricsRecorder
		if i%3 != 2 {
			r = &deltaSum{}
		}
		if err := store.SetMetricsRecorder(r); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

type deltaSum struct {
	mu                  sync.Mutex
	attempts, sum, most int
}

func (d *deltaSum) AcquireAttempt(string, bool, time.Duration) {
	d.mu.Lock()
	d.attempts++
	d.mu.Unlock()
}

func (d *deltaSum) HoldDuration(string, time.Duration) {}

func (d *deltaSum) ActiveLocksDelta(_ string, delta int) {
	d.mu.Lock()
	d.sum += delta
	d.most = max(d.most, d.sum)
	d.mu.Unlock()
}

// panicky panics in the methods named in it.
type panicky struct {
	eventLog
	in string
}

func (p *panicky) AcquireAttempt(name string, acquired bool, wait time.Duration) {
	if p.in == "attempt" {
		panic("recorder bug")
	}
	p.eventLog.AcquireAttempt(name, acquired, wait)
}

func (p *panicky) HoldDuration(name string, held time.Duration) {
	if p.in == "held" {
		panic(errors.New("recorder bug"))
	}
	p.eventLog.HoldDuration(name, held)
}

func TestAPanickingRecorderDoesNotCrashOrChangeTheOperation(t *testing.T) {
	for _, in := range []string{"attempt", "held"} {
		t.Run(in, func(t *testing.T) {
			store := openStore(t)
			recorder := &panicky{in: in}
			if err := store.SetMetricsRecorder(recorder); err != nil {
				t.Fatal(err)
			}
			h := acquire(t, store, "p")
			if _, err := store.Acquire(bg, "p"); !errors.Is(err, fencelock.ErrLocked) {
				t.Fatalf("a refusal that panicked the recorder: %v", err)
			}
			if err := h.Release(); err != nil {
				t.Fatal(err)
			}
			if held, err := h.Held(bg); held || err != nil {
				t.Fatalf("released: held %v, %v", held, err)
			}
			if err := acquire(t, store, "p").Release(); err != nil {
				t.Fatal(err)
			}
			// The panicking call skips what the event had left; the recorder stays set.
			want := map[string][]string{
				"attempt": {"held p", "delta p -1", "held p", "delta p -1"},
				"held": {"attempt p true", "delta p +1", "attempt p false",
					"attempt p true", "delta p +1"},
			}[in]
			expectEvents(t, &recorder.eventLog, want...)
		})
	}
}

func TestWithLockReleasesAfterFnAndReturnsItsError(t *testing.T) {
	store := openStore(t)
	var token uint64
	err := store.WithLock(bg, "job", func(ctx context.Context, h fencelock.Holder) error {
		token = h.Token()
		if h.Name() != "job" || ctx.Err() != nil {
			t.Errorf("holder %v, ctx %v", h, ctx.Err())
		}
		if _, err := store.Acquire(bg, "job"); !errors.Is(err, fencelock.ErrLocked) {
			t.Errorf("the lock is not held while fn runs: %v", err)
		}
		return h.Put(ctx, "report", []byte("done"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, tok, err := store.Get(bg, "report"); err != nil || tok != token {
		t.Fatalf("fn's write: token %d, %v", tok, err)
	}
	// Free afterwards.
	if err := acquire(t, store, "job").Release(); err != nil {
		t.Fatalf("the lock after WithLock: %v", err)
	}

	failed := errors.New("export failed")
	err = store.WithLock(bg, "job", func(context.Context, fencelock.Holder) error { return failed })
	if !errors.Is(err, failed) || err.Error() != failed.Error() {
		t.Fatalf("WithLock returned %v, want fn's %v", err, failed)
	}
	if err := acquire(t, store, "job").Release(); err != nil {
		t.Fatalf("the lock after fn failed: %v", err)
	}

	// Held elsewhere: Acquire's error, and fn does not run; with Wait, it waits per ctx.
	other := acquire(t, store, "job")
	run := func(context.Context, fencelock.Holder) error {
		t.Error("fn ran without the lock")
		return nil
	}
	if err := store.WithLock(bg, "job", run); !errors.Is(err, fencelock.ErrLocked) {
		t.Fatalf("WithLock of a held lock: %v", err)
	}
	ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
	defer cancel()
	if err := store.WithLock(ctx, "job", run, fencelock.Wait()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a waiting WithLock past its deadline: %v", err)
	}
	if err := other.Release(); err != nil {
		t.Fatal(err)
	}
}

func TestWithLockReleasesWhenFnPanics(t *testing.T) {
	store := openStore(t)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want fn's panic", r)
			}
		}()
		_ = store.WithLock(bg, "job", func(context.Context, fencelock.Holder) error { panic("boom") })
		t.Fatal("WithLock returned from a panicking fn")
	}()
	if err := acquire(t, store, "job").Release(); err != nil {
		t.Fatalf("the lock after fn panicked: %v", err)
	}
}

// The lease is renewed while fn runs, and fn's ctx ends, with ErrLockLost as its cause, once
// the lease is known lost.
func TestWithLockKeepsTheLeaseAndEndsFnsContextWhenItIsLost(t *testing.T) {
	store := openStore(t)
	err := store.WithLock(bg, "job", func(ctx context.Context, h fencelock.Holder) error {
		first := lockInfo(t, store, "job").ExpiresAt
		waitFor(t, "a background renewal", func() bool {
			return lockInfo(t, store, "job").ExpiresAt.After(first)
		})
		if ctx.Err() != nil {
			t.Errorf("fn's ctx ended while the lease is held: %v", context.Cause(ctx))
		}
		return nil
	}, fencelock.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}

	// Lost: the lease is cut short (an Extend to 1ms, long before the next renewal of a
	// minute's lease) as a pause past the TTL would, another store takes the lock over, and
	// fn's write finds the lease lost.
	second, err := fencelock.Open(store.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	var lostToken uint64
	errFn := errors.New("fn's own failure")
	err = store.WithLock(bg, "lost", func(ctx context.Context, h fencelock.Holder) error {
		lostToken = h.Token()
		if err := h.Extend(ctx, time.Millisecond); err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond)
		taker := acquire(t, second, "lost", fencelock.WithTTL(time.Minute))
		if err := h.Put(bg, "k", []byte("late")); !errors.Is(err, fencelock.ErrLockLost) {
			t.Errorf("a write after the takeover: %v", err)
		}
		<-ctx.Done()
		var lost *fencelock.LockLostError
		if cause := context.Cause(ctx); !errors.Is(cause, fencelock.ErrLockLost) || !errors.As(cause, &lost) || lost.Token != h.Token() {
			t.Errorf("fn's ctx ended with %v, want a LockLostError of token %d", cause, h.Token())
		}
		if err := taker.Release(); err != nil {
			t.Errorf("the taker's release: %v", err)
		}
		return errFn
	}, fencelock.WithTTL(time.Minute))
	// The release after fn reports the loss, joined with fn's error.
	var lost *fencelock.LockLostError
	if !errors.Is(err, errFn) || !errors.Is(err, fencelock.ErrLockLost) || !errors.As(err, &lost) || lost.Token != lostToken {
		t.Errorf("WithLock of a lost lease returned %v, want fn's error and a LockLostError of token %d", err, lostToken)
	}
	entries := history(t, store, "lost")
	if len(entries) == 0 || entries[0].Token != lostToken || entries[0].Ending != fencelock.EndingTakenOver {
		t.Errorf("history %s", endings(entries))
	}
}

// A Store opened WithoutHistory records no grant history, and its metrics still count how
// leases ended.
func TestWithoutHistoryRecordsNothingAndStillCounts(t *testing.T) {
	store := openStore(t, fencelock.WithoutHistory())
	ctx := context.Background()
	before := metrics(t, store)
	first, err := store.Acquire(ctx, "quiet")
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	second, err := store.Acquire(ctx, "quiet")
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release()
	if got, want := endings(history(t, store, "quiet")), fmt.Sprintf("%d:held", second.Token()); got != want {
		t.Fatalf("history %s, want %s", got, want)
	}
	if d := metrics(t, store).EndedReleased - before.EndedReleased; d != 1 {
		t.Fatalf("EndedReleased grew by %d, want 1", d)
	}
}
