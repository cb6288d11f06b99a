// Command leader is a leader election whose deposed leader's late write is refused.
//
//	go run ./examples/leader
//
// Leader A (a child process: this program with the argument "a") wins the election
// "scheduler" and writes the schedule with its term. It is then paused (SIGSTOP, as by a long
// GC pause) past its lease; B campaigns, is granted the next term and writes. A resumes and
// writes late, with its term as the fencing token, and the store refuses the write: B's term
// is higher.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fencelock/fencelock-go"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "a" {
		leaderA(os.Args[2])
		return
	}
	if err := demo(); err != nil {
		log.Fatal(err)
	}
}

// leaderA leads, writes, and once told on stdin (after its pause) writes late.
func leaderA(path string) {
	ctx := context.Background()
	store, err := fencelock.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	leadership, err := store.Campaign(ctx, "scheduler", fencelock.WithValue([]byte("node-a")), fencelock.WithLeaseTTL(600*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	if err := leadership.Put(ctx, "schedule", []byte("A's schedule")); err != nil {
		log.Fatal(err)
	}
	fmt.Println(leadership.Term())
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		log.Fatal(err)
	}
	// Late: written with the term as the fencing token, as a write to a system of your own
	// would be (leadership.Put would refuse before trying).
	err = store.PutWithFence(ctx, "schedule", []byte("A's stale schedule"), leadership.Term())
	switch {
	case errors.Is(err, fencelock.ErrStaleToken):
		fmt.Println("REFUSED:", err)
	case err == nil:
		fmt.Println("ACCEPTED")
	default:
		log.Fatal(err)
	}
	fmt.Println("leadership ended:", leadership.IsLost())
}

func demo() error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fencelock-leader-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "locks.db")
	self, err := os.Executable()
	if err != nil {
		return err
	}
	a := exec.Command(self, "a", path)
	a.Stderr = os.Stderr
	stdin, err := a.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := a.StdoutPipe()
	if err != nil {
		return err
	}
	if err := a.Start(); err != nil {
		return err
	}
	defer a.Process.Kill()
	out := bufio.NewReader(stdout)
	term, err := out.ReadString('\n')
	if err != nil {
		return fmt.Errorf("leader A: %w", err)
	}
	fmt.Printf("A leads with term %s and writes the schedule\n", strings.TrimSpace(term))
	if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	fmt.Println("A is paused past its lease")

	store, err := fencelock.Open(path)
	if err != nil {
		return err
	}
	defer store.Close()
	// Waits until A's lease runs out: A is stopped, so nothing renews it.
	waitCtx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	b, err := store.Campaign(waitCtx, "scheduler", fencelock.WithValue([]byte("node-b")))
	if err != nil {
		return err
	}
	defer b.Resign(ctx)
	if err := b.Put(ctx, "schedule", []byte("B's schedule")); err != nil {
		return err
	}
	fmt.Printf("B leads with term %d and writes the schedule\n", b.Term())
	if err := a.Process.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		return err
	}
	refused := false
	for {
		line, err := out.ReadString('\n')
		if err != nil {
			break
		}
		refused = refused || strings.HasPrefix(line, "REFUSED")
		fmt.Print("A wakes and writes late: ", line)
	}
	if err := a.Wait(); err != nil {
		return fmt.Errorf("leader A: %w", err)
	}
	value, token, err := store.Get(ctx, "schedule")
	if err != nil {
		return err
	}
	fmt.Printf("the schedule stays B's: %q, token %d\n", value, token)
	if !refused || token != b.Term() {
		return errors.New("the deposed leader's late write was not refused")
	}
	return nil
}
