//! A store opened read-only: it reads what writers commit, tells lock states, and refuses
//! every grant and write with a typed error, changing nothing.

mod common;

use std::time::Duration;

use fencelock::{Error, LockState, Options, Store};

fn read_only() -> Options {
    Options {
        read_only: true,
        ..Options::default()
    }
}

fn refused<T: std::fmt::Debug>(result: fencelock::Result<T>) -> bool {
    matches!(&result, Err(Error::InvalidArgument(message)) if message.contains("read-only"))
}

#[test]
fn a_read_only_store_reads_and_refuses_every_write() {
    let (_dir, path, store) = common::temp_store();
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    holder.put(b"k", b"v").unwrap();
    store.fence("printer", holder.token()).unwrap();
    let reader = Store::open_with(&path, &read_only()).unwrap();
    assert_eq!(reader.get(b"k").unwrap().unwrap().value, b"v");
    assert_eq!(reader.keys(b"").unwrap(), vec![b"k".to_vec()]);
    assert_eq!(reader.fence_token("printer").unwrap(), Some(holder.token()));
    assert_eq!(reader.lock("job").unwrap().unwrap().state, LockState::Held);
    reader.verify().unwrap();
    let before = reader.info().unwrap();

    let token = holder.token();
    assert!(refused(reader.acquire("other", Duration::from_secs(1))));
    assert!(refused(reader.acquire_wait(
        "other",
        Duration::from_secs(1),
        Duration::from_millis(10)
    )));
    assert!(refused(reader.acquire_and_put(
        "other",
        Duration::from_secs(1),
        b"k",
        b"w"
    )));
    assert!(refused(reader.put(b"k", b"w", token)));
    assert!(refused(reader.delete(b"k", token)));
    assert!(refused(reader.fence("scanner", token)));
    // A fence the token already passed needs no write, and passes.
    reader.fence("printer", token).unwrap();
    assert_eq!(store.info().unwrap(), before);

    // Commits of the writer are seen by the reader.
    holder.put(b"k", b"newer").unwrap();
    assert_eq!(reader.get(b"k").unwrap().unwrap().value, b"newer");
    holder.release().unwrap();
    assert_eq!(
        reader.lock("job").unwrap().unwrap().state,
        LockState::Released
    );
}

#[test]
fn a_read_only_open_of_a_missing_store_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing.db");
    assert!(matches!(
        Store::open_with(&path, &read_only()),
        Err(Error::Io(err)) if err.kind() == std::io::ErrorKind::NotFound
    ));
    assert!(!path.exists());
}
