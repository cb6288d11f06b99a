//! A leader election whose deposed leader's late write is refused.
//!
//! ```text
//! cargo run --example leader
//! ```
//!
//! Leader A (a child process: this program with the role `a`) wins the election "scheduler"
//! and writes the schedule with its term. It is then paused (SIGSTOP, as by a long GC pause)
//! past its lease; B campaigns, is granted the next term and writes. A resumes: it learns its
//! leadership ended, but a paused process may write before it looks, so it writes anyway, and
//! the store refuses the write: B's term is higher.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use fencelock::{CampaignOptions, Store};

const ELECTION: &str = "scheduler";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [role, path] if role == "a" => leader_a(path),
        [] => demo(),
        _ => {
            eprintln!("usage: leader");
            ExitCode::from(2)
        }
    }
}

/// Leader A: leads, writes, then (told on stdin, after its pause) writes once more.
fn leader_a(path: &str) -> ExitCode {
    let store = Store::open(path).expect("open");
    let options = CampaignOptions {
        ttl: Duration::from_millis(600),
        ..CampaignOptions::default()
    };
    let leadership = store.campaign(ELECTION, b"node-a", &options).expect("lead");
    leadership.put(b"schedule", b"A's schedule").expect("write");
    println!("{}", leadership.term());
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("stdin");
    // Late: written through the term as the fencing token, as a write to a system of the
    // user's own would be (the leadership's own `put` would refuse before trying).
    match store.put(b"schedule", b"A's stale schedule", leadership.term()) {
        Ok(()) => println!("ACCEPTED"),
        Err(err) => println!("REFUSED ({err})"),
    }
    println!("leadership ended: {}", leadership.is_lost());
    ExitCode::SUCCESS
}

fn demo() -> ExitCode {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("locks.db");
    let path = path.to_str().expect("UTF-8 path");
    let store = Store::open(path).expect("open");
    let mut a = Command::new(std::env::current_exe().expect("this program"))
        .args(["a", path])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn A");
    let mut out = BufReader::new(a.stdout.take().expect("A's stdout")).lines();
    let term_a = out.next().expect("A's term").expect("read");
    println!(
        "1. A (pid {}) leads {ELECTION:?} with term {term_a}",
        a.id()
    );
    let pid = libc::pid_t::try_from(a.id()).expect("pid");
    // SAFETY: kill(2) takes plain integers; A is our child, not reaped.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    println!("2. A is paused (SIGSTOP), past its 600 ms lease");
    let b = store
        .campaign(ELECTION, b"node-b", &CampaignOptions::default())
        .expect("B leads");
    b.put(b"schedule", b"B's schedule").expect("B writes");
    println!("3. B leads with term {} and writes the schedule", b.term());
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let mut stdin = a.stdin.take().expect("A's stdin");
    writeln!(stdin, "write").expect("tell A");
    let late = out.next().expect("A's write").expect("read");
    let ended = out.next().expect("A's end").expect("read");
    println!("4. A resumes and writes with term {term_a}: {late}; {ended}");
    let _ = a.wait();
    let schedule = store.get(b"schedule").expect("get").expect("a schedule");
    println!(
        "5. the schedule holds {:?} (term {})",
        String::from_utf8_lossy(&schedule.value),
        schedule.token
    );
    let leader = store.leader(ELECTION).expect("leader").expect("B leads");
    println!(
        "6. the leader: term {}, pid {}, value {:?}",
        leader.term,
        leader.pid,
        String::from_utf8_lossy(&leader.value)
    );
    if late.starts_with("REFUSED") {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
