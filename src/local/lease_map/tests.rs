//! The lease map's user through whole engines of one store file: many names of one bucket,
//! ends that cannot be flushed, grants stopped after taking their tokens, a refused acquire
//! with a write.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::hooks::pause_after_token;
use crate::api::store::Store;
use crate::local::LocalEngine;
use crate::ring::lock_hash;
use crate::ring::map::bucket_of;

fn open(path: &Path) -> Store {
    open_engine(path).0
}

fn open_engine(path: &Path) -> (Store, Arc<LocalEngine>) {
    let inner = LocalEngine::open(path, &crate::Options::default()).unwrap();
    assert!(
        inner.lease_map.member().is_some(),
        "the lease map is usable in tests"
    );
    let store = Store::new(Arc::clone(&inner) as Arc<dyn crate::engine::Engine>);
    (store, inner)
}

/// `count` names of 1,000 bytes in one bucket of the map, as anyone finds them in a second
/// (FNV-1a over a fixed prefix, then a varying tail).
fn names_of_one_bucket(count: usize) -> Vec<String> {
    let prefix = "p".repeat(990);
    let start = lock_hash(&prefix);
    let fold = |hash: u64, tail: &str| {
        tail.bytes().fold(hash, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
    };
    let target = bucket_of(lock_hash(&format!("{prefix}{:010}", 0)));
    let names: Vec<String> = (0u64..)
        .map(|i| format!("{i:010}"))
        .filter(|tail| bucket_of(fold(start, tail)) == target)
        .take(count)
        .map(|tail| format!("{prefix}{tail}"))
        .collect();
    assert!(names.iter().all(|n| bucket_of(lock_hash(n)) == target));
    names
}

#[test]
fn many_long_names_of_one_bucket_are_all_granted() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("store"));
    // Past the 192 KiB a bucket once held (183 such names), far below the map's capacity.
    let names = names_of_one_bucket(300);
    let held: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            store
                .acquire(name, Duration::from_secs(60))
                .unwrap_or_else(|err| panic!("{i} names granted, then: {err}"))
        })
        .collect();
    assert_eq!(held.len(), 300);
    assert_eq!(store.locks().unwrap().len(), 300);
}

#[test]
fn ends_that_cannot_be_flushed_give_way_to_grants_and_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let (store, engine) = open_engine(&path);
    // Another process holds the map's flush and never ends it, as one stopped inside the
    // flush's commit does: the ends of one-off names pile up in the map.
    let (_stopped, flusher) = open_engine(&path);
    let header = engine.lease_map.member().unwrap().ring().map_header();
    let stopped_id = flusher.lease_map.member().unwrap().id();
    header
        .flushing
        .store(stopped_id, std::sync::atomic::Ordering::Release);
    // Names of 200 bytes: without the bound their ends fill the map's 16,384 blocks after
    // about 13,000 of them.
    for i in 0..20_000 {
        let name = format!("{i:0>200}");
        let holder = store
            .acquire(&name, Duration::from_secs(60))
            .unwrap_or_else(|err| panic!("grant {i} refused: {err}"));
        holder.release().unwrap();
    }
    assert_eq!(
        header.flushing.load(std::sync::atomic::Ordering::Acquire),
        stopped_id,
        "no flush ran"
    );
    let metrics = store.metrics().unwrap();
    assert!(metrics.history_dropped > 0, "{metrics:?}");
    assert!(metrics.ended_released + metrics.history_dropped > 0);
    // Once a flush can commit, what was kept reaches the history.
    header
        .flushing
        .store(0, std::sync::atomic::Ordering::Release);
    engine
        .lease_map
        .flush_ends(&*engine, engine.lease_map.member().unwrap(), None, false)
        .unwrap();
    let first = store.history(&format!("{:0>200}", 0)).unwrap();
    assert_eq!(first.len(), 1, "the first name's end was kept: {first:?}");
}

/// A name other than `name` in the same bucket of the map.
fn neighbour_of(name: &str) -> String {
    let bucket = bucket_of(lock_hash(name));
    (0..)
        .map(|i| format!("neighbour-{i}"))
        .find(|other| bucket_of(lock_hash(other)) == bucket)
        .unwrap()
}

/// What another process does while a grant of `name` is stopped after taking its token:
/// it is granted `name` with a short lease, lets it expire, and a grant of another name of
/// the bucket then ends its record out of the bucket. The token it was granted.
fn granted_and_gone_meanwhile(other: &Store, name: &str) -> u64 {
    let token = {
        let holder = other.acquire(name, Duration::from_millis(20)).unwrap();
        std::thread::sleep(Duration::from_millis(60));
        let token = holder.token();
        std::mem::forget(holder); // expired, not released
        token
    };
    let neighbour = other
        .acquire(&neighbour_of(name), Duration::from_secs(60))
        .unwrap();
    assert!(neighbour.token() > token);
    std::mem::forget(neighbour);
    token
}

#[test]
fn a_grant_stopped_after_taking_its_token_is_never_published_below_a_later_grant() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let (paused, other) = (open(&path), open(&path));
    let meanwhile = Arc::new(std::sync::Mutex::new(0));
    let seen = Arc::clone(&meanwhile);
    pause_after_token(move || *seen.lock().unwrap() = granted_and_gone_meanwhile(&other, "lock-0"));
    let late = paused.acquire("lock-0", Duration::from_secs(60)).unwrap();
    let meanwhile = *meanwhile.lock().unwrap();
    assert!(
        meanwhile > 0,
        "the other grant ran while this one was paused"
    );
    assert!(
        late.token() > meanwhile,
        "lock-0 granted token {} after token {meanwhile}: its tokens went back",
        late.token()
    );
}

#[test]
fn an_acquire_of_several_stopped_after_taking_its_tokens_is_never_published_below_a_later_grant() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let (paused, other) = (open(&path), open(&path));
    let meanwhile = Arc::new(std::sync::Mutex::new(0));
    let seen = Arc::clone(&meanwhile);
    pause_after_token(move || *seen.lock().unwrap() = granted_and_gone_meanwhile(&other, "lock-0"));
    let late = paused
        .acquire_all(&["lock-0", "lock-1"], Duration::from_secs(60))
        .unwrap();
    let meanwhile = *meanwhile.lock().unwrap();
    assert!(
        meanwhile > 0,
        "the other grant ran while this one was paused"
    );
    let token = late.iter().find(|h| h.name() == "lock-0").unwrap().token();
    assert!(
        token > meanwhile,
        "lock-0 granted token {token} after token {meanwhile}: its tokens went back"
    );
}

/// An acquire with a write, run as a combiner runs it, refused by its check: the refusal
/// leaves the lease map and its token counter as they were (the map is not undone by its
/// requester afterwards: it is never written).
#[test]
fn a_refused_acquire_with_a_write_writes_nothing_in_the_lease_map() {
    use crate::rules::ops::Op;
    use crate::share::buckets::entry_of;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let (store, engine) = open_engine(&path);
    let member = engine.lease_map.member().unwrap();
    // The key holds a value of a token above every token the map handed out (written
    // directly: no grant makes one), so no new grant may write it.
    let above = member.ring().last_token() + 1_000;
    let db = engine.database().unwrap();
    let txn = db.writable().unwrap().begin_write().unwrap();
    txn.open_table(crate::rules::tables::VALUES)
        .unwrap()
        .insert(
            b"k".as_slice(),
            crate::rules::record::encode_value(above, Some(b"old")).as_slice(),
        )
        .unwrap();
    txn.commit().unwrap();
    drop(db);
    let other = store.acquire("held", Duration::from_secs(60)).unwrap();
    for name in ["free", "held"] {
        let last_token = member.ring().last_token();
        let before = entry_of(member.ring(), name).unwrap();
        let grant = crate::local::acquire::Grant::take(&engine).unwrap();
        let op = Op::Acquire {
            name: name.to_owned(),
            ttl: Duration::from_secs(60),
            write: Some((b"k".to_vec(), b"new".to_vec())),
            holder: engine.me,
            live: grant.live,
            ticket: None,
        };
        let result = engine.router.submit(&*engine, op, None);
        match name {
            "free" => assert!(
                matches!(result, Err(crate::Error::StaleToken { .. })),
                "{result:?}"
            ),
            _ => assert!(
                matches!(result, Err(crate::Error::Locked { .. })),
                "{result:?}"
            ),
        }
        assert_eq!(
            entry_of(member.ring(), name).unwrap(),
            before,
            "the refused grant of {name} changed its record in the map"
        );
        assert_eq!(
            member.ring().last_token(),
            last_token,
            "{name}: a token was taken"
        );
    }
    assert_eq!(store.get(b"k").unwrap().unwrap().value, b"old");
    other.release().unwrap();
}
