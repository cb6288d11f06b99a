//! What an error says: the lock or the file it concerns, as filelock's `Timeout`, fs-err's
//! errors and Go's `fs.PathError` name them, with the typed fields as before.

use std::path::Path;
use std::time::Duration;

use fencelock::{Error, Store};

#[test]
fn a_failed_open_names_the_store_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no/such/dir/locks.db");
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, Error::Io(_)), "{err:?}");
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    assert_eq!(err.path(), Some(path.as_path()));
    let text = err.to_string();
    assert!(text.contains(&format!("{path:?}")), "{text}");
    assert!(text.contains("No such file or directory"), "{text}");
    // The system's error is the source, as std's error chains expect.
    let source = std::error::Error::source(&err).expect("the io::Error");
    assert!(source.to_string().contains(&format!("{path:?}")));
}

#[test]
fn a_held_lock_names_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("locks.db")).unwrap();
    let holder = store
        .acquire("payment-export", Duration::from_secs(60))
        .unwrap();
    let err = store
        .acquire("payment-export", Duration::from_secs(60))
        .unwrap_err();
    match &err {
        Error::Locked {
            name, token, pid, ..
        } => {
            assert_eq!(name, "payment-export");
            assert_eq!((*token, *pid), (holder.token(), std::process::id()));
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.starts_with("lock \"payment-export\" is held by pid "),
        "{text}"
    );
    assert_eq!(err.path(), None::<&Path>);
}

#[test]
fn a_timed_out_wait_names_its_locks_and_how_long_it_waited() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let _held = Store::open(&path)
        .unwrap()
        .lock("payment-export")
        .try_acquire()
        .unwrap();
    let store = Store::open(&path).unwrap();
    let timeout = Duration::from_millis(50);
    let err = store
        .lock("payment-export")
        .timeout(timeout)
        .acquire()
        .unwrap_err();
    match &err {
        Error::Timeout { locks, waited } => {
            assert_eq!(locks, &["payment-export"]);
            assert!(waited.expect("a caller's wait says its length") >= timeout);
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.starts_with("timed out after "), "{text}");
    assert!(
        text.ends_with("s waiting for lock \"payment-export\""),
        "{text}"
    );

    // Several locks at once: all of them, in the order asked.
    let err = store
        .lock_all(&["a", "payment-export"])
        .timeout(timeout)
        .acquire()
        .unwrap_err();
    assert!(
        matches!(&err, Error::Timeout { locks, .. } if locks == &["a", "payment-export"]),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .ends_with("waiting for locks [\"a\", \"payment-export\"]"),
        "{err}"
    );
}
