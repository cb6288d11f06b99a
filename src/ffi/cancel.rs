//! `fencelock_cancel`: ends a waiting call from another thread.

use super::{fencelock_error, fencelock_status, free_boxed, guard, guard_value, Out};
use crate::Cancel;

/// A cancel handle: passed to the `*_cancellable` functions, it ends their wait with
/// `FENCELOCK_CANCELLED` once `fencelock_cancel_fire` is called (within about a millisecond; 10
/// ms for `fencelock_holder_wait_lost_cancellable`), changing nothing. Created by `fencelock_cancel_new`; freed with `fencelock_cancel_free`. Once fired it
/// stays fired: make a new one for the next call. Safe to use from many threads at once.
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
    // SAFETY: upheld by the caller.
    guard_value((), || {
        if let Some(cancel) = unsafe { cancel.as_ref() } {
            cancel.cancel.cancel();
        }
    });
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
