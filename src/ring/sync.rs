//! The atomics and futexes the ring's protocols are written with, in one place, so that a model
//! checker can stand in for them (issue 36: loom's atomics, and a futex per address modelled as
//! a condition variable).
//!
//! The futexes are shared ones: their words are in a mapping other processes share.

use std::time::Duration;

pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Sleeps while `word` holds `seen`, for at most `timeout`. Shared futexes (the word is in a
/// mapping other processes share). Interruptions, timeouts and a changed word all just return;
/// the caller looks again.
pub(super) fn futex_wait(word: &AtomicU32, seen: u32, timeout: Duration) {
    use rustix::thread::futex;
    let timeout = rustix::time::Timespec::try_from(timeout).unwrap_or(rustix::time::Timespec {
        tv_sec: i64::MAX,
        tv_nsec: 0,
    });
    let _ = futex::wait(word, futex::Flags::empty(), seen, Some(&timeout));
}

pub(super) fn futex_wake(word: &AtomicU32) {
    futex_wake_some(word, i32::MAX as u32);
}

/// Wakes at most `count` sleepers on `word`.
pub(super) fn futex_wake_some(word: &AtomicU32, count: u32) {
    use rustix::thread::futex;
    let _ = futex::wake(word, futex::Flags::empty(), count);
}
