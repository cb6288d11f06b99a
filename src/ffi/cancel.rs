//! `fencelock_cancel`: ends a waiting call from another thread.

use super::{
    fencelock_error, fencelock_status, free_boxed, guard, guard_value, handle, millis, Out,
};
use crate::Status;
use crate::{Cancel, ThreadTag};

/// A cancel handle: passed to the `*_cancellable` functions, it ends their wait with
/// `FENCELOCK_CANCELLED` once `fencelock_cancel_fire` is called (within about a millisecond; 10
/// ms for `fencelock_holder_wait_lost_cancellable`), changing nothing. It may also carry a
/// deadline for the calls given it (`fencelock_cancel_set_timeout`) and name the thread its
/// waits are for (`fencelock_cancel_set_thread`). Created by
/// `fencelock_cancel_new`; freed with `fencelock_cancel_free`. Once fired it stays fired: make a
/// new one for the next call. Safe to use from many threads at once.
pub struct fencelock_cancel {
    pub(super) cancel: Cancel,
}

/// Makes a cancel handle that has not fired.
///
/// On success `*cancel_out` receives it, to be freed with `fencelock_cancel_free`.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`cancel_out`), `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_cancel_new(
    cancel_out: *mut *mut fencelock_cancel,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let cancel_out = Out::required(cancel_out, "cancel_out")?;
            cancel_out.set(Box::into_raw(Box::new(fencelock_cancel {
                cancel: Cancel::new(),
            })));
            Ok(())
        })
    }
}

/// Fires the handle: every call waiting with it ends with `FENCELOCK_CANCELLED`, and every
/// later call given it ends so at once. NULL does nothing.
///
/// Thread-safe and lock-free (one atomic store), so it may be called from a signal handler.
///
/// # Safety
/// `cancel` is NULL or a handle from `fencelock_cancel_new` not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_cancel_fire(cancel: *const fencelock_cancel) {
    guard_value((), || {
        // SAFETY: upheld by the caller.
        if let Some(cancel) = unsafe { cancel.as_ref() } {
            cancel.cancel.cancel();
        }
    });
}

/// Bounds every call given `cancel` from now on to `timeout_ms` milliseconds from now: a call
/// still waiting then (for a lock, for another process that holds the store, for a server)
/// ends with `FENCELOCK_TIMEOUT`, as at a timeout of its own. A wait with a timeout of its own
/// ends at the earlier of the two; a write, an extend or a try-once acquire, which otherwise wait
/// for a busy store up to the store's busy timeout, wait until this deadline instead, shorter
/// or longer. A write given up on waiting for the store was not posted or was withdrawn, so
/// changed nothing, unless a process had taken it into a commit of its own and was then
/// paused: then it may land when that process resumes. Setting it again moves the deadline.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`cancel`), `FENCELOCK_PANIC`.
///
/// Thread-safe; set it before the call it bounds begins.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_cancel_set_timeout(
    cancel: *const fencelock_cancel,
    timeout_ms: u64,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let cancel = handle(cancel, "cancel")?;
            cancel.cancel.set_timeout(millis(timeout_ms));
            Ok(())
        })
    }
}

/// The calling thread's identity as the library records the leases it was granted and judges
/// the waits it makes (`FENCELOCK_WOULD_DEADLOCK`): non-zero, and never that of another thread
/// of the process, even one that ended. For `fencelock_cancel_set_thread`.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn fencelock_thread_self() -> u64 {
    // No fallback is ever used: reading a thread-local number does not panic.
    guard_value(0, || ThreadTag::current().get())
}

/// Makes every call given `cancel` `thread`'s (a number from `fencelock_thread_self`) instead
/// of the calling thread's: a waiting acquire given it is refused with
/// `FENCELOCK_WOULD_DEADLOCK` when `thread` holds the lease it would wait for through the same
/// store, and the lease an acquire given it is granted is recorded as `thread`'s. For a wait
/// made on another thread's behalf from a helper thread, which that thread watches so that a
/// signal it handles ends the wait (`fencelock_cancel_fire`). The library keeps no state per
/// thread: the handle carries the number.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`cancel`), `FENCELOCK_INVALID_ARGUMENT`
/// (`thread` 0), `FENCELOCK_PANIC`.
///
/// Thread-safe; set it before the call it is for begins.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_cancel_set_thread(
    cancel: *const fencelock_cancel,
    thread: u64,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let cancel = handle(cancel, "cancel")?;
            let thread = ThreadTag::from_u64(thread).ok_or_else(|| {
                fencelock_error::new(Status::InvalidArgument, "thread 0 is no thread".into())
            })?;
            cancel.cancel.set_thread(thread);
            Ok(())
        })
    }
}

/// Frees a cancel handle. NULL does nothing. No call may be waiting with it.
///
/// # Safety
/// `cancel` is NULL or a handle from `fencelock_cancel_new` not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_cancel_free(cancel: *mut fencelock_cancel) {
    // SAFETY: upheld by the caller.
    unsafe { free_boxed(cancel) }
}
