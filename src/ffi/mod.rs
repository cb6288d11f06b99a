//! The C ABI of fencelock: opaque handles, status codes and an optional error object.
//!
//! Layer 8, the top: it uses what `lib.rs` exports (`crate::Store`, `crate::Holder`, ...), as a
//! Rust user of the crate would, and the base's panic catching.
//!
//! This layer holds no logic. Each exported function checks its pointers, converts its
//! arguments, calls the engine and maps the result. Every exported body runs inside [`guard`]
//! (fallible functions) or [`guard_value`] (infallible ones), the one panic boundary: a panic
//! never unwinds into C. Outputs are written only on success, through `Out`.
//!
//! The header `include/fencelock.h` is generated from these files by cbindgen (see `build.rs`).
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, CStr};
use std::ptr::NonNull;
use std::time::Duration;

use crate::Status;

pub mod acquire;
pub mod cancel;
pub mod election;
pub mod error;
pub mod history;
pub mod holder;
pub mod kinds;
pub mod lists;
pub mod observe;
pub mod store;

// Every exported function and type, at `fencelock::ffi::*` for Rust callers and tests.
pub use acquire::*;
pub use cancel::*;
pub use election::*;
pub use error::*;
pub use history::*;
pub use holder::*;
pub use kinds::*;
pub use lists::*;
pub use observe::*;
pub use store::*;

/// A status code returned by every fallible function; `FENCELOCK_OK` (0) is success.
pub type fencelock_status = i32;

/// Success.
pub const FENCELOCK_OK: fencelock_status = 0;
/// The lock is held by a live lease.
pub const FENCELOCK_LOCKED: fencelock_status = 1;
/// The token is lower than the highest one accepted.
pub const FENCELOCK_STALE_TOKEN: fencelock_status = 2;
/// The holder's lease expired, was taken over or was released.
pub const FENCELOCK_LOCK_LOST: fencelock_status = 3;
/// A wait timed out: a waiting acquire, or an open or write behind another process that holds
/// the store's write lock (it may be paused inside a commit).
pub const FENCELOCK_TIMEOUT: fencelock_status = 4;
/// An argument was out of range or malformed (including a name that is not UTF-8).
pub const FENCELOCK_INVALID_ARGUMENT: fencelock_status = 5;
/// A required pointer was NULL.
pub const FENCELOCK_NULL_POINTER: fencelock_status = 6;
/// An operating-system I/O error.
pub const FENCELOCK_IO: fencelock_status = 7;
/// The store file is damaged.
pub const FENCELOCK_CORRUPT: fencelock_status = 8;
/// The file is not a fencelock store.
pub const FENCELOCK_NOT_A_STORE: fencelock_status = 9;
/// The store was written by a newer version of fencelock.
pub const FENCELOCK_INCOMPATIBLE_VERSION: fencelock_status = 10;
/// The store is open elsewhere in a way that excludes this open.
pub const FENCELOCK_IN_USE: fencelock_status = 11;
/// The store was used in a child after `fork()`; open a new store in the child.
pub const FENCELOCK_FORKED: fencelock_status = 12;
/// Any other storage error.
pub const FENCELOCK_STORAGE: fencelock_status = 13;
/// The key has no value.
pub const FENCELOCK_NOT_FOUND: fencelock_status = 14;
/// A panic was caught at the C boundary.
pub const FENCELOCK_PANIC: fencelock_status = 15;
/// A wait was cancelled through its `fencelock_cancel`; nothing was changed.
pub const FENCELOCK_CANCELLED: fencelock_status = 16;
/// The store file was deleted, renamed or replaced at its path since it was opened; writes and
/// grants through this handle are refused.
pub const FENCELOCK_REPLACED: fencelock_status = 17;
/// A semaphore acquire asked for another permit count than the live permits of the name were
/// granted with; nothing was changed (the error's token is the stored count, its highest the
/// requested one).
pub const FENCELOCK_PERMITS_MISMATCH: fencelock_status = 18;
/// A waiting acquire would wait for a live lease that a holder of the same store, granted on
/// the same thread, holds; nothing was changed (the error's token is that lease's). Another
/// thread, another open of the store or another process waits as ever.
pub const FENCELOCK_WOULD_DEADLOCK: fencelock_status = 19;

/// Mode of `fencelock_store_open_with`: any number of processes share the file (the default).
pub const FENCELOCK_MODE_MULTI_PROCESS: i32 = 0;
/// Mode of `fencelock_store_open_with`: only this process opens the file; cheaper commits.
pub const FENCELOCK_MODE_SINGLE_PROCESS: i32 = 1;

/// Flag of `fencelock_store_open_cancellable`: open for reading only; grants and writes are
/// refused, and the open never waits for another process's write lock.
pub const FENCELOCK_OPEN_READ_ONLY: u32 = 1;
/// Flag of `fencelock_store_open_cancellable`: the grants this store commits record no grant
/// history (`fencelock_store_history`), which saves about a fifth of a grant's cost in
/// single-process mode; the metrics still count how leases ended.
pub const FENCELOCK_OPEN_NO_HISTORY: u32 = 2;
/// Flag of `fencelock_store_open_cancellable`: a waiting acquire is not refused with
/// `FENCELOCK_WOULD_DEADLOCK` when the lease it waits for was granted to the calling thread
/// through this store; it waits, as one of another thread does. For callers whose holders move
/// between threads that each may wait (thread pools, Go's goroutines).
pub const FENCELOCK_OPEN_ALLOW_OWN_WAITS: u32 = 4;
/// Flag of `fencelock_store_open_cancellable`: in multi-process mode, fenced writes (puts,
/// deletes, fences, an acquire's write) go to a redo log beside the store file (`STORE.wal.*`)
/// instead of a commit of the store file: one `fdatasync` shared by the processes writing at
/// that moment, and no process stopped in a write holds another's. The first process that opens
/// the store decides for every process that has it open at the same time; the last to close it
/// leaves it one file again. No effect in single-process mode. Off by default while it is new.
pub const FENCELOCK_OPEN_WRITE_LOG: u32 = 8;

/// Lock kind: one holder at a time.
pub const FENCELOCK_KIND_EXCLUSIVE: i32 = 0;
/// Lock kind: any number of shared holders at once, none while an exclusive holder holds it.
pub const FENCELOCK_KIND_SHARED: i32 = 1;
/// Lock kind: up to a permit count of holders at once (a semaphore).
pub const FENCELOCK_KIND_SEMAPHORE: i32 = 2;
/// The most holders of one name at once (the largest semaphore, the most shared holders), and
/// the most names of one `fencelock_store_acquire_all`.
pub const FENCELOCK_MAX_HOLDERS: u32 = 1024;

/// Lock state: held by a live holder and not expired.
pub const FENCELOCK_LOCK_HELD: i32 = 0;
/// Lock state: the lease ran out; the next acquire takes the lock.
pub const FENCELOCK_LOCK_EXPIRED: i32 = 1;
/// Lock state: the holder released it.
pub const FENCELOCK_LOCK_RELEASED: i32 = 2;
/// Lock state: the holder's process died, or the lease is from an earlier boot.
pub const FENCELOCK_LOCK_HOLDER_DEAD: i32 = 3;

// The header's numbers are the engine's numbers; a mismatch fails the build.
const _: () = {
    assert!(FENCELOCK_OK == Status::Ok as i32);
    assert!(FENCELOCK_LOCKED == Status::Locked as i32);
    assert!(FENCELOCK_STALE_TOKEN == Status::StaleToken as i32);
    assert!(FENCELOCK_LOCK_LOST == Status::LockLost as i32);
    assert!(FENCELOCK_TIMEOUT == Status::Timeout as i32);
    assert!(FENCELOCK_INVALID_ARGUMENT == Status::InvalidArgument as i32);
    assert!(FENCELOCK_NULL_POINTER == Status::NullPointer as i32);
    assert!(FENCELOCK_IO == Status::Io as i32);
    assert!(FENCELOCK_CORRUPT == Status::Corrupt as i32);
    assert!(FENCELOCK_NOT_A_STORE == Status::NotAStore as i32);
    assert!(FENCELOCK_INCOMPATIBLE_VERSION == Status::IncompatibleVersion as i32);
    assert!(FENCELOCK_IN_USE == Status::InUse as i32);
    assert!(FENCELOCK_FORKED == Status::Forked as i32);
    assert!(FENCELOCK_STORAGE == Status::Storage as i32);
    assert!(FENCELOCK_NOT_FOUND == Status::NotFound as i32);
    assert!(FENCELOCK_PANIC == Status::Panic as i32);
    assert!(FENCELOCK_CANCELLED == Status::Cancelled as i32);
    assert!(FENCELOCK_REPLACED == Status::Replaced as i32);
    assert!(FENCELOCK_PERMITS_MISMATCH == Status::PermitsMismatch as i32);
    assert!(FENCELOCK_WOULD_DEADLOCK == Status::WouldDeadlock as i32);
    assert!(FENCELOCK_MAX_HOLDERS == crate::MAX_HOLDERS);
};

/// Every status, indexed by its code.
const STATUSES: [Status; 20] = [
    Status::Ok,
    Status::Locked,
    Status::StaleToken,
    Status::LockLost,
    Status::Timeout,
    Status::InvalidArgument,
    Status::NullPointer,
    Status::Io,
    Status::Corrupt,
    Status::NotAStore,
    Status::IncompatibleVersion,
    Status::InUse,
    Status::Forked,
    Status::Storage,
    Status::NotFound,
    Status::Panic,
    Status::Cancelled,
    Status::Replaced,
    Status::PermitsMismatch,
    Status::WouldDeadlock,
];

/// The status with code `code`, if there is one.
fn status_of(code: fencelock_status) -> Option<Status> {
    let status = *STATUSES.get(usize::try_from(code).ok()?)?;
    debug_assert_eq!(status as i32, code);
    Some(status)
}

/// The library's version as a NUL-terminated string.
const VERSION_C: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(version) => version,
        Err(_) => panic!("the package version contains a NUL byte"),
    };

/// The library's version, e.g. "0.1.0"; equal to `FENCELOCK_VERSION`.
///
/// Returns a static string; never free it. Thread-safe.
#[no_mangle]
pub extern "C" fn fencelock_version() -> *const c_char {
    VERSION_C.as_ptr()
}

/// The library's version as one number, MAJOR * 1000000 + MINOR * 1000 + PATCH; build.rs
/// writes it from Cargo's version, as it writes the header's `FENCELOCK_VERSION_NUMBER`.
const VERSION_NUMBER: c_int = include!(concat!(env!("OUT_DIR"), "/version_number"));

/// The library's version as one number, MAJOR * 1000000 + MINOR * 1000 + PATCH (1002003 for
/// 1.2.3), as `sqlite3_libversion_number()`: equal to the `FENCELOCK_VERSION_NUMBER` of the
/// header the library was built with. A program compares it with the `FENCELOCK_VERSION_NUMBER`
/// it was compiled with to check the library it loaded.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn fencelock_version_number() -> c_int {
    VERSION_NUMBER
}

/// A static, human-readable description of `status`; "unknown status" for a code that is not
/// a `FENCELOCK_*` status.
///
/// Returns a static string; never free it. Thread-safe.
#[no_mangle]
pub extern "C" fn fencelock_status_str(status: fencelock_status) -> *const c_char {
    guard_value(c"unknown status".as_ptr(), || {
        status_of(status).map_or(c"unknown status".as_ptr(), |status| {
            error::static_description(status).as_ptr()
        })
    })
}

/// Runs the body of a fallible exported function behind the panic boundary, and maps its
/// result to a status. On failure, when `err_out` is not NULL, `*err_out` receives a new error
/// object that the caller frees with `fencelock_error_free`, and the error object it held
/// before (if not NULL) is freed, so a variable reused across calls never leaks; on success it
/// is left untouched. Freeing rather than refusing: a refusal would turn a call that failed
/// for its own reason into a failure about the error variable, and lose the new error.
///
/// # Safety
/// `err_out` is NULL or points to a `fencelock_error *` that is NULL or an error object of this
/// library not yet freed.
pub unsafe fn guard(
    err_out: *mut *mut fencelock_error,
    body: impl FnOnce() -> Result<(), fencelock_error>,
) -> fencelock_status {
    // Quiet: the panic's message travels in the error object, not on the host's stderr.
    let outcome = crate::base::quiet::catch(body)
        .unwrap_or_else(|panic| Err(fencelock_error::from_panic(&panic)));
    match outcome {
        Ok(()) => FENCELOCK_OK,
        Err(err) => {
            let status = err.status as fencelock_status;
            if !err_out.is_null() {
                // SAFETY: the caller passes either NULL or a pointer to a `fencelock_error *`
                // that is NULL or a live error object, as the header's conventions say.
                unsafe {
                    free_boxed(err_out.read());
                    err_out.write(Box::into_raw(Box::new(err)));
                }
            }
            status
        }
    }
}

/// Runs the body of an infallible exported function behind the panic boundary; a panic gives
/// `fallback`.
pub fn guard_value<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    crate::base::quiet::catch(body).unwrap_or(fallback)
}

/// Frees a handle made by `Box::into_raw`, inside the panic boundary; NULL does nothing.
///
/// # Safety
/// `ptr` is NULL or came from `Box::into_raw`, and is not used after this call.
unsafe fn free_boxed<T>(ptr: *mut T) {
    guard_value((), || {
        if !ptr.is_null() {
            // SAFETY: upheld by the caller.
            drop(unsafe { Box::from_raw(ptr) });
        }
    });
}

/// `read` of the object behind a handle, or `fallback` for NULL (and for a panic), for the
/// infallible getters.
///
/// # Safety
/// `ptr` is NULL or points to a live `T`.
unsafe fn read_or<T, R: Copy>(ptr: *const T, fallback: R, read: impl FnOnce(&T) -> R) -> R {
    // SAFETY: upheld by the caller.
    guard_value(fallback, || unsafe { ptr.as_ref() }.map_or(fallback, read))
}

/// A required pointer argument was NULL.
fn null(what: &str) -> fencelock_error {
    fencelock_error::new(Status::NullPointer, format!("{what} is NULL"))
}

/// The object behind a handle, or `NULL_POINTER`.
///
/// # Safety
/// `ptr` is NULL or points to a live `T` that outlives `'a`.
unsafe fn handle<'a, T>(ptr: *const T, what: &str) -> Result<&'a T, fencelock_error> {
    // SAFETY: upheld by the caller.
    unsafe { ptr.as_ref() }.ok_or_else(|| null(what))
}

/// A NUL-terminated UTF-8 name: `NULL_POINTER` for NULL, `INVALID_ARGUMENT` when not UTF-8.
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string that outlives `'a`.
unsafe fn name<'a>(ptr: *const c_char, what: &str) -> Result<&'a str, fencelock_error> {
    if ptr.is_null() {
        return Err(null(what));
    }
    // SAFETY: upheld by the caller.
    let bytes = unsafe { CStr::from_ptr(ptr) };
    bytes.to_str().map_err(|err| {
        fencelock_error::new(
            Status::InvalidArgument,
            format!("{what} is not valid UTF-8: {err}"),
        )
    })
}

/// A (pointer, length) byte string; the pointer may be NULL only when the length is 0. A
/// length above `limit` (the engine's own limit of the argument) is refused before the bytes
/// are read: a careless length (`len - 1` of 0 is `SIZE_MAX`) is an error, not a wild read.
///
/// # Safety
/// `ptr` is NULL or points to `len` readable bytes that outlive `'a`.
unsafe fn bytes<'a>(
    ptr: *const u8,
    len: usize,
    limit: usize,
    what: &str,
) -> Result<&'a [u8], fencelock_error> {
    if ptr.is_null() {
        return if len == 0 { Ok(&[]) } else { Err(null(what)) };
    }
    if len > limit {
        // The engine's refusal of the argument, given before its bytes are touched.
        return Err(crate::Error::InvalidArgument(format!(
            "{what} is {len} bytes; the limit is {limit}"
        ))
        .into());
    }
    // SAFETY: upheld by the caller; `len` is at most `limit`, far below `isize::MAX`.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// A key or key prefix: at most `MAX_NAME_LEN` bytes.
///
/// # Safety
/// As [`bytes`].
unsafe fn key_bytes<'a>(
    ptr: *const u8,
    len: usize,
    what: &str,
) -> Result<&'a [u8], fencelock_error> {
    // SAFETY: upheld by the caller.
    unsafe { bytes(ptr, len, crate::MAX_NAME_LEN, what) }
}

/// A value: at most `MAX_VALUE_LEN_LIMIT` bytes (the store's own limit is the engine's check).
///
/// # Safety
/// As [`bytes`].
unsafe fn value_bytes<'a>(ptr: *const u8, len: usize) -> Result<&'a [u8], fencelock_error> {
    // SAFETY: upheld by the caller.
    unsafe { bytes(ptr, len, crate::MAX_VALUE_LEN_LIMIT, "value") }
}

fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// An output parameter, checked for NULL before any work is done and written only on success.
struct Out<T>(NonNull<T>);

impl<T> Out<T> {
    /// A required output: NULL gives `NULL_POINTER`.
    fn required(ptr: *mut T, what: &str) -> Result<Out<T>, fencelock_error> {
        NonNull::new(ptr).map(Out).ok_or_else(|| null(what))
    }

    /// An optional output: NULL means the caller does not want it.
    fn optional(ptr: *mut T) -> Option<Out<T>> {
        NonNull::new(ptr).map(Out)
    }

    /// Writes the output.
    ///
    /// # Safety
    /// The pointer given to the constructor points to writable memory for a `T`.
    unsafe fn set(self, value: T) {
        // SAFETY: upheld by the caller; `write` does not drop the uninitialized old value.
        unsafe { self.0.as_ptr().write(value) };
    }

    /// Writes `values` to the array the output points to.
    ///
    /// # Safety
    /// The output points to room for `values.len()` writable `T`s.
    unsafe fn set_all(self, values: &[T])
    where
        T: Copy,
    {
        // SAFETY: upheld by the caller; the regions cannot overlap (`values` is ours).
        unsafe {
            std::ptr::copy_nonoverlapping(values.as_ptr(), self.0.as_ptr(), values.len());
        }
    }
}
