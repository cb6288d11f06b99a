package fencelock_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock-go"
)

// Leader election: one leader at a time across processes, a deposed leader's writes refused,
// observers see every change in order, Resign hands over at once, and a campaign ended while
// it waits leaves no trace. No assertion is about how long anything took: a hand-over that did
// not happen at once shows as a candidate still waiting behind a lease of ten minutes, which
// `go test -timeout` turns into a failure.

const longLease = 10 * time.Minute

func campaign(t testing.TB, store *fencelock.Store, name string, opts ...fencelock.CampaignOption) *fencelock.Leadership {
	t.Helper()
	leadership, err := store.Campaign(bg, name, opts...)
	if err != nil {
		t.Fatalf("Campaign(%q): %v", name, err)
	}
	t.Cleanup(func() { _ = leadership.Resign(bg) })
	return leadership
}

func next(t testing.TB, changes <-chan fencelock.Leader) fencelock.Leader {
	t.Helper()
	leader, ok := <-changes
	if !ok {
		t.Fatal("the observe channel closed")
	}
	return leader
}

func TestElectionCampaignProclaimAndFencedWrites(t *testing.T) {
	store := openStore(t)
	if _, err := store.Leader(bg, "scheduler"); !errors.Is(err, fencelock.ErrNotFound) {
		t.Fatalf("Leader before any campaign: %v, want ErrNotFound", err)
	}
	ctx, stop := context.WithCancel(bg)
	changes, err := store.Observe(ctx, "scheduler")
	if err != nil {
		t.Fatal(err)
	}
	leadership := campaign(t, store, "scheduler", fencelock.WithValue([]byte("node-a")), fencelock.WithLeaseTTL(longLease))
	if leadership.Term() == 0 || leadership.Name() != "scheduler" || leadership.IsLost() {
		t.Fatalf("leadership %v lost=%v", leadership, leadership.IsLost())
	}
	first := next(t, changes)
	if first.Term != leadership.Term() || first.Version != 1 || string(first.Value) != "node-a" || first.PID != os.Getpid() || first.Since.IsZero() {
		t.Fatalf("first change %+v", first)
	}
	if err := leadership.Proclaim(bg, []byte("node-a:8080")); err != nil {
		t.Fatal(err)
	}
	second := next(t, changes)
	if second.Term != leadership.Term() || second.Version != 2 || string(second.Value) != "node-a:8080" {
		t.Fatalf("second change %+v", second)
	}
	if current, err := store.Leader(bg, "scheduler"); err != nil || current.Version != 2 || !bytes.Equal(leadership.Value(), current.Value) {
		t.Fatalf("Leader: %+v, %v", current, err)
	}
	if err := leadership.Put(bg, "schedule", []byte("by a")); err != nil {
		t.Fatal(err)
	}
	if _, token, err := store.Get(bg, "schedule"); err != nil || token != leadership.Term() {
		t.Fatalf("Get: token %d, %v", token, err)
	}
	if existed, err := leadership.Delete(bg, "schedule"); err != nil || !existed {
		t.Fatalf("Delete: %v %v", existed, err)
	}
	if err := leadership.Fence(bg, "s3://bucket/schedule.json"); err != nil {
		t.Fatal(err)
	}
	if token, err := store.FenceToken(bg, "s3://bucket/schedule.json"); err != nil || token != leadership.Term() {
		t.Fatalf("FenceToken: %d, %v", token, err)
	}
	done := leadership.Done()
	if err := leadership.Resign(bg); err != nil {
		t.Fatal(err)
	}
	<-done
	if !leadership.IsLost() {
		t.Fatal("IsLost after Resign")
	}
	if err := leadership.Put(bg, "schedule", []byte("late")); !errors.Is(err, fencelock.ErrLockLost) {
		t.Fatalf("Put after Resign: %v, want ErrLockLost", err)
	}
	if err := leadership.Resign(bg); err != nil {
		t.Fatalf("a second Resign: %v", err)
	}
	if _, err := store.Leader(bg, "scheduler"); !errors.Is(err, fencelock.ErrNotFound) {
		t.Fatalf("Leader after Resign: %v, want ErrNotFound", err)
	}
	stop()
	for range changes { // closed once ctx is done
	}
}

func TestElectionBadArgumentsChangeNothing(t *testing.T) {
	store := openStore(t)
	for _, c := range []struct {
		name string
		opts []fencelock.CampaignOption
	}{
		{"", nil},
		{"a\x00b", nil},
		{"scheduler", []fencelock.CampaignOption{fencelock.WithLeaseTTL(-time.Second)}},
		{"scheduler", []fencelock.CampaignOption{fencelock.WithLeaseTTL(3 * time.Second), fencelock.WithMargin(3 * time.Second)}},
	} {
		if _, err := store.Campaign(bg, c.name, c.opts...); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Errorf("Campaign(%q): %v, want ErrInvalidArgument", c.name, err)
		}
	}
	if _, err := store.Observe(bg, ""); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Errorf("Observe(\"\"): %v, want ErrInvalidArgument", err)
	}
	if locks, err := store.Locks(bg); err != nil || len(locks) != 0 {
		t.Fatalf("Locks: %v, %v", locks, err)
	}
}

func TestElectionResignHandsOverAtOnce(t *testing.T) {
	store := openStore(t)
	other, err := fencelock.Open(store.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	first := campaign(t, store, "scheduler", fencelock.WithLeaseTTL(longLease))
	won := make(chan *fencelock.Leadership, 1)
	go func() {
		l, err := other.Campaign(bg, "scheduler", fencelock.WithValue([]byte("b")), fencelock.WithLeaseTTL(longLease))
		if err != nil {
			t.Error(err)
		}
		won <- l
	}()
	waitFor(t, "the second candidate waits", func() bool {
		waiters, err := store.Waiters(bg, "scheduler")
		return err == nil && len(waiters) > 0
	})
	if err := first.Resign(bg); err != nil {
		t.Fatal(err)
	}
	second := <-won
	if second == nil {
		t.FailNow()
	}
	defer second.Resign(bg)
	if second.Term() <= first.Term() {
		t.Fatalf("terms %d then %d", first.Term(), second.Term())
	}
	if err := first.Put(bg, "schedule", []byte("late")); !errors.Is(err, fencelock.ErrLockLost) {
		t.Fatalf("the first leader's Put: %v, want ErrLockLost", err)
	}
	if leader, err := store.Leader(bg, "scheduler"); err != nil || leader.Term != second.Term() || string(leader.Value) != "b" {
		t.Fatalf("Leader: %+v, %v", leader, err)
	}
}

func TestElectionEndedCampaignLeavesNoTrace(t *testing.T) {
	store := openStore(t)
	other, err := fencelock.Open(store.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	leadership := campaign(t, store, "scheduler", fencelock.WithValue([]byte("a")), fencelock.WithLeaseTTL(longLease))
	before, err := store.Locks(bg)
	if err != nil {
		t.Fatal(err)
	}

	ctx, stop := context.WithTimeout(bg, 50*time.Millisecond)
	_, err = other.Campaign(ctx, "scheduler")
	stop()
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, fencelock.ErrTimeout) {
		t.Fatalf("Campaign past its deadline: %v", err)
	}
	ctx, cancel := context.WithCancel(bg)
	ended := make(chan error, 1)
	go func() {
		_, err := other.Campaign(ctx, "scheduler")
		ended <- err
	}()
	waitFor(t, "the candidate waits", func() bool {
		waiters, err := store.Waiters(bg, "scheduler")
		return err == nil && len(waiters) > 0
	})
	cancel()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled Campaign: %v", err)
	}

	if waiters, err := store.Waiters(bg, "scheduler"); err != nil || len(waiters) != 0 {
		t.Fatalf("Waiters: %v, %v", waiters, err)
	}
	after, err := store.Locks(bg)
	if err != nil || len(after) != len(before) {
		t.Fatalf("Locks before %v, after %v (%v)", before, after, err)
	}
	for i := range before {
		if after[i].Name != before[i].Name || after[i].Token != before[i].Token {
			t.Fatalf("Locks before %v, after %v", before, after)
		}
	}
	if leader, err := store.Leader(bg, "scheduler"); err != nil || leader.Term != leadership.Term() {
		t.Fatalf("Leader: %+v, %v", leader, err)
	}
	if err := leadership.Resign(bg); err != nil {
		t.Fatal(err)
	}
	// No ended candidate stands in the queue before the next one.
	next := campaign(t, other, "scheduler")
	if next.Term() <= leadership.Term() {
		t.Fatalf("terms %d then %d", leadership.Term(), next.Term())
	}
}

// runCandidate leads the election "scheduler" four times, each time creating a marker file
// that must not exist (one leader at a time), and prints each term.
func runCandidate(path string) int {
	store, err := fencelock.Open(path)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer store.Close()
	marker := filepath.Join(filepath.Dir(path), "leading")
	for range 4 {
		leadership, err := store.Campaign(bg, "scheduler", fencelock.WithValue([]byte(strconv.Itoa(os.Getpid()))))
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			fmt.Println("two leaders:", err)
			return 1
		}
		for range 20 {
			if err := leadership.Put(bg, "count", []byte("x")); err != nil {
				fmt.Println("error", err)
				return 1
			}
		}
		_ = f.Close()
		_ = os.Remove(marker)
		fmt.Println("term", leadership.Term())
		if err := leadership.Resign(bg); err != nil {
			fmt.Println("error", err)
			return 1
		}
	}
	return 0
}

func TestElectionOneLeaderAtATimeAcrossProcesses(t *testing.T) {
	store := openStore(t)
	ctx, stop := context.WithCancel(bg)
	defer stop()
	changes, err := store.Observe(ctx, "scheduler")
	if err != nil {
		t.Fatal(err)
	}
	var terms []uint64
	outs := make([]*bufio.Reader, 3)
	for i := range outs {
		_, stdin, out := child(t, "candidate", store.Path())
		_ = stdin.Close()
		outs[i] = out
	}
	for i, out := range outs {
		for {
			line, err := out.ReadString('\n')
			if err != nil {
				break
			}
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), "term ")
			if !ok {
				t.Fatalf("candidate %d said %q", i, line)
			}
			term, err := strconv.ParseUint(rest, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			terms = append(terms, term)
		}
	}
	slices.Sort(terms)
	if len(terms) != 12 || len(slices.Compact(slices.Clone(terms))) != 12 {
		t.Fatalf("terms %v", terms)
	}
	// The observer saw every term, in order.
	var seen []uint64
	for len(seen) < len(terms) {
		leader := next(t, changes)
		if leader.Version != 1 {
			t.Fatalf("a change %+v", leader)
		}
		seen = append(seen, leader.Term)
	}
	if !slices.Equal(seen, terms) {
		t.Fatalf("observed %v, led %v", seen, terms)
	}
}

// runDeposed leads with a short lease, reports its term, and once told to go on (after the
// parent paused it past its lease, and another leader took over) writes as the leader.
func runDeposed(path string) int {
	store, err := fencelock.Open(path)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer store.Close()
	leadership, err := store.Campaign(bg, "scheduler", fencelock.WithLeaseTTL(600*time.Millisecond))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("token", leadership.Term())
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Println("error", err)
		return 1
	}
	<-leadership.Done()
	fmt.Println("done", leadership.IsLost())
	err = leadership.Put(bg, "schedule", []byte("late write"))
	fmt.Println("put", errors.Is(err, fencelock.ErrLockLost))
	err = store.PutWithFence(bg, "schedule", []byte("late write"), leadership.Term())
	fmt.Println("fenced put", errors.Is(err, fencelock.ErrStaleToken))
	return 0
}

func TestElectionDeposedLeaderWriteIsRefused(t *testing.T) {
	store := openStore(t)
	cmd, stdin, out := child(t, "deposed", store.Path())
	term := readToken(t, "the first leader", out)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Waits until the stopped leader's lease runs out: nothing renews it.
	leadership := campaign(t, store, "scheduler", fencelock.WithLeaseTTL(longLease))
	if leadership.Term() <= term {
		t.Fatalf("terms %d then %d", term, leadership.Term())
	}
	if err := leadership.Put(bg, "schedule", []byte("by b")); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for {
		line, err := out.ReadString('\n')
		if err != nil {
			break
		}
		lines = append(lines, strings.TrimSpace(line))
	}
	if want := []string{"done true", "put true", "fenced put true"}; !slices.Equal(lines, want) {
		t.Fatalf("the deposed leader said %q, want %q", lines, want)
	}
	if value, token, err := store.Get(bg, "schedule"); err != nil || string(value) != "by b" || token != leadership.Term() {
		t.Fatalf("Get: %q %d %v", value, token, err)
	}
}
