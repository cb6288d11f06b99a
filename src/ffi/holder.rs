//! `fencelock_holder`: a granted lease.

use std::ffi::{c_char, CString};

use super::store::with_cancel;
use super::{
    fencelock_cancel, fencelock_error, fencelock_status, free_boxed, guard, handle, key_bytes,
    millis, read_or, value_bytes, Out,
};
use crate::Holder;

/// A granted lease. Created by the `fencelock_store_acquire*` functions; freed with
/// `fencelock_holder_free`, which releases the lease if still held. Safe to use from many
/// threads at once (one thread may write while another extends or releases).
pub struct fencelock_holder {
    pub(super) holder: Holder,
    /// The lock name as a C string, handed out by `fencelock_holder_name`.
    name: CString,
}

impl fencelock_holder {
    pub(super) fn into_raw(holder: Holder) -> *mut fencelock_holder {
        // A lock name is checked UTF-8 without NUL bytes by the engine before it is granted.
        let name = CString::new(holder.name()).expect("lock names contain no NUL byte");
        Box::into_raw(Box::new(fencelock_holder { holder, name }))
    }
}

/// The fencing token of the lease; 0 for NULL (0 is never granted).
///
/// Thread-safe.
///
/// # Safety
/// `holder` is NULL or a holder from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_holder_token(holder: *const fencelock_holder) -> u64 {
    // SAFETY: upheld by the caller.
    unsafe { read_or(holder, 0, |holder| holder.holder.token()) }
}

/// The lock's name, NUL-terminated UTF-8; NULL for NULL.
///
/// The string belongs to the holder and is valid until `fencelock_holder_free(holder)`; never
/// free it yourself. Thread-safe.
///
/// # Safety
/// `holder` is NULL or a holder from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_holder_name(holder: *const fencelock_holder) -> *const c_char {
    // SAFETY: upheld by the caller.
    unsafe { read_or(holder, std::ptr::null(), |holder| holder.name.as_ptr()) }
}

/// The time left on the lease as this holder last set it, in milliseconds (rounded down); 0
/// once it ran out. Reads no storage: whether another holder took the lock over is answered by
/// `fencelock_holder_is_held`. `*remaining_ms_out` receives the answer.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`holder`, `remaining_ms_out`),
/// `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_holder_remaining_ms(
    holder: *const fencelock_holder,
    remaining_ms_out: *mut u64,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let holder = handle(holder, "holder")?;
            let remaining_ms_out = Out::required(remaining_ms_out, "remaining_ms_out")?;
            let remaining = holder.holder.remaining().as_millis();
            remaining_ms_out.set(u64::try_from(remaining).unwrap_or(u64::MAX));
            Ok(())
        })
    }
}

/// Renews the lease for `ttl_ms` milliseconds from now, only while this holder still owns it.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_LOCK_LOST` (expired, taken over, or released),
/// `FENCELOCK_NULL_POINTER` (`holder`), `FENCELOCK_INVALID_ARGUMENT` (TTL out of 1 ms to 30 days),
/// `FENCELOCK_TIMEOUT` (another process held the store past the busy timeout), `FENCELOCK_REPLACED`
/// (the store file was replaced at its path), `FENCELOCK_FORKED`, `FENCELOCK_IO`,
/// `FENCELOCK_CORRUPT`, `FENCELOCK_STORAGE`, `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_holder_extend(
    holder: *const fencelock_holder,
    ttl_ms: u64,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe { fencelock_holder_extend_cancellable(holder, ttl_ms, std::ptr::null(), err_out) }
}

/// Like `fencelock_holder_extend`, its wait for another process that holds the store (or for its
/// server) ended within about a millisecond with `FENCELOCK_CANCELLED`, changing nothing, once
/// `cancel` fires (at once when it fired before), and bounded by the deadline of `cancel`
/// (`fencelock_cancel_set_timeout`) instead of the store's busy timeout. NULL: no cancel handle.
///
/// Returns the codes of `fencelock_holder_extend`, and `FENCELOCK_CANCELLED`.
///
/// Thread-safe; blocks the calling thread only.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_holder_extend_cancellable(
    holder: *const fencelock_holder,
    ttl_ms: u64,
    cancel: *const fencelock_cancel,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let holder = &handle(holder, "holder")?.holder;
            let ttl = millis(ttl_ms);
            with_cancel(
                cancel,
                || holder.extend(ttl),
                |cancel| holder.extend_cancellable(ttl, cancel),
            )?;
            Ok(())
        })
    }
}

/// Whether this holder still holds the lease: not released, not expired, not taken over.
/// Reads only. `*held_out` receives the answer.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`holder`, `held_out`),
/// `FENCELOCK_FORKED`, `FENCELOCK_IO`, `FENCELOCK_CORRUPT`, `FENCELOCK_STORAGE`,
/// `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_holder_is_held(
    holder: *const fencelock_holder,
    held_out: *mut bool,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let holder = handle(holder, "holder")?;
            let held_out = Out::required(held_out, "held_out")?;
            held_out.set(holder.holder.is_held()?);
            Ok(())
        })
    }
}

/// Writes `value` under `key` with this holder's token, checking in the same transaction that
/// the lease is still current and that the key accepted no higher token.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_LOCK_LOST` (the lease expired, was taken over or was
/// released; the error carries this token and the lock's current one), `FENCELOCK_STALE_TOKEN`,
/// `FENCELOCK_NULL_POINTER` (`holder`, or `key`/`value` NULL with a non-zero length),
/// `FENCELOCK_INVALID_ARGUMENT` (empty or long key, value over the limit), `FENCELOCK_TIMEOUT`
/// (another process held the store past the busy timeout), `FENCELOCK_REPLACED` (the store file was
/// replaced at its path), `FENCELOCK_FORKED`, `FENCELOCK_IO`, `FENCELOCK_CORRUPT`,
/// `FENCELOCK_STORAGE`, `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described; `key` and `value` point to `key_len` and
/// `value_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_holder_put(
    holder: *const fencelock_holder,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        fencelock_holder_put_cancellable(
            holder,
            key,
            key_len,
            value,
            value_len,
            std::ptr::null(),
            err_out,
        )
    }
}

/// Like `fencelock_holder_put`, its wait for another process that holds the store (or for its
/// server) ended within about a millisecond with `FENCELOCK_CANCELLED`, changing nothing, once
/// `cancel` fires (at once when it fired before), and bounded by the deadline of `cancel`
/// (`fencelock_cancel_set_timeout`) instead of the store's busy timeout. NULL: no cancel handle.
///
/// Returns the codes of `fencelock_holder_put`, and `FENCELOCK_CANCELLED`.
///
/// Thread-safe; blocks the calling thread only.
///
/// # Safety
/// Every pointer is NULL or valid as described; `key` and `value` point to `key_len` and
/// `value_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_holder_put_cancellable(
    holder: *const fencelock_holder,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    cancel: *const fencelock_cancel,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let holder = &handle(holder, "holder")?.holder;
            let key = key_bytes(key, key_len, "key")?;
            let value = value_bytes(value, value_len)?;
            with_cancel(
                cancel,
                || holder.put(key, value),
                |cancel| holder.put_cancellable(key, value, cancel),
            )?;
            Ok(())
        })
    }
}

/// Deletes `key` with this holder's token, checked like `fencelock_holder_put`.
/// `*existed_out` (optional, may be NULL) receives whether the key held a value.
///
/// Returns the codes of `fencelock_holder_put`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described; `key` points to `key_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_holder_delete(
    holder: *const fencelock_holder,
    key: *const u8,
    key_len: usize,
    existed_out: *mut bool,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        fencelock_holder_delete_cancellable(
            holder,
            key,
            key_len,
            std::ptr::null(),
            existed_out,
            err_out,
        )
    }
}

/// Like `fencelock_holder_delete`, its wait for another process that holds the store (or for its
/// server) ended within about a millisecond with `FENCELOCK_CANCELLED`, changing nothing, once
/// `cancel` fires (at once when it fired before), and bounded by the deadline of `cancel`
/// (`fencelock_cancel_set_timeout`) instead of the store's busy timeout. NULL: no cancel handle.
///
/// Returns the codes of `fencelock_holder_delete`, and `FENCELOCK_CANCELLED`.
///
/// Thread-safe; blocks the calling thread only.
///
/// # Safety
/// Every pointer is NULL or valid as described; `key` points to `key_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_holder_delete_cancellable(
    holder: *const fencelock_holder,
    key: *const u8,
    key_len: usize,
    cancel: *const fencelock_cancel,
    existed_out: *mut bool,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let holder = &handle(holder, "holder")?.holder;
            let key = key_bytes(key, key_len, "key")?;
            let existed_out = Out::optional(existed_out);
            let existed = with_cancel(
                cancel,
                || holder.delete(key),
                |cancel| holder.delete_cancellable(key, cancel),
            )?;
            if let Some(existed_out) = existed_out {
                existed_out.set(existed);
            }
            Ok(())
        })
    }
}

/// Releases the lease, at once for every process. A stale holder's release never touches its
/// successor's lease. The holder must still be freed with `fencelock_holder_free`.
///
/// The first release of a lease that was lost before it (it expired, or another holder took the
/// lock over) frees what is still this holder's and returns `FENCELOCK_LOCK_LOST` (the error
/// carries this token and the lock's current one): the work done under the lease may have
/// overlapped another holder's; its fenced writes after the loss were refused, and side effects
/// no fence checked must be checked by the caller. Every later release returns `FENCELOCK_OK`.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_LOCK_LOST`, `FENCELOCK_NULL_POINTER` (`holder`),
/// `FENCELOCK_FORKED`, `FENCELOCK_IO`, `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_holder_release(
    holder: *const fencelock_holder,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let holder = handle(holder, "holder")?;
            holder.holder.release()?;
            Ok(())
        })
    }
}

/// Keeps the lease alive in a background thread: renews it for `ttl_ms` every third of
/// `ttl_ms` until it is released or lost (learn of a loss with `fencelock_holder_wait_lost`).
/// Calling it again changes nothing.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`holder`), `FENCELOCK_INVALID_ARGUMENT`
/// (`ttl_ms` under 3 ms or over 30 days), `FENCELOCK_IO` (the thread could not start),
/// `FENCELOCK_PANIC`.
///
/// Thread-safe. Do not call it before `fork()` in a process whose child uses the holder.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_holder_keep_alive(
    holder: *const fencelock_holder,
    ttl_ms: u64,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let holder = handle(holder, "holder")?;
            holder.holder.keep_alive(millis(ttl_ms))?;
            Ok(())
        })
    }
}

/// Blocks up to `timeout_ms` milliseconds until the lease is known to be lost or released
/// (its TTL ran out without a renewal, an extend or write found it taken over, or it was
/// released).
/// `*lost_out` receives whether it ended. Reads no storage.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`holder`, `lost_out`), `FENCELOCK_PANIC`.
///
/// Thread-safe; blocks the calling thread only.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_holder_wait_lost(
    holder: *const fencelock_holder,
    timeout_ms: u64,
    lost_out: *mut bool,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        fencelock_holder_wait_lost_cancellable(
            holder,
            timeout_ms,
            std::ptr::null(),
            lost_out,
            err_out,
        )
    }
}

/// Like `fencelock_holder_wait_lost`, and ends within about 10 ms with `FENCELOCK_CANCELLED`
/// once `cancel` fires (NULL: no cancel handle).
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`holder`, `lost_out`),
/// `FENCELOCK_CANCELLED`, `FENCELOCK_PANIC`.
///
/// Thread-safe; blocks the calling thread only.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_holder_wait_lost_cancellable(
    holder: *const fencelock_holder,
    timeout_ms: u64,
    cancel: *const fencelock_cancel,
    lost_out: *mut bool,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let holder = handle(holder, "holder")?;
            let lost_out = Out::required(lost_out, "lost_out")?;
            let timeout = millis(timeout_ms);
            let lost = match cancel.as_ref() {
                Some(cancel) => holder
                    .holder
                    .wait_lost_cancellable(timeout, &cancel.cancel)?,
                None => holder.holder.wait_lost(timeout),
            };
            lost_out.set(lost);
            Ok(())
        })
    }
}

/// Frees a holder, releasing the lease if it is still held (errors of that release are
/// ignored; call `fencelock_holder_release` first to see them). NULL does nothing.
///
/// No other thread may use `holder` during or after this call.
///
/// # Safety
/// `holder` is NULL or a holder from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_holder_free(holder: *mut fencelock_holder) {
    // SAFETY: upheld by the caller.
    unsafe { free_boxed(holder) }
}
