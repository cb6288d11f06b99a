//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use fencelock::Store;

/// A store in a fresh temporary directory; the directory lives as long as the returned guard.
pub fn temp_store() -> (tempfile::TempDir, PathBuf, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("locks.db");
    let store = Store::open(&path).expect("open store");
    (dir, path, store)
}
