//! `fencelock_history`: the grant history of a lock.

use std::ffi::c_char;

use super::lists::unix_ms_or_zero;
use super::store::fencelock_store;
use super::{fencelock_error, fencelock_status, free_boxed, guard, handle, read_or, Out};
use crate::Status;
use crate::{Ending, HistoryEntry};

/// How a lease ended: not yet (live and unexpired).
pub const FENCELOCK_ENDING_HELD: i32 = 0;
/// How a lease ended: its holder released it.
pub const FENCELOCK_ENDING_RELEASED: i32 = 1;
/// How a lease ended: its TTL ran out before its holder let go, and nobody took it over.
pub const FENCELOCK_ENDING_EXPIRED: i32 = 2;
/// How a lease ended: a later grant took the lock after the TTL ran out, while the holder still
/// held on (a paused holder).
pub const FENCELOCK_ENDING_TAKEN_OVER: i32 = 3;
/// How a lease ended: its holder's process ended without a release on record.
pub const FENCELOCK_ENDING_HOLDER_DIED: i32 = 4;

/// One grant of a lock's history. Times are milliseconds since the Unix epoch, 0 when not
/// known.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fencelock_history_entry {
    pub token: u64,
    /// `FENCELOCK_KIND_*`, and the permit count (0 unless a semaphore).
    pub kind: i32,
    pub permits: u32,
    /// The holder's process id.
    pub pid: u32,
    /// `FENCELOCK_ENDING_*`.
    pub ending: i32,
    pub granted_unix_ms: i64,
    /// When the lease expires or expired, as last extended.
    pub expires_unix_ms: i64,
    /// When it ended, where known (a release's time, an expiry, the grant that took it over).
    pub ended_unix_ms: i64,
    /// When the store recorded the end; 0 for a grant still in the lock's record.
    pub recorded_unix_ms: i64,
}

/// A lock's grant history from `fencelock_store_history`, oldest first; freed with
/// `fencelock_history_free`. Immutable, so safe to read from many threads at once.
pub struct fencelock_history {
    entries: Vec<fencelock_history_entry>,
}

fn ending_code(ending: Ending) -> i32 {
    match ending {
        Ending::Released => FENCELOCK_ENDING_RELEASED,
        Ending::Expired => FENCELOCK_ENDING_EXPIRED,
        Ending::TakenOver => FENCELOCK_ENDING_TAKEN_OVER,
        Ending::HolderDied => FENCELOCK_ENDING_HOLDER_DIED,
        // Ending is non-exhaustive to Rust callers only; every ending of this crate is named.
        Ending::Held => FENCELOCK_ENDING_HELD,
    }
}

fn entry(e: &HistoryEntry) -> fencelock_history_entry {
    let (kind, permits) = super::kinds::kind_code(e.kind);
    fencelock_history_entry {
        token: e.token,
        kind,
        permits,
        pid: e.pid,
        ending: ending_code(e.ending),
        granted_unix_ms: unix_ms_or_zero(e.granted),
        expires_unix_ms: unix_ms_or_zero(e.expires),
        ended_unix_ms: unix_ms_or_zero(e.ended),
        recorded_unix_ms: unix_ms_or_zero(e.recorded),
    }
}

/// The grant history of the lock `name`, oldest first: its latest ended grants (up to 32),
/// then its current grants with their state now; empty for a lock the store knows nothing of.
/// On success `*history_out` receives a new list, to be freed with `fencelock_history_free`.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`store`, `name`, `history_out`),
/// `FENCELOCK_INVALID_ARGUMENT` (a bad name, or an etcd store), `FENCELOCK_TIMEOUT`,
/// `FENCELOCK_FORKED`, `FENCELOCK_IO`, `FENCELOCK_CORRUPT`, `FENCELOCK_STORAGE`,
/// `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_history(
    store: *const fencelock_store,
    name: *const c_char,
    history_out: *mut *mut fencelock_history,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let store = handle(store, "store")?;
            let lock = super::name(name, "name")?;
            let history_out = Out::required(history_out, "history_out")?;
            let entries = store.store.history(lock)?.iter().map(entry).collect();
            history_out.set(Box::into_raw(Box::new(fencelock_history { entries })));
            Ok(())
        })
    }
}

/// The number of entries of `history`; 0 for NULL.
///
/// Thread-safe.
///
/// # Safety
/// `history` is NULL or a history from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_history_len(history: *const fencelock_history) -> usize {
    // SAFETY: upheld by the caller.
    unsafe { read_or(history, 0, |history| history.entries.len()) }
}

/// Copies entry `index` of `history` to `*entry_out`.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`history`, `entry_out`),
/// `FENCELOCK_INVALID_ARGUMENT` (`index` out of range), `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_history_get(
    history: *const fencelock_history,
    index: usize,
    entry_out: *mut fencelock_history_entry,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(std::ptr::null_mut(), || {
            let history = handle(history, "history")?;
            let entry_out = Out::required(entry_out, "entry_out")?;
            let entry = history.entries.get(index).ok_or_else(|| {
                fencelock_error::new(
                    Status::InvalidArgument,
                    format!(
                        "index {index} is out of range for a history of {}",
                        history.entries.len()
                    ),
                )
            })?;
            entry_out.set(*entry);
            Ok(())
        })
    }
}

/// Frees a history. NULL does nothing.
///
/// No other thread may use `history` during or after this call.
///
/// # Safety
/// `history` is NULL or a history from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_history_free(history: *mut fencelock_history) {
    // SAFETY: upheld by the caller.
    unsafe { free_boxed(history) }
}
