//! Bad input through the Rust API: every case gets its typed error and leaves the store as it
//! was, on every backend. What a backend lacks is refused as documented, changing nothing.
//! Files that are not stores, or damaged ones, are `tests/bad_files.rs`; the C side of the
//! matrix is in tests/c.

use std::time::Duration;

use fencelock::{Error, Fenced, Holder, Kind, LockState, Options, Store, MAX_NAME_LEN, MAX_TTL};

use crate::harness::{Capability, Harness};

crate::on_every_backend! {
    [
        bad_arguments_get_their_error_and_change_nothing,
        options_out_of_range_are_refused,
        a_read_only_store_refuses_grants_and_writes,
        what_a_backend_lacks_is_refused_and_changes_nothing,
    ]
    etcd: [
        bad_store_strings_are_invalid_arguments,
        an_unreachable_cluster_is_an_io_error_after_the_busy_timeout,
        what_etcd_cannot_do_is_refused_and_changes_nothing,
    ]
}

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

/// The test's store with a held lock, a released one, two values and a fence.
fn populated(h: &Harness) -> (Store, Holder) {
    let options = Options {
        max_value_len: VALUE_LIMIT,
        ..Options::default()
    };
    let store = h.store_with(&options);
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
        |e| matches!(e, Error::Timeout { .. }),
    ),
    (
        "acquire: held lock",
        |s, h| match s.acquire("held", TTL) {
            Err(Error::Locked { token, pid, .. })
                if token == h.token() && pid == std::process::id() =>
            {
                Err(Error::Timeout {
                    locks: vec![],
                    waited: None,
                })
            }
            other => other.map(drop),
        },
        |e| matches!(e, Error::Timeout { .. }),
    ),
    (
        "acquire_and_put: empty name",
        |s, _| s.acquire_and_put("", TTL, b"k3", b"v").map(drop),
        invalid,
    ),
    (
        "acquire_and_put: name with NUL",
        |s, _| s.acquire_and_put("a\0b", TTL, b"k3", b"v").map(drop),
        invalid,
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
    (
        "lock_info: empty name",
        |s, _| s.lock_info("").map(drop),
        invalid,
    ),
    (
        "lock_info: over-long name",
        |s, _| s.lock_info(&long_name()).map(drop),
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

fn bad_arguments_get_their_error_and_change_nothing(h: &Harness) {
    let (store, held) = populated(h);
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

fn options_out_of_range_are_refused(h: &Harness) {
    let options = Options {
        max_value_len: fencelock::MAX_VALUE_LEN_LIMIT + 1,
        ..Options::default()
    };
    let unopened = h.unopened_file().map(std::path::Path::to_path_buf);
    assert!(matches!(
        h.try_open(&options),
        Err(Error::InvalidArgument(_))
    ));
    if let Some(path) = unopened {
        assert!(!path.exists(), "a refused open creates no file");
    }
}

/// A read-only open beside a writer (single-process mode refuses a second open of any kind).
fn a_read_only_store_refuses_grants_and_writes(h: &Harness) {
    let writer = h.store();
    let holder = writer.acquire("job", TTL).unwrap();
    holder.put(b"k", b"v").unwrap();
    let options = Options {
        read_only: true,
        ..Options::default()
    };
    let reader = match h.try_open(&options) {
        Err(Error::InUse) if !h.supports(Capability::SecondOpen) => return,
        other => other.unwrap(),
    };
    assert!(matches!(
        reader.acquire("other", TTL),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        reader.put(b"k", b"w", holder.token()),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(reader.get(b"k").unwrap().unwrap().value, b"v");
    assert_eq!(
        reader.lock_info("job").unwrap().unwrap().token,
        holder.token()
    );
}

/// Lock kinds, histories, metrics and observers: where the backend has them they work; where
/// it does not (etcd) each is refused with `InvalidArgument`, granting and writing nothing.
fn what_a_backend_lacks_is_refused_and_changes_nothing(h: &Harness) {
    let store = h.store();
    let holder = store.acquire("job", TTL).unwrap();
    holder.put(b"k1", b"v").unwrap();
    let before = snapshot(&store);
    for kind in [Kind::Shared, Kind::Semaphore(2)] {
        let granted = h.if_supported(Capability::Kinds, store.acquire_kind("other", kind, TTL));
        assert!(granted.is_none_or(|holder| holder.kind() == kind));
        let waited = store.acquire_kind_wait("other", kind, TTL, TTL);
        drop(h.if_supported(Capability::Kinds, waited));
    }
    let all = h.if_supported(Capability::Kinds, store.acquire_all(&["a", "b"], TTL));
    assert!(all.is_none_or(|all| all.len() == 2));
    let history = h.if_supported(Capability::History, store.history("job"));
    assert!(history.is_none_or(|history| history.len() == 1));
    let metrics = h.if_supported(Capability::Metrics, store.metrics());
    assert!(metrics.is_none_or(|metrics| metrics.grants > 0));
    h.if_supported(Capability::Metrics, store.set_observer(None));
    assert_eq!(holder.kind(), Kind::Exclusive);
    if !h.supports(Capability::Kinds) {
        assert_eq!(snapshot(&store), before);
    }
}

#[cfg(feature = "etcd")]
fn bad_store_strings_are_invalid_arguments(_: &Harness) {
    for text in [
        "etcd://",
        "etcd:///app",
        "etcd://127.0.0.1/app",
        "etcd://127.0.0.1:0/app",
        "etcd://127.0.0.1:65536/app",
        "etcd://127.0.0.1:port/app",
        "etcd://:2379/app",
        "etcd://127.0.0.1:2379,/app",
        // `@` ends a prefix in the store's keys: no prefix has a segment of it.
        "etcd://127.0.0.1:2379/app/@",
        "etcd://127.0.0.1:2379/app/@/jobs",
    ] {
        match Store::open(text) {
            Err(Error::InvalidArgument(message)) => assert!(message.contains(text), "{message}"),
            other => panic!("{text}: expected InvalidArgument, got {other:?}"),
        }
    }
}

#[cfg(feature = "etcd")]
fn an_unreachable_cluster_is_an_io_error_after_the_busy_timeout(_: &Harness) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let options = Options {
        busy_timeout: Duration::from_millis(500),
        ..Options::default()
    };
    match Store::open_with(format!("etcd://127.0.0.1:{port}/app"), &options) {
        Err(Error::Io(err)) => assert!(err.to_string().contains("etcd"), "{err}"),
        other => panic!("expected Io, got {other:?}"),
    }
}

/// etcd keeps leases of whole seconds, at least `ETCD_MIN_TTL`; it has no single-process mode
/// and no fencelock server.
#[cfg(feature = "etcd")]
fn what_etcd_cannot_do_is_refused_and_changes_nothing(h: &Harness) {
    use fencelock::ETCD_MIN_TTL;
    let single = Options {
        mode: fencelock::Mode::SingleProcess,
        ..Options::default()
    };
    assert!(matches!(
        Store::open_with(h.path(), &single),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        fencelock::Server::start(h.path(), &fencelock::ServeOptions::default()),
        Err(Error::InvalidArgument(_))
    ));
    let store = h.store();
    for ttl in [
        Duration::from_millis(1),
        Duration::from_millis(1999),
        Duration::from_millis(2500),
        MAX_TTL + Duration::from_secs(1),
    ] {
        match store.acquire("job", ttl) {
            Err(Error::InvalidArgument(message)) => assert!(message.contains("ttl"), "{message}"),
            other => panic!("{ttl:?}: expected InvalidArgument, got {other:?}"),
        }
        assert!(matches!(
            store.acquire_and_put("job", ttl, b"k", b"v"),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(store.lock_info("job").unwrap().is_none());
    assert!(store.get(b"k").unwrap().is_none());
    assert_eq!(store.info().unwrap().last_token, 0);

    let holder = store.acquire("job", ETCD_MIN_TTL).unwrap();
    for ttl in [Duration::from_millis(500), Duration::from_millis(2100)] {
        assert!(matches!(holder.extend(ttl), Err(Error::InvalidArgument(_))));
        assert!(matches!(
            holder.keep_alive(ttl),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(holder.is_held().unwrap());
    assert_eq!(store.info().unwrap().last_token, holder.token());
    assert_eq!(store.info().unwrap().keys, 0);
}
