//! Fenced writes through the redo log (issue 35, `Options::write_log`), with real processes,
//! every store opened with the log on: the seed's walkthrough across processes; every
//! acknowledged write kept through the kill of every process; a get from another process right
//! after an acknowledgement; a refused write that changes nothing; a closed store read by a
//! read-only and by a single-process open; a read-only open after the kill of every process; a writer stopped or killed in the middle of a write
//! of a key that delays no other writer of the key; a process killed while it skips a stopped
//! writer's gap, whose skip the next writer takes over; a write waiting for a stopped writer's
//! claim, ended by its cancel handle; a process stopped at random points of its
//! writes (checkpoints included) that delays no other process; a server refused beside the log.
//!
//! Children are this test binary run again with `FENCELOCK_TEST_ROLE` set; the `child` test
//! then plays the role and reports on stdout in lines marked with `@@ `.

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencelock::{Cancel, Error, Fenced, Mode, Options, ServeOptions, Server, Status, Store};

use common::{say, Kid, DB, ROLE};

/// The options of every store these tests open: fenced writes go through the log.
fn logged() -> Options {
    Options {
        write_log: true,
        ..Options::default()
    }
}

fn open(path: impl AsRef<Path>) -> Store {
    Store::open_with(path, &logged()).unwrap()
}

/// The environment of every process of a test whose writes must pass segment ends and
/// checkpoints: segments of 64 KiB, the smallest.
fn small_segments() -> [(&'static str, &'static OsStr); 1] {
    [("FENCELOCK_LOG_SEGMENT", OsStr::new("65536"))]
}

/// Value number `seq`, `len` bytes of ASCII without spaces: the number, then a filler that
/// depends on it, so that a value read back says which write it is and that it is whole.
fn value(seq: u64, len: usize) -> String {
    let mut text = format!("{seq}-");
    let fill = char::from(b'a' + u8::try_from(seq % 26).unwrap());
    while text.len() < len {
        text.push(fill);
    }
    text
}

fn fenced(value: &str, token: u64) -> Fenced {
    Fenced {
        value: value.as_bytes().to_vec(),
        token,
    }
}

/// How a child reports a refused or failed call: `stale HIGHEST`, `lost`, or `error TEXT`.
fn refusal(err: &Error) -> String {
    match err {
        Error::StaleToken { highest, .. } => format!("stale {highest}"),
        Error::LockLost { .. } => "lost".into(),
        other => format!("error {other}"),
    }
}

/// A call a child expects to succeed: on an error it says so (the parent fails on the line)
/// and ends.
fn must<T>(what: &str, result: fencelock::Result<T>) -> T {
    result.unwrap_or_else(|err| {
        say(format!("error {what}: {err}"));
        panic!("{what}: {err}")
    })
}

fn read_stdin_line() -> Option<String> {
    let mut line = String::new();
    let read = std::io::stdin().read_line(&mut line).unwrap();
    (read > 0).then(|| line.trim_end().to_owned())
}

/// Not a test of its own: the entry point of child processes.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let path = std::env::var(DB).unwrap();
    let (role, arg) = role.split_once(' ').unwrap_or((role.as_str(), ""));
    match role {
        "walk-a" => walk_a(&path),
        "walk-b" => walk_b(&path),
        "writer" => writer(&path, arg),
        "client" => client(&path, arg),
        "lockstep" => lockstep(&path),
        "batch" => batch(&path, arg),
        "contend" => contend(&path),
        "cycle" => cycle(&path),
        "steady" => steady(&path),
        "serve" => serve(&path),
        "mover" => mover(&path),
        other => panic!("unknown role {other}"),
    }
}

// 1. The seed's walkthrough.

const WALK_LOCK: &str = "payment-export";
const WALK_KEY: &[u8] = b"payment-export/batch";

/// A: takes the lock with a short TTL, then (told to, after its stop) writes with it.
fn walk_a(path: &str) {
    let store = open(path);
    let holder = store
        .acquire(WALK_LOCK, Duration::from_millis(200))
        .unwrap();
    say(format!("token {}", holder.token()));
    read_stdin_line();
    say(match holder.put(WALK_KEY, b"from A") {
        Ok(()) => "ok".into(),
        Err(err) => refusal(&err),
    });
}

/// B: waits for the lock, writes with it, and stays open until told to end.
fn walk_b(path: &str) {
    let store = open(path);
    let holder = store
        .acquire_wait(WALK_LOCK, Duration::from_secs(60), Duration::from_secs(60))
        .unwrap();
    say(format!("token {}", holder.token()));
    say(match holder.put(WALK_KEY, b"from B") {
        Ok(()) => "ok".into(),
        Err(err) => refusal(&err),
    });
    read_stdin_line();
}

#[test]
fn a_holder_paused_past_its_ttl_cannot_overwrite_the_next_holders_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    // The third open, first: the log stays set up by it through the walkthrough.
    let store = open(&path);
    let mut a = Kid::spawn("walk-a", &path);
    let token = a.token();
    // A pauses (a GC, a swap storm) past its TTL; B's acquire waits for the lease to end.
    a.stop();
    let mut b = Kid::spawn("walk-b", &path);
    assert_eq!(b.token(), token + 1);
    assert_eq!(b.report().as_deref(), Some("ok"));
    a.signal(libc::SIGCONT);
    writeln!(a.stdin, "put").unwrap();
    let refused = a.report().expect("A reported its write");
    assert!(
        refused == "lost" || refused == format!("stale {}", token + 1),
        "A's write with the lost lease: {refused}"
    );
    assert!(a.child.wait().unwrap().success());
    // B's data stays, while B is open and after it closed.
    let b_wrote = Some(fenced("from B", token + 1));
    assert_eq!(store.get(WALK_KEY).unwrap(), b_wrote);
    writeln!(b.stdin, "end").unwrap();
    assert!(b.child.wait().unwrap().success());
    assert_eq!(store.get(WALK_KEY).unwrap(), b_wrote);
}

// 2. Every acknowledged write survives the kill of every process.

/// Keys each writer writes: `w{writer}/k{0..KEYS}`.
const KEYS: usize = 4;
/// Bytes of each value a writer writes: records of about 1 KiB, so that a few hundred writes
/// pass several segment ends of 64 KiB.
const WRITER_VALUE: usize = 1000;

fn writer_key(writer: usize, key: usize) -> String {
    format!("w{writer}/k{key}")
}

/// Writes its own keys in rounds until killed: the first key by an acquire with a write (or
/// an acquire, then `holder.put`), the others by `holder.put` or `Store::put` with the token,
/// the last one deleted every third round. Before each write it reports
/// `try KEY SEQ put|delete`, after its acknowledgement `ack KEY SEQ TOKEN`. `SEQ` numbers its
/// writes and is in the value.
fn writer(path: &str, me: &str) {
    let me: usize = me.parse().unwrap();
    let store = open(path);
    let lock = format!("writer-{me}");
    let ttl = Duration::from_secs(60);
    let mut seq = 0u64;
    for round in 0u64.. {
        seq += 1;
        let key = writer_key(me, 0);
        let written = value(seq, WRITER_VALUE);
        say(format!("try {key} {seq} put"));
        let holder = if round % 2 == 0 {
            must(
                "acquire_and_put",
                store.acquire_and_put(&lock, ttl, key.as_bytes(), written.as_bytes()),
            )
        } else {
            let holder = must("acquire", store.acquire(&lock, ttl));
            must("holder.put", holder.put(key.as_bytes(), written.as_bytes()));
            holder
        };
        say(format!("ack {key} {seq} {}", holder.token()));
        for j in 1..KEYS {
            seq += 1;
            let key = writer_key(me, j);
            let written = value(seq, WRITER_VALUE);
            if j == KEYS - 1 && round % 3 == 2 {
                say(format!("try {key} {seq} delete"));
                must("holder.delete", holder.delete(key.as_bytes()));
            } else if (round + j as u64) % 2 == 0 {
                say(format!("try {key} {seq} put"));
                must("holder.put", holder.put(key.as_bytes(), written.as_bytes()));
            } else {
                say(format!("try {key} {seq} put"));
                must(
                    "Store::put",
                    store.put(key.as_bytes(), written.as_bytes(), holder.token()),
                );
            }
            say(format!("ack {key} {seq} {}", holder.token()));
        }
        must("release", holder.release());
    }
}

/// A write a writer reported.
#[derive(Debug, Clone)]
struct Attempt {
    key: String,
    seq: u64,
    delete: bool,
}

/// What a writer reported before it was killed: each key's last acknowledged write with its
/// token, and the write it had begun and not seen acknowledged (which may or may not have
/// landed).
#[derive(Debug, Default)]
struct Ledger {
    acked: BTreeMap<String, (Attempt, u64)>,
    in_flight: Option<Attempt>,
    acks: u64,
}

impl Ledger {
    fn of(lines: &[String]) -> Ledger {
        let mut ledger = Ledger::default();
        for line in lines {
            let words: Vec<&str> = line.split(' ').collect();
            match words.as_slice() {
                ["try", key, seq, kind] => {
                    ledger.in_flight = Some(Attempt {
                        key: (*key).to_owned(),
                        seq: seq.parse().unwrap(),
                        delete: *kind == "delete",
                    });
                }
                ["ack", key, seq, token] => {
                    let write = ledger.in_flight.take().expect("an ack follows its try");
                    assert!(write.key == *key && write.seq.to_string() == *seq, "{line}");
                    ledger
                        .acked
                        .insert(write.key.clone(), (write, token.parse().unwrap()));
                    ledger.acks += 1;
                }
                _ => panic!("a writer reported {line:?}"),
            }
        }
        ledger
    }
}

/// Runs `writers` writers with `env`; once each has seen `acks` writes acknowledged, kills
/// them all at once (SIGKILL) and returns what each reported.
fn kill_writers_midway(
    path: &Path,
    writers: usize,
    env: &[(&str, &OsStr)],
    acks: u64,
) -> Vec<Ledger> {
    let running: Vec<_> = (0..writers)
        .map(|i| {
            let mut kid = Kid::spawn_with(&format!("writer {i}"), path, env);
            let pid = libc::pid_t::try_from(kid.child.id()).unwrap();
            let count = Arc::new(AtomicU64::new(0));
            let counted = Arc::clone(&count);
            let reader = std::thread::spawn(move || {
                let lines: Vec<String> = std::iter::from_fn(|| kid.report())
                    .inspect(|line| {
                        if line.starts_with("ack ") {
                            counted.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                    .collect();
                (lines, kid.child.wait().unwrap())
            });
            (pid, count, reader)
        })
        .collect();
    // A bound that catches writers that stopped writing, not slow ones.
    let stuck = Instant::now() + Duration::from_secs(120);
    while running
        .iter()
        .any(|(_, count, reader)| count.load(Ordering::Relaxed) < acks && !reader.is_finished())
    {
        assert!(Instant::now() < stuck, "the writers stopped writing");
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_micros(
        u64::from(std::process::id()) % 20_000,
    ));
    for (pid, _, _) in &running {
        // SAFETY: kill(2) on our own child (not reaped yet: its reader waits for its end).
        assert_eq!(unsafe { libc::kill(*pid, libc::SIGKILL) }, 0);
    }
    running
        .into_iter()
        .map(|(_, _, reader)| {
            use std::os::unix::process::ExitStatusExt;
            let (lines, status) = reader.join().unwrap();
            assert_eq!(
                status.signal(),
                Some(libc::SIGKILL),
                "a writer ended before it was killed ({status}), its last reports: {:?}",
                &lines[lines.len().saturating_sub(5)..]
            );
            Ledger::of(&lines)
        })
        .collect()
}

/// The numbers of the log's segments beside the store file at `path`, in order.
fn segments(path: &Path) -> Vec<u64> {
    let prefix = format!("{}.wal.", path.file_name().unwrap().to_str().unwrap());
    let mut seqs: Vec<u64> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|name| {
            let seq = name.strip_prefix(&prefix)?;
            (seq.len() == 16).then(|| u64::from_str_radix(seq, 16).unwrap())
        })
        .collect();
    seqs.sort_unstable();
    seqs
}

/// Each writer's keys, as `get` returns them now, hold its last acknowledged write, or the
/// write it had begun when it was killed.
fn assert_writes_kept(ledgers: &[Ledger], mut get: impl FnMut(&str) -> Option<Fenced>) {
    for (writer, ledger) in ledgers.iter().enumerate() {
        assert!(ledger.acks > 0, "writer {writer} wrote nothing");
        for j in 0..KEYS {
            let key = writer_key(writer, j);
            let got = get(&key);
            let acked = ledger.acked.get(&key);
            let expected = match acked {
                Some((write, token)) if !write.delete => {
                    Some(fenced(&value(write.seq, WRITER_VALUE), *token))
                }
                _ => None,
            };
            if got == expected {
                continue;
            }
            let shown = got.as_ref().map(|f| {
                let text = String::from_utf8_lossy(&f.value);
                (text[..text.len().min(20)].to_owned(), f.token)
            });
            let begun = ledger
                .in_flight
                .as_ref()
                .filter(|write| write.key == key)
                .unwrap_or_else(|| {
                    panic!("{key}: the acknowledged write {acked:?} is lost, found {shown:?}")
                });
            let newer_token = |token: u64| acked.is_none_or(|(_, acked)| token >= *acked);
            match &got {
                None => assert!(begun.delete, "{key}: {acked:?} lost, found nothing"),
                Some(found) => assert!(
                    !begun.delete
                        && found.value == value(begun.seq, WRITER_VALUE).as_bytes()
                        && newer_token(found.token),
                    "{key}: {acked:?} lost, found {shown:?}"
                ),
            }
        }
    }
}

/// Tokens go on from the recovered log: `next`, a grant after it, is above every token a write
/// was acknowledged with, and each key refuses (`refused` says whether) a token below its last
/// acknowledged write's.
fn assert_tokens_go_on(ledgers: &[Ledger], next: u64, mut refused: impl FnMut(&str, u64) -> bool) {
    let acked = || ledgers.iter().flat_map(|ledger| ledger.acked.iter());
    let highest = acked().map(|(_, (_, token))| *token).max().unwrap();
    assert!(next > highest, "token {next} granted after {highest}");
    for (key, (_, token)) in acked().filter(|(_, (_, token))| *token > 1) {
        assert!(refused(key, token - 1), "{key} took token {}", token - 1);
    }
}

/// A child playing "client": one command a line, one answer each (see `client`).
struct Client(Kid);

impl Client {
    fn spawn(path: &Path, env: &[(&str, &OsStr)]) -> Client {
        let mut kid = Kid::spawn_with("client", path, env);
        assert_eq!(kid.report().as_deref(), Some("ready"));
        Client(kid)
    }

    /// A client of a read-only store, in a /dev/shm of its own (another container's, which
    /// shares the store file but not its shared memory).
    fn reader_in_private_shm(path: &Path) -> Client {
        Client::reader_in(Kid::spawn_in_private_shm("client read-only", path))
    }

    fn reader_in(mut kid: Kid) -> Client {
        assert_eq!(
            kid.report().as_deref(),
            Some("ready"),
            "a private /dev/shm needs root and unshare(1)"
        );
        Client(kid)
    }

    fn ask(&mut self, command: &str) -> String {
        writeln!(self.0.stdin, "{command}").unwrap();
        self.0.report().expect("the client answered")
    }

    fn get(&mut self, key: &str) -> Option<Fenced> {
        let answer = self.ask(&format!("get {key}"));
        if answer == "none" {
            return None;
        }
        let (token, value) = answer
            .strip_prefix("value ")
            .and_then(|rest| rest.split_once(' '))
            .unwrap_or_else(|| panic!("a get of {key}: {answer}"));
        Some(fenced(value, token.parse().unwrap()))
    }

    /// Closes its store and ends, cleanly.
    fn close(mut self) {
        writeln!(self.0.stdin, "quit").unwrap();
        assert!(self.0.child.wait().unwrap().success());
    }
}

/// Opens the store, says `ready`, then answers each command on stdin: `get KEY` (`value TOKEN
/// VALUE` or `none`), `put KEY TOKEN VALUE` (`ok`), `delete KEY TOKEN` (`deleted BOOL`),
/// `fence RESOURCE TOKEN` (`ok`), `acquire NAME` (`token TOKEN`, released at once), or a
/// refusal; `quit` closes the store and ends. With `arg` `read-only`, a read-only store's.
fn client(path: &str, arg: &str) {
    let store = if arg == "read-only" {
        let options = Options {
            read_only: true,
            ..logged()
        };
        Store::open_with(path, &options).unwrap()
    } else {
        open(path)
    };
    say("ready");
    let answered = |result: fencelock::Result<String>| result.unwrap_or_else(|err| refusal(&err));
    while let Some(line) = read_stdin_line() {
        let words: Vec<&str> = line.split(' ').collect();
        let token = |word: &str| -> u64 { word.parse().unwrap() };
        let answer = match words.as_slice() {
            ["get", key] => answered(store.get(key.as_bytes()).map(|got| match got {
                Some(Fenced { value, token }) => {
                    format!("value {token} {}", String::from_utf8(value).unwrap())
                }
                None => "none".into(),
            })),
            ["put", key, t, value] => answered(
                store
                    .put(key.as_bytes(), value.as_bytes(), token(t))
                    .map(|()| "ok".into()),
            ),
            ["delete", key, t] => answered(
                store
                    .delete(key.as_bytes(), token(t))
                    .map(|held| format!("deleted {held}")),
            ),
            ["fence", resource, t] => {
                answered(store.fence(resource, token(t)).map(|()| "ok".into()))
            }
            ["acquire", name] => answered(
                store
                    .acquire(name, Duration::from_secs(60))
                    .map(|holder| format!("token {}", holder.token())),
            ),
            ["quit"] => return,
            _ => panic!("unknown command {line:?}"),
        };
        say(answer);
    }
}

#[test]
fn every_acknowledged_write_survives_the_kill_of_every_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let env = small_segments();
    let ledgers = kill_writers_midway(&path, 3, &env, 150);
    // The writes passed segment ends, and checkpoints retired the first segments.
    let left = segments(&path);
    assert!(
        left.first().is_some_and(|first| *first > 0) && left.last() > Some(&2),
        "the log's segments: {left:?}"
    );
    // Every process of the store is gone: this open sets its shared memory up anew, which
    // recovers the log.
    let mut reader = Client::spawn(&path, &env);
    assert_writes_kept(&ledgers, |key| reader.get(key));
    let next = reader.ask("acquire after");
    let next = token_of(&next);
    assert_tokens_go_on(&ledgers, next, |key, stale| {
        reader
            .ask(&format!("put {key} {stale} stale"))
            .starts_with("stale ")
    });
    reader.close();
}

#[test]
fn a_single_process_open_recovers_every_write_that_killed_processes_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let ledgers = kill_writers_midway(&path, 2, &[], 60);
    let single = Options {
        mode: Mode::SingleProcess,
        ..logged()
    };
    let store = Store::open_with(&path, &single).unwrap();
    assert_writes_kept(&ledgers, |key| store.get(key.as_bytes()).unwrap());
    let next = store.acquire("after", Duration::from_secs(60)).unwrap();
    assert_tokens_go_on(&ledgers, next.token(), |key, stale| {
        matches!(
            store.put(key.as_bytes(), b"stale", stale),
            Err(Error::StaleToken { .. })
        )
    });
}

// 3. A get from another process right after an acknowledgement.

const LOCKSTEP_ROUNDS: u64 = 200;

/// The write of round `round` of a lockstep writer: its key, and whether it deletes it.
fn lockstep_write(prefix: &str, round: u64) -> (String, bool) {
    (format!("{prefix}/k{}", round % 5), round % 7 == 6)
}

/// For each line on stdin, one fenced write to one of five keys (a put by the holder, by
/// `Store::put` with its token, or by an acquire with a write every 50 rounds; or a delete),
/// reported once acknowledged: `put KEY TOKEN VALUE` or `deleted KEY`.
fn lockstep(path: &str) {
    let store = open(path);
    let ttl = Duration::from_secs(60);
    let mut holder = must("acquire", store.acquire("lockstep", ttl));
    for round in 0u64.. {
        if read_stdin_line().is_none() {
            return;
        }
        let (key, delete) = lockstep_write("c", round);
        let written = value(round, 100);
        if delete {
            must("holder.delete", holder.delete(key.as_bytes()));
            say(format!("deleted {key}"));
            continue;
        }
        if round % 50 == 49 {
            must("release", holder.release());
            holder = must(
                "acquire_and_put",
                store.acquire_and_put("lockstep", ttl, key.as_bytes(), written.as_bytes()),
            );
        } else if round % 2 == 0 {
            must("holder.put", holder.put(key.as_bytes(), written.as_bytes()));
        } else {
            must(
                "Store::put",
                store.put(key.as_bytes(), written.as_bytes(), holder.token()),
            );
        }
        say(format!("put {key} {} {written}", holder.token()));
    }
}

#[test]
fn a_get_from_another_process_right_after_an_acknowledgement_returns_the_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let store = open(&path);
    // A child writes; this process reads as soon as the child reports the acknowledgement.
    let mut writer = Kid::spawn("lockstep", &path);
    for round in 0..LOCKSTEP_ROUNDS {
        writeln!(writer.stdin, "next").unwrap();
        let report = writer.report().expect("the writer reported its write");
        let words: Vec<&str> = report.split(' ').collect();
        let (key, expected) = match words.as_slice() {
            ["put", key, token, value] => (*key, Some(fenced(value, token.parse().unwrap()))),
            ["deleted", key] => (*key, None),
            _ => panic!("the writer reported {report:?}"),
        };
        assert_eq!(lockstep_write("c", round).0, key, "round {round}");
        assert_eq!(
            store.get(key.as_bytes()).unwrap(),
            expected,
            "round {round}"
        );
    }
    // This process writes; a child reads as soon as the write is acknowledged.
    let mut reader = Client::spawn(&path, &[]);
    let ttl = Duration::from_secs(60);
    let mut holder = store.acquire("parent", ttl).unwrap();
    for round in 0..LOCKSTEP_ROUNDS {
        let (key, delete) = lockstep_write("p", round);
        let written = value(round, 100);
        if delete {
            holder.delete(key.as_bytes()).unwrap();
            assert_eq!(reader.get(&key), None, "round {round}");
            continue;
        }
        if round % 50 == 49 {
            holder.release().unwrap();
            holder = store
                .acquire_and_put("parent", ttl, key.as_bytes(), written.as_bytes())
                .unwrap();
        } else {
            holder.put(key.as_bytes(), written.as_bytes()).unwrap();
        }
        assert_eq!(
            reader.get(&key),
            Some(fenced(&written, holder.token())),
            "round {round}"
        );
    }
    reader.close();
}

// 4. A refused write changes nothing.

#[test]
fn a_refused_write_changes_nothing_for_any_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let store = open(&path);
    let ttl = Duration::from_secs(60);
    store.acquire("job", ttl).unwrap().release().unwrap();
    let holder = store.acquire("job", ttl).unwrap();
    let token = holder.token();
    let stale = token - 1;
    assert!(stale > 0, "token {stale} was granted");
    let mut writer = Client::spawn(&path, &[]);
    assert_eq!(writer.ask(&format!("put report {token} fresh")), "ok");
    assert_eq!(writer.ask(&format!("fence bucket/report {token}")), "ok");
    // Refused here and in the writer's process alike.
    assert!(matches!(
        store.put(b"report", b"stale", stale),
        Err(Error::StaleToken { token: t, highest }) if t == stale && highest == token
    ));
    assert!(matches!(
        store.delete(b"report", stale),
        Err(Error::StaleToken { highest, .. }) if highest == token
    ));
    assert!(matches!(
        store.fence("bucket/report", stale),
        Err(Error::StaleToken { highest, .. }) if highest == token
    ));
    let refused = format!("stale {token}");
    assert_eq!(writer.ask(&format!("put report {stale} stale")), refused);
    assert_eq!(writer.ask(&format!("delete report {stale}")), refused);
    assert_eq!(writer.ask(&format!("fence bucket/report {stale}")), refused);
    // Every process still reads the accepted write, one that saw none of it too.
    let fresh = Some(fenced("fresh", token));
    assert_eq!(store.get(b"report").unwrap(), fresh);
    assert_eq!(writer.get("report"), fresh);
    let mut other = Client::spawn(&path, &[]);
    assert_eq!(other.get("report"), fresh);
    // The accepted token still passes; the refused one still does not.
    assert_eq!(other.ask(&format!("fence bucket/report {token}")), "ok");
    assert_eq!(other.ask(&format!("put report {stale} stale")), refused);
    // After a checkpoint (a listing runs one first), and once every process closed the store.
    assert_eq!(store.keys(b"").unwrap(), [b"report".to_vec()]);
    assert_eq!(store.get(b"report").unwrap(), fresh);
    store.verify().unwrap();
    writer.close();
    other.close();
    drop(holder);
    drop(store);
    let store = open(&path);
    assert_eq!(store.get(b"report").unwrap(), fresh);
    assert!(matches!(
        store.fence("bucket/report", stale),
        Err(Error::StaleToken { highest, .. }) if highest == token
    ));
}

// 5. A closed store, read by a read-only and by a single-process open.

/// Rounds of fenced writes of its own keys and fence (an acquire with a write, puts, deletes,
/// a fence), each reported once acknowledged as the state it leaves: `value KEY TOKEN VALUE`,
/// `none KEY` or `fence RESOURCE TOKEN`; then `done`, and it closes the store when told to.
fn batch(path: &str, me: &str) {
    let store = open(path);
    let ttl = Duration::from_secs(60);
    let (lock, owner, resource) = (
        format!("batch-{me}"),
        format!("b{me}/owner"),
        format!("b{me}/bucket"),
    );
    for round in 0..30u64 {
        let written = value(round, 100);
        let holder = must(
            "acquire_and_put",
            store.acquire_and_put(&lock, ttl, owner.as_bytes(), written.as_bytes()),
        );
        let token = holder.token();
        say(format!("value {owner} {token} {written}"));
        for j in 0..3u64 {
            let key = format!("b{me}/k{j}");
            let written = value(round * 10 + j, 100);
            if j == 2 && round % 2 == 1 {
                must("holder.delete", holder.delete(key.as_bytes()));
                say(format!("none {key}"));
                continue;
            }
            if j == 0 {
                must("holder.put", holder.put(key.as_bytes(), written.as_bytes()));
            } else {
                must(
                    "Store::put",
                    store.put(key.as_bytes(), written.as_bytes(), token),
                );
            }
            say(format!("value {key} {token} {written}"));
        }
        must("fence", store.fence(&resource, token));
        say(format!("fence {resource} {token}"));
        must("release", holder.release());
    }
    say("done");
    read_stdin_line();
    drop(store);
}

/// The state the batches' writes left: each key's value (or none), each fence's token.
#[derive(Default)]
struct Written {
    values: BTreeMap<String, Option<Fenced>>,
    fences: BTreeMap<String, u64>,
}

impl Written {
    /// Takes in what a child playing "batch" reports, up to its `done`.
    fn batch(&mut self, kid: &mut Kid) {
        loop {
            let report = kid.report().expect("a batch reported");
            let words: Vec<&str> = report.split(' ').collect();
            match words.as_slice() {
                ["value", key, token, value] => {
                    let written = Some(fenced(value, token.parse().unwrap()));
                    self.values.insert((*key).to_owned(), written);
                }
                ["none", key] => {
                    self.values.insert((*key).to_owned(), None);
                }
                ["fence", resource, token] => {
                    self.fences
                        .insert((*resource).to_owned(), token.parse().unwrap());
                }
                ["done"] => return,
                _ => panic!("a batch reported {report:?}"),
            }
        }
    }
}

#[test]
fn a_closed_store_shows_every_write_to_a_read_only_and_a_single_process_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let mut batches: Vec<Kid> = (0..2)
        .map(|i| Kid::spawn(&format!("batch {i}"), &path))
        .collect();
    let mut written = Written::default();
    for kid in &mut batches {
        written.batch(kid);
    }
    let Written { values, fences } = written;
    // One closes while the other is open, then the last one closes.
    for mut kid in batches {
        writeln!(kid.stdin, "close").unwrap();
        assert!(kid.child.wait().unwrap().success());
    }
    let read_only = Options {
        read_only: true,
        ..logged()
    };
    let store = Store::open_with(&path, &read_only).unwrap();
    for (key, expected) in &values {
        assert_eq!(
            &store.get(key.as_bytes()).unwrap(),
            expected,
            "{key} read-only"
        );
    }
    drop(store);
    // The last process to close the store left it one file again: a copy of the store file
    // alone (a backup of a closed store) holds every write.
    let elsewhere = tempfile::tempdir().unwrap();
    let copy = elsewhere.path().join("locks.db");
    std::fs::copy(&path, &copy).unwrap();
    let store = Store::open_with(&copy, &read_only).unwrap();
    for (key, expected) in &values {
        assert_eq!(
            &store.get(key.as_bytes()).unwrap(),
            expected,
            "{key} in a copy of the store file"
        );
    }
    drop(store);
    let single = Options {
        mode: Mode::SingleProcess,
        ..logged()
    };
    let store = Store::open_with(&path, &single).unwrap();
    for (key, expected) in &values {
        assert_eq!(
            &store.get(key.as_bytes()).unwrap(),
            expected,
            "{key} single-process"
        );
    }
    for (resource, token) in &fences {
        assert!(
            matches!(
                store.fence(resource, token - 1),
                Err(Error::StaleToken { highest, .. }) if highest == *token
            ),
            "{resource}"
        );
    }
}

/// A read-only open after the kill of every process of the store, before any process that
/// may write has opened it again (`fencelock get` looking at what a crash left), with `reader`'s
/// options: it reads every write they acknowledged, from the log they left, laid over the store
/// file; a writer that opens next recovers the log and writes, and the reader, still open, reads
/// those writes too (for a multi-process reader), whether it writes through the log
/// (`next_writer_logs`) or to the store file.
fn read_only_after_a_crash(reader: &Options, next_writer_logs: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    {
        // Keys in the store file, written before the log was turned on.
        let store = Store::open(&path).unwrap();
        let holder = store.acquire("file", Duration::from_secs(10)).unwrap();
        holder.put(b"old", b"from-the-file").unwrap();
        holder.put(b"kept", b"from-the-file").unwrap();
    }
    let mut client = Client::spawn(&path, &[]);
    let first = token_of(&client.ask("acquire w"));
    let large = value(7, 70_000);
    for command in [
        format!("put new {first} v1"),
        format!("put large {first} {large}"),
        format!("fence printer {first}"),
    ] {
        assert_eq!(
            client.ask(&command),
            "ok",
            "{}",
            &command[..20.min(command.len())]
        );
    }
    assert_eq!(client.ask(&format!("delete old {first}")), "deleted true");
    client.0.child.kill().unwrap();
    client.0.child.wait().unwrap();
    let segments_left = segments(&path);
    assert!(!segments_left.is_empty(), "the killed process left its log");

    let store = Store::open_with(&path, reader).unwrap();
    // Each value as its length, first bytes and token: a failure prints no 70 KB value.
    let shown = |got: Option<Fenced>| {
        got.map(|got| {
            let head = String::from_utf8_lossy(&got.value[..got.value.len().min(13)]).into_owned();
            (got.value.len(), head, got.token)
        })
    };
    let read = |store: &Store| {
        (
            ["new", "large", "old", "kept"].map(|key| shown(store.get(key.as_bytes()).unwrap())),
            store.fence_token("printer").unwrap(),
            store.keys(b"").unwrap(),
        )
    };
    let written = |value: &str, token: u64| shown(Some(fenced(value, token)));
    let acknowledged = (
        [
            written("v1", first),
            written(&large, first),
            None,
            written("from-the-file", 1),
        ],
        Some(first),
        vec![b"kept".to_vec(), b"large".to_vec(), b"new".to_vec()],
    );
    assert_eq!(
        read(&store),
        acknowledged,
        "what the killed process acknowledged"
    );
    // It wrote nothing: the log is as the killed process left it, and is recovered by the
    // next open that may write, which then writes through it.
    assert_eq!(segments(&path), segments_left);
    if reader.mode == Mode::SingleProcess {
        // It holds the store file: no other process opens it meanwhile.
        return;
    }
    let second = if next_writer_logs {
        // It turns the log on: the reader then reads the log through the ring.
        let mut writer = Client::spawn(&path, &[]);
        let second = token_of(&writer.ask("acquire w"));
        assert_eq!(writer.ask(&format!("put new {second} v2")), "ok");
        assert_eq!(writer.ask(&format!("put kept {second} v2")), "ok");
        writer.close();
        second
    } else {
        // A store that does not write through the log: the ring's processes then commit to
        // the store file, which the reader reads alone once the recovery moved the log there.
        let writer = Store::open(&path).unwrap();
        let holder = writer.acquire("w", Duration::from_secs(10)).unwrap();
        holder.put(b"new", b"v2").unwrap();
        holder.put(b"kept", b"v2").unwrap();
        holder.token()
    };
    let mut now = acknowledged.clone();
    now.0[0] = written("v2", second);
    now.0[3] = written("v2", second);
    assert_eq!(
        read(&store),
        now,
        "after a writer recovered the log and wrote"
    );
}

/// The token in an answer `token N`.
fn token_of(answer: &str) -> u64 {
    let token = answer.strip_prefix("token ");
    token
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{answer}"))
}

#[test]
fn a_read_only_store_left_open_reads_the_writes_of_a_later_writer_killed_after_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    // A writes and closes: the store file holds its write, the log nothing more.
    let mut first = Client::spawn(&path, &[]);
    let a = token_of(&first.ask("acquire w"));
    assert_eq!(first.ask(&format!("put k {a} v1")), "ok");
    first.close();
    // A reader outside the writers' shared memory (so that it reads the log itself, not
    // through their ring), open from here on.
    let mut reader = Client::reader_in_private_shm(&path);
    assert_eq!(reader.get("k"), Some(fenced("v1", a)));
    // B opens (its recovery finds nothing to move: the file's position in the log stays),
    // writes through the log, and is killed before any checkpoint.
    let mut second = Client::spawn(&path, &[]);
    let b = token_of(&second.ask("acquire w"));
    assert_eq!(second.ask(&format!("put k {b} v2")), "ok");
    second.0.child.kill().unwrap();
    second.0.child.wait().unwrap();
    assert_eq!(
        reader.get("k"),
        Some(fenced("v2", b)),
        "the reader kept what it read of the log before B"
    );
    reader.close();
}

#[test]
fn a_read_only_open_after_every_process_was_killed_reads_their_acknowledged_writes() {
    let reader = Options {
        read_only: true,
        ..logged()
    };
    read_only_after_a_crash(&reader, true);
    read_only_after_a_crash(&reader, false);
}

#[test]
fn a_read_only_single_process_open_after_every_process_was_killed_reads_their_writes() {
    let reader = Options {
        read_only: true,
        mode: Mode::SingleProcess,
        ..logged()
    };
    read_only_after_a_crash(&reader, false);
}

// 6. A writer stopped in the middle of a write of a key delays no other writer of that key.

const CONTENDED: &[u8] = b"contended/key";

/// Writes `CONTENDED` with `Store::put` and its token as fast as it can, until killed; once its
/// token is refused (another process wrote the key with a higher one), takes a new one. Reports
/// only the failures, as `error ...`.
fn contend(path: &str) {
    let store = open(path);
    let ttl = Duration::from_secs(60);
    let mut holder = must("acquire", store.acquire("contender", ttl));
    say("contending");
    for seq in 0u64.. {
        match store.put(CONTENDED, value(seq, 100).as_bytes(), holder.token()) {
            Ok(()) => {}
            Err(Error::StaleToken { .. }) => {
                must("release", holder.release());
                holder = must("acquire", store.acquire("contender", ttl));
            }
            Err(err) => say(format!("error {err}")),
        }
    }
}

/// The store of a test whose writes must not wait for a stopped process: one that did would
/// fail at its busy timeout, 5 s.
fn impatient(path: &Path) -> Store {
    let options = Options {
        busy_timeout: Duration::from_secs(5),
        ..logged()
    };
    Store::open_with(path, &options).unwrap()
}

/// A pseudo-random number generator seeded by this process's id: `random(below)`.
fn randoms() -> impl FnMut(u64) -> u64 {
    let mut seed = u64::from(std::process::id());
    move |below| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % below
    }
}

/// While the contender is stopped or dead anywhere in its write of `CONTENDED` (its claim, its
/// record's write, its sync): a get of the key returns a write no older than `last` (this
/// process's previous one; nothing before the first), and a write with a higher token is
/// acknowledged, and then read.
fn write_over(store: &Store, round: u64, last: &mut u64) {
    let before = store
        .get(CONTENDED)
        .unwrap_or_else(|err| panic!("round {round}: a get of the key: {err}"));
    assert!(
        before.as_ref().map_or(*last == 0, |f| f.token >= *last),
        "round {round}: {before:?} after token {last}"
    );
    let holder = store.acquire("writer", Duration::from_secs(60)).unwrap();
    let written = value(round, 100);
    store
        .put(CONTENDED, written.as_bytes(), holder.token())
        .unwrap_or_else(|err| panic!("round {round}: a write of the key: {err}"));
    assert_eq!(
        store.get(CONTENDED).unwrap(),
        Some(fenced(&written, holder.token())),
        "round {round}"
    );
    *last = holder.token();
    holder.release().unwrap();
}

#[test]
fn a_writer_stopped_in_the_middle_of_a_write_delays_no_other_writer_of_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let store = impatient(&path);
    let mut contender = Kid::spawn("contend", &path);
    assert_eq!(contender.report().as_deref(), Some("contending"));
    let mut random = randoms();
    let mut last = 0;
    for round in 0..30 {
        std::thread::sleep(Duration::from_micros(random(5_000)));
        contender.stop();
        write_over(&store, round, &mut last);
        contender.signal(libc::SIGCONT);
    }
    contender.signal(libc::SIGKILL);
    let failures: Vec<String> = std::iter::from_fn(|| contender.report()).collect();
    assert!(
        failures.is_empty(),
        "the stopped writer's own: {failures:?}"
    );
}

#[test]
fn a_writer_killed_in_the_middle_of_a_write_delays_no_other_writer_of_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    // Open throughout: the ring and its key index outlive each killed writer.
    let store = impatient(&path);
    let mut random = randoms();
    let mut last = 0;
    for round in 0..10 {
        let mut contender = Kid::spawn("contend", &path);
        assert_eq!(contender.report().as_deref(), Some("contending"));
        std::thread::sleep(Duration::from_micros(random(5_000)));
        contender.signal(libc::SIGKILL);
        contender.child.wait().unwrap();
        write_over(&store, round, &mut last);
    }
}

/// The environment of a child that stops itself (the fault shim, `tests/eio/shim.c`) right
/// before each write of `bytes` bytes ("0": of any size) into the log's first segment, while
/// `trigger` exists.
fn stops_before_writes<'a>(trigger: &'a Path, bytes: &'a str) -> [(&'static str, &'a OsStr); 5] {
    [
        ("LD_PRELOAD", common::eio_shim().as_os_str()),
        (
            "FENCELOCK_EIO_SUFFIX",
            OsStr::new("locks.db.wal.0000000000000000"),
        ),
        ("FENCELOCK_EIO_TRIGGER", trigger.as_os_str()),
        ("FENCELOCK_EIO_ON", OsStr::new("stop-write")),
        ("FENCELOCK_EIO_BYTES", OsStr::new(bytes)),
    ]
}

/// Two children writing the store at `path`, stopped by the fault shim (their triggers are
/// files beside the store): the contender in its first write of `CONTENDED`, its claim on the
/// key made, between its reservation and its mark (a gap in the log that every later write
/// waits for, then skips); the skipper, a steady writer behind it, in the write of its skip
/// record (64 bytes, the only write of that size), the gap claimed and not yet skipped.
/// Returns each with its trigger.
fn a_stopped_writer_and_its_skipper(path: &Path) -> (Kid, PathBuf, Kid, PathBuf) {
    let dir = path.parent().unwrap();
    let contender_stops = dir.join("stop-contender");
    std::fs::write(&contender_stops, "").unwrap();
    let mut contender =
        Kid::spawn_with("contend", path, &stops_before_writes(&contender_stops, "0"));
    assert_eq!(contender.report().as_deref(), Some("contending"));
    contender.stopped();
    let skipper_stops = dir.join("stop-skipper");
    std::fs::write(&skipper_stops, "").unwrap();
    let mut skipper = Kid::spawn_with("steady", path, &stops_before_writes(&skipper_stops, "64"));
    assert_eq!(skipper.report().as_deref(), Some("ready"));
    skipper.stopped();
    (contender, contender_stops, skipper, skipper_stops)
}

/// Waits until the contender, resumed, has written `CONTENDED` (the bound catches a hang only).
fn until_the_contender_wrote(store: &Store) {
    let stuck = Instant::now() + Duration::from_secs(60);
    while store.get(CONTENDED).unwrap().is_none() {
        assert!(Instant::now() < stuck, "the resumed contender never wrote");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_process_killed_while_it_skips_a_stopped_writer_is_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let store = impatient(&path);
    // A gap in the log that every later write waits for, and its skipper stopped in the skip;
    // the skipper is killed there.
    let (mut contender, contender_stops, mut skipper, _) = a_stopped_writer_and_its_skipper(&path);
    skipper.signal(libc::SIGKILL);
    skipper.child.wait().unwrap();
    let reports: Vec<String> = std::iter::from_fn(|| skipper.report()).collect();
    assert!(reports.is_empty(), "the killed skipper's: {reports:?}");
    // This process writes past both: it takes the dead skipper's claim over and skips the gap.
    // A write that waited for the dead skipper would fail at the busy timeout (5 s).
    let holder = store.acquire("after", Duration::from_secs(60)).unwrap();
    holder
        .put(b"after/key", b"written past a dead skipper")
        .unwrap_or_else(|err| panic!("a write behind a dead skipper's claim: {err}"));
    assert_eq!(
        store.get(b"after/key").unwrap(),
        Some(fenced("written past a dead skipper", holder.token()))
    );
    holder.release().unwrap();
    // The contender resumes: its record was voided by the skip; it writes it anew and goes on.
    std::fs::remove_file(&contender_stops).unwrap();
    contender.signal(libc::SIGCONT);
    until_the_contender_wrote(&store);
    contender.signal(libc::SIGKILL);
    let failures: Vec<String> = std::iter::from_fn(|| contender.report()).collect();
    assert!(failures.is_empty(), "the resumed contender's: {failures:?}");
}

#[test]
fn a_process_stopped_while_it_skips_a_stopped_writer_is_passed_and_its_late_skip_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let store = impatient(&path);
    // A gap in the log that every later write waits for, and its skipper stopped in the skip,
    // alive, holding the skipper's word and its claim of the gap.
    let (mut contender, contender_stops, mut skipper, skipper_stops) =
        a_stopped_writer_and_its_skipper(&path);
    // This process writes past both: it passes the stopped skipper, takes its claim over and
    // skips the gap. A write that waited for the skipper to resume would fail at the busy
    // timeout (5 s).
    let holder = store.acquire("after", Duration::from_secs(60)).unwrap();
    holder
        .put(b"after/key", b"written past a stopped skipper")
        .unwrap_or_else(|err| panic!("a write behind a stopped skipper's claim: {err}"));
    let written = Some(fenced("written past a stopped skipper", holder.token()));
    assert_eq!(store.get(b"after/key").unwrap(), written);
    // Both resume. The skipper finishes its skip late (another skip covered the gap: its
    // steps change nothing) and goes on with its cycles, each put acknowledged and read
    // back; the contender writes its voided record anew.
    for stops in [&contender_stops, &skipper_stops] {
        std::fs::remove_file(stops).unwrap();
    }
    skipper.signal(libc::SIGCONT);
    contender.signal(libc::SIGCONT);
    until_the_contender_wrote(&store);
    let resumed: Vec<String> = (0..3).filter_map(|_| skipper.report()).collect();
    assert_eq!(resumed, ["done"; 3], "the resumed skipper's cycles");
    contender.signal(libc::SIGKILL);
    skipper.signal(libc::SIGKILL);
    let failures: Vec<String> = std::iter::from_fn(|| contender.report()).collect();
    assert!(failures.is_empty(), "the resumed contender's: {failures:?}");
    assert_eq!(store.get(b"after/key").unwrap(), written);
    holder.put(b"after/key", b"written again").unwrap();
}

#[test]
fn a_write_waiting_for_a_stopped_writers_claim_ends_when_its_cancel_fires_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    // A busy timeout far beyond the cancel below: a write that waited it out fails the test.
    let options = Options {
        busy_timeout: Duration::from_secs(60),
        ..logged()
    };
    let store = Store::open_with(&path, &options).unwrap();
    // Every other write of the key waits for the contender's claim's fate, which its stopped
    // skipper holds until a waiter passes it (after about 270 ms).
    let (contender, contender_stops, skipper, skipper_stops) =
        a_stopped_writer_and_its_skipper(&path);

    let holder = store
        .acquire("cancelled", Duration::from_secs(600))
        .unwrap();
    // A handle fired before the call: refused at once, as on the store file's path.
    let fired = Cancel::new();
    fired.cancel();
    let put = store.put_cancellable(b"elsewhere", b"never", holder.token(), &fired);
    assert!(matches!(put, Err(Error::Cancelled)), "{put:?}");
    // A handle fired while the write waits for the stopped writer's claim on the key.
    let cancel = Cancel::new();
    let fire = cancel.clone();
    let firer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        fire.cancel();
    });
    let put = store.put_cancellable(CONTENDED, b"never", holder.token(), &cancel);
    firer.join().unwrap();
    assert!(matches!(put, Err(Error::Cancelled)), "{put:?}");

    // Both resume; neither cancelled write happened.
    for stops in [&contender_stops, &skipper_stops] {
        std::fs::remove_file(stops).unwrap();
    }
    contender.signal(libc::SIGCONT);
    skipper.signal(libc::SIGCONT);
    until_the_contender_wrote(&store);
    contender.signal(libc::SIGKILL);
    skipper.signal(libc::SIGKILL);
    assert_ne!(
        store.get(CONTENDED).unwrap().map(|f| f.value),
        Some(b"never".to_vec())
    );
    assert_eq!(store.get(b"elsewhere").unwrap(), None);
    holder.put(b"after", b"written").unwrap();
}

// 7. A process stopped at random points of its writes delays no other process.

/// Cycles acquire, `holder.put` and release of its own lock and key until killed, and every
/// 20th cycle a listing of its keys, which runs a checkpoint first (redb's write lock held);
/// reports only the failures, as `error ...`.
fn cycle(path: &str) {
    let store = open(path);
    say("cycling");
    for seq in 0u64.. {
        let written = value(seq, 100);
        let cycled = store
            .acquire("cycler", Duration::from_secs(60))
            .and_then(|holder| {
                holder.put(b"cycler/key", written.as_bytes())?;
                holder.release()
            });
        let listed = match seq % 20 {
            19 => store.keys(b"cycler/").map(drop),
            _ => Ok(()),
        };
        if let Err(err) = cycled.and(listed) {
            say(format!("error {err}"));
        }
    }
}

/// Cycles acquire, `holder.put`, a get of it and release of its own lock and key, with a busy
/// timeout of 5 s, until killed; reports `done` after each cycle, or what failed.
fn steady(path: &str) {
    let store = impatient(Path::new(path));
    say("ready");
    for seq in 0u64.. {
        let written = value(seq, 100);
        let failed = |what: &'static str| move |err: Error| format!("{what}: {err}");
        let cycled = store
            .acquire("steady", Duration::from_secs(60))
            .map_err(failed("acquire"))
            .and_then(|holder| {
                holder
                    .put(b"steady/key", written.as_bytes())
                    .map_err(failed("put"))?;
                let got = store.get(b"steady/key").map_err(failed("get"))?;
                holder.release().map_err(failed("release"))?;
                if got == Some(fenced(&written, holder.token())) {
                    Ok(())
                } else {
                    Err(format!("the get after the put returned {got:?}"))
                }
            });
        say(match cycled {
            Ok(()) => "done".into(),
            Err(failure) => format!("error {failure}"),
        });
    }
}

#[test]
fn a_process_stopped_at_random_points_of_its_writes_delays_no_other_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    // Segments of the default size: the cycler's checkpoints are its listings', and the log
    // has room for far more than the other writes in the run. The cycler is stopped most of
    // the run, in its checkpoints too, and a stopped checkpointer lets the others write only
    // up to the log's bound (docs/design/writes.md, section 6): with segments of 64 or 256
    // KiB, the others reach it within the run, and then wait for the cycler.
    let mut cycler = Kid::spawn("cycle", &path);
    assert_eq!(cycler.report().as_deref(), Some("cycling"));
    let mut steady = Kid::spawn("steady", &path);
    assert_eq!(steady.report().as_deref(), Some("ready"));
    let steady_pid = libc::pid_t::try_from(steady.child.id()).unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let (done, failures) = (Arc::clone(&done), Arc::clone(&failures));
        std::thread::spawn(move || {
            while let Some(report) = steady.report() {
                if report == "done" {
                    done.fetch_add(1, Ordering::Relaxed);
                } else {
                    failures.lock().unwrap().push(report);
                }
            }
            steady.child.wait().unwrap()
        })
    };
    let failed = || failures.lock().unwrap().clone();
    let mut random = randoms();
    for stop in 0..50 {
        std::thread::sleep(Duration::from_micros(random(5_000)));
        cycler.stop();
        let before = done.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(random(300)));
        // Still stopped, the cycler must not hold up the other's cycles: one that waited for
        // it would fail at its busy timeout (5 s) and say so. The bound catches a hang only.
        let stuck = Instant::now() + Duration::from_secs(60);
        while done.load(Ordering::Relaxed) < before + 2 {
            assert!(failed().is_empty(), "stop {stop}: {:?}", failed());
            assert!(
                Instant::now() < stuck,
                "stop {stop}: the other process hangs"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        cycler.signal(libc::SIGCONT);
    }
    // SAFETY: kill(2) on our own child (not reaped yet: its reader waits for its end).
    assert_eq!(unsafe { libc::kill(steady_pid, libc::SIGKILL) }, 0);
    reader.join().unwrap();
    assert!(failed().is_empty(), "{:?}", failed());
    cycler.signal(libc::SIGKILL);
    let cycler_failures: Vec<String> = std::iter::from_fn(|| cycler.report()).collect();
    assert!(
        cycler_failures.is_empty(),
        "the stopped process's own cycles: {cycler_failures:?}"
    );
}

// 8. A server is refused beside the log.

/// Serves the store (`fencelock serve`) until killed.
fn serve(path: &str) {
    let options = ServeOptions {
        wait: Duration::from_secs(60),
        ..ServeOptions::default()
    };
    let server = Server::start(path, &options).unwrap();
    say("serving");
    server.run(&options).unwrap();
}

#[test]
fn a_server_is_refused_while_processes_write_through_the_log_and_serves_their_writes_after() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let mut writer = Kid::spawn("batch 0", &path);
    let mut written = Written::default();
    written.batch(&mut writer);
    // A server would commit writes to the store file beside a log that holds newer ones.
    let quick = ServeOptions {
        wait: Duration::from_millis(200),
        ..ServeOptions::default()
    };
    match Server::start(&path, &quick) {
        Err(err) => assert!(
            err.status() == Status::InvalidArgument && err.to_string().contains("redo log"),
            "{err}"
        ),
        Ok(_) => panic!("a server started while processes write through the log"),
    }
    // The refusal changed nothing: another process reads every write.
    let mut reader = Client::spawn(&path, &[]);
    for (key, expected) in &written.values {
        assert_eq!(
            &reader.get(key),
            expected,
            "{key} beside the refused server"
        );
    }
    reader.close();
    writeln!(writer.stdin, "close").unwrap();
    assert!(writer.child.wait().unwrap().success());
    // Once they closed it, the store is one file again: a server serves it, and every write.
    let mut server = Kid::spawn("serve", &path);
    assert_eq!(server.report().as_deref(), Some("serving"));
    let store = open(&path);
    let stuck = Instant::now() + Duration::from_secs(60);
    while store.server().is_none() {
        assert!(
            Instant::now() < stuck,
            "the store never went through the server"
        );
        let _ = store.lock_info("probe");
        std::thread::sleep(Duration::from_millis(1));
    }
    for (key, expected) in &written.values {
        assert_eq!(
            &store.get(key.as_bytes()).unwrap(),
            expected,
            "{key} served"
        );
    }
    let highest = written.values.values().flatten().map(|f| f.token).max();
    let holder = store.acquire("batch-0", Duration::from_secs(60)).unwrap();
    assert!(Some(holder.token()) > highest, "tokens went back");
    holder.put(b"b0/k0", b"served").unwrap();
    assert_eq!(
        store.get(b"b0/k0").unwrap(),
        Some(fenced("served", holder.token()))
    );
    for (resource, token) in &written.fences {
        assert!(matches!(
            store.fence(resource, token - 1),
            Err(Error::StaleToken { highest, .. }) if highest == *token
        ));
    }
    server.signal(libc::SIGKILL);
}

#[test]
fn a_store_opened_through_a_symbolic_link_shares_the_log_of_the_file_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let store = open(&path);
    let through_link = open(&link);
    // Writes through each name, read through the other: one log for the one file.
    let holder = through_link
        .acquire("job", Duration::from_secs(60))
        .unwrap();
    holder.put(b"k", b"through the link").unwrap();
    assert_eq!(store.get(b"k").unwrap().unwrap().value, b"through the link");
    holder.release().unwrap();
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    holder.put(b"k", b"through the file").unwrap();
    assert_eq!(
        through_link.get(b"k").unwrap().unwrap().value,
        b"through the file"
    );
    let token = holder.token();
    drop(holder);
    assert!(!segments(&path).is_empty());
    assert_eq!(
        segments(&link),
        Vec::<u64>::new(),
        "a log named after the link"
    );
    drop((store, through_link));
    // Closed and opened again through the link, the store has every write.
    let store = open(&link);
    let got = store.get(b"k").unwrap().unwrap();
    assert_eq!(
        (got.value.as_slice(), got.token),
        (&b"through the file"[..], token)
    );
}

#[test]
fn a_store_file_with_two_names_is_refused_the_log_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    drop(Store::open(&path).unwrap());
    std::fs::hard_link(&path, dir.path().join("second-name.db")).unwrap();
    let err = Store::open_with(&path, &logged()).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument, "{err}");
    assert!(err.to_string().contains("2 names (hard links)"), "{err}");
    assert_eq!(segments(&path), Vec::<u64>::new());
    // The refusal gave the store no log: opened without it, it works as before.
    let store = Store::open(&path).unwrap();
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    holder.put(b"k", b"v").unwrap();
}

#[test]
fn a_new_store_where_a_deleted_one_left_its_log_is_refused_naming_the_file_to_remove() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    {
        let store = open(&path);
        let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
        holder.put(b"k", b"of the deleted store").unwrap();
    }
    let kept = segments(&path);
    assert!(
        !kept.is_empty(),
        "a closed store keeps its log's newest segment"
    );
    let segment = format!("{}.wal.{:016x}", path.display(), kept[0]);
    let mode = |file: &str| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(file).unwrap().permissions().mode() & 0o777
    };
    let kept_mode = mode(&segment);
    std::fs::remove_file(&path).unwrap();
    // A new store at the name, which its owner lets others read.
    drop(Store::open(&path).unwrap());
    std::fs::set_permissions(
        &path,
        std::os::unix::fs::PermissionsExt::from_mode(kept_mode | 0o044),
    )
    .unwrap();
    let err = Store::open_with(&path, &logged()).unwrap_err();
    // The other store's segment is refused as it is: not given the new store's mode.
    assert_eq!(mode(&segment), kept_mode, "{err}");
    assert_eq!(err.status(), Status::NotAStore, "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&segment) && text.contains("remove the file"),
        "{text}"
    );
    // The refusal gave the new store no log: opened without one, it works.
    for mode in [Mode::MultiProcess, Mode::SingleProcess] {
        let store = Store::open_with(
            &path,
            &Options {
                mode,
                ..Options::default()
            },
        )
        .unwrap();
        assert_eq!(store.get(b"k").unwrap(), None, "{mode:?}");
    }
    for seq in kept {
        std::fs::remove_file(format!("{}.wal.{seq:016x}", path.display())).unwrap();
    }
    let store = open(&path);
    assert_eq!(store.get(b"k").unwrap(), None);
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    holder.put(b"k", b"of the new store").unwrap();
    assert_eq!(store.get(b"k").unwrap().unwrap().value, b"of the new store");
}

/// Whether `result` is the refusal of a name of the store beside which its log does not lie.
fn refused_elsewhere<T>(result: &fencelock::Result<T>) -> bool {
    matches!(result, Err(err) if err.status() == Status::InvalidArgument
        && err.to_string().contains("write its redo log beside another name of the file"))
}

#[test]
fn a_store_renamed_while_open_is_refused_by_its_new_name_until_every_process_closed_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let moved = dir.path().join("moved.db");
    let store = open(&path);
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    holder.put(b"k", b"before the rename").unwrap();
    std::fs::rename(&path, &moved).unwrap();
    // Its log lies beside the old name, where the open processes write it.
    let opened = Store::open_with(&moved, &logged());
    assert!(refused_elsewhere(&opened), "{:?}", opened.err());
    assert_eq!(
        store.get(b"k").unwrap().unwrap().value,
        b"before the rename"
    );
    drop(holder);
    drop(store);
    // Closed, the store is its file, whatever its name.
    let store = open(&moved);
    assert_eq!(
        store.get(b"k").unwrap().unwrap().value,
        b"before the rename"
    );
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    holder.put(b"k", b"after").unwrap();
    drop((holder, store));
    assert_eq!(open(&moved).get(b"k").unwrap().unwrap().value, b"after");
}

#[test]
fn a_store_file_bind_mounted_under_another_name_is_refused_the_log_there() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let other = tempfile::tempdir().unwrap();
    let at = other.path().join("locks.db");
    let store = open(&path);
    std::fs::write(&at, b"").unwrap();
    let Some(_bound) = common::Mounted::bind(&path, &at) else {
        return;
    };
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    holder.put(b"k", b"v").unwrap();
    // The log would lie beside the mount point, where a process that reaches the file by its
    // own name never looks: refused, whether the store is in use or not.
    let mounted = |result: &fencelock::Result<Store>| {
        matches!(result, Err(err) if err.status() == Status::InvalidArgument
            && err.to_string().contains("the store file is mounted over this name"))
    };
    let opened = Store::open_with(&at, &logged());
    assert!(mounted(&opened), "{:?}", opened.err());
    assert_eq!(store.get(b"k").unwrap().unwrap().value, b"v");
    drop((holder, store));
    let opened = Store::open_with(&at, &logged());
    assert!(mounted(&opened), "{:?}", opened.err());
    assert_eq!(segments(&at), Vec::<u64>::new());
    // Nor without the option: the store has a log, which a crash could leave holding writes.
    let opened = Store::open(&at);
    assert!(mounted(&opened), "{:?}", opened.err());
    // By its own name, it has every write.
    assert_eq!(open(&path).get(b"k").unwrap().unwrap().value, b"v");
}

/// A process of a store whose directory is renamed while it has it open: `put PREFIX N` writes
/// N values under keys `PREFIX-0` to `PREFIX-{N-1}`; `get KEY` says what it reads.
fn mover(path: &str) {
    let store = open(path);
    let holder = must(
        "acquire",
        store.acquire(
            &format!("mover-{}", std::process::id()),
            Duration::from_secs(600),
        ),
    );
    while let Some(line) = read_stdin_line() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["put", prefix, count] => {
                for i in 0..count.parse::<u64>().unwrap() {
                    let key = format!("{prefix}-{i}");
                    must("put", holder.put(key.as_bytes(), value(i, 100).as_bytes()));
                }
                say("ok");
            }
            ["get", key] => say(match store.get(key.as_bytes()) {
                Ok(Some(got)) => format!("value {}", String::from_utf8_lossy(&got.value)),
                Ok(None) => "none".into(),
                Err(err) => refusal(&err),
            }),
            other => panic!("unknown command {other:?}"),
        }
    }
}

/// A process that opened the store before its directory was renamed looks for the log's
/// segments by the old name; one made since is not there. Its get of a write in it is refused
/// (`Replaced`), or answered, never answered with the older value the store file holds.
#[test]
fn a_process_whose_store_directory_was_renamed_never_reads_an_older_value() {
    let top = tempfile::tempdir().unwrap();
    let (before, after) = (top.path().join("d1"), top.path().join("d2"));
    std::fs::create_dir(&before).unwrap();
    let env = small_segments();
    let mut a = Kid::spawn_with("mover", &before.join("locks.db"), &env);
    assert_eq!(common::ask(&mut a, "put a 1"), "ok");
    std::fs::rename(&before, &after).unwrap();
    let mut b = Kid::spawn_with("mover", &after.join("locks.db"), &env);
    // Across several segments of 64 KiB.
    assert_eq!(common::ask(&mut b, "put b 2000"), "ok");
    let written = value(1999, 100);
    assert_eq!(
        common::ask(&mut b, "get b-1999"),
        format!("value {written}")
    );
    let seen = common::ask(&mut a, "get b-1999");
    assert!(
        seen == format!("value {written}") || seen.contains("though no checkpoint passed it"),
        "{seen}"
    );
    drop((a, b));
}
