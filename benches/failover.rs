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
//! worst).
//!
//! Beside them, on an etcd node (the store's, or `FENCELOCK_ETCD_URL`'s when the store is a
//! file, as `scripts/with-etcd.sh` sets it), the same two scenarios with etcd's own
//! `concurrency.Election` (`benches/failover-etcd`, a Go program built with `go` into
//! `target/failover-etcd/`): a leader process, a candidate process already in the queue, the
//! candidate's first write a `Txn` guarded by its leader key's create revision. Once with etcd's
//! default session TTL (60 s) and once with fencelock's lease here (15 s), `--peer-rounds N`
//! rounds each (default 3: a SIGKILL round waits the TTL out); then the ratios of the medians,
//! fencelock's over etcd Election's. Without `go` or an etcd node, those rows say why they are
//! missing. client-go's leader elector is not run (it needs a Kubernetes API server): after a
//! crash it takes over once the 15 s lease ran out (and its 2 s retry period came round), after
//! a resign (`ReleaseOnCancel`) at once.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use fencelock::{CampaignOptions, Store};

const ELECTION: &str = "bench";
/// Rounds of each scenario, unless `--rounds N` says otherwise.
const ROUNDS: usize = 15;
/// Rounds of each scenario of etcd's Election, unless `--peer-rounds N` says otherwise.
const PEER_ROUNDS: usize = 3;
/// fencelock's lease here, client-go's default; etcd Election's short session TTL.
const TTL: Duration = Duration::from_secs(15);
/// etcd's default session TTL (`concurrency.NewSession` without `WithTTL`).
const ETCD_DEFAULT_TTL: Duration = Duration::from_secs(60);

fn options() -> CampaignOptions {
    CampaignOptions {
        ttl: TTL,
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

/// The sample at quantile `q` (0.5 the median, 1 the worst), nearest rank.
fn quantile(samples: &[u64], q: f64) -> u64 {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // An index in 0..len.
    let rank = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[rank]
}

fn report(what: &str, samples: &[u64]) {
    let ms = |ns: u64| ns as f64 / 1e6;
    let at = |q: f64| quantile(samples, q);
    println!(
        "{what:<56} median {:>9.2} ms   p90 {:>9.2} ms   worst {:>9.2} ms   ({} rounds)",
        ms(at(0.5)),
        ms(at(0.9)),
        ms(at(1.0)),
        samples.len()
    );
}

/// `x` with three significant digits (a file's failover is a tiny fraction of an etcd TTL).
fn significant(x: f64) -> String {
    let digits = if x > 0.0 {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // A few digits.
        let digits = (2.0 - x.log10().floor()).max(0.0) as usize;
        digits
    } else {
        3
    };
    format!("{x:.digits$}")
}

/// The Go program of etcd's Election, built into `target/failover-etcd/` (Go's own cache makes
/// a rebuild quick); `Err` says why it cannot be (no `go`, or the build failed).
fn election_program() -> Result<PathBuf, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let program = target.join("failover-etcd").join("failover-etcd");
    let built = Command::new("go")
        .args(["build", "-o"])
        .arg(&program)
        .arg(".")
        .current_dir(root.join("benches/failover-etcd"))
        .stdout(Stdio::null())
        .output();
    match built {
        Ok(output) if output.status.success() => Ok(program),
        Ok(output) => Err(format!(
            "go build of benches/failover-etcd failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )),
        Err(err) => Err(format!("cannot run go ({err})")),
    }
}

/// etcd Election's failover on the node of the store string `url` with session TTL `ttl`:
/// the nanoseconds of each SIGKILL round, then of each resign round.
fn run_election(
    program: &Path,
    url: &str,
    ttl: Duration,
    rounds: usize,
) -> Result<(Vec<u64>, Vec<u64>), String> {
    let rest = url
        .strip_prefix("etcd://")
        .ok_or_else(|| format!("{url} is not an etcd store string"))?;
    let (endpoint, prefix) = rest.split_once('/').unwrap_or((rest, "fencelock"));
    // A prefix of this run's own: a key a run before left behind is not in its queue.
    let prefix = format!("{prefix}/failover-{}", std::process::id());
    let output = Command::new(program)
        .args(["-endpoint", endpoint, "-prefix", &prefix])
        .arg("-ttl")
        .arg(ttl.as_secs().to_string())
        .arg("-rounds")
        .arg(rounds.to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|err| format!("cannot start {}: {err}", program.display()))?;
    if !output.status.success() {
        return Err(format!(
            "the etcd Election program failed ({})",
            output.status
        ));
    }
    let (mut kills, mut resigns) = (Vec::new(), Vec::new());
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let (scenario, ns) = line
            .split_once(' ')
            .ok_or_else(|| format!("unexpected line {line:?}"))?;
        let ns: u64 = ns
            .parse()
            .map_err(|_| format!("unexpected line {line:?}"))?;
        match scenario {
            "kill" => kills.push(ns),
            "resign" => resigns.push(ns),
            _ => return Err(format!("unexpected line {line:?}")),
        }
    }
    if kills.is_empty() || resigns.is_empty() {
        return Err("the etcd Election program measured nothing".into());
    }
    Ok((kills, resigns))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("leader") {
        leader(&args[1]);
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd_store = args.iter().find(|a| a.starts_with("etcd://")).cloned();
    let path = etcd_store
        .clone()
        .unwrap_or_else(|| dir.path().join("locks.db").to_string_lossy().into_owned());
    let count = |flag: &str, default: usize| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .map_or(default, |n| {
                n.parse().unwrap_or_else(|_| panic!("{flag} N"))
            })
    };
    let rounds = count("--rounds", ROUNDS);
    let peer_rounds = count("--peer-rounds", PEER_ROUNDS);
    let store = Store::open(&path).expect("open the store");
    println!(
        "failover of a leader election on {path} (lease {} s, margin 5 s)",
        TTL.as_secs()
    );
    let kills: Vec<u64> = (0..rounds).map(|_| round(&path, &store, true)).collect();
    report(
        "fencelock: SIGKILL -> next leader's first fenced write",
        &kills,
    );
    let resigns: Vec<u64> = (0..rounds).map(|_| round(&path, &store, false)).collect();
    report(
        "fencelock: resign -> next leader's first fenced write",
        &resigns,
    );

    let Some(node) = etcd_store.or_else(|| std::env::var("FENCELOCK_ETCD_URL").ok()) else {
        println!(
            "etcd Election: not measured (no etcd node: give an etcd:// store, set \
             FENCELOCK_ETCD_URL, or run under scripts/with-etcd.sh)"
        );
        return;
    };
    let program = match election_program() {
        Ok(program) => program,
        Err(why) => {
            println!("etcd Election: not measured ({why})");
            return;
        }
    };
    for ttl in [ETCD_DEFAULT_TTL, TTL] {
        let secs = ttl.as_secs();
        match run_election(&program, &node, ttl, peer_rounds) {
            Ok((their_kills, their_resigns)) => {
                report(
                    &format!("etcd Election (TTL {secs} s): SIGKILL -> guarded write"),
                    &their_kills,
                );
                report(
                    &format!("etcd Election (TTL {secs} s): resign -> guarded write"),
                    &their_resigns,
                );
                let ratio = |ours: &[u64], theirs: &[u64]| {
                    significant(quantile(ours, 0.5) as f64 / quantile(theirs, 0.5) as f64)
                };
                println!(
                    "  ratio of medians, fencelock / etcd Election (TTL {secs} s): SIGKILL {}x, resign {}x",
                    ratio(&kills, &their_kills),
                    ratio(&resigns, &their_resigns)
                );
            }
            Err(why) => println!("etcd Election (TTL {secs} s): not measured ({why})"),
        }
    }
    println!(
        "client-go leaderelection: not run (it needs a Kubernetes API server); its defaults: \
         after a crash up to the 15 s lease + 2 s retry, after a resign (ReleaseOnCancel) at once"
    );
}
