//! `fencelock_leadership`, `fencelock_leader` and `fencelock_leader_watch`: leader election
//! (`Store::campaign`, `Store::leader`, `Store::observe_leader`).

use std::ffi::{c_char, CString};

use parking_lot::Mutex;

use super::lists::unix_ms;
use super::store::fencelock_store;
use super::{
    fencelock_cancel, fencelock_error, fencelock_status, free_boxed, guard, handle, key_bytes,
    millis, name as utf8, read_or, value_bytes, Out,
};
use crate::{CampaignOptions, Leader, LeaderWatch, Leadership};

/// A leadership won by `fencelock_store_campaign`: its lease is kept alive in the background
/// until it is resigned or freed. Freed with `fencelock_leadership_free`, which resigns. Safe
/// to use from many threads at once.
pub struct fencelock_leadership {
    leadership: Leadership,
    /// The election's name as a C string, handed out by `fencelock_leadership_name`.
    name: CString,
}

/// A leader of an election, as `fencelock_store_leader` and `fencelock_leader_watch_next` tell
/// it: immutable, so safe to read from many threads at once. Freed with `fencelock_leader_free`.
pub struct fencelock_leader {
    leader: Leader,
    /// The election's name as a C string, handed out by `fencelock_leader_name`.
    name: CString,
}

impl fencelock_leader {
    fn into_raw(leader: Leader) -> *mut fencelock_leader {
        // An election name is checked UTF-8 without NUL bytes before anything is read.
        let name = CString::new(leader.name.as_str()).expect("election names contain no NUL");
        Box::into_raw(Box::new(fencelock_leader { leader, name }))
    }
}

/// A watch of an election's leader from `fencelock_store_observe_leader`; freed with
/// `fencelock_leader_watch_free`. Safe to use from many threads at once: calls of
/// `fencelock_leader_watch_next` on one watch take turns, and each change is told once.
pub struct fencelock_leader_watch {
    watch: Mutex<LeaderWatch>,
}

/// Campaigns to lead the election `name` (NUL-terminated UTF-8) with `value` (the candidate's
/// address, say; may be empty, then `value` may be NULL): waits, fairly (candidates are granted
/// oldest first, across processes), to hold the lock `name` for `ttl_ms`, writes the leader
/// record with the grant's token (the term), and keeps the lease alive in the background. The
/// leadership ends for its holder `margin_ms` before its lease could be granted to another
/// (0: a third of `ttl_ms`; at most half of it): see `fencelock_leadership_wait_lost`.
/// `timeout_ms` bounds the wait (`UINT64_MAX`: no bound); `cancel` (NULL: none) ends it with
/// `FENCELOCK_CANCELLED`. A campaign that ends while it waits leaves nothing behind.
///
/// On success `*leadership_out` receives a new leadership, to be freed with
/// `fencelock_leadership_free`.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_TIMEOUT`, `FENCELOCK_CANCELLED`,
/// `FENCELOCK_NULL_POINTER` (`store`, `name`, `leadership_out`, or `value` NULL with a non-zero
/// length), `FENCELOCK_INVALID_ARGUMENT` (a bad name, TTL or margin, a value over the limit, a
/// read-only store), `FENCELOCK_WOULD_DEADLOCK` (this thread leads the election already through
/// this store), `FENCELOCK_REPLACED`, `FENCELOCK_FORKED`, `FENCELOCK_IO`, `FENCELOCK_CORRUPT`,
/// `FENCELOCK_STORAGE`, `FENCELOCK_PANIC`.
///
/// Thread-safe; blocks the calling thread only.
///
/// # Safety
/// Every pointer is NULL or valid as described; `value` points to `value_len` readable bytes.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fencelock_store_campaign(
    store: *const fencelock_store,
    name: *const c_char,
    value: *const u8,
    value_len: usize,
    ttl_ms: u64,
    margin_ms: u64,
    timeout_ms: u64,
    cancel: *const fencelock_cancel,
    leadership_out: *mut *mut fencelock_leadership,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let store = &handle(store, "store")?.store;
            let election = utf8(name, "name")?;
            let value = value_bytes(value, value_len)?;
            let leadership_out = Out::required(leadership_out, "leadership_out")?;
            let options = CampaignOptions {
                ttl: millis(ttl_ms),
                margin: (margin_ms != 0).then(|| millis(margin_ms)),
                timeout: (timeout_ms != u64::MAX).then(|| millis(timeout_ms)),
                cancel: cancel.as_ref().map(|cancel| cancel.cancel.clone()),
            };
            let leadership = store.campaign(election, value, &options)?;
            leadership_out.set(Box::into_raw(Box::new(fencelock_leadership {
                leadership,
                name: CString::new(election).expect("election names contain no NUL"),
            })));
            Ok(())
        })
    }
}

/// The term of the leadership: the token of its grant, higher than every earlier term's, and
/// the fencing token of its writes; 0 for NULL (0 is never granted).
///
/// Thread-safe.
///
/// # Safety
/// `leadership` is NULL or a leadership from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_leadership_term(leadership: *const fencelock_leadership) -> u64 {
    // SAFETY: upheld by the caller.
    unsafe { read_or(leadership, 0, |l| l.leadership.term()) }
}

/// The election's name, NUL-terminated UTF-8; NULL for NULL. The string belongs to the
/// leadership and is valid until `fencelock_leadership_free`; never free it yourself.
///
/// Thread-safe.
///
/// # Safety
/// `leadership` is NULL or a leadership from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_leadership_name(
    leadership: *const fencelock_leadership,
) -> *const c_char {
    // SAFETY: upheld by the caller.
    unsafe { read_or(leadership, std::ptr::null(), |l| l.name.as_ptr()) }
}

/// Whether the leadership ended for its holder: resigned, its lease lost, or less than the
/// safety margin left on it; once true, always true. Reads no storage. True for NULL.
///
/// Thread-safe.
///
/// # Safety
/// `leadership` is NULL or a leadership from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_leadership_is_lost(
    leadership: *const fencelock_leadership,
) -> bool {
    // SAFETY: upheld by the caller.
    unsafe { read_or(leadership, true, |l| l.leadership.is_lost()) }
}

/// Blocks up to `timeout_ms` milliseconds until the leadership ends for its holder (as
/// `fencelock_leadership_is_lost` tells), woken at once by the end; `cancel` (NULL: none) ends
/// the wait within about 10 ms with `FENCELOCK_CANCELLED`. `*lost_out` receives whether it
/// ended.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`leadership`, `lost_out`),
/// `FENCELOCK_CANCELLED`, `FENCELOCK_PANIC`.
///
/// Thread-safe; blocks the calling thread only.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_leadership_wait_lost(
    leadership: *const fencelock_leadership,
    timeout_ms: u64,
    cancel: *const fencelock_cancel,
    lost_out: *mut bool,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let leadership = &handle(leadership, "leadership")?.leadership;
            let lost_out = Out::required(lost_out, "lost_out")?;
            let timeout = millis(timeout_ms);
            let lost = match cancel.as_ref() {
                Some(cancel) => leadership.wait_lost_cancellable(timeout, &cancel.cancel)?,
                None => leadership.wait_lost(timeout),
            };
            lost_out.set(lost);
            Ok(())
        })
    }
}

/// Changes the leader's value to `value` (may be empty, then `value` may be NULL): writes the
/// next version of the leader record, fenced by the term with the lease checked in the same
/// transaction, and wakes the observers.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_LOCK_LOST` (the leadership ended; nothing written),
/// `FENCELOCK_NULL_POINTER` (`leadership`, or `value` NULL with a non-zero length),
/// `FENCELOCK_INVALID_ARGUMENT` (a value over the limit), `FENCELOCK_TIMEOUT`,
/// `FENCELOCK_REPLACED`, `FENCELOCK_FORKED`, `FENCELOCK_IO`, `FENCELOCK_CORRUPT`,
/// `FENCELOCK_STORAGE`, `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described; `value` points to `value_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_leadership_proclaim(
    leadership: *const fencelock_leadership,
    value: *const u8,
    value_len: usize,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let leadership = &handle(leadership, "leadership")?.leadership;
            let value = value_bytes(value, value_len)?;
            leadership.proclaim(value)?;
            Ok(())
        })
    }
}

/// Writes `value` under `key` (1 to 1024 bytes) fenced by the term, with the lease checked in
/// the same transaction; refused once the leadership ended, even while its lease still has its
/// safety margin left.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_LOCK_LOST`, `FENCELOCK_STALE_TOKEN` (the key accepted a
/// higher token), `FENCELOCK_NULL_POINTER` (`leadership`, or `key`/`value` NULL with a non-zero
/// length), `FENCELOCK_INVALID_ARGUMENT` (empty or long key, value over the limit),
/// `FENCELOCK_TIMEOUT`, `FENCELOCK_REPLACED`, `FENCELOCK_FORKED`, `FENCELOCK_IO`,
/// `FENCELOCK_CORRUPT`, `FENCELOCK_STORAGE`, `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described; `key` and `value` point to `key_len` and
/// `value_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_leadership_put(
    leadership: *const fencelock_leadership,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let leadership = &handle(leadership, "leadership")?.leadership;
            let key = key_bytes(key, key_len, "key")?;
            let value = value_bytes(value, value_len)?;
            leadership.put(key, value)?;
            Ok(())
        })
    }
}

/// Deletes `key` fenced by the term, checked like `fencelock_leadership_put`. `*existed_out`
/// (optional, may be NULL) receives whether the key held a value.
///
/// Returns the codes of `fencelock_leadership_put`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described; `key` points to `key_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_leadership_delete(
    leadership: *const fencelock_leadership,
    key: *const u8,
    key_len: usize,
    existed_out: *mut bool,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let leadership = &handle(leadership, "leadership")?.leadership;
            let key = key_bytes(key, key_len, "key")?;
            let existed_out = Out::optional(existed_out);
            let existed = leadership.delete(key)?;
            if let Some(out) = existed_out {
                out.set(existed);
            }
            Ok(())
        })
    }
}

/// Checks the term at the external fence `resource` (NUL-terminated UTF-8), recording it as
/// the highest seen, for storage of the caller's own; refused once the leadership ended.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_LOCK_LOST`, `FENCELOCK_STALE_TOKEN` (the resource
/// accepted a higher token), `FENCELOCK_NULL_POINTER` (`leadership`, `resource`),
/// `FENCELOCK_INVALID_ARGUMENT` (empty or long resource name), `FENCELOCK_TIMEOUT`,
/// `FENCELOCK_REPLACED`, `FENCELOCK_FORKED`, `FENCELOCK_IO`, `FENCELOCK_CORRUPT`,
/// `FENCELOCK_STORAGE`, `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_leadership_fence(
    leadership: *const fencelock_leadership,
    resource: *const c_char,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let leadership = &handle(leadership, "leadership")?.leadership;
            let resource = utf8(resource, "resource")?;
            leadership.fence(resource)?;
            Ok(())
        })
    }
}

/// Steps down at once: the next candidate is granted without waiting for the lease to run
/// out. The first resign of a leadership whose lease was lost before it returns
/// `FENCELOCK_LOCK_LOST` (its writes after the loss were refused); a later one returns
/// `FENCELOCK_OK` and does nothing.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_LOCK_LOST`, `FENCELOCK_NULL_POINTER` (`leadership`),
/// `FENCELOCK_FORKED`, `FENCELOCK_IO`, `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_leadership_resign(
    leadership: *const fencelock_leadership,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            handle(leadership, "leadership")?.leadership.resign()?;
            Ok(())
        })
    }
}

/// Frees a leadership, resigning it if it still leads (errors of that resign are ignored; call
/// `fencelock_leadership_resign` first to see them). NULL does nothing.
///
/// No other thread may use `leadership` during or after this call.
///
/// # Safety
/// `leadership` is NULL or a leadership from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_leadership_free(leadership: *mut fencelock_leadership) {
    // SAFETY: upheld by the caller.
    unsafe { free_boxed(leadership) }
}

/// The current leader of the election `name` (NUL-terminated UTF-8): the live holder of its
/// lock, with its record. On success `*leader_out` receives a new leader, to be freed with
/// `fencelock_leader_free`.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NOT_FOUND` (nobody leads now, or a new leader has not yet
/// written its record), `FENCELOCK_NULL_POINTER` (`store`, `name`, `leader_out`),
/// `FENCELOCK_INVALID_ARGUMENT` (a bad name), `FENCELOCK_FORKED`, `FENCELOCK_IO`,
/// `FENCELOCK_CORRUPT`, `FENCELOCK_STORAGE`, `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_leader(
    store: *const fencelock_store,
    name: *const c_char,
    leader_out: *mut *mut fencelock_leader,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let store = &handle(store, "store")?.store;
            let election = utf8(name, "name")?;
            let leader_out = Out::required(leader_out, "leader_out")?;
            let leader = store.leader(election)?.ok_or_else(|| {
                fencelock_error::new(
                    crate::Status::NotFound,
                    format!("nobody leads election {election:?} now"),
                )
            })?;
            leader_out.set(fencelock_leader::into_raw(leader));
            Ok(())
        })
    }
}

/// The leader's term (the token of its grant); 0 for NULL.
///
/// Thread-safe.
///
/// # Safety
/// `leader` is NULL or a leader from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_leader_term(leader: *const fencelock_leader) -> u64 {
    // SAFETY: upheld by the caller.
    unsafe { read_or(leader, 0, |l| l.leader.term) }
}

/// The version of the leader's value within its term: 1 at the start, one more at each
/// proclaim; 0 for NULL.
///
/// Thread-safe.
///
/// # Safety
/// `leader` is NULL or a leader from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_leader_version(leader: *const fencelock_leader) -> u64 {
    // SAFETY: upheld by the caller.
    unsafe { read_or(leader, 0, |l| l.leader.version) }
}

/// The leader's process id; 0 for NULL.
///
/// Thread-safe.
///
/// # Safety
/// `leader` is NULL or a leader from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_leader_pid(leader: *const fencelock_leader) -> u32 {
    // SAFETY: upheld by the caller.
    unsafe { read_or(leader, 0, |l| l.leader.pid) }
}

/// When the leader's term began, in milliseconds since the Unix epoch (the leader's wall
/// clock); 0 for NULL.
///
/// Thread-safe.
///
/// # Safety
/// `leader` is NULL or a leader from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_leader_since_unix_ms(leader: *const fencelock_leader) -> i64 {
    // SAFETY: upheld by the caller.
    unsafe { read_or(leader, 0, |l| unix_ms(l.leader.since)) }
}

/// The leader's value: a pointer to its bytes (never NULL for a leader, even when empty), and
/// its length in `*len_out` (optional, may be NULL); NULL (and a length of 0) for NULL. The
/// bytes belong to the leader and are valid until `fencelock_leader_free`; never free them.
///
/// Thread-safe.
///
/// # Safety
/// `leader` is NULL or a leader from this library not yet freed; `len_out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_leader_value(
    leader: *const fencelock_leader,
    len_out: *mut usize,
) -> *const u8 {
    // SAFETY: upheld by the caller.
    let (ptr, len) = unsafe {
        read_or(leader, (std::ptr::null(), 0), |l| {
            (l.leader.value.as_ptr(), l.leader.value.len())
        })
    };
    if let Some(out) = Out::optional(len_out) {
        // SAFETY: upheld by the caller.
        unsafe { out.set(len) };
    }
    ptr
}

/// The election's name, NUL-terminated UTF-8; NULL for NULL. The string belongs to the leader
/// and is valid until `fencelock_leader_free`; never free it yourself.
///
/// Thread-safe.
///
/// # Safety
/// `leader` is NULL or a leader from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_leader_name(leader: *const fencelock_leader) -> *const c_char {
    // SAFETY: upheld by the caller.
    unsafe { read_or(leader, std::ptr::null(), |l| l.name.as_ptr()) }
}

/// Frees a leader. NULL does nothing.
///
/// # Safety
/// `leader` is NULL or a leader from this library not yet freed, and not used after this call.
#[no_mangle]
pub unsafe extern "C" fn fencelock_leader_free(leader: *mut fencelock_leader) {
    // SAFETY: upheld by the caller.
    unsafe { free_boxed(leader) }
}

/// Watches the election `name` (NUL-terminated UTF-8): `fencelock_leader_watch_next` gives the
/// leader of the time of this call first (if one led), then every later change (each new term,
/// each proclaim) in order, never going back. An observer changes nothing the candidates see.
///
/// On success `*watch_out` receives a new watch, to be freed with
/// `fencelock_leader_watch_free`.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`store`, `name`, `watch_out`),
/// `FENCELOCK_INVALID_ARGUMENT` (a bad name), `FENCELOCK_FORKED`, `FENCELOCK_IO`,
/// `FENCELOCK_CORRUPT`, `FENCELOCK_STORAGE`, `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_observe_leader(
    store: *const fencelock_store,
    name: *const c_char,
    watch_out: *mut *mut fencelock_leader_watch,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let store = &handle(store, "store")?.store;
            let election = utf8(name, "name")?;
            let watch_out = Out::required(watch_out, "watch_out")?;
            let watch = store.observe_leader(election)?;
            watch_out.set(Box::into_raw(Box::new(fencelock_leader_watch {
                watch: Mutex::new(watch),
            })));
            Ok(())
        })
    }
}

/// Blocks up to `timeout_ms` milliseconds for the next change of the leader; `cancel` (NULL:
/// none) ends the wait within about 10 ms with `FENCELOCK_CANCELLED`. On success `*leader_out`
/// receives the new leader, to be freed with `fencelock_leader_free`.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_TIMEOUT` (no change within `timeout_ms`),
/// `FENCELOCK_CANCELLED`, `FENCELOCK_NULL_POINTER` (`watch`, `leader_out`), `FENCELOCK_FORKED`,
/// `FENCELOCK_IO`, `FENCELOCK_CORRUPT`, `FENCELOCK_STORAGE`, `FENCELOCK_PANIC`.
///
/// Thread-safe (calls on one watch take turns); blocks the calling thread only.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_leader_watch_next(
    watch: *const fencelock_leader_watch,
    timeout_ms: u64,
    cancel: *const fencelock_cancel,
    leader_out: *mut *mut fencelock_leader,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let watch = handle(watch, "watch")?;
            let leader_out = Out::required(leader_out, "leader_out")?;
            let timeout = millis(timeout_ms);
            let mut watch = watch.watch.lock();
            let next = match cancel.as_ref() {
                Some(cancel) => watch.next_change_cancellable(timeout, &cancel.cancel)?,
                None => watch.next_change(timeout)?,
            };
            let leader = next.ok_or(crate::Error::timed_out())?;
            leader_out.set(fencelock_leader::into_raw(leader));
            Ok(())
        })
    }
}

/// Frees a watch. NULL does nothing.
///
/// No other thread may use `watch` during or after this call.
///
/// # Safety
/// `watch` is NULL or a watch from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_leader_watch_free(watch: *mut fencelock_leader_watch) {
    // SAFETY: upheld by the caller.
    unsafe { free_boxed(watch) }
}
