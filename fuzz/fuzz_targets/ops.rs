//! Random operation sequences through the Rust API. Every result must be one the rules allow:
//! granted tokens only grow, an accepted write reads back with its token, a refusal as stale
//! names a higher accepted token, and no operation fails in the storage or panics. The store
//! passes `verify()` at the end.

#![no_main]

use std::time::Duration;

use arbitrary::Arbitrary;
use fencelock::{Error, Holder, Kind, LockState, Options, Store};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    Acquire {
        lock: u8,
        ttl_ms: u16,
    },
    AcquireAndPut {
        lock: u8,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Release(u8),
    Extend {
        holder: u8,
        ttl_ms: u16,
    },
    HolderPut {
        holder: u8,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    HolderDelete {
        holder: u8,
        key: Vec<u8>,
    },
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
        token: u64,
    },
    Delete {
        key: Vec<u8>,
        token: u64,
    },
    Fence {
        resource: String,
        token: u64,
    },
    Get(Vec<u8>),
    Keys(Vec<u8>),
    Locks,
    /// A permit of a semaphore of `permits` (0: a shared grant).
    AcquireKind {
        lock: u8,
        permits: u8,
        ttl_ms: u16,
    },
    AcquireAll(Vec<u8>),
}

const LOCKS: [&str; 4] = ["a", "b", "c", "\u{e9}t\u{e9}"];

/// Fails the input on errors that no argument should cause.
fn refusal(err: &Error) {
    match err {
        Error::Locked { .. }
        | Error::StaleToken { .. }
        | Error::LockLost { .. }
        | Error::PermitsMismatch { .. }
        | Error::InvalidArgument(_) => {}
        other => panic!("an operation failed in the storage: {other:?}"),
    }
}

/// No name has more live grants than its kind allows: one exclusive holder, N permits of a
/// semaphore of N.
fn holders_fit(store: &Store) {
    for name in LOCKS {
        let grants = store.lock_holders(name).unwrap();
        let held = grants.iter().filter(|g| g.state == LockState::Held).count();
        match grants.first().map(|g| g.kind) {
            Some(Kind::Semaphore(permits)) => assert!(held <= permits as usize, "{grants:?}"),
            Some(Kind::Exclusive) => assert!(grants.len() == 1, "{grants:?}"),
            _ => {}
        }
        assert!(grants
            .iter()
            .all(|g| Some(g.kind) == grants.first().map(|f| f.kind)));
    }
}

/// After an accepted write of `value` with `token`, the key reads it back.
fn reads_back(store: &Store, key: &[u8], value: Option<&[u8]>, token: u64) {
    let found = store.get(key).expect("get after an accepted write");
    match value {
        Some(value) => {
            let found = found.expect("an accepted put reads back");
            assert_eq!((found.value.as_slice(), found.token), (value, token));
        }
        None => assert!(found.is_none(), "a delete leaves no value"),
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        max_value_len: 64,
        ..Options::default()
    };
    let store = Store::open_with(dir.path().join("fuzz.db"), &options).unwrap();
    let mut holders: Vec<Holder> = Vec::new();
    let mut last_token = 0;
    let granted = |holder: &Holder, last_token: &mut u64| {
        assert!(holder.token() > *last_token, "tokens only grow");
        *last_token = holder.token();
    };
    for op in ops.iter().take(64) {
        match op {
            Op::Acquire { lock, ttl_ms } => {
                let name = LOCKS[usize::from(*lock) % LOCKS.len()];
                match store.acquire(name, Duration::from_millis(u64::from(*ttl_ms))) {
                    Ok(holder) => {
                        granted(&holder, &mut last_token);
                        holders.push(holder);
                    }
                    Err(err) => refusal(&err),
                }
            }
            Op::AcquireAndPut { lock, key, value } => {
                let name = LOCKS[usize::from(*lock) % LOCKS.len()];
                match store.acquire_and_put(name, Duration::from_secs(60), key, value) {
                    Ok(holder) => {
                        granted(&holder, &mut last_token);
                        reads_back(&store, key, Some(value), holder.token());
                        holders.push(holder);
                    }
                    Err(err) => refusal(&err),
                }
            }
            Op::Release(h) => {
                if let Some(holder) = holders.get(usize::from(*h) % holders.len().max(1)) {
                    holder.release().unwrap();
                    assert!(!holder.is_held().unwrap());
                }
            }
            Op::Extend { holder, ttl_ms } => {
                if let Some(holder) = holders.get(usize::from(*holder) % holders.len().max(1)) {
                    if let Err(err) = holder.extend(Duration::from_millis(u64::from(*ttl_ms))) {
                        refusal(&err);
                    }
                }
            }
            Op::HolderPut { holder, key, value } => {
                if let Some(holder) = holders.get(usize::from(*holder) % holders.len().max(1)) {
                    match holder.put(key, value) {
                        Ok(()) => reads_back(&store, key, Some(value), holder.token()),
                        Err(err) => refusal(&err),
                    }
                }
            }
            Op::HolderDelete { holder, key } => {
                if let Some(holder) = holders.get(usize::from(*holder) % holders.len().max(1)) {
                    match holder.delete(key) {
                        Ok(_) => reads_back(&store, key, None, holder.token()),
                        Err(err) => refusal(&err),
                    }
                }
            }
            Op::Put { key, value, token } => match store.put(key, value, *token) {
                Ok(()) => {
                    assert!(*token >= 1 && *token <= last_token, "only granted tokens");
                    reads_back(&store, key, Some(value), *token);
                }
                Err(Error::StaleToken { token: t, highest }) => {
                    assert_eq!(t, *token);
                    assert!(highest > t && highest <= last_token);
                }
                Err(err) => refusal(&err),
            },
            Op::Delete { key, token } => match store.delete(key, *token) {
                Ok(_) => reads_back(&store, key, None, *token),
                Err(err) => refusal(&err),
            },
            Op::Fence { resource, token } => match store.fence(resource, *token) {
                Ok(()) => {
                    let highest = store.fence_token(resource).unwrap();
                    assert_eq!(highest, Some(*token), "an accepted fence is the highest");
                }
                Err(err) => refusal(&err),
            },
            Op::Get(key) => {
                if let Err(err) = store.get(key) {
                    refusal(&err);
                }
            }
            Op::Keys(prefix) => match store.keys(prefix) {
                Ok(keys) => {
                    assert!(keys.windows(2).all(|w| w[0] < w[1]), "keys are sorted");
                    assert!(keys.iter().all(|k| k.starts_with(prefix)));
                }
                Err(err) => refusal(&err),
            },
            Op::Locks => {
                store.locks().unwrap();
            }
            Op::AcquireKind {
                lock,
                permits,
                ttl_ms,
            } => {
                let name = LOCKS[usize::from(*lock) % LOCKS.len()];
                let kind = match permits % 4 {
                    0 => Kind::Shared,
                    n => Kind::Semaphore(u32::from(n)),
                };
                match store.acquire_kind(name, kind, Duration::from_millis(u64::from(*ttl_ms))) {
                    Ok(holder) => {
                        granted(&holder, &mut last_token);
                        assert_eq!(holder.kind(), kind);
                        holders.push(holder);
                    }
                    Err(err) => refusal(&err),
                }
                holders_fit(&store);
            }
            Op::AcquireAll(locks) => {
                let names: Vec<&str> = locks
                    .iter()
                    .take(4)
                    .map(|l| LOCKS[usize::from(*l) % LOCKS.len()])
                    .collect();
                let before = store.info().unwrap().last_token;
                match store.acquire_all(&names, Duration::from_secs(60)) {
                    Ok(all) => {
                        assert_eq!(all.len(), names.len());
                        for holder in all {
                            granted(&holder, &mut last_token);
                            holders.push(holder);
                        }
                    }
                    Err(err) => {
                        refusal(&err);
                        assert_eq!(store.info().unwrap().last_token, before, "all or none");
                    }
                }
                holders_fit(&store);
            }
        }
    }
    store.verify().unwrap();
    assert_eq!(store.info().unwrap().last_token, last_token);
});
