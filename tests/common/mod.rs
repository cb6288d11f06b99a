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

/// Takes an open-file-description write lock on `len` bytes of `file` from `start`, as another
/// process's redb or fencelock would; it lasts until `file` is closed.
pub fn lock_bytes(file: &std::fs::File, start: i64, len: i64) {
    // SAFETY: an all-zero flock is valid; fcntl gets a valid descriptor and struct.
    let rc = unsafe {
        let mut lock: libc::flock = std::mem::zeroed();
        lock.l_type = libc::F_WRLCK as libc::c_short;
        lock.l_whence = libc::SEEK_SET as libc::c_short;
        lock.l_start = start;
        lock.l_len = len;
        libc::fcntl(
            std::os::fd::AsRawFd::as_raw_fd(file),
            libc::F_OFD_SETLK,
            &raw mut lock,
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
}
