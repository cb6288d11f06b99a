//! The atomics and futexes the ring's protocols are written with, in one place, so that a model
//! checker stands in for them: std's atomics and the kernel's futexes in production; under
//! `cfg(fencelock_loom)` (make test-loom), loom's atomics, and a futex modelled as a condition variable
//! (one for every address: a wake-up wakes every sleeper, each of which looks at its own word
//! again, which a futex allows). A model's waits have no timeout, so a lost wake-up is a
//! deadlock that loom reports.
//!
//! Liveness (whether the process behind a liveness id still runs: an OFD lock on the store file,
//! `storage/liveness.rs`) is the trait [`Live`], which the models fake: a "process" that dies
//! drops its lock.
//!
//! The futexes are shared ones: their words are in a mapping other processes share.

use std::io;
use std::time::Duration;

#[cfg(not(fencelock_loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

#[cfg(fencelock_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Whether the process behind a liveness id still runs.
pub(crate) trait Live {
    /// Whether the liveness lock `id` is held (an error: not known).
    fn is_held(&self, id: u64) -> io::Result<bool>;
}

impl Live for crate::storage::liveness::Liveness {
    fn is_held(&self, id: u64) -> io::Result<bool> {
        crate::storage::liveness::Liveness::is_held(self, id)
    }
}

/// A pause in a loop that waits for another process's store: a spin hint, or under loom a
/// yield (loom explores a loop that does not yield as if it spun forever).
pub(super) fn spin() {
    #[cfg(not(fencelock_loom))]
    std::hint::spin_loop();
    #[cfg(fencelock_loom)]
    loom::thread::yield_now();
}

/// Sleeps while `word` holds `seen`, for at most `timeout`. Shared futexes (the word is in a
/// mapping other processes share). Interruptions, timeouts and a changed word all just return;
/// the caller looks again.
#[cfg(not(fencelock_loom))]
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
#[cfg(not(fencelock_loom))]
pub(super) fn futex_wake_some(word: &AtomicU32, count: u32) {
    use rustix::thread::futex;
    let _ = futex::wake(word, futex::Flags::empty(), count);
}

#[cfg(fencelock_loom)]
loom::lazy_static! {
    /// The model's futex: every word's sleepers wait on this one condition variable.
    static ref FUTEX: (loom::sync::Mutex<()>, loom::sync::Condvar) =
        (loom::sync::Mutex::new(()), loom::sync::Condvar::new());
}

/// The model of `futex_wait`: compares and sleeps under the futex's lock, as the kernel does
/// under its hash bucket's, so that a wake after the word changed is never missed. No timeout:
/// a wake-up the protocol loses is a deadlock for loom to report.
#[cfg(fencelock_loom)]
pub(super) fn futex_wait(word: &AtomicU32, seen: u32, _timeout: Duration) {
    let guard = FUTEX.0.lock().expect("the model's futex");
    if word.load(Ordering::SeqCst) == seen {
        drop(FUTEX.1.wait(guard).expect("the model's futex"));
    }
}

/// The model of `futex_wake_some`: wakes every sleeper (more than `count` is a spurious wake-up
/// for the others, which a futex allows).
#[cfg(fencelock_loom)]
pub(super) fn futex_wake_some(_word: &AtomicU32, _count: u32) {
    let _guard = FUTEX.0.lock().expect("the model's futex");
    FUTEX.1.notify_all();
}
