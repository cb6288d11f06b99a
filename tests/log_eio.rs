//! A failed `fdatasync` (or `pwrite`) of the redo log, injected with real syscalls into real
//! processes (issue 35, goal 6; docs/design/writes.md section 9): the record whose sync or write
//! failed is never acknowledged, every later append of every process on the log fails with a
//! storage error saying the log failed and the store must be reopened (at once, not at a
//! deadline), every record acknowledged before stays on the file at its place, and once every
//! process closed, a new set-up appends again.
//!
//! The fault is `tests/eio/shim.c`, preloaded into one child: it fails the log file's syncs (or
//! writes) with EIO once the test creates a trigger file. Children are this test binary run
//! again with `FENCELOCK_TEST_ROLE` set, as in `tests/group_sync.rs`.

mod common;

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use fencelock::SharedLogFile;

use common::{log_record as record, say, Kid, DB, LOG_RECORD as RECORD, ROLE};

const LOG_SIZE: u64 = 1 << 20;
/// The log file's name: the suffix the shim fails.
const LOG: &str = "eio.log";

/// Not a test of its own: the entry point of child processes. Role "steps WRITER": one command
/// a line on stdin, one report each:
/// - "append": appends its next record (`ack SEQ LSN`);
/// - "write": reserves and writes its next record without awaiting it (`written SEQ LSN`);
/// - "await": awaits the record it wrote last (`durable`);
/// - "quit": closes the log and ends.
///
/// A failed call reports `storage TEXT` or `other ERROR`.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let dir = PathBuf::from(std::env::var(DB).unwrap());
    let log = SharedLogFile::open(&dir, &dir.join("store"), &dir.join(LOG)).unwrap();
    let writer: u64 = role.strip_prefix("steps ").unwrap().parse().unwrap();
    let mut seq = 0;
    let mut last = None;
    say("ready");
    loop {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        match line.trim_end() {
            "append" => {
                match log.append(&record(writer, seq)) {
                    Ok(lsn) => say(format!("ack {seq} {lsn}")),
                    Err(err) => say(common::outcome(&err)),
                }
                seq += 1;
            }
            "write" => {
                let written = log
                    .reserve(RECORD as u64)
                    .and_then(|lsn| log.write(lsn, &record(writer, seq)).map(|()| lsn));
                match written {
                    Ok(lsn) => {
                        say(format!("written {seq} {lsn}"));
                        last = Some(lsn);
                    }
                    Err(err) => say(common::outcome(&err)),
                }
                seq += 1;
            }
            "await" => {
                let lsn = last.expect("a record written first");
                match log.await_durable(lsn + RECORD as u64) {
                    Ok(()) => say("durable"),
                    Err(err) => say(common::outcome(&err)),
                }
            }
            "quit" => return,
            other => panic!("unknown command {other:?}"),
        }
    }
}

fn prepare(dir: &Path) {
    std::fs::write(dir.join("store"), b"").unwrap();
    let log = std::fs::File::create(dir.join(LOG)).unwrap();
    log.set_len(LOG_SIZE).unwrap();
    log.write_all_at(&vec![0u8; usize::try_from(LOG_SIZE).unwrap()], 0)
        .unwrap();
    log.sync_all().unwrap();
}

/// A writer whose log file fails `on` ("sync" or "write") once `trigger` exists.
fn faulty(writer: u64, dir: &Path, trigger: &Path, on: &str) -> Kid {
    Kid::spawn_with(
        &format!("steps {writer}"),
        dir,
        &[
            ("LD_PRELOAD", common::eio_shim().as_os_str()),
            ("FENCELOCK_EIO_SUFFIX", OsStr::new(LOG)),
            ("FENCELOCK_EIO_TRIGGER", trigger.as_os_str()),
            ("FENCELOCK_EIO_ON", OsStr::new(on)),
        ],
    )
}

fn healthy(writer: u64, dir: &Path) -> Kid {
    Kid::spawn(&format!("steps {writer}"), dir)
}

/// Appends a record that must be acknowledged: its (seq, lsn).
fn acked(kid: &mut Kid) -> (u64, u64) {
    let report = common::ask(kid, "append");
    match report.split(' ').collect::<Vec<_>>()[..] {
        ["ack", seq, lsn] => (seq.parse().unwrap(), lsn.parse().unwrap()),
        _ => panic!("an append before the fault: {report}"),
    }
}

fn check_on_file(dir: &Path, writer: u64, acks: &[(u64, u64)]) {
    let log = std::fs::File::open(dir.join(LOG)).unwrap();
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

/// The records on the log file, as (writer, seq), found whole at any granule.
fn records_on_file(dir: &Path) -> Vec<(u64, u64)> {
    let bytes = std::fs::read(dir.join(LOG)).unwrap();
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    (0..=bytes.len() - RECORD)
        .step_by(8)
        .filter(|&at| &bytes[at..at + 8] == b"RECORD!!")
        .map(|at| (at, word(at + 8), word(at + 16)))
        .filter(|&(at, writer, seq)| bytes[at..at + RECORD] == record(writer, seq))
        .map(|(_, writer, seq)| (writer, seq))
        .collect()
}

fn rings(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension() == Some(OsStr::new("ring")))
        .collect()
}

/// The scenario, with the log's syncs or its writes failing (`on`) in writer 1's process.
fn a_failed_call_of_the_log_is_never_acknowledged(on: &'static str) {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_owned();
    prepare(&dir);
    let trigger = dir.join("trigger");
    common::bounded("the processes on a failed log", move || {
        let mut one = faulty(1, &dir, &trigger, on);
        let mut two = healthy(2, &dir);
        for kid in [&mut one, &mut two] {
            assert_eq!(kid.report().as_deref(), Some("ready"));
        }
        assert_eq!(rings(&dir).len(), 1, "the processes share one ring");
        // Before the fault: both acknowledge, through the shim's real calls.
        let acks_one: Vec<(u64, u64)> = (0..5).map(|_| acked(&mut one)).collect();
        let acks_two: Vec<(u64, u64)> = (0..3).map(|_| acked(&mut two)).collect();
        // Writer 2 writes a record and does not await it: the next sync (writer 1's) would
        // cover it.
        let written = common::ask(&mut two, "write");
        assert!(written.starts_with("written 3 "), "{written}");
        std::fs::write(&trigger, b"").unwrap();
        // Writer 1's next append: its sync (or its write) fails, and it is not acknowledged.
        let failed = common::ask(&mut one, "append");
        common::assert_log_failed(&failed, Some("os error 5"), "the append whose call failed");
        // Every later append of its process fails, with no deadline to wait out.
        for _ in 0..3 {
            let later = common::ask(&mut one, "append");
            common::assert_log_failed(&later, None, "an append of the failing process after");
        }
        // The other process, with no fault of its own: its record written before the failure
        // is never acknowledged, and its appends fail too.
        common::assert_log_failed(
            &common::ask(&mut two, "await"),
            None,
            "the other process's await of its record",
        );
        common::assert_log_failed(
            &common::ask(&mut two, "append"),
            None,
            "the other process's append",
        );
        // Every record acknowledged before the fault is on the file at its place, and no
        // append refused after it wrote anything.
        check_on_file(&dir, 1, &acks_one);
        check_on_file(&dir, 2, &acks_two);
        let refused = [(1, 6), (1, 7), (1, 8), (2, 4)];
        let found = records_on_file(&dir);
        assert!(acks_one.iter().all(|&(seq, _)| found.contains(&(1, seq))));
        assert!(
            refused.iter().all(|seen| !found.contains(seen)),
            "a refused append wrote its record: {found:?}"
        );
        for kid in [&mut one, &mut two] {
            writeln!(kid.stdin, "quit").unwrap();
            assert!(kid.child.wait().unwrap().success());
        }
        // The last process to close removed the ring and its `failed` word: what reopening
        // means at this layer. `SharedLogFile` sets the ring up as for an empty log (its
        // positions start at 0 again, over the records of before: it recovers nothing; the
        // store's log recovers by its scan, `storage/wal/scan.rs`), so what holds is that new
        // processes append and acknowledge again (one with the shim, its trigger gone).
        assert_eq!(rings(&dir), Vec::<PathBuf>::new(), "a ring left behind");
        std::fs::remove_file(&trigger).unwrap();
        let mut three = healthy(3, &dir);
        let mut four = faulty(4, &dir, &trigger, on);
        for kid in [&mut three, &mut four] {
            assert_eq!(kid.report().as_deref(), Some("ready"));
        }
        let acks_three: Vec<(u64, u64)> = (0..3).map(|_| acked(&mut three)).collect();
        let acks_four: Vec<(u64, u64)> = (0..3).map(|_| acked(&mut four)).collect();
        check_on_file(&dir, 3, &acks_three);
        check_on_file(&dir, 4, &acks_four);
        for kid in [&mut three, &mut four] {
            writeln!(kid.stdin, "quit").unwrap();
            assert!(kid.child.wait().unwrap().success());
        }
    });
}

#[test]
fn a_failed_fdatasync_is_never_acknowledged_and_fails_every_append_until_set_up_anew() {
    a_failed_call_of_the_log_is_never_acknowledged("sync");
}

#[test]
fn a_failed_pwrite_is_never_acknowledged_and_fails_every_append_until_set_up_anew() {
    a_failed_call_of_the_log_is_never_acknowledged("write");
}
