//! Failover of a leader election, with real processes: from the leader's SIGKILL, and from its
//! resign, to the next leader's first fenced write.
//!
//! ```text
//! cargo bench --bench failover                       # a file store
//! cargo bench --features etcd --bench failover -- etcd://127.0.0.1:2379/bench --rounds 3
//! ```
//!
//! Each round: a leader process (this program with the role `leader`) wins the election, with
//! client-go's default lease (15 s; the leadership ends 5 s before it could run out); the next
//! candidate, a thread here, already waits in its campaign. Then the leader is killed (SIGKILL)
//! or told to resign, at `t0`, and the candidate's campaign returns and it writes with its term
//! (`Leadership::put`), at `t1`. Printed: t1 - t0 over the rounds (median, 90th percentile,
//! worst). The figures to hold them against are the peers' defaults, not measured here:
//! client-go's leader elector takes over after a crash once the 15 s lease ran out (and its 2 s
//! retry period came round), etcd's `concurrency.Election` once the 60 s session TTL of the dead
//! leader ran out; after a resign, both hand over at once.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use fencelock::{CampaignOptions, Store};

const ELECTION: &str = "bench";
/// Rounds of each scenario, unless `--rounds N` says otherwise.
const ROUNDS: usize = 15;

fn options() -> CampaignOptions {
    CampaignOptions {
        ttl: Duration::from_secs(15),
        margin: Some(Duration::from_secs(5)),
        ..CampaignOptions::default()
    }
}

/// The role `leader STORE`: leads, says so, and resigns when told (or is killed first).
fn leader(path: &str) {
    let store = Store::open(path).expect("open");
    let leadership = store.campaign(ELECTION, b"old", &options()).expect("lead");
    println!("{}", leadership.term());
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("stdin");
    let at = fencelock::boottime_ns();
    leadership.resign().expect("resign");
    println!("{at}");
    let _ = std::io::stdin().read_line(&mut line);
}

/// One round: the nanoseconds from the leader's end (killed, or its resign) to the next
/// leader's first fenced write.
fn round(path: &str, store: &Store, kill: bool) -> u64 {
    let mut child = Command::new(std::env::current_exe().expect("this program"))
        .args(["leader", path])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the leader");
    let mut out = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let old_term: u64 = out
        .next()
        .expect("a term")
        .expect("read")
        .parse()
        .expect("term");
    let next = {
        let store = store.clone();
        std::thread::spawn(move || {
            let leadership = store
                .campaign(ELECTION, b"new", &options())
                .expect("lead next");
            leadership.put(b"schedule", b"by the next").expect("write");
            let at = fencelock::boottime_ns();
            assert!(leadership.term() > old_term);
            at
        })
    };
    // The next candidate waits in its campaign by now (a round where it did not yet only
    // measures less of the wait: a waiter queued after the end is granted at once).
    std::thread::sleep(Duration::from_millis(50));
    let mut stdin = child.stdin.take().expect("stdin");
    let start = if kill {
        let start = fencelock::boottime_ns();
        child.kill().expect("SIGKILL the leader");
        start
    } else {
        writeln!(stdin, "resign").expect("tell the leader");
        out.next()
            .expect("its resign")
            .expect("read")
            .parse()
            .expect("ns")
    };
    let end = next.join().expect("the next leader");
    drop(stdin);
    let _ = child.wait();
    end - start
}

fn report(what: &str, mut samples: Vec<u64>) {
    samples.sort_unstable();
    let ms = |ns: u64| ns as f64 / 1e6;
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    println!(
        "{what:<46} median {:>8.2} ms   p90 {:>8.2} ms   worst {:>8.2} ms   ({} rounds)",
        ms(at(0.5)),
        ms(at(0.9)),
        ms(*samples.last().expect("rounds")),
        samples.len()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("leader") {
        leader(&args[1]);
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = args
        .iter()
        .find(|a| a.starts_with("etcd://"))
        .cloned()
        .unwrap_or_else(|| dir.path().join("locks.db").to_string_lossy().into_owned());
    let rounds = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .map_or(ROUNDS, |n| n.parse().expect("--rounds N"));
    let store = Store::open(&path).expect("open the store");
    println!("failover of a leader election on {path} (lease 15 s, margin 5 s)");
    let kills = (0..rounds).map(|_| round(&path, &store, true)).collect();
    report("SIGKILL -> next leader's first fenced write", kills);
    let resigns = (0..rounds).map(|_| round(&path, &store, false)).collect();
    report("resign -> next leader's first fenced write", resigns);
    println!(
        "peers' defaults (not measured here): client-go after a crash up to 15 s lease + 2 s \
         retry; etcd Election after a crash up to its 60 s session TTL; both at once after a \
         resign"
    );
}
