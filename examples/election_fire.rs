//! Leader election under fire, with an independent witness.
//!
//! ```text
//! cargo run --release --example election_fire -- --duration 10s
//! cargo run --release --example election_fire -- --duration 300s --candidates 5 --observers 2
//! cargo run --release --features etcd --example election_fire -- --duration 60s \
//!     --db etcd://127.0.0.1:2379/fire --ttl-ms 2000
//! ```
//!
//! Candidate processes (this program re-executed with the role `candidate`) campaign for one
//! election over and over; while one leads it proclaims now and then and writes twice a loop:
//! through its leadership (a holder-checked put of `lease-checked`) and as an outside system
//! would, with its term as the fencing token (`Store::put` of `fenced`). Observer processes
//! (the role `observer`) watch the election. The controller SIGSTOPs candidates (the leader half
//! of the time) for longer than a lease and resumes them, and SIGKILLs them and starts
//! replacements. Every process logs what it did with `CLOCK_BOOTTIME` timestamps, one line a
//! `write(2)` to a file of its own, so that a killed process leaves what it logged.
//!
//! Afterwards the controller checks the logs (a candidate logs its term when it starts to lead
//! and, before each action, the moment it last found itself still leading):
//!
//! - no two leaders' windows overlap: a term's last "still leading" comes before the next
//!   term's start, and terms rise in the order their leaders started;
//! - every write a deposed leader made after it lost was refused: no lease-checked write of a
//!   term was accepted that began after a later term had started, and no fenced write of a term
//!   was accepted that began after a write of a higher term had been accepted; the fenced key
//!   ends with the highest term accepted (or a higher term whose leader was killed inside its
//!   write, before it could log the outcome);
//! - no observer missed a change or saw one out of order: each saw (term, version) strictly
//!   rising, and every term a leader started in its time (but the last second's).
//!
//! It then checks the checker: mutants of the logs (an overlap, a late write accepted, a term an
//! observer missed, the fenced key below the highest accepted or at a token no write carried)
//! must each be reported. The exit status is non-zero on any violation.

#[allow(dead_code)]
#[path = "torture/rng.rs"]
mod rng;

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode};
use std::thread;
use std::time::{Duration, Instant};

use fencelock::{CampaignOptions, Error, Store};

use rng::Rng;

const ELECTION: &str = "fire";
const LEASE_CHECKED: &[u8] = b"lease-checked";
const FENCED: &[u8] = b"fenced";
/// The candidates' lease unless `--ttl-ms` says otherwise (on etcd at least 2000, whole
/// seconds); the margin is a third of it, and pauses last half of it to three times it.
const TTL_MS: u64 = 300;

fn now() -> u64 {
    fencelock::boottime_ns()
}

/// A log of one process: one line a `write(2)`, so that a SIGKILL loses no line written.
struct Log(File);

impl Log {
    fn create(path: &Path) -> Log {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap_or_else(|err| panic!("log {}: {err}", path.display()));
        Log(file)
    }

    fn line(&mut self, text: &str) {
        let line = format!("{text}\n");
        self.0.write_all(line.as_bytes()).expect("log write");
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("candidate") => candidate(&args[1..]),
        Some("observer") => observer(&args[1..]),
        _ => controller(&args),
    }
}

/// The role `candidate STORE LOG ID TTL_MS`: campaigns, leads, writes, loses, campaigns again.
fn candidate(args: &[String]) -> ExitCode {
    let [store, log, id, ttl_ms] = args else {
        eprintln!("usage: election_fire candidate STORE LOG ID TTL_MS");
        return ExitCode::from(2);
    };
    let ttl = Duration::from_millis(ttl_ms.parse().expect("TTL_MS"));
    let store = Store::open(store).expect("open the store");
    let mut log = Log::create(Path::new(log));
    let options = CampaignOptions {
        ttl,
        margin: Some(ttl / 3),
        ..CampaignOptions::default()
    };
    let mut rng = Rng::new(now() ^ u64::from(std::process::id()));
    loop {
        let leadership = match store.campaign(ELECTION, id.as_bytes(), &options) {
            Ok(leadership) => leadership,
            Err(err) => {
                log.line(&format!("error campaign {err}"));
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let term = leadership.term();
        log.line(&format!("lead {term} {}", now()));
        let mut writes = 0u64;
        loop {
            let before = now();
            let lost = leadership.is_lost();
            if lost {
                log.line(&format!("stop {term} {}", now()));
            } else {
                log.line(&format!("alive {term} {before}"));
            }
            // Once lost, one write more of each kind, as a paused leader that has not looked
            // yet would make: each must be refused once a later term has written.
            writes += 1;
            let value = format!("{term}/{writes}");
            // As an outside system would: the term as the fencing token.
            let start = now();
            let fenced = store.put(FENCED, value.as_bytes(), term);
            log.line(&format!(
                "fenced {term} {start} {} {}",
                now(),
                outcome(&fenced)
            ));
            // Through the leadership's holder: lease-checked in the same transaction.
            let start = now();
            let checked = leadership.holder().put(LEASE_CHECKED, value.as_bytes());
            log.line(&format!(
                "checked {term} {start} {} {}",
                now(),
                outcome(&checked)
            ));
            if lost {
                break;
            }
            if rng.chance(10) {
                let _ = leadership.proclaim(format!("{id}/{writes}").as_bytes());
            }
            thread::sleep(Duration::from_millis(rng.range(1, 10)));
        }
        let _ = leadership.resign();
    }
}

fn outcome(result: &fencelock::Result<()>) -> &'static str {
    match result {
        Ok(()) => "ok",
        Err(Error::StaleToken { .. }) => "stale",
        Err(Error::LockLost { .. }) => "lost",
        Err(_) => "error",
    }
}

/// The role `observer STORE LOG`: logs every change it is told.
fn observer(args: &[String]) -> ExitCode {
    let [store, log] = args else {
        eprintln!("usage: election_fire observer STORE LOG");
        return ExitCode::from(2);
    };
    let store = Store::open(store).expect("open the store");
    let mut log = Log::create(Path::new(log));
    let mut watch = store.observe_leader(ELECTION).expect("observe");
    log.line(&format!("begin {}", now()));
    loop {
        match watch.next_change(Duration::from_secs(1)) {
            Ok(Some(leader)) => {
                log.line(&format!("saw {} {} {}", leader.term, leader.version, now()));
            }
            Ok(None) => {}
            Err(err) => log.line(&format!("error observe {err}")),
        }
    }
}

struct Settings {
    duration: Duration,
    candidates: usize,
    observers: usize,
    seed: u64,
    db: Option<String>,
    ttl_ms: u64,
}

fn parse_args(args: &[String]) -> Result<Settings, String> {
    let mut settings = Settings {
        duration: Duration::from_secs(10),
        candidates: 5,
        observers: 2,
        seed: now(),
        db: None,
        ttl_ms: TTL_MS,
    };
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = || {
            value
                .trim_end_matches('s')
                .parse::<u64>()
                .map_err(|e| e.to_string())
        };
        match flag.as_str() {
            "--duration" => settings.duration = Duration::from_secs(number()?),
            "--candidates" => settings.candidates = usize::try_from(number()?).unwrap(),
            "--observers" => settings.observers = usize::try_from(number()?).unwrap(),
            "--seed" => settings.seed = number()?,
            "--db" => settings.db = Some(value.clone()),
            "--ttl-ms" => settings.ttl_ms = number()?,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(settings)
}

fn spawn(role: &[&str]) -> Child {
    Command::new(std::env::current_exe().expect("this program"))
        .args(role)
        .spawn()
        .expect("spawn")
}

fn signal(child: &Child, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).expect("pid");
    // SAFETY: kill(2) takes plain integers; the child is not reaped, so the pid is its.
    unsafe { libc::kill(pid, signal) };
}

fn controller(args: &[String]) -> ExitCode {
    let settings = match parse_args(args) {
        Ok(settings) => settings,
        Err(err) => {
            eprintln!("election_fire: {err}");
            return ExitCode::from(2);
        }
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let db = settings
        .db
        .clone()
        .unwrap_or_else(|| dir.path().join("locks.db").to_string_lossy().into_owned());
    let logs = dir.path().join("logs");
    fs::create_dir(&logs).unwrap();
    let store = Store::open(&db).expect("create the store");
    println!(
        "election_fire: {} candidates, {} observers, {:?}, lease {} ms, seed {} on {db}",
        settings.candidates, settings.observers, settings.duration, settings.ttl_ms, settings.seed
    );
    let mut rng = Rng::new(settings.seed);
    let mut incarnation = 0u32;
    let mut observers: Vec<Child> = (0..settings.observers)
        .map(|i| {
            let log = logs.join(format!("observer-{i}"));
            spawn(&["observer", &db, log.to_str().unwrap()])
        })
        .collect();
    let start_candidate = |id: usize, incarnation: &mut u32| {
        *incarnation += 1;
        let log = logs.join(format!("candidate-{id}-{incarnation}"));
        let ttl_ms = settings.ttl_ms.to_string();
        spawn(&[
            "candidate",
            &db,
            log.to_str().unwrap(),
            &id.to_string(),
            &ttl_ms,
        ])
    };
    let mut candidates: Vec<Child> = (0..settings.candidates)
        .map(|id| start_candidate(id, &mut incarnation))
        .collect();
    let (mut stops, mut kills) = (0u32, 0u32);
    let end = Instant::now() + settings.duration;
    while Instant::now() < end {
        thread::sleep(Duration::from_millis(rng.range(50, 400)));
        // The leader half of the time, else anyone.
        let leader_pid = store.leader(ELECTION).ok().flatten().map(|l| l.pid);
        let victim = match leader_pid {
            Some(pid) if rng.chance(50) => candidates.iter().position(|c| c.id() == pid),
            _ => None,
        }
        .unwrap_or_else(|| rng.below(candidates.len()));
        if rng.chance(70) {
            stops += 1;
            signal(&candidates[victim], libc::SIGSTOP);
            let ttl = settings.ttl_ms;
            thread::sleep(Duration::from_millis(rng.range(ttl / 2, ttl * 3)));
            signal(&candidates[victim], libc::SIGCONT);
        } else {
            kills += 1;
            signal(&candidates[victim], libc::SIGKILL);
            let _ = candidates[victim].wait();
            candidates[victim] = start_candidate(victim, &mut incarnation);
        }
    }
    // Observers outlive the candidates by a second, so that they can see the last changes.
    let stopped = now();
    for child in &mut candidates {
        signal(child, libc::SIGKILL);
        let _ = child.wait();
    }
    thread::sleep(Duration::from_secs(1));
    for child in &mut observers {
        signal(child, libc::SIGKILL);
        let _ = child.wait();
    }
    let history = History::read(&logs);
    let fenced_token = store.get(FENCED).ok().flatten().map(|f| f.token);
    let violations = history.check(stopped, fenced_token);
    println!(
        "election_fire: {} terms, {} fenced and {} lease-checked writes accepted, {} and {} \
         refused after their leader lost; {} observer changes; {stops} stops, {kills} kills",
        history.leads.len(),
        history.accepted(&history.fenced),
        history.accepted(&history.checked),
        history.refused(&history.fenced),
        history.refused(&history.checked),
        history.observers.iter().map(|o| o.saw.len()).sum::<usize>()
    );
    // Errors are not violations (a candidate paused while it waited may find its place in
    // the queue gone, on etcd; it campaigns again), but they are shown.
    for error in history.errors.iter().take(10) {
        println!("error (not a violation): {error}");
    }
    if history.errors.len() > 10 {
        println!("... {} errors in all", history.errors.len());
    }
    for violation in &violations {
        println!("VIOLATION: {violation}");
    }
    let missed = history.mutants_missed(stopped, fenced_token);
    for mutant in &missed {
        println!("CHECKER: the mutant {mutant} passed");
    }
    if violations.is_empty() && missed.is_empty() && !history.leads.is_empty() {
        println!("election_fire: no violation");
        ExitCode::SUCCESS
    } else {
        if history.leads.is_empty() {
            println!("election_fire: no leader led: nothing was tested");
        }
        ExitCode::FAILURE
    }
}

/// A write's term, start, end and outcome.
#[derive(Clone)]
struct Attempt {
    term: u64,
    start: u64,
    end: u64,
    ok: bool,
}

#[derive(Clone, Default)]
struct Observed {
    name: String,
    begin: u64,
    /// (term, version, time)
    saw: Vec<(u64, u64, u64)>,
}

#[derive(Clone, Default)]
struct History {
    /// term -> (start, last time found still leading)
    leads: BTreeMap<u64, (u64, u64)>,
    fenced: Vec<Attempt>,
    checked: Vec<Attempt>,
    observers: Vec<Observed>,
    errors: Vec<String>,
    /// Terms whose leader was killed inside a fenced write: its log ends with the line it
    /// writes before the write ("alive" or "stop"), so the write may have landed unlogged.
    in_flight: Vec<u64>,
}

impl History {
    fn read(dir: &Path) -> History {
        let mut history = History::default();
        let mut paths: Vec<PathBuf> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        paths.sort();
        for path in paths {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = fs::read_to_string(&path).unwrap();
            let mut observed = Observed {
                name: name.clone(),
                ..Observed::default()
            };
            for line in text.lines() {
                let words: Vec<&str> = line.split(' ').collect();
                let n = |i: usize| {
                    words
                        .get(i)
                        .and_then(|w| w.parse::<u64>().ok())
                        .unwrap_or(0)
                };
                match words[0] {
                    "lead" => {
                        history.leads.insert(n(1), (n(2), n(2)));
                    }
                    "alive" => {
                        if let Some(lead) = history.leads.get_mut(&n(1)) {
                            lead.1 = lead.1.max(n(2));
                        }
                    }
                    "fenced" | "checked" => {
                        let write = Attempt {
                            term: n(1),
                            start: n(2),
                            end: n(3),
                            ok: words.get(4) == Some(&"ok"),
                        };
                        if words.get(4) == Some(&"error") {
                            history.errors.push(format!("{name}: {line}"));
                        }
                        match words[0] {
                            "fenced" => history.fenced.push(write),
                            _ => history.checked.push(write),
                        }
                    }
                    "begin" => observed.begin = n(1),
                    "saw" => observed.saw.push((n(1), n(2), n(3))),
                    "error" => history.errors.push(format!("{name}: {line}")),
                    _ => {}
                }
            }
            if name.starts_with("observer") {
                history.observers.push(observed);
            }
            let last: Vec<&str> = text.lines().last().unwrap_or("").split(' ').collect();
            if let ["alive" | "stop", term, ..] = last[..] {
                history.in_flight.extend(term.parse::<u64>());
            }
        }
        history
    }

    #[allow(clippy::unused_self)] // Called as `refused` is, which reads the history.
    fn accepted(&self, writes: &[Attempt]) -> usize {
        writes.iter().filter(|w| w.ok).count()
    }

    /// Writes refused whose leader had lost: a later term had started when they began.
    fn refused(&self, writes: &[Attempt]) -> usize {
        writes
            .iter()
            .filter(|w| !w.ok && self.next_start(w.term).is_some_and(|next| w.start > next))
            .count()
    }

    /// When the first term after `term` started, if one did.
    fn next_start(&self, term: u64) -> Option<u64> {
        self.leads
            .range(term + 1..)
            .map(|(_, (start, _))| *start)
            .min()
    }

    fn check(&self, stopped: u64, fenced_token: Option<u64>) -> Vec<String> {
        let mut violations = Vec::new();
        // Windows: in order of terms, each ends before the next starts.
        let leads: Vec<(u64, (u64, u64))> = self.leads.iter().map(|(t, w)| (*t, *w)).collect();
        for pair in leads.windows(2) {
            let ((term, (_, last)), (next, (start, _))) = (pair[0], pair[1]);
            if last >= start {
                violations.push(format!(
                    "term {term} still led at {last}, after term {next} started at {start}"
                ));
            }
        }
        // Lease-checked writes: none accepted that began after a later term started.
        for write in self.checked.iter().filter(|w| w.ok) {
            if let Some(next) = self.next_start(write.term) {
                if write.start > next {
                    violations.push(format!(
                        "a lease-checked write of term {} began at {} after the next term \
                         started at {next}, and was accepted",
                        write.term, write.start
                    ));
                }
            }
        }
        // Fenced writes: none accepted that began after a higher term's write was accepted.
        let mut by_end: Vec<&Attempt> = self.fenced.iter().filter(|w| w.ok).collect();
        by_end.sort_by_key(|w| w.end);
        let mut highest_before: Vec<u64> = Vec::with_capacity(by_end.len());
        for write in &by_end {
            let prior = highest_before.last().copied().unwrap_or(0);
            highest_before.push(prior.max(write.term));
        }
        for write in self.fenced.iter().filter(|w| w.ok) {
            let ended_before = by_end.partition_point(|w| w.end < write.start);
            if ended_before > 0 && highest_before[ended_before - 1] > write.term {
                violations.push(format!(
                    "a fenced write of term {} began at {} after a write of term {} was \
                     accepted, and was accepted",
                    write.term,
                    write.start,
                    highest_before[ended_before - 1]
                ));
            }
        }
        // The fenced key holds the highest term accepted, or a higher one whose write was
        // cut off by a SIGKILL before its outcome was logged (the controller kills every
        // candidate at the end, one of them perhaps right after its put committed).
        let highest = self.fenced.iter().filter(|w| w.ok).map(|w| w.term).max();
        let unlogged = fenced_token.is_some_and(|token| {
            highest.is_none_or(|highest| token > highest) && self.in_flight.contains(&token)
        });
        if highest != fenced_token && !unlogged {
            violations.push(format!(
                "the fenced key holds token {fenced_token:?}, the highest accepted is {highest:?}{}",
                if self.in_flight.is_empty() {
                    String::new()
                } else {
                    format!(" (killed inside a write: terms {:?})", self.in_flight)
                }
            ));
        }
        // Observers: strictly rising, and every term begun in their time seen.
        for observed in &self.observers {
            for pair in observed.saw.windows(2) {
                if (pair[1].0, pair[1].1) <= (pair[0].0, pair[0].1) {
                    violations.push(format!(
                        "{} saw term {} version {} after term {} version {}",
                        observed.name, pair[1].0, pair[1].1, pair[0].0, pair[0].1
                    ));
                }
            }
            let seen: Vec<u64> = observed.saw.iter().map(|s| s.0).collect();
            for (term, (start, _)) in &self.leads {
                let in_time = *start > observed.begin && *start + 1_000_000_000 < stopped;
                if in_time && !seen.contains(term) {
                    violations.push(format!("{} missed term {term}", observed.name));
                }
            }
        }
        violations
    }

    /// The mutants of this history that the checker passes (it must report each).
    fn mutants_missed(&self, stopped: u64, fenced_token: Option<u64>) -> Vec<&'static str> {
        let mut missed = Vec::new();
        let leads: Vec<(u64, (u64, u64))> = self.leads.iter().map(|(t, w)| (*t, *w)).collect();
        if let [(first, (_, _)), (_, (second_start, _)), ..] = leads[..] {
            let mut overlap = self.clone();
            overlap.leads.get_mut(&first).unwrap().1 = second_start;
            if overlap.check(stopped, fenced_token).is_empty() {
                missed.push("two overlapping windows");
            }
            let mut late = self.clone();
            late.checked.push(Attempt {
                term: first,
                start: second_start + 1,
                end: second_start + 2,
                ok: true,
            });
            if late.check(stopped, fenced_token).is_empty() {
                missed.push("a deposed leader's lease-checked write accepted");
            }
        }
        if let Some(top) = self.fenced.iter().filter(|w| w.ok).max_by_key(|w| w.term) {
            let mut stale = self.clone();
            stale.fenced.push(Attempt {
                term: top.term - 1,
                start: top.end + 1,
                end: top.end + 2,
                ok: true,
            });
            if stale.check(stopped, fenced_token).is_empty() {
                missed.push("a stale fenced write accepted");
            }
            // The key below the highest accepted: an acknowledged write lost.
            if self.check(stopped, Some(top.term - 1)).is_empty() {
                missed.push("an accepted fenced write lost");
            }
        }
        // The key above every term accepted and every write cut off: a token no write carried.
        let terms = self.fenced.iter().map(|w| w.term);
        let never = terms
            .chain(self.in_flight.iter().copied())
            .max()
            .unwrap_or(0)
            + 1;
        if self.check(stopped, Some(never)).is_empty() {
            missed.push("a token no write carried");
        }
        if let Some(observed) = self.observers.iter().position(|o| o.saw.len() > 2) {
            let mut blind = self.clone();
            blind.observers[observed].saw.remove(1);
            let mut swapped = self.clone();
            swapped.observers[observed].saw.swap(0, 1);
            if swapped.check(stopped, fenced_token).is_empty() {
                missed.push("an observer's changes out of order");
            }
            let removed = self.observers[observed].saw[1].0;
            let counted = self.leads.get(&removed).is_some_and(|(start, _)| {
                *start > self.observers[observed].begin && *start + 1_000_000_000 < stopped
            });
            let still_seen = blind.observers[observed].saw.iter().any(|s| s.0 == removed);
            if counted && !still_seen && blind.check(stopped, fenced_token).is_empty() {
                missed.push("an observer missing a term");
            }
        }
        missed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The history of two candidates' logs, as `History::read` finds them.
    fn history(first: &str, second: &str) -> History {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("candidate-0-1"), first).unwrap();
        fs::write(dir.path().join("candidate-1-2"), second).unwrap();
        History::read(dir.path())
    }

    const FIRST: &str = "lead 1 100\nalive 1 101\nfenced 1 102 103 ok\nchecked 1 104 105 ok\n";

    #[test]
    fn a_leader_killed_inside_its_fenced_write_may_have_written_it() {
        let killed = history(FIRST, "lead 2 200\nalive 2 201\n");
        assert_eq!(killed.in_flight, vec![2]);
        for token in [1, 2] {
            assert!(killed.check(300, Some(token)).is_empty(), "token {token}");
        }
        // Never below the highest accepted, nor a token no write carried.
        for token in [None, Some(0), Some(3)] {
            assert_eq!(killed.check(300, token).len(), 1, "token {token:?}");
        }
    }

    #[test]
    fn a_write_whose_outcome_was_logged_was_not_cut_off() {
        let refused = history(FIRST, "lead 2 200\nalive 2 201\nfenced 2 202 203 stale\n");
        assert!(refused.in_flight.is_empty());
        assert!(refused.check(300, Some(1)).is_empty());
        assert_eq!(refused.check(300, Some(2)).len(), 1);
        let missed = refused.mutants_missed(300, Some(1));
        assert!(missed.is_empty(), "{missed:?}");
    }
}
