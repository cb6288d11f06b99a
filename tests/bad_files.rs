//! Files that are not stores, or damaged ones, through the Rust API: refused without a panic
//! and, when they are not redb files at all, without a change; a full disk loses nothing
//! acknowledged. (Bad arguments, on every backend, are `tests/rules/bad_input.rs`; the C side is
//! in tests/c.)

mod common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use redb::ReadableDatabase;

use fencelock::{Error, Store};

const TTL: Duration = Duration::from_secs(600);

/// Opens `path` and returns the error, failing the test on a panic or a successful open.
fn open_error(path: &Path) -> Error {
    let opened = std::panic::catch_unwind(|| Store::open(path))
        .unwrap_or_else(|_| panic!("opening {} panicked", path.display()));
    match opened {
        Ok(_) => panic!("{} opened as a store", path.display()),
        Err(err) => err,
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
        *byte = x.to_le_bytes()[0];
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
                .put(
                    format!("key-{i}").as_bytes(),
                    &vec![u8::try_from(i).unwrap(); 300],
                )
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

/// The child of the full-disk test: writes under `RLIMIT_FSIZE` until the file cannot grow.
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
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &raw const rlimit) };
    assert_eq!(rc, 0);
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
    if let Error::Io(_) = failure {
        // The system's number, through the commit that handed the failure to the put.
        assert_eq!(failure.raw_os_error(), Some(libc::EFBIG), "{failure:?}");
    }
    rlimit.rlim_cur = libc::RLIM_INFINITY;
    // SAFETY: as above; raising the soft limit up to the (infinite) hard limit is allowed.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &raw const rlimit) };
    assert_eq!(rc, 0);
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
