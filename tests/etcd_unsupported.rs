//! Without the `etcd` feature an etcd store string is refused with a clear error, and no file
//! of that name is created.
#![cfg(not(feature = "etcd"))]

use fencelock::{Error, Store};

#[test]
fn an_etcd_string_says_the_library_was_built_without_etcd() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_current_dir(dir.path()).unwrap();
    match Store::open("etcd://127.0.0.1:2379/app") {
        Err(Error::InvalidArgument(message)) => {
            assert!(message.contains("built without etcd support"), "{message}");
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
