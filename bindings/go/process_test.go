package fencelock_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock-go"
)

// roleEnv makes the test binary act as one process of the seed scenario instead of running
// the tests. A child opens its own store: one opened before fork() would refuse with ErrForked.
const roleEnv = "FENCELOCK_GO_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "":
		os.Exit(m.Run())
	case "A":
		os.Exit(runA(os.Getenv("FENCELOCK_GO_TEST_STORE")))
	case "B":
		os.Exit(runB(os.Getenv("FENCELOCK_GO_TEST_STORE")))
	case "waiter":
		os.Exit(runWaiter(os.Getenv("FENCELOCK_GO_TEST_STORE")))
	case "permit":
		os.Exit(runPermit(os.Getenv("FENCELOCK_GO_TEST_STORE")))
	case "holder":
		os.Exit(runHolder(os.Getenv("FENCELOCK_GO_TEST_STORE")))
	case "renewer":
		os.Exit(runRenewer(os.Getenv("FENCELOCK_GO_TEST_STORE")))
	case "candidate":
		os.Exit(runCandidate(os.Getenv("FENCELOCK_GO_TEST_STORE")))
	case "deposed":
		os.Exit(runDeposed(os.Getenv("FENCELOCK_GO_TEST_STORE")))
	default:
		fmt.Fprintln(os.Stderr, "unknown role", os.Getenv(roleEnv))
		os.Exit(2)
	}
}

// writeLogEnv, set to 1, makes the seed scenario's processes open the store WithWriteLog.
const writeLogEnv = "FENCELOCK_GO_TEST_WRITE_LOG"

// seedOptions are the options the seed scenario's processes open the store with.
func seedOptions() []fencelock.OpenOption {
	if os.Getenv(writeLogEnv) == "1" {
		return []fencelock.OpenOption{fencelock.WithWriteLog()}
	}
	return nil
}

// runA is the seed's process A: it takes the lock with a short lease, reports its token, and
// then (paused by the parent in the meantime) writes with that token once told to go on.
func runA(path string) int {
	store, err := fencelock.Open(path, seedOptions()...)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer store.Close()
	holder, err := store.Acquire(bg, "payment-export", fencelock.WithTTL(200*time.Millisecond))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer holder.Release()
	fence := holder.Token()
	fmt.Println("token", fence)
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Println("error", err)
		return 1
	}
	err = store.PutWithFence(bg, "payments/today.csv", []byte("A's export"), fence)
	var stale *fencelock.StaleTokenError
	switch {
	case errors.Is(err, fencelock.ErrStaleToken) && errors.As(err, &stale):
		fmt.Println("stale", stale.Token, stale.Highest)
	case err != nil:
		fmt.Println("error", err)
	default:
		fmt.Println("written")
	}
	// The holder's own checked write also knows the lease is gone.
	if err := holder.Put(bg, "payments/today.csv", []byte("A again")); errors.Is(err, fencelock.ErrLockLost) {
		fmt.Println("lost")
	} else {
		fmt.Println("holder put:", err)
	}
	return 0
}

// runB is process B: it waits for the lock, which frees when A's lease runs out, and writes.
func runB(path string) int {
	store, err := fencelock.Open(path, seedOptions()...)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer store.Close()
	holder, err := store.Acquire(bg, "payment-export", fencelock.Wait())
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer holder.Release()
	if err := store.PutWithFence(bg, "payments/today.csv", []byte("B's export"), holder.Token()); err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("token", holder.Token())
	return 0
}

// runWaiter serves BenchmarkWakeUpAcrossProcesses: for each line it reads, it waits for the
// lock and prints the wall-clock time it got it.
func runWaiter(path string) int {
	store, err := fencelock.Open(path)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer store.Close()
	in := bufio.NewReader(os.Stdin)
	for {
		if _, err := in.ReadString('\n'); err != nil {
			return 0
		}
		holder, err := store.Acquire(bg, "bench", fencelock.Wait())
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		woke := time.Now().UnixNano()
		_ = holder.Release()
		fmt.Println("token", woke)
	}
}

// child starts the test binary as the process role of the store at path, with env added to
// its environment.
func child(t testing.TB, role, path string, env ...string) (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), roleEnv+"="+role, "FENCELOCK_GO_TEST_STORE="+path)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, stdin, bufio.NewReader(stdout)
}

func readToken(t testing.TB, who string, out *bufio.Reader) uint64 {
	t.Helper()
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatalf("%s: %v", who, err)
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), "token ")
	if !ok {
		t.Fatalf("%s said %q", who, line)
	}
	token, err := strconv.ParseUint(rest, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// The seed scenario with real processes: A holds the lock and is paused (SIGSTOP) past its
// lease; B takes over and writes; A wakes and writes with its old token, which is refused, and
// B's data stays. Both with fenced writes committed to the store file and through the redo log
// (WithWriteLog), and in each a read-only open of the closed store finds B's write.
func TestPausedProcessCannotOverwriteItsSuccessor(t *testing.T) {
	t.Run("commit", func(t *testing.T) { pausedProcessCannotOverwriteItsSuccessor(t, false) })
	t.Run("write log", func(t *testing.T) { pausedProcessCannotOverwriteItsSuccessor(t, true) })
}

func pausedProcessCannotOverwriteItsSuccessor(t *testing.T, writeLog bool) {
	path := t.TempDir() + "/locks.db"
	env := writeLogEnv + "=0"
	if writeLog {
		env = writeLogEnv + "=1"
	}

	a, aIn, aOut := child(t, "A", path, env)
	tokenA := readToken(t, "A", aOut)
	if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}

	b, _, bOut := child(t, "B", path, env)
	tokenB := readToken(t, "B", bOut)
	if err := b.Wait(); err != nil {
		t.Fatalf("B: %v", err)
	}
	if tokenB != tokenA+1 {
		t.Fatalf("B's token %d does not follow A's %d", tokenB, tokenA)
	}
	// B's write went through the log exactly when the processes asked for it.
	segments, err := filepath.Glob(path + ".wal.*")
	if err != nil {
		t.Fatal(err)
	}
	if (len(segments) > 0) != writeLog {
		t.Fatalf("log segments %q with writeLog %v", segments, writeLog)
	}

	if err := a.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(aIn, "go\n"); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(aOut)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("stale %d %d\nlost\n", tokenA, tokenB)
	if string(rest) != want {
		t.Fatalf("A said %q, want %q", rest, want)
	}
	if err := a.Wait(); err != nil {
		t.Fatalf("A: %v", err)
	}

	store, err := fencelock.Open(path, fencelock.WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	value, token, err := store.Get(bg, "payments/today.csv")
	if err != nil || string(value) != "B's export" || token != tokenB {
		t.Fatalf("Get = %q, %d, %v; want B's export at token %d", value, token, err, tokenB)
	}
}

// runHolder holds the lock nightly until killed.
func runHolder(path string) int {
	store, err := fencelock.Open(path)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer store.Close()
	holder, err := store.Acquire(bg, "nightly", fencelock.WithTTL(10*time.Minute))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer holder.Release()
	fmt.Println("token", holder.Token())
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

// A holder killed while it holds the lock is on record as such, and its grant counted in the
// metrics of every process that has the store open.
func TestAKilledHolderIsOnRecordAsHolderDiedAndCountedHere(t *testing.T) {
	path := t.TempDir() + "/locks.db"
	store, err := fencelock.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	before := metrics(t, store)
	if before.Scope != fencelock.ScopeStore {
		t.Fatalf("scope %v: the processes share no counters", before.Scope)
	}

	kid, _, kidOut := child(t, "holder", path)
	killed := readToken(t, "holder", kidOut)
	held := metrics(t, store)
	if err := kid.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = kid.Wait()
	if got := held.Grants - before.Grants; got != 1 {
		t.Errorf("the child's grant: %d more grants here, want 1", got)
	}

	next := acquire(t, store, "nightly", fencelock.WithTTL(time.Minute))
	entries := history(t, store, "nightly")
	want := fmt.Sprintf("%d:holder-died %d:held", killed, next.Token())
	if got := endings(entries); got != want {
		t.Fatalf("history %s, want %s", got, want)
	}
	if entries[0].PID != uint32(kid.Process.Pid) || entries[0].RecordedAt.IsZero() {
		t.Errorf("the killed holder's entry %+v, its pid %d", entries[0], kid.Process.Pid)
	}
	after := metrics(t, store)
	if got := after.EndedHolderDied - before.EndedHolderDied; got != 1 || after.LeasesLost()-before.LeasesLost() != 1 {
		t.Errorf("%d more holders died, %d more leases lost; want 1 and 1", got, after.LeasesLost()-before.LeasesLost())
	}
}

// lineRecorder prints each event on stdout, for the parent to read.
type lineRecorder struct{ lost chan struct{} }

func (r lineRecorder) AcquireAttempt(name string, acquired bool, _ time.Duration) {
	fmt.Println("attempt", name, acquired)
}

func (r lineRecorder) HoldDuration(name string, _ time.Duration) { fmt.Println("held", name) }

func (r lineRecorder) ActiveLocksDelta(name string, delta int) {
	fmt.Println("delta", name, delta)
	if delta < 0 {
		close(r.lost)
	}
}

// runRenewer holds the lock nightly with KeepAlive and a recorder, and exits once the
// recorder heard the lease end.
func runRenewer(path string) int {
	store, err := fencelock.Open(path)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer store.Close()
	recorder := lineRecorder{lost: make(chan struct{})}
	if err := store.SetMetricsRecorder(recorder); err != nil {
		fmt.Println("error", err)
		return 1
	}
	holder, err := store.Acquire(bg, "nightly", fencelock.WithTTL(300*time.Millisecond), fencelock.KeepAlive())
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer holder.Release()
	fmt.Println("token", holder.Token())
	<-recorder.lost
	return 0
}

// stopped waits until the process is stopped (state T in /proc), so that what follows runs
// while it cannot.
func stopped(t *testing.T, pid int) {
	t.Helper()
	waitFor(t, "the child stopped", func() bool {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		return len(fields) > 0 && fields[0] == "T"
	})
}

// A child's recorder hears its lease lost from the library's keep-alive thread, a thread Go
// did not start: the child is stopped past its lease, the parent takes the lock over, and the
// child's renewal, once it runs again, finds the lease gone.
func TestARecorderHearsALossFromTheKeepAliveThread(t *testing.T) {
	path := t.TempDir() + "/locks.db"
	kid, _, kidOut := child(t, "renewer", path)
	lines := make(chan string)
	go func() {
		defer close(lines)
		for {
			line, err := kidOut.ReadString('\n')
			if err != nil {
				return
			}
			lines <- strings.TrimSpace(line)
		}
	}()
	next := func() string {
		t.Helper()
		line, ok := <-lines
		if !ok {
			t.Fatal("the child's output ended")
		}
		return line
	}
	for _, want := range []string{"attempt nightly true", "delta nightly 1"} {
		if got := next(); got != want {
			t.Fatalf("child said %q, want %q", got, want)
		}
	}
	token, err := strconv.ParseUint(strings.TrimPrefix(next(), "token "), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := kid.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped(t, kid.Process.Pid)

	store, err := fencelock.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	mine := acquire(t, store, "nightly", fencelock.Wait(), fencelock.WithTTL(time.Minute))
	if err := kid.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"held nightly", "delta nightly -1"} {
		if got := next(); got != want {
			t.Fatalf("child said %q, want %q", got, want)
		}
	}
	if err := kid.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	want := fmt.Sprintf("%d:taken-over %d:held", token, mine.Token())
	if got := endings(history(t, store, "nightly")); got != want {
		t.Errorf("history %s, want %s", got, want)
	}
}
