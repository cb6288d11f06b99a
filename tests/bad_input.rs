//! Bad input through the Rust API: every case gets its typed error and leaves the store as it
//! was; files that are not stores are refused without a panic and, when they are not redb
//! files at all, without a change.
//!
//! The C side of the matrix is in tests/c.

mod common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use redb::ReadableDatabase;

use fencelock::{Error, Fenced, Holder, LockState, Options, Store, MAX_NAME_LEN, MAX_TTL};

const TTL: Duration = Duration::from_secs(600);
const VALUE_LIMIT: usize = 16;
const KEYS: [&[u8]; 2] = [b"k1", b"k2"];

/// Everything a user can observe of a store, less what moves with the clock.
#[derive(Debug, PartialEq)]
struct Snapshot {
    last_token: u64,
    lock_records: u64,
    key_count: u64,
    fence_count: u64,
    locks: Vec<(String, u64, u32, LockState)>,
    keys: Vec<Vec<u8>>,
    values: Vec<Option<Fenced>>,
    fences: Vec<Option<u64>>,
}

fn snapshot(store: &Store) -> Snapshot {
    let info = store.info().unwrap();
    Snapshot {
        last_token: info.last_token,
        lock_records: info.lock_records,
        key_count: info.keys,
        fence_count: info.fences,
        locks: store
            .locks()
            .unwrap()
            .into_iter()
            .map(|l| (l.name, l.token, l.pid, l.state))
            .collect(),
        keys: store.keys(b"").unwrap(),
        values: KEYS.iter().map(|k| store.get(k).unwrap()).collect(),
        fences: vec![store.fence_token("res").unwrap()],
    }
}

/// A store with a held lock, a released one, two values and a fence.
fn populated(dir: &Path) -> (Store, Holder) {
    let options = Options {
        max_value_len: VALUE_LIMIT,
        ..Options::default()
    };
    let store = Store::open_with(dir.join("bad.db"), &options).unwrap();
    let old = store.acquire("old", TTL).unwrap();
    store.put(b"k1", b"one", old.token()).unwrap();
    old.release().unwrap();
    let held = store.acquire("held", TTL).unwrap();
    held.put(b"k2", b"two").unwrap();
    store.fence("res", held.token()).unwrap();
    (store, held)
}

type Case = (
    &'static str,
    fn(&Store, &Holder) -> fencelock::Result<()>,
    fn(&Error) -> bool,
);

fn long_name() -> String {
    "n".repeat(MAX_NAME_LEN + 1)
}

fn long_key() -> Vec<u8> {
    vec![b'k'; MAX_NAME_LEN + 1]
}

fn big_value() -> Vec<u8> {
    vec![0; VALUE_LIMIT + 1]
}

fn invalid(err: &Error) -> bool {
    matches!(err, Error::InvalidArgument(_))
}

const CASES: &[Case] = &[
    (
        "acquire: empty name",
        |s, _| s.acquire("", TTL).map(drop),
        invalid,
    ),
    (
        "acquire: over-long name",
        |s, _| s.acquire(&long_name(), TTL).map(drop),
        invalid,
    ),
    (
        "acquire: name with NUL",
        |s, _| s.acquire("a\0b", TTL).map(drop),
        invalid,
    ),
    (
        "acquire: zero TTL",
        |s, _| s.acquire("new", Duration::ZERO).map(drop),
        invalid,
    ),
    (
        "acquire: TTL above MAX_TTL",
        |s, _| {
            s.acquire("new", MAX_TTL + Duration::from_millis(1))
                .map(drop)
        },
        invalid,
    ),
    (
        "acquire: Duration::MAX TTL",
        |s, _| s.acquire("new", Duration::MAX).map(drop),
        invalid,
    ),
    (
        "acquire_wait: empty name",
        |s, _| s.acquire_wait("", TTL, Duration::ZERO).map(drop),
        invalid,
    ),
    (
        "acquire_wait: zero TTL",
        |s, _| {
            s.acquire_wait("new", Duration::ZERO, Duration::ZERO)
                .map(drop)
        },
        invalid,
    ),
    (
        "acquire_wait: held lock, zero timeout",
        |s, _| s.acquire_wait("held", TTL, Duration::ZERO).map(drop),
        |e| matches!(e, Error::Timeout),
    ),
    (
        "acquire: held lock",
        |s, h| match s.acquire("held", TTL) {
            Err(Error::Locked { token, pid, .. })
                if token == h.token() && pid == std::process::id() =>
            {
                Err(Error::Timeout)
            }
            other => other.map(drop),
        },
        |e| matches!(e, Error::Timeout),
    ),
    (
        "acquire_and_put: empty key",
        |s, _| s.acquire_and_put("new", TTL, b"", b"v").map(drop),
        invalid,
    ),
    (
        "acquire_and_put: over-long key",
        |s, _| s.acquire_and_put("new", TTL, &long_key(), b"v").map(drop),
        invalid,
    ),
    (
        "acquire_and_put: value over the limit",
        |s, _| s.acquire_and_put("new", TTL, b"k3", &big_value()).map(drop),
        invalid,
    ),
    (
        "acquire_and_put: held lock",
        |s, _| s.acquire_and_put("held", TTL, b"k1", b"v").map(drop),
        |e| matches!(e, Error::Locked { .. }),
    ),
    (
        "put: empty key",
        |s, h| s.put(b"", b"v", h.token()),
        invalid,
    ),
    (
        "put: over-long key",
        |s, h| s.put(&long_key(), b"v", h.token()),
        invalid,
    ),
    (
        "put: value over the limit",
        |s, h| s.put(b"k1", &big_value(), h.token()),
        invalid,
    ),
    ("put: token 0", |s, _| s.put(b"k1", b"v", 0), invalid),
    (
        "put: token u64::MAX (never granted)",
        |s, _| s.put(b"k1", b"v", u64::MAX),
        invalid,
    ),
    (
        "put: next token (not granted yet)",
        |s, h| s.put(b"k1", b"v", h.token() + 1),
        invalid,
    ),
    (
        "put: stale token",
        |s, h| s.put(b"k2", b"v", h.token() - 1),
        |e| matches!(e, Error::StaleToken { token, highest } if *highest == token + 1),
    ),
    (
        "delete: empty key",
        |s, h| s.delete(b"", h.token()).map(drop),
        invalid,
    ),
    (
        "delete: token 0",
        |s, _| s.delete(b"k1", 0).map(drop),
        invalid,
    ),
    (
        "delete: token u64::MAX",
        |s, _| s.delete(b"k1", u64::MAX).map(drop),
        invalid,
    ),
    (
        "delete: stale token",
        |s, h| s.delete(b"k2", h.token() - 1).map(drop),
        |e| matches!(e, Error::StaleToken { .. }),
    ),
    ("get: empty key", |s, _| s.get(b"").map(drop), invalid),
    (
        "get: over-long key",
        |s, _| s.get(&long_key()).map(drop),
        invalid,
    ),
    (
        "keys: over-long prefix",
        |s, _| s.keys(&long_key()).map(drop),
        invalid,
    ),
    (
        "fence: empty resource",
        |s, h| s.fence("", h.token()),
        invalid,
    ),
    (
        "fence: resource with NUL",
        |s, h| s.fence("r\0", h.token()),
        invalid,
    ),
    (
        "fence: over-long resource",
        |s, h| s.fence(&long_name(), h.token()),
        invalid,
    ),
    ("fence: token 0", |s, _| s.fence("res", 0), invalid),
    (
        "fence: token u64::MAX",
        |s, _| s.fence("res", u64::MAX),
        invalid,
    ),
    (
        "fence: new resource, token u64::MAX",
        |s, _| s.fence("other", u64::MAX),
        invalid,
    ),
    (
        "fence: stale token",
        |s, h| s.fence("res", h.token() - 1),
        |e| matches!(e, Error::StaleToken { .. }),
    ),
    (
        "fence_token: empty resource",
        |s, _| s.fence_token("").map(drop),
        invalid,
    ),
    ("lock: empty name", |s, _| s.lock("").map(drop), invalid),
    (
        "lock: over-long name",
        |s, _| s.lock(&long_name()).map(drop),
        invalid,
    ),
    ("extend: zero TTL", |_, h| h.extend(Duration::ZERO), invalid),
    ("extend: huge TTL", |_, h| h.extend(Duration::MAX), invalid),
    ("holder put: empty key", |_, h| h.put(b"", b"v"), invalid),
    (
        "holder put: over-long key",
        |_, h| h.put(&long_key(), b"v"),
        invalid,
    ),
    (
        "holder put: value over the limit",
        |_, h| h.put(b"k2", &big_value()),
        invalid,
    ),
    (
        "holder delete: empty key",
        |_, h| h.delete(b"").map(drop),
        invalid,
    ),
    (
        "keep_alive: TTL too short",
        |_, h| h.keep_alive(Duration::from_millis(2)),
        invalid,
    ),
    (
        "keep_alive: huge TTL",
        |_, h| h.keep_alive(Duration::MAX),
        invalid,
    ),
];

#[test]
fn bad_arguments_get_their_error_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (store, held) = populated(dir.path());
    let before = snapshot(&store);
    let mut failures = Vec::new();
    for (name, case, expected) in CASES {
        match case(&store, &held) {
            Err(err) if expected(&err) => {}
            other => failures.push(format!("{name}: unexpected {other:?}")),
        }
        let after = snapshot(&store);
        if after != before {
            failures.push(format!(
                "{name}: the store changed: {before:?} -> {after:?}"
            ));
        }
    }
    assert!(held.is_held().unwrap(), "the holder survived every case");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn options_out_of_range_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let options = Options {
        max_value_len: fencelock::MAX_VALUE_LEN_LIMIT + 1,
        ..Options::default()
    };
    assert!(matches!(
        Store::open_with(&path, &options),
        Err(Error::InvalidArgument(_))
    ));
    assert!(!path.exists(), "a refused open creates no file");
}

/// Opens `path` and returns the error, failing the test on a panic or a successful open.
fn open_error(path: &Path) -> Error {
    match std::panic::catch_unwind(|| Store::open(path)) {
        Ok(Ok(_)) => panic!("{} opened as a store", path.display()),
        Ok(Err(err)) => err,
        Err(_) => panic!("opening {} panicked", path.display()),
    }
}

/// Fails with the first differing offsets (not the whole file) when `path` no longer holds
/// `bytes`.
fn assert_unchanged(path: &Path, bytes: &[u8]) {
    let now = std::fs::read(path).unwrap();
    let differ: Vec<usize> = (0..now.len().max(bytes.len()))
        .filter(|&i| now.get(i) != bytes.get(i))
        .take(16)
        .collect();
    assert!(
        differ.is_empty(),
        "{} was modified: {} bytes before, {} after; first differing offsets {differ:?}",
        path.display(),
        bytes.len(),
        now.len()
    );
}

fn write_file(path: &Path, bytes: &[u8]) {
    std::fs::File::create(path)
        .and_then(|mut f| f.write_all(bytes))
        .unwrap();
}

#[test]
fn files_that_are_not_stores_are_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let mut noise = vec![0u8; 64 << 10];
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for byte in &mut noise {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *byte = x as u8;
    }
    let text = b"# not a database\nhello = world\n".repeat(100);
    for (name, bytes) in [
        ("random.bin", &noise[..]),
        ("text.txt", &text[..]),
        ("one-byte", &b"r"[..]),
        ("redb-magic-prefix", &b"redb\x1a"[..]),
    ] {
        let path = dir.path().join(name);
        write_file(&path, bytes);
        let err = open_error(&path);
        assert!(matches!(err, Error::NotAStore(_)), "{name}: {err:?}");
        assert_unchanged(&path, bytes);
    }
}

/// What redb leaves when a creation is cut short after its first write (the file sized, all
/// zeros) and after its second (the header without the magic number), built from the header
/// of a real new redb file.
fn creation_remnants(dir: &Path) -> Vec<(&'static str, Vec<u8>)> {
    let fresh = dir.join("fresh.redb");
    drop(redb::Database::create(&fresh).unwrap());
    let bytes = std::fs::read(&fresh).unwrap();
    std::fs::remove_file(&fresh).unwrap();
    assert_eq!(&bytes[..4], b"redb");
    let sized = vec![0u8; bytes.len()];
    let mut unsealed = sized.clone();
    unsealed[9..320].copy_from_slice(&bytes[9..320]);
    vec![("sized", sized), ("header-without-magic", unsealed)]
}

#[test]
fn a_store_whose_creation_was_cut_short_is_created_again() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in creation_remnants(dir.path()) {
        let path = dir.path().join(name);
        write_file(&path, &bytes);
        let store = Store::open(&path).unwrap_or_else(|err| panic!("{name}: {err}"));
        let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
        assert_eq!(holder.token(), 1, "{name}");
        holder.put(b"k", b"v").unwrap();
        store.verify().unwrap();
        drop((holder, store));
        assert_eq!(
            Store::open(&path)
                .unwrap()
                .get(b"k")
                .unwrap()
                .unwrap()
                .value,
            b"v"
        );
    }
}

#[test]
fn a_remnant_lookalike_with_data_or_an_owner_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let (_, sized) = creation_remnants(dir.path()).remove(0);
    // A byte of data past the header: not a remnant of redb's creation.
    let path = dir.path().join("data");
    let mut data = sized.clone();
    data[5000] = 1;
    write_file(&path, &data);
    assert!(matches!(open_error(&path), Error::NotAStore(_)));
    assert_unchanged(&path, &data);
    // A remnant that some process holds a header lock on is a creation still at work.
    let path = dir.path().join("owned");
    write_file(&path, &sized);
    let owner = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    common::lock_bytes(&owner, 0, 320);
    assert!(matches!(open_error(&path), Error::NotAStore(_)));
    assert_unchanged(&path, &sized);
    drop(owner);
    Store::open(&path).unwrap();
}

#[test]
fn another_programs_redb_database_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.redb");
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let table: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("users");
            let mut users = txn.open_table(table).unwrap();
            users.insert("alice", 1).unwrap();
        }
        txn.commit().unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    let err = open_error(&path);
    assert!(matches!(err, Error::NotAStore(_)), "{err:?}");
    assert_unchanged(&path, &bytes);
    // The other program can still open its database as before, with its data.
    let reopened = redb::Database::open(&path).map(|db| {
        let txn = db.begin_read().unwrap();
        let table: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("users");
        let users = txn.open_table(table).unwrap();
        users.get("alice").unwrap().map(|v| v.value())
    });
    assert!(
        matches!(reopened, Ok(Some(1))),
        "the other program cannot use its database any more: {reopened:?}"
    );
}

#[test]
fn a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = open_error(dir.path());
    assert!(
        matches!(err, Error::InvalidArgument(_) | Error::Io(_)),
        "{err:?}"
    );
}

/// A store with data, closed, and its bytes.
fn closed_store(dir: &Path) -> (PathBuf, Vec<u8>) {
    let path = dir.join("victim.db");
    {
        let store = Store::open(&path).unwrap();
        let holder = store.acquire("lock", TTL).unwrap();
        for i in 0..50u32 {
            holder
                .put(format!("key-{i}").as_bytes(), &vec![i as u8; 300])
                .unwrap();
        }
    }
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

/// Opening a damaged store gives an error or a store whose reads give errors or data; never a
/// panic, and never a value with a token above the counter when `verify` passes.
fn open_damaged(path: &Path, what: &str) -> Option<String> {
    let outcome = std::panic::catch_unwind(|| match Store::open(path) {
        Err(err) => {
            assert!(
                matches!(
                    err,
                    Error::NotAStore(_) | Error::Corrupt(_) | Error::Storage(_) | Error::Io(_)
                ),
                "{what}: unexpected error kind {err:?}"
            );
            format!("open refused: {err}")
        }
        Ok(store) => {
            let verify = store.verify();
            let keys = store.keys(b"");
            let get = store.get(b"key-1");
            format!(
                "opened; verify {verify:?}, keys ok {}, get ok {}",
                keys.is_ok(),
                get.is_ok()
            )
        }
    });
    outcome.ok()
}

#[test]
fn truncated_stores_give_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes) = closed_store(dir.path());
    for keep in [0, 9, 100, 512, 4096, bytes.len() / 2, bytes.len() - 1] {
        write_file(&path, &bytes[..keep]);
        let what = format!("truncated to {keep} of {} bytes", bytes.len());
        let seen = open_damaged(&path, &what).unwrap_or_else(|| panic!("{what}: panicked"));
        println!("{what}: {seen}");
        if keep > 0 && keep < 9 {
            assert!(seen.contains("not a fencelock store"), "{what}: {seen}");
        }
    }
}

#[test]
fn flipped_bytes_give_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes) = closed_store(dir.path());
    // Flip bytes across the file, a few at a time: the header, the commit slots, the pages.
    let mut panicked = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let mut damaged = bytes.clone();
        for byte in &mut damaged[at..(at + 8).min(bytes.len())] {
            *byte ^= 0xA5;
        }
        write_file(&path, &damaged);
        let what = format!("bytes {at}..{} flipped", at + 8);
        let Some(seen) = open_damaged(&path, &what) else {
            panicked.push(at);
            at += if at < 4096 { 61 } else { 1021 };
            continue;
        };
        if at < 9 {
            assert!(seen.contains("not a fencelock store"), "{what}: {seen}");
            assert_unchanged(&path, &damaged);
        }
        at += if at < 4096 { 61 } else { 1021 };
    }
    assert!(
        panicked.is_empty(),
        "panicked with bytes flipped at offsets {panicked:?}"
    );
}

#[test]
fn a_read_only_store_is_refused_or_skipped_as_root() {
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes) = closed_store(dir.path());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        println!("note: running as root, where mode 0444 does not stop writes; skipped");
        return;
    }
    let err = open_error(&path);
    assert!(matches!(err, Error::Io(_)), "{err:?}");
    assert_unchanged(&path, &bytes);
}

const CHILD_ENV: &str = "FENCELOCK_BAD_INPUT_CHILD";

/// Runs one test of this binary in a child process, for process-wide state such as rlimits.
fn run_child(test: &str, arg: &Path) {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, arg)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("CHILD DONE"),
        "child {test} failed: {}\n{stdout}\n{stderr}",
        output.status
    );
    print!("{stdout}");
}

#[test]
fn a_full_disk_during_a_put_keeps_earlier_data_and_the_next_put_works() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("full.db");
    run_child("full_disk_child", &path);
    // After the child: a fresh open sees every acknowledged write and takes new ones.
    let store = Store::open(&path).unwrap();
    store.verify().unwrap();
    let last = store.get(b"last-acknowledged").unwrap().expect("recorded");
    let count = u32::from_le_bytes(last.value[..4].try_into().unwrap());
    for i in 0..count {
        let found = store.get(format!("key-{i}").as_bytes()).unwrap();
        assert_eq!(found.map(|f| f.value.len()), Some(4000), "key-{i}");
    }
    store.put(b"after", b"space is back", last.token).unwrap();
}

/// The child of the full-disk test: writes under RLIMIT_FSIZE until the file cannot grow.
#[test]
fn full_disk_child() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return; // only meaningful as the child
    };
    // SAFETY: ignoring SIGXFSZ turns an over-limit write into EFBIG instead of a kill.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let store = Store::open(&path).unwrap();
    let holder = store.acquire("writer", TTL).unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    let limit = size + (256 << 10);
    let mut rlimit = libc::rlimit {
        rlim_cur: limit,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: a valid rlimit struct for this process.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &rlimit) }, 0);
    let mut acknowledged = 0u32;
    let failure = loop {
        let key = format!("key-{acknowledged}");
        match holder.put(key.as_bytes(), &[7u8; 4000]) {
            Ok(()) => acknowledged += 1,
            Err(err) => break err,
        }
        assert!(acknowledged < 10_000, "the file limit never bit");
    };
    println!("full disk after {acknowledged} puts: {failure:?}");
    assert!(
        matches!(failure, Error::Io(_) | Error::Storage(_)),
        "a full disk is an I/O or storage error: {failure:?}"
    );
    rlimit.rlim_cur = libc::RLIM_INFINITY;
    // SAFETY: as above; raising the soft limit up to the (infinite) hard limit is allowed.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &rlimit) }, 0);
    // Space is back. The store that saw the failure reopens its database and goes on; the
    // holder kept its lease throughout.
    assert!(store.get(b"key-0").unwrap().is_some());
    holder.put(b"after-full", b"x").unwrap();
    assert!(holder.is_held().unwrap());
    drop(holder);
    drop(store);
    let store = Store::open(&path).unwrap();
    store.verify().unwrap();
    for i in 0..acknowledged {
        let found = store.get(format!("key-{i}").as_bytes()).unwrap();
        assert_eq!(found.map(|f| f.value.len()), Some(4000), "key-{i}");
    }
    let holder = store.acquire("writer", TTL).unwrap();
    holder
        .put(b"last-acknowledged", &acknowledged.to_le_bytes())
        .unwrap();
    println!("CHILD DONE");
}
