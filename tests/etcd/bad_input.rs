//! Bad input on etcd: a clear typed error, and nothing changed.

use std::time::Duration;

use fencelock::{Error, Mode, Options, Store, ETCD_MIN_TTL};

use crate::cluster::Cluster;

#[test]
fn bad_store_strings_are_invalid_arguments() {
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

#[test]
fn an_unreachable_cluster_is_an_io_error_after_the_busy_timeout() {
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

#[test]
fn what_etcd_cannot_do_is_refused_and_changes_nothing() {
    let etcd = Cluster::single();
    let single = Options {
        mode: Mode::SingleProcess,
        ..Options::default()
    };
    assert!(matches!(
        Store::open_with(etcd.url("t"), &single),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        fencelock::Server::start(etcd.url("t"), &fencelock::ServeOptions::default()),
        Err(Error::InvalidArgument(_))
    ));
    let store = etcd.open("t");
    for ttl in [
        Duration::from_millis(1),
        Duration::from_millis(1999),
        Duration::from_millis(2500),
        fencelock::MAX_TTL + Duration::from_secs(1),
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
    assert!(store.lock("job").unwrap().is_none());
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
    for (name, key) in [("", &b"k"[..]), ("job2", b""), ("a\0b", b"k")] {
        assert!(matches!(
            store.acquire_and_put(name, ETCD_MIN_TTL, key, b"v"),
            Err(Error::InvalidArgument(_))
        ));
    }
    let big = vec![0; fencelock::MAX_NAME_LEN + 1];
    assert!(matches!(
        holder.put(&big, b"v"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(store.keys(&big), Err(Error::InvalidArgument(_))));
    // Only exclusive locks so far: the other kinds are refused, granting nothing.
    for kind in [fencelock::Kind::Shared, fencelock::Kind::Semaphore(2)] {
        assert!(matches!(
            store.acquire_kind("other", kind, ETCD_MIN_TTL),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            store.acquire_kind_wait("other", kind, ETCD_MIN_TTL, Duration::ZERO),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        store.acquire_all(&["a", "b"], ETCD_MIN_TTL),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(holder.kind(), fencelock::Kind::Exclusive);
    assert_eq!(store.info().unwrap().last_token, holder.token());
    assert_eq!(store.info().unwrap().keys, 0);
}

#[test]
fn a_read_only_store_refuses_grants_and_writes() {
    let etcd = Cluster::single();
    let writer = etcd.open("t");
    let holder = writer.acquire("job", ETCD_MIN_TTL).unwrap();
    holder.put(b"k", b"v").unwrap();
    let options = Options {
        read_only: true,
        ..Options::default()
    };
    let reader = Store::open_with(etcd.url("t"), &options).unwrap();
    assert!(matches!(
        reader.acquire("other", ETCD_MIN_TTL),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        reader.put(b"k", b"w", holder.token()),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(reader.get(b"k").unwrap().unwrap().value, b"v");
    assert_eq!(reader.lock("job").unwrap().unwrap().token, holder.token());
}
