// The etcd Election rows of benches/failover.rs: etcd's own Go concurrency.Election on the same
// etcd node as fencelock, in the same two scenarios, with real processes. Each round a leader
// process campaigns and leads; a candidate process campaigns and waits in the election's queue
// (its key is in etcd before t0); then the leader is SIGKILLed (t0 taken just before the
// signal) or told to resign (t0 taken in the leader just before Resign). The candidate's
// Campaign returns and it writes once, guarded by its leadership (a Txn If the leader key's
// create revision is its own, the usual etcd fencing), and takes t1 once etcd accepted it.
//
//	failover-etcd -endpoint 127.0.0.1:2379 -prefix bench -ttl 60 -rounds 3
//
// Prints one line a round: the scenario (kill or resign) and t1 - t0 in nanoseconds. Times are
// CLOCK_BOOTTIME, one clock for every process of the host (as fencelock::boottime_ns). The
// roles leader and candidate are this program started by itself.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"golang.org/x/sys/unix"
)

func boottimeNs() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		log.Fatalf("clock_gettime: %v", err)
	}
	return ts.Nano()
}

func main() {
	endpoint := flag.String("endpoint", "", "the etcd client address, host:port")
	prefix := flag.String("prefix", "failover", "the key prefix of this run")
	ttl := flag.Int("ttl", 60, "the session TTL in seconds (etcd's default is 60)")
	rounds := flag.Int("rounds", 3, "rounds of each scenario")
	role := flag.String("role", "", "leader or candidate (this program started by itself)")
	flag.Parse()
	if *endpoint == "" {
		log.Fatal("-endpoint is needed")
	}
	election := strings.TrimSuffix(*prefix, "/") + "/etcd-election/ttl-" + strconv.Itoa(*ttl)
	switch *role {
	case "leader":
		leader(*endpoint, election, *ttl)
	case "candidate":
		candidate(*endpoint, election, *ttl)
	case "":
		client := connect(*endpoint)
		defer client.Close()
		for _, scenario := range []string{"kill", "resign"} {
			for i := 0; i < *rounds; i++ {
				ns := round(client, election, scenario, *endpoint, *ttl)
				fmt.Printf("%s %d\n", scenario, ns)
			}
		}
	default:
		log.Fatalf("unknown role %q", *role)
	}
}

func connect(endpoint string) *clientv3.Client {
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatalf("connect to %s: %v", endpoint, err)
	}
	return client
}

// campaign opens a session with the given TTL and waits to lead election.
func campaign(endpoint, election string, ttl int, value string) (*clientv3.Client, *concurrency.Session, *concurrency.Election) {
	client := connect(endpoint)
	session, err := concurrency.NewSession(client, concurrency.WithTTL(ttl))
	if err != nil {
		log.Fatalf("session: %v", err)
	}
	e := concurrency.NewElection(session, election)
	if err := e.Campaign(context.Background(), value); err != nil {
		log.Fatalf("campaign: %v", err)
	}
	return client, session, e
}

// leader leads, says so, resigns when told (printing when it began to), then waits for its end.
func leader(endpoint, election string, ttl int) {
	client, session, e := campaign(endpoint, election, ttl, "old")
	fmt.Println("leading")
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		return
	}
	at := boottimeNs()
	if err := e.Resign(context.Background()); err != nil {
		log.Fatalf("resign: %v", err)
	}
	fmt.Println(at)
	in.Scan()
	session.Close()
	client.Close()
}

// candidate waits in the election's queue, then makes its first write guarded by its
// leadership, prints when etcd accepted it, resigns and ends.
func candidate(endpoint, election string, ttl int) {
	client, session, e := campaign(endpoint, election, ttl, "new")
	resp, err := client.Txn(context.Background()).
		If(clientv3.Compare(clientv3.CreateRevision(e.Key()), "=", e.Rev())).
		Then(clientv3.OpPut(election+"-schedule", "by the next")).
		Commit()
	if err != nil {
		log.Fatalf("the guarded write: %v", err)
	}
	at := boottimeNs()
	if !resp.Succeeded {
		log.Fatal("the guarded write was refused: this candidate does not lead")
	}
	fmt.Println(at)
	if err := e.Resign(context.Background()); err != nil {
		log.Fatalf("resign: %v", err)
	}
	session.Close()
	client.Close()
}

type child struct {
	cmd   *exec.Cmd
	out   *bufio.Scanner
	stdin *os.File
}

func start(endpoint, election string, ttl int, role string) child {
	prefix := strings.TrimSuffix(election, "/etcd-election/ttl-"+strconv.Itoa(ttl))
	cmd := exec.Command(os.Args[0], "-endpoint", endpoint, "-prefix", prefix,
		"-ttl", strconv.Itoa(ttl), "-role", role)
	cmd.Stderr = os.Stderr
	stdinRead, stdinWrite, err := os.Pipe()
	if err != nil {
		log.Fatal(err)
	}
	cmd.Stdin = stdinRead
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		log.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		log.Fatalf("start the %s: %v", role, err)
	}
	stdinRead.Close()
	return child{cmd, bufio.NewScanner(stdout), stdinWrite}
}

func (c child) line(what string) string {
	if !c.out.Scan() {
		log.Fatalf("no %s from the child (%v)", what, c.out.Err())
	}
	return c.out.Text()
}

// round runs one round of scenario and returns t1 - t0 in nanoseconds.
func round(client *clientv3.Client, election, scenario, endpoint string, ttl int) int64 {
	old := start(endpoint, election, ttl, "leader")
	old.line("leadership")
	next := start(endpoint, election, ttl, "candidate")
	// The candidate waits in the queue once its key is in etcd (the leader's and its own).
	for {
		resp, err := client.Get(context.Background(), election+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			log.Fatalf("count the candidates: %v", err)
		}
		if resp.Count >= 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	var t0 int64
	if scenario == "kill" {
		t0 = boottimeNs()
		if err := old.cmd.Process.Kill(); err != nil {
			log.Fatalf("SIGKILL the leader: %v", err)
		}
	} else {
		fmt.Fprintln(old.stdin, "resign")
		var err error
		if t0, err = strconv.ParseInt(old.line("resign time"), 10, 64); err != nil {
			log.Fatalf("the leader's resign time: %v", err)
		}
	}
	t1, err := strconv.ParseInt(next.line("first write time"), 10, 64)
	if err != nil {
		log.Fatalf("the candidate's write time: %v", err)
	}
	old.stdin.Close()
	next.stdin.Close()
	_ = old.cmd.Wait()
	if err := next.cmd.Wait(); err != nil {
		log.Fatalf("the candidate: %v", err)
	}
	return t1 - t0
}
