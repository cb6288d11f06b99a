//! A redo log that a killed process left is recovered by the next ring whatever that ring
//! decides (issue 35): a ring whose first process does not write through the log still moves
//! the log's acknowledged writes into the store file before anything else, so that its own
//! writes, committed to the file, are never overwritten by older ones that a later ring, which
//! writes through the log again, would find in the log. Children are this test binary run again
//! with `FENCELOCK_TEST_ROLE` set.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use fencelock::{Options, Store};

use common::{say, Kid, DB, ROLE};

fn options(write_log: bool) -> Options {
    Options {
        write_log,
        ..Options::default()
    }
}

/// Not a test of its own: the entry point of child processes. Role "logged": opens the store
/// with the log on, writes `key` = "from the log" with a lease's token, reports `acked TOKEN`
/// and waits on stdin until it is killed.
#[test]
fn child() {
    if std::env::var(ROLE).as_deref() != Ok("logged") {
        return;
    }
    let dir = PathBuf::from(std::env::var(DB).unwrap());
    let store = Store::open_with(dir.join("store"), &options(true)).unwrap();
    let holder = store.acquire("writer", Duration::from_secs(60)).unwrap();
    holder.put(b"key", b"from the log").unwrap();
    say(format!("acked {}", holder.token()));
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    std::process::exit(0);
}

#[test]
fn a_ring_that_writes_to_the_file_first_recovers_the_log_a_killed_process_left() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_owned();
    common::bounded("the killed writer and the rings after it", move || {
        let mut kid = Kid::spawn("logged", &dir);
        let report = kid.report().expect("the writer's report");
        let logged: u64 = report.strip_prefix("acked ").unwrap().parse().unwrap();
        // Killed: no close, no checkpoint; the write is only in the log.
        kid.child.kill().unwrap();
        kid.child.wait().unwrap();
        let _ = writeln!(kid.stdin);
        // A ring whose processes commit to the file: the log's write is there first.
        let path = dir.join("store");
        let plain = Store::open_with(&path, &options(false)).unwrap();
        let got = plain
            .get(b"key")
            .unwrap()
            .expect("the logged write, recovered");
        assert_eq!(
            (got.value.as_slice(), got.token),
            (&b"from the log"[..], logged)
        );
        // A later write, with a later token, committed to the file.
        let holder = plain.acquire("writer", Duration::from_secs(60)).unwrap();
        assert!(holder.token() > logged);
        holder.put(b"key", b"from the file").unwrap();
        let later = holder.token();
        drop(holder);
        drop(plain);
        // A ring that writes through the log again: the log's older write stays applied once,
        // never over the later one.
        let logging = Store::open_with(&path, &options(true)).unwrap();
        let got = logging.get(b"key").unwrap().unwrap();
        assert_eq!(
            (got.value.as_slice(), got.token),
            (&b"from the file"[..], later)
        );
        let holder = logging.acquire("writer", Duration::from_secs(60)).unwrap();
        holder.put(b"key", b"through the log again").unwrap();
        let last = holder.token();
        drop(holder);
        drop(logging);
        let alone = Store::open_with(
            &path,
            &Options {
                read_only: true,
                ..Options::default()
            },
        )
        .unwrap();
        let got = alone.get(b"key").unwrap().unwrap();
        assert_eq!(
            (got.value.as_slice(), got.token),
            (&b"through the log again"[..], last)
        );
    });
}
