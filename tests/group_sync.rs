//! Group sync of a redo log across processes (`ring/flush.rs`), with real processes on one
//! preallocated file: every acknowledged record is on the file at its place, and a process
//! stopped (SIGSTOP) at a random point of the protocol, and kept stopped, does not keep the
//! others from acknowledging theirs.
//!
//! Children are this test binary run again with `FENCELOCK_TEST_ROLE` set; the `child` test
//! then plays the role and reports on stdout in lines marked with `@@ `.

mod common;

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use fencelock::{Error, SharedLogFile};

use common::{log_record as record, say, Kid, DB, LOG_RECORD as RECORD, ROLE};

/// The log file's size: more than every round's records and skip records.
const LOG_SIZE: u64 = 4 << 20;
const WRITERS: u64 = 4;
const RECORDS: u64 = 50;

/// Not a test of its own: the entry point of child processes.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let dir = std::path::PathBuf::from(std::env::var(DB).unwrap());
    let log = SharedLogFile::open(&dir, &dir.join("store"), &dir.join("log")).unwrap();
    // "gap": reserves a record's space, and writes it only when told (after a stop).
    if role == "gap" {
        let lsn = log.reserve(RECORD as u64).unwrap();
        say(format!("reserved {lsn}"));
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        match log.write(lsn, &record(99, 0)) {
            Err(Error::Timeout { .. }) => say("timeout"),
            other => say(format!("written {other:?}")),
        }
        return;
    }
    // "append WRITER COUNT": waits for a line, then appends COUNT records, reporting each one's
    // fate.
    let (writer, count) = role
        .strip_prefix("append ")
        .unwrap()
        .split_once(' ')
        .unwrap();
    let (writer, count): (u64, u64) = (writer.parse().unwrap(), count.parse().unwrap());
    say("ready");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    for seq in 0..count {
        match log.append(&record(writer, seq)) {
            Ok(lsn) => say(format!("ack {seq} {lsn}")),
            // Its gap was skipped while it was stopped: the write did not happen.
            Err(Error::Timeout { .. }) => say(format!("skipped {seq}")),
            Err(err) => panic!("{err}"),
        }
    }
    say("done");
}

fn prepare(dir: &Path) {
    std::fs::write(dir.join("store"), b"").unwrap();
    let log = std::fs::File::create(dir.join("log")).unwrap();
    log.set_len(LOG_SIZE).unwrap();
    // Written with zeros and synced once: every write after is an overwrite in place.
    let zeros = vec![0u8; 1 << 20];
    for at in (0..LOG_SIZE).step_by(zeros.len()) {
        log.write_all_at(&zeros, at).unwrap();
    }
    log.sync_all().unwrap();
}

/// The acknowledged records of a writer, as (seq, lsn), up to its "done".
fn acknowledged(kid: &mut Kid) -> Vec<(u64, u64)> {
    let mut acks = Vec::new();
    loop {
        let line = kid.report().expect("the writer ended before it was done");
        if line == "done" {
            return acks;
        }
        let words: Vec<&str> = line.split(' ').collect();
        match words[..] {
            ["ack", seq, lsn] => acks.push((seq.parse().unwrap(), lsn.parse().unwrap())),
            ["skipped", _] => {}
            _ => panic!("unexpected report {line}"),
        }
    }
}

fn check_on_file(dir: &Path, writer: u64, acks: &[(u64, u64)]) {
    let log = std::fs::File::open(dir.join("log")).unwrap();
    for &(seq, lsn) in acks {
        let mut found = [0u8; RECORD];
        log.read_exact_at(&mut found, lsn).unwrap();
        assert_eq!(
            found,
            record(writer, seq),
            "writer {writer}'s acknowledged record {seq} is not at {lsn}"
        );
    }
}

/// A small xorshift: random points to stop at, without a dependency.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn writers_acknowledge_only_records_on_file_while_one_stays_stopped() {
    // The clock's low 64 bits seed the generator.
    #[allow(clippy::cast_possible_truncation)]
    let mut random = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    for round in 0..4 {
        let dir = tempfile::tempdir().unwrap();
        prepare(dir.path());
        let mut kids: Vec<Kid> = (0..WRITERS)
            // Writer 0 has many more: it is still appending when it is stopped.
            .map(|writer| {
                let count = if writer == 0 { 10 * RECORDS } else { RECORDS };
                Kid::spawn(&format!("append {writer} {count}"), dir.path())
            })
            .collect();
        for kid in &mut kids {
            assert_eq!(kid.report().as_deref(), Some("ready"));
        }
        for kid in &mut kids {
            writeln!(kid.stdin, "go").unwrap();
        }
        // Writer 0 is stopped at a random point of its appends (a reserve, a write, a sync,
        // a wait), and kept stopped until every other writer is done: they must not need it.
        std::thread::sleep(Duration::from_micros(next(&mut random) % 3_000));
        kids[0].stop();
        let others: Vec<Vec<(u64, u64)>> = common::bounded("the other writers", {
            let mut others: Vec<Kid> = kids.drain(1..).collect();
            move || {
                let acks = others.iter_mut().map(acknowledged).collect();
                for kid in &mut others {
                    assert!(kid.child.wait().unwrap().success());
                }
                acks
            }
        });
        for (writer, acks) in others.iter().enumerate() {
            let writer = writer as u64 + 1;
            // Only a record behind writer 0's gap may be refused, and only while it was skipped
            // (none of the others was stopped): most must be acknowledged.
            assert!(!acks.is_empty(), "writer {writer} acknowledged nothing");
            check_on_file(dir.path(), writer, acks);
        }
        kids[0].signal(libc::SIGCONT);
        let stopped = acknowledged(&mut kids[0]);
        assert!(kids[0].child.wait().unwrap().success());
        eprintln!(
            "round {round}: the stopped writer had {} of {} acknowledged, the others {:?}",
            stopped.len(),
            10 * RECORDS,
            others.iter().map(Vec::len).collect::<Vec<_>>()
        );
        check_on_file(dir.path(), 0, &stopped);
    }
}

/// The skip records on the log file, as (their place, the gap's place, the gap's length).
fn skips(dir: &Path) -> Vec<(u64, u64, u64)> {
    let bytes = std::fs::read(dir.join("log")).unwrap();
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    (0..bytes.len() - 32)
        .step_by(8)
        .filter(|&at| &bytes[at..at + 8] == b"SKIPSKIP" && word(at + 8) == at as u64)
        .map(|at| (at as u64, word(at + 16), word(at + 24)))
        .collect()
}

#[test]
fn a_writer_stopped_after_reserving_is_skipped_and_its_write_refused() {
    let dir = tempfile::tempdir().unwrap();
    prepare(dir.path());
    let mut gap = Kid::spawn("gap", dir.path());
    let reserved: u64 = gap
        .report()
        .unwrap()
        .strip_prefix("reserved ")
        .unwrap()
        .parse()
        .unwrap();
    gap.stop();
    let mut kids: Vec<Kid> = (1..WRITERS)
        .map(|writer| Kid::spawn(&format!("append {writer} {RECORDS}"), dir.path()))
        .collect();
    for kid in &mut kids {
        assert_eq!(kid.report().as_deref(), Some("ready"));
        writeln!(kid.stdin, "go").unwrap();
    }
    let acks: Vec<Vec<(u64, u64)>> = common::bounded("the writers behind a gap", move || {
        let acks = kids.iter_mut().map(acknowledged).collect();
        for kid in &mut kids {
            assert!(kid.child.wait().unwrap().success());
        }
        acks
    });
    for (writer, acks) in acks.iter().enumerate() {
        assert_eq!(
            acks.len() as u64,
            RECORDS,
            "every record of a running writer"
        );
        check_on_file(dir.path(), writer as u64 + 1, acks);
    }
    // The gap was voided on the file before anything past it counted.
    assert!(
        skips(dir.path())
            .iter()
            .any(|&(_, at, len)| at == reserved && len >= RECORD as u64),
        "no skip record for the gap at {reserved}: {:?}",
        skips(dir.path())
    );
    // The stopped writer, resumed, finds its gap skipped: its write does not count.
    gap.signal(libc::SIGCONT);
    writeln!(gap.stdin, "write").unwrap();
    assert_eq!(gap.report().as_deref(), Some("timeout"));
    assert!(gap.child.wait().unwrap().success());
}
