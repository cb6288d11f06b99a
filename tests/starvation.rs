//! Many processes cycling on one lock, far more than the waiting queue in shared memory holds
//! (63): each is granted in its turn, none starves, and the waiters sleep rather than spin.
//!
//! Children are this test binary run again with `FENCELOCK_TEST_ROLE` set; the `child` test
//! then plays the role and reports on stdout in lines marked with `@@ `.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use fencelock::{Options, Store};

use common::{say, Kid, DB, ROLE};

const PROCESSES: usize = 200;
const ROUNDS: usize = 3;

/// The CPU time this process has used so far.
fn cpu_used() -> Duration {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct, and getrusage writes
    // only into it.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &raw mut usage), 0);
        usage
    };
    let micros = |t: libc::timeval| {
        u64::try_from(t.tv_sec).unwrap() * 1_000_000 + u64::try_from(t.tv_usec).unwrap()
    };
    Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime))
}

/// Not a test of its own: the entry point of child processes.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    assert_eq!(role, "cycle-rounds");
    // Two hundred opens at once take turns on the store file's set-up; on a loaded machine that
    // outlasts the default busy timeout (10 s), which is not what this test is about.
    let options = Options {
        busy_timeout: Duration::from_secs(120),
        ..Options::default()
    };
    let store = Store::open_with(std::env::var(DB).unwrap(), &options).unwrap();
    say("ready");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let cpu_before = cpu_used();
    let mut tokens = Vec::new();
    for _ in 0..ROUNDS {
        // A wait long enough that only starvation makes it run out.
        match store.acquire_wait("hot", Duration::from_secs(30), Duration::from_secs(100)) {
            Ok(holder) => {
                tokens.push(holder.token().to_string());
                std::thread::sleep(Duration::from_millis(1));
                holder.release().unwrap();
            }
            Err(err) => {
                say(format!("failed {err}"));
                return;
            }
        }
    }
    let cpu = cpu_used()
        .checked_sub(cpu_before)
        .expect("CPU time only grows");
    say(format!("done {} {}", cpu.as_micros(), tokens.join(",")));
}

#[test]
fn two_hundred_processes_cycling_on_one_lock_are_each_granted_in_turn_and_sleep_meanwhile() {
    let (_dir, path, store) = common::temp_store();
    drop(store);
    let mut kids: Vec<Kid> = (0..PROCESSES)
        .map(|_| Kid::spawn("cycle-rounds", &path))
        .collect();
    for kid in &mut kids {
        assert_eq!(kid.report().as_deref(), Some("ready"));
    }
    let start = Instant::now();
    for kid in &mut kids {
        writeln!(kid.stdin, "go").unwrap();
    }
    let mut cpu = Duration::ZERO;
    // The tokens of every grant, each with the process it went to.
    let mut grants = Vec::new();
    for (index, kid) in kids.iter_mut().enumerate() {
        let report = kid.report().expect("a child reported how it went");
        let rest = report
            .strip_prefix("done ")
            .unwrap_or_else(|| panic!("child {index}: {report}"));
        let (micros, tokens) = rest.split_once(' ').unwrap();
        cpu += Duration::from_micros(micros.parse().unwrap());
        let tokens: Vec<u64> = tokens.split(',').map(|t| t.parse().unwrap()).collect();
        assert_eq!(
            tokens.len(),
            ROUNDS,
            "child {index} was granted the lock {ROUNDS} times"
        );
        grants.extend(tokens.into_iter().map(|token| (token, index)));
    }
    let wall = start.elapsed();
    for kid in &mut kids {
        assert!(kid.child.wait().unwrap().success());
    }
    // Tokens in grant order: between two grants of one process, how many grants went to the
    // others, said for the record. Waiters beyond the queue's 63 places are not ordered among
    // themselves, so it may be most of the run; that every process was granted each of its
    // rounds within its wait is the test.
    grants.sort_unstable();
    let mut last = vec![None; PROCESSES];
    let mut longest = 0;
    for (position, &(_, index)) in grants.iter().enumerate() {
        if let Some(previous) = last[index] {
            longest = longest.max(position - previous - 1);
        }
        last[index] = Some(position);
    }
    println!(
        "{PROCESSES} processes, {ROUNDS} rounds: {wall:?} wall, {cpu:?} CPU in the rounds, \
         at most {longest} grants to others between two of one process"
    );
    // Spinning waiters would keep both cores busy for the whole run (about twice the wall
    // time in CPU); sleeping ones use a small part of one.
    assert!(
        cpu < wall,
        "the waiters used {cpu:?} of CPU in {wall:?}: they spin rather than sleep"
    );
}
