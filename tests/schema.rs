//! Stores written by schema 1 (before lease records carried a liveness id) and schema 2 (before
//! semaphores and shared locks) open, are upgraded, and keep their live leases.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::time::Duration;

use fencelock::{Error, Kind, Store};
use redb::{Database, ReadableDatabase, TableDefinition};

const META: TableDefinition<&str, u64> = TableDefinition::new("fencelock.meta");
const LEASES: TableDefinition<&str, &[u8]> = TableDefinition::new("fencelock.leases");
const VALUES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("fencelock.values");
const FENCES: TableDefinition<&str, u64> = TableDefinition::new("fencelock.fences");

fn boot_id() -> [u8; 16] {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let hex: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
    let mut id = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        id[i] = u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap();
    }
    id
}

/// A lease record of format 1: the holder's liveness lock is its token's byte.
fn format_1_lease(token: u64, expires_ns: u64) -> Vec<u8> {
    let mut out = vec![1u8];
    out.extend_from_slice(&token.to_le_bytes());
    out.extend_from_slice(&std::process::id().to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&boot_id());
    out.extend_from_slice(&fencelock::boottime_ns().to_le_bytes());
    out.extend_from_slice(&expires_ns.to_le_bytes());
    out
}

/// Holds the liveness byte of schema-1 token `token` through an open file of its own, as a
/// holder running the schema-1 library did.
fn hold_token_byte(path: &std::path::Path, token: u64) -> File {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    // SAFETY: an all-zero flock is a valid value of the plain C struct.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::c_short::try_from(libc::F_WRLCK).unwrap();
    lock.l_whence = libc::c_short::try_from(libc::SEEK_SET).unwrap();
    lock.l_start = libc::off_t::try_from((1u64 << 61) + token).unwrap();
    lock.l_len = 1;
    // SAFETY: the descriptor is open; `lock` is a valid flock.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &raw mut lock) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    file
}

#[test]
fn a_schema_1_store_is_upgraded_at_open_and_keeps_its_live_lease() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    {
        let db = Database::builder()
            .set_concurrency_mode(redb::ConcurrencyMode::MultiWriter)
            .create(&path)
            .unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn.open_table(META).unwrap();
            meta.insert("schema_version", 1).unwrap();
            meta.insert("last_token", 5).unwrap();
            let expires = fencelock::boottime_ns() + 600_000_000_000;
            txn.open_table(LEASES)
                .unwrap()
                .insert("payment-export", format_1_lease(5, expires).as_slice())
                .unwrap();
            txn.open_table(VALUES).unwrap();
            txn.open_table(FENCES).unwrap();
        }
        txn.commit().unwrap();
    }
    let old_holder = hold_token_byte(&path, 5);

    let store = Store::open(&path).unwrap();
    assert_eq!(
        store.info().unwrap().schema_version,
        fencelock::SCHEMA_VERSION
    );
    assert_eq!(fencelock::SCHEMA_VERSION, 5);
    match store.acquire("payment-export", Duration::from_secs(5)) {
        Err(Error::Locked { token: 5, .. }) => {}
        other => panic!("the schema-1 holder's lease must still exclude: {other:?}"),
    }
    drop(old_holder);
    let holder = store
        .acquire("payment-export", Duration::from_secs(5))
        .unwrap();
    assert_eq!(holder.token(), 6);
    holder.put(b"k", b"v").unwrap();
    drop(holder);
    drop(store);
    // Reopened, it is of the current schema and goes on from there.
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store.info().unwrap().schema_version,
        fencelock::SCHEMA_VERSION
    );
    // Above every token before (the store's shared memory was set up anew: tokens go on from
    // the file's reservation).
    assert!(
        store
            .acquire("payment-export", Duration::from_secs(5))
            .unwrap()
            .token()
            > 6
    );
}

/// A lease record of format 2 (schemas 2 and 3): format 1's fields and the liveness id.
fn format_2_lease(token: u64, expires_ns: u64, live: u64) -> Vec<u8> {
    let mut out = format_1_lease(token, expires_ns);
    out[0] = 2;
    out.extend_from_slice(&live.to_le_bytes());
    out
}

#[test]
fn a_schema_2_store_is_upgraded_at_open_and_its_exclusive_lease_still_excludes_every_kind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    // The liveness byte of id 7, held as a schema-2 holder of another open file held it.
    let live = 7;
    {
        let db = Database::builder()
            .set_concurrency_mode(redb::ConcurrencyMode::MultiWriter)
            .create(&path)
            .unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn.open_table(META).unwrap();
            meta.insert("schema_version", 2).unwrap();
            meta.insert("last_token", 9).unwrap();
            let expires = fencelock::boottime_ns() + 600_000_000_000;
            txn.open_table(LEASES)
                .unwrap()
                .insert(
                    "payment-export",
                    format_2_lease(9, expires, live).as_slice(),
                )
                .unwrap();
            txn.open_table(VALUES).unwrap();
            txn.open_table(FENCES).unwrap();
        }
        txn.commit().unwrap();
    }
    let old_holder = hold_token_byte(&path, live);

    let store = Store::open(&path).unwrap();
    assert_eq!(
        store.info().unwrap().schema_version,
        fencelock::SCHEMA_VERSION
    );
    let ttl = Duration::from_secs(5);
    for kind in [Kind::Shared, Kind::Semaphore(3)] {
        match store.acquire_kind("payment-export", kind, ttl) {
            Err(Error::Locked { token: 9, .. }) => {}
            other => panic!("the schema-2 holder's lease must exclude {kind:?}: {other:?}"),
        }
    }
    drop(old_holder);
    let a = store
        .acquire_kind("payment-export", Kind::Semaphore(3), ttl)
        .unwrap();
    let b = store
        .acquire_kind("payment-export", Kind::Semaphore(3), ttl)
        .unwrap();
    assert_eq!((a.token(), b.token()), (10, 11));
    drop((a, b));
    drop(store);
    // A library that knows only schema 2 (or 3, or 4) would now refuse the file: its version is 5.
    let db = Database::builder()
        .set_concurrency_mode(redb::ConcurrencyMode::MultiWriter)
        .open(&path)
        .unwrap();
    let txn = db.begin_read().unwrap();
    let version = txn
        .open_table(META)
        .unwrap()
        .get("schema_version")
        .unwrap()
        .unwrap()
        .value();
    assert_eq!(version, fencelock::SCHEMA_VERSION);
}
