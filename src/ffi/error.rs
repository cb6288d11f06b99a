//! The error object handed out through the optional `fencelock_error **err_out` parameters.
//!
//! A failing call frees the error object `*err_out` already holds before writing its own (see
//! `guard` in mod.rs), so `*err_out` must be NULL or a live error object, never uninitialized.

use std::ffi::{c_char, c_int, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;

use super::{fencelock_status, free_boxed, read_or, FENCELOCK_NULL_POINTER, STATUSES};
use crate::{Error, Status};

/// A detailed error: its status, a message, the numbers of a refusal, the lock or file it
/// concerns, and the system's error number of an I/O error. Created by the library on failure; freed with
/// `fencelock_error_free`, or by the next call that fails with the same `err_out` (which frees
/// the error `*err_out` holds before writing its own). Immutable, so safe to read from many
/// threads at once.
pub struct fencelock_error {
    pub(super) status: Status,
    message: CString,
    token: u64,
    highest: u64,
    pid: u32,
    remaining_ms: u64,
    os_code: c_int,
    name: Option<CString>,
    path: Option<CString>,
}

impl fencelock_error {
    pub(super) fn new(status: Status, message: String) -> fencelock_error {
        fencelock_error {
            status,
            message: c_string(message),
            token: 0,
            highest: 0,
            pid: 0,
            remaining_ms: 0,
            os_code: 0,
            name: None,
            path: None,
        }
    }

    pub(super) fn from_panic(detail: &str) -> fencelock_error {
        fencelock_error::new(
            Status::Panic,
            format!("internal panic caught at the C boundary: {detail}"),
        )
    }
}

impl From<Error> for fencelock_error {
    fn from(err: Error) -> fencelock_error {
        let mut message = err.to_string();
        if let Some(code) = err.raw_os_error() {
            // Rust's "(os error 2)": a binding shows the number its own way (Python's
            // "[Errno 2] ...", Go's syscall.Errno), from fencelock_error_os_code.
            message = message.replace(&format!(" (os error {code})"), "");
        }
        let mut out = fencelock_error::new(err.status(), message);
        out.os_code = err.raw_os_error().unwrap_or(0);
        out.path = err
            .path()
            .map(|path| c_string(path.as_os_str().as_bytes().to_vec()));
        match err {
            Error::Locked {
                name,
                token,
                pid,
                remaining,
            } => {
                out.name = Some(c_string(name.into_bytes()));
                out.token = token;
                out.pid = pid;
                out.remaining_ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX);
            }
            Error::StaleToken { token, highest } => {
                out.token = token;
                out.highest = highest;
            }
            Error::LockLost { token, current } => {
                out.token = token;
                out.highest = current.unwrap_or(0);
            }
            Error::PermitsMismatch { permits, requested } => {
                out.token = u64::from(permits);
                out.highest = u64::from(requested);
            }
            Error::WouldDeadlock { name, token } => {
                out.token = token;
                out.name = Some(c_string(name.into_bytes()));
            }
            Error::Timeout { mut locks, .. } if locks.len() == 1 => {
                out.name = locks.pop().map(|name| c_string(name.into_bytes()));
            }
            _ => {}
        }
        out
    }
}

/// A C string of `text`; a NUL byte inside (never expected in a message, a lock name or a
/// path) is dropped rather than losing the text.
fn c_string(text: impl Into<Vec<u8>>) -> CString {
    CString::new(text).unwrap_or_else(|err| {
        let mut bytes = err.into_vec();
        bytes.retain(|&b| b != 0);
        CString::new(bytes).expect("NUL bytes removed")
    })
}

/// The static description of `status`, as a C string that lives for the whole program.
pub(super) fn static_description(status: Status) -> &'static CStr {
    static DESCRIPTIONS: OnceLock<Vec<CString>> = OnceLock::new();
    let all = DESCRIPTIONS.get_or_init(|| {
        STATUSES
            .iter()
            .map(|status| c_string(status.description().to_owned()))
            .collect()
    });
    &all[status as usize]
}

/// The status of `err`; `FENCELOCK_NULL_POINTER` when `err` is NULL.
///
/// Thread-safe.
///
/// # Safety
/// `err` is NULL or an error returned by this library and not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_error_status(err: *const fencelock_error) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        read_or(err, FENCELOCK_NULL_POINTER, |err| {
            err.status as fencelock_status
        })
    }
}

/// The message of `err`, NUL-terminated UTF-8; NULL when `err` is NULL.
///
/// The string belongs to `err` and is valid until `fencelock_error_free(err)`; never free it
/// yourself. Thread-safe.
///
/// # Safety
/// `err` is NULL or an error returned by this library and not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_error_message(err: *const fencelock_error) -> *const c_char {
    // SAFETY: upheld by the caller.
    unsafe { read_or(err, std::ptr::null(), |err| err.message.as_ptr()) }
}

/// For `FENCELOCK_LOCKED`: the current holder's token. For `FENCELOCK_STALE_TOKEN` and
/// `FENCELOCK_LOCK_LOST`: the caller's token. For `FENCELOCK_PERMITS_MISMATCH`: the permit
/// count stored with the name. For `FENCELOCK_WOULD_DEADLOCK`: the token of the calling
/// thread's own lease that the wait would wait for. Otherwise, and for NULL, 0.
///
/// Thread-safe.
///
/// # Safety
/// `err` is NULL or an error returned by this library and not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_error_token(err: *const fencelock_error) -> u64 {
    // SAFETY: upheld by the caller.
    unsafe { read_or(err, 0, |err| err.token) }
}

/// For `FENCELOCK_STALE_TOKEN`: the highest token accepted. For `FENCELOCK_LOCK_LOST`: the
/// token now recorded for the lock (0 if none). For `FENCELOCK_PERMITS_MISMATCH`: the permit
/// count the acquire asked for. Otherwise, and for NULL, 0.
///
/// Thread-safe.
///
/// # Safety
/// `err` is NULL or an error returned by this library and not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_error_highest(err: *const fencelock_error) -> u64 {
    // SAFETY: upheld by the caller.
    unsafe { read_or(err, 0, |err| err.highest) }
}

/// For `FENCELOCK_LOCKED`: the process id of the current holder. Otherwise, and for NULL, 0.
///
/// Thread-safe.
///
/// # Safety
/// `err` is NULL or an error returned by this library and not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_error_pid(err: *const fencelock_error) -> u32 {
    // SAFETY: upheld by the caller.
    unsafe { read_or(err, 0, |err| err.pid) }
}

/// For `FENCELOCK_LOCKED`: the time left on the current lease, in milliseconds (rounded
/// down). Otherwise, and for NULL, 0.
///
/// Thread-safe.
///
/// # Safety
/// `err` is NULL or an error returned by this library and not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_error_remaining_ms(err: *const fencelock_error) -> u64 {
    // SAFETY: upheld by the caller.
    unsafe { read_or(err, 0, |err| err.remaining_ms) }
}

/// The operating system's error number (an `errno` value such as `ENOENT`, `EACCES` or
/// `ENOSPC`) behind `err`, as `sqlite3_system_errno` gives SQLite's: for a `FENCELOCK_IO`
/// error the system reported. 0 when the error has no such cause (every other status, an I/O
/// error fencelock found itself such as an unreachable etcd cluster), and for NULL.
///
/// Thread-safe.
///
/// # Safety
/// `err` is NULL or an error returned by this library and not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_error_os_code(err: *const fencelock_error) -> c_int {
    // SAFETY: upheld by the caller.
    unsafe { read_or(err, 0, |err| err.os_code) }
}

/// The name of the lock `err` concerns, NUL-terminated: for `FENCELOCK_LOCKED` the lock that is
/// held, for `FENCELOCK_WOULD_DEADLOCK` the lock the wait was for, for the `FENCELOCK_TIMEOUT` of
/// a waiting `fencelock_store_acquire_opts` of one lock that lock (its message also says how
/// long it waited). NULL for every other status, and for NULL. The message names the lock too.
///
/// The string belongs to `err` and is valid until `fencelock_error_free(err)`; never free it
/// yourself. Thread-safe.
///
/// # Safety
/// `err` is NULL or an error returned by this library and not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_error_name(err: *const fencelock_error) -> *const c_char {
    // SAFETY: upheld by the caller.
    unsafe {
        read_or(err, std::ptr::null(), |err| {
            err.name
                .as_ref()
                .map_or(std::ptr::null(), |name| name.as_ptr())
        })
    }
}

/// The path of the file a `FENCELOCK_IO` error concerns, NUL-terminated bytes as the system
/// takes them, when the library knows it: the store file of a failed open (a missing
/// directory, a file without permission), as `fs.PathError` and Python's `OSError.filename`
/// carry it. NULL otherwise, and for NULL. The message names the path too.
///
/// The string belongs to `err` and is valid until `fencelock_error_free(err)`; never free it
/// yourself. Thread-safe.
///
/// # Safety
/// `err` is NULL or an error returned by this library and not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_error_path(err: *const fencelock_error) -> *const c_char {
    // SAFETY: upheld by the caller.
    unsafe {
        read_or(err, std::ptr::null(), |err| {
            err.path
                .as_ref()
                .map_or(std::ptr::null(), |path| path.as_ptr())
        })
    }
}

/// Frees an error object. NULL does nothing.
///
/// Not thread-safe for the same `err`: no other thread may use `err` during or after this call.
///
/// # Safety
/// `err` is NULL or an error returned by this library and not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_error_free(err: *mut fencelock_error) {
    // SAFETY: upheld by the caller.
    unsafe { free_boxed(err) }
}
