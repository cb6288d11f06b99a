//! Semaphores, shared locks and atomic multi-lock acquires of a `fencelock_store`.

use std::ffi::c_char;

use super::acquire::{
    fencelock_acquire_options, fencelock_store_acquire_opts, FENCELOCK_ACQUIRE_WAIT,
};
use super::store::fencelock_store;
use super::{
    fencelock_cancel, fencelock_error, fencelock_holder, fencelock_status, read_or,
    FENCELOCK_KIND_EXCLUSIVE, FENCELOCK_KIND_SEMAPHORE, FENCELOCK_KIND_SHARED,
};
use crate::Kind;
use crate::Status;

/// The engine's kind for `kind` (a `FENCELOCK_KIND_*`) and `permits`.
pub(super) fn kind_of(kind: i32, permits: u32) -> Result<Kind, fencelock_error> {
    match kind {
        FENCELOCK_KIND_EXCLUSIVE => Ok(Kind::Exclusive),
        FENCELOCK_KIND_SHARED => Ok(Kind::Shared),
        FENCELOCK_KIND_SEMAPHORE => Ok(Kind::Semaphore(permits)),
        other => Err(fencelock_error::new(
            Status::InvalidArgument,
            format!("unknown lock kind {other}"),
        )),
    }
}

/// The permit count the entry points before `fencelock_store_acquire_opts` pass on: theirs
/// ignore it for a kind other than a semaphore.
fn legacy_permits(kind: i32, permits: u32) -> u32 {
    if kind == FENCELOCK_KIND_SEMAPHORE {
        permits
    } else {
        0
    }
}

/// The `FENCELOCK_KIND_*` of `kind` and its permit count (0 unless a semaphore).
pub(super) fn kind_code(kind: Kind) -> (i32, u32) {
    match kind {
        Kind::Shared => (FENCELOCK_KIND_SHARED, 0),
        Kind::Semaphore(permits) => (FENCELOCK_KIND_SEMAPHORE, permits),
        // Kind is non-exhaustive to Rust callers only; every kind of this crate is named here.
        Kind::Exclusive => (FENCELOCK_KIND_EXCLUSIVE, 0),
    }
}

/// Tries once to acquire the lock `name` as `kind` for `ttl_ms`: `FENCELOCK_KIND_EXCLUSIVE`
/// (as `fencelock_store_acquire`; `permits` is ignored), `FENCELOCK_KIND_SHARED` (any number of
/// shared holders, none while an exclusive holder holds it; `permits` is ignored) or
/// `FENCELOCK_KIND_SEMAPHORE` (one of `permits` permits, 1 to `FENCELOCK_MAX_HOLDERS`). Each
/// grant has its own token, higher than every earlier grant, its own lease and TTL. A grant
/// that would join live holders stands behind every queued waiting acquire of the name.
///
/// On success `*holder_out` receives a new holder, to be freed with `fencelock_holder_free`. A
/// shared holder's `fencelock_holder_put` and `fencelock_holder_delete` are refused with
/// `FENCELOCK_INVALID_ARGUMENT`: a shared lock promises its holders that nobody writes.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_LOCKED` (held in a way that excludes this grant),
/// `FENCELOCK_PERMITS_MISMATCH` (live permits of the name were granted with another count; the
/// error's token is that count, its highest the one asked for; nothing changed),
/// `FENCELOCK_NULL_POINTER` (`store`, `name`, `holder_out`), `FENCELOCK_INVALID_ARGUMENT` (an
/// unknown kind, a permit count out of range, a bad name or TTL), and the other codes of
/// `fencelock_store_acquire`.
///
/// Thread-safe.
///
/// Kept for one release, as a thin wrapper: it is `fencelock_store_acquire_opts` with `ttl_ms`,
/// `kind` and `permits` set in its options; call that instead.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_acquire_kind(
    store: *const fencelock_store,
    name: *const c_char,
    kind: i32,
    permits: u32,
    ttl_ms: u64,
    holder_out: *mut *mut fencelock_holder,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        fencelock_store_acquire_kind_cancellable(
            store,
            name,
            kind,
            permits,
            ttl_ms,
            std::ptr::null(),
            holder_out,
            err_out,
        )
    }
}

/// Like `fencelock_store_acquire_kind`: tries once, and its wait for another process that holds
/// the store (or for its server) ends within about a millisecond with `FENCELOCK_CANCELLED`,
/// changing nothing, once `cancel` fires (at once when it fired before), and is bounded by the
/// deadline of `cancel` (`fencelock_cancel_set_timeout`) instead of the store's busy timeout.
/// `cancel` may also name the thread the lease is for (`fencelock_cancel_set_thread`). NULL: no
/// cancel handle. With `FENCELOCK_KIND_EXCLUSIVE` it is the cancellable form of
/// `fencelock_store_acquire`.
///
/// Returns the codes of `fencelock_store_acquire_kind`, and `FENCELOCK_CANCELLED`.
///
/// Thread-safe; blocks the calling thread only.
///
/// Kept for one release, as a thin wrapper: it is `fencelock_store_acquire_opts` with `ttl_ms`,
/// `kind`, `permits` and `cancel` set in its options; call that instead.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_acquire_kind_cancellable(
    store: *const fencelock_store,
    name: *const c_char,
    kind: i32,
    permits: u32,
    ttl_ms: u64,
    cancel: *const fencelock_cancel,
    holder_out: *mut *mut fencelock_holder,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    let options = fencelock_acquire_options {
        kind,
        permits: legacy_permits(kind, permits),
        cancel,
        ..fencelock_acquire_options::new(ttl_ms)
    };
    // SAFETY: upheld by the caller; `name` lives through the call.
    unsafe {
        fencelock_store_acquire_opts(
            store,
            &raw const name,
            1,
            &raw const options,
            holder_out,
            err_out,
        )
    }
}

/// Like `fencelock_store_acquire_kind`, waiting up to `timeout_ms` for its turn (waiting
/// acquires of a name, of every kind, are granted oldest first), and ending with
/// `FENCELOCK_CANCELLED`, changing nothing, once `cancel` fires (NULL: no cancel handle).
///
/// Returns the codes of `fencelock_store_acquire_kind` but `FENCELOCK_LOCKED`, and
/// `FENCELOCK_TIMEOUT` and `FENCELOCK_CANCELLED`.
///
/// Thread-safe; blocks the calling thread only.
///
/// Kept for one release, as a thin wrapper: it is `fencelock_store_acquire_opts` with `ttl_ms`,
/// `kind`, `permits`, `FENCELOCK_ACQUIRE_WAIT`, `timeout_ms` and `cancel` set in its options; call
/// that instead.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_acquire_kind_wait(
    store: *const fencelock_store,
    name: *const c_char,
    kind: i32,
    permits: u32,
    ttl_ms: u64,
    timeout_ms: u64,
    cancel: *const fencelock_cancel,
    holder_out: *mut *mut fencelock_holder,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    let options = fencelock_acquire_options {
        flags: FENCELOCK_ACQUIRE_WAIT,
        timeout_ms,
        kind,
        permits: legacy_permits(kind, permits),
        cancel,
        ..fencelock_acquire_options::new(ttl_ms)
    };
    // SAFETY: upheld by the caller; `name` lives through the call.
    unsafe {
        fencelock_store_acquire_opts(
            store,
            &raw const name,
            1,
            &raw const options,
            holder_out,
            err_out,
        )
    }
}

/// Acquires every lock of `names` (an array of `count` names, 1 to `FENCELOCK_MAX_HOLDERS`, no
/// name twice) exclusively for `ttl_ms`, all or none, in one transaction: deadlock-free by
/// construction, since it never holds some while it waits for others. With `timeout_ms` 0 it
/// tries once (`FENCELOCK_LOCKED` on contention); otherwise it waits up to `timeout_ms` until
/// all are free at once (`FENCELOCK_TIMEOUT`). Either way `cancel` (NULL: none) ends the call
/// once it fires, and bounds it by its deadline (`fencelock_cancel_set_timeout`): a try's wait
/// for another process that holds the store too, instead of the store's busy timeout. A single
/// name is acquired as one lock is, waiting in its turn.
///
/// On success `holders_out[0..count]` receive one new holder per name, in the order of
/// `names`, each with its own token (they follow each other), lease and TTL, each to be freed
/// with `fencelock_holder_free`; on failure nothing is written.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_LOCKED` (the error names the holder of the first held
/// name), `FENCELOCK_TIMEOUT`, `FENCELOCK_CANCELLED`, `FENCELOCK_NULL_POINTER` (`store`,
/// `names`, a name, `holders_out`), `FENCELOCK_INVALID_ARGUMENT` (a `count` of 0 or above
/// `FENCELOCK_MAX_HOLDERS`, refused before `names` is read; a name twice, a bad name or TTL),
/// and the other codes of `fencelock_store_acquire`.
///
/// Thread-safe; blocks the calling thread only.
///
/// Kept for one release, as a thin wrapper: it is `fencelock_store_acquire_opts` with `ttl_ms`,
/// `cancel`, and `FENCELOCK_ACQUIRE_WAIT` with `timeout_ms` when it is not 0, set in its options;
/// call that instead.
///
/// # Safety
/// Every pointer is NULL or valid as described: `names` points to `count` name pointers,
/// `holders_out` to room for `count` holder pointers.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_acquire_all(
    store: *const fencelock_store,
    names: *const *const c_char,
    count: usize,
    ttl_ms: u64,
    timeout_ms: u64,
    cancel: *const fencelock_cancel,
    holders_out: *mut *mut fencelock_holder,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    let options = fencelock_acquire_options {
        // A timeout of 0 tries once.
        flags: if timeout_ms == 0 {
            0
        } else {
            FENCELOCK_ACQUIRE_WAIT
        },
        timeout_ms,
        cancel,
        ..fencelock_acquire_options::new(ttl_ms)
    };
    // SAFETY: upheld by the caller.
    unsafe {
        fencelock_store_acquire_opts(
            store,
            names,
            count,
            &raw const options,
            holders_out,
            err_out,
        )
    }
}

/// The kind of the holder's lease (`FENCELOCK_KIND_*`); -1 for NULL.
///
/// Thread-safe.
///
/// # Safety
/// `holder` is NULL or a holder from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_holder_kind(holder: *const fencelock_holder) -> i32 {
    // SAFETY: upheld by the caller.
    unsafe { read_or(holder, -1, |holder| kind_code(holder.holder.kind()).0) }
}

/// The permit count of the semaphore the holder holds a permit of; 0 for another kind and for
/// NULL.
///
/// Thread-safe.
///
/// # Safety
/// `holder` is NULL or a holder from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_holder_permits(holder: *const fencelock_holder) -> u32 {
    // SAFETY: upheld by the caller.
    unsafe { read_or(holder, 0, |holder| kind_code(holder.holder.kind()).1) }
}
