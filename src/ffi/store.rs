//! `fencelock_store`: opening a store, acquiring locks, fenced values and fences.

use std::ffi::c_char;

use super::acquire::{
    fencelock_acquire_options, fencelock_store_acquire_opts, FENCELOCK_ACQUIRE_PUT,
    FENCELOCK_ACQUIRE_WAIT,
};
use super::{
    fencelock_cancel, fencelock_error, fencelock_holder, fencelock_key_list, fencelock_lock_list,
    fencelock_status, free_boxed, guard, guard_value, handle, key_bytes, millis, name, value_bytes,
    Out, FENCELOCK_MODE_MULTI_PROCESS, FENCELOCK_MODE_SINGLE_PROCESS,
    FENCELOCK_OPEN_ALLOW_OWN_WAITS, FENCELOCK_OPEN_NO_HISTORY, FENCELOCK_OPEN_READ_ONLY,
    FENCELOCK_OPEN_WRITE_LOG,
};
use crate::Status;
use crate::Store;
use crate::DEFAULT_MAX_VALUE_LEN;
use crate::{Mode, Options, DEFAULT_BUSY_TIMEOUT};

/// An open store. Created by `fencelock_store_open`; closed with `fencelock_store_close`.
/// Safe to use from many threads at once.
pub struct fencelock_store {
    pub(super) store: Store,
}

/// The plain or the cancellable form of a wait, as the NULL-or-valid `cancel` asks.
///
/// # Safety
/// `cancel` is NULL or a cancel handle of this library not yet freed.
pub(super) unsafe fn with_cancel<T>(
    cancel: *const fencelock_cancel,
    plain: impl FnOnce() -> crate::Result<T>,
    cancellable: impl FnOnce(&crate::Cancel) -> crate::Result<T>,
) -> crate::Result<T> {
    // SAFETY: upheld by the caller.
    match unsafe { cancel.as_ref() } {
        Some(cancel) => cancellable(&cancel.cancel),
        None => plain(),
    }
}

/// Opens the store at `path` (NUL-terminated UTF-8), creating it if it does not exist, in
/// multi-process mode with the default value limit (16 MiB). `path` may instead name an etcd
/// cluster, `etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`, in a library built with the `etcd`
/// feature (without it: `FENCELOCK_INVALID_ARGUMENT`, built without etcd support).
///
/// On success `*store_out` receives a new store, to be closed with `fencelock_store_close`.
/// A store opened before `fork()` returns `FENCELOCK_FORKED` in the child: open a new one there.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`path` or `store_out`),
/// `FENCELOCK_INVALID_ARGUMENT` (`path` not UTF-8 or a directory), `FENCELOCK_IO`,
/// `FENCELOCK_NOT_A_STORE`, `FENCELOCK_INCOMPATIBLE_VERSION`, `FENCELOCK_CORRUPT`,
/// `FENCELOCK_IN_USE` (open in single-process mode elsewhere), `FENCELOCK_TIMEOUT` (another
/// process held the store for the default busy timeout of 10 s), `FENCELOCK_STORAGE`,
/// `FENCELOCK_PANIC`. On failure, `*err_out` (if `err_out` is not NULL) receives an error to
/// free with `fencelock_error_free`, and the error it held before, if any, is freed.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_open(
    path: *const c_char,
    store_out: *mut *mut fencelock_store,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe { fencelock_store_open_with(path, FENCELOCK_MODE_MULTI_PROCESS, 0, store_out, err_out) }
}

/// Opens the store at `path` like `fencelock_store_open`, with a mode
/// (`FENCELOCK_MODE_MULTI_PROCESS` or `FENCELOCK_MODE_SINGLE_PROCESS`) and the largest value
/// accepted in bytes (`max_value_len`; 0 means the default of 16 MiB, at most 1 GiB). Every
/// process opening one file must use the same mode.
///
/// Returns the codes of `fencelock_store_open`; `FENCELOCK_INVALID_ARGUMENT` also for an
/// unknown mode or a `max_value_len` over the limit.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_open_with(
    path: *const c_char,
    mode: i32,
    max_value_len: u64,
    store_out: *mut *mut fencelock_store,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        fencelock_store_open_cancellable(
            path,
            mode,
            0,
            max_value_len,
            0,
            std::ptr::null(),
            store_out,
            err_out,
        )
    }
}

/// Opens the store at `path` like `fencelock_store_open_with`, with flags, a busy timeout and a
/// cancel handle.
///
/// `flags` is 0 or a bitwise or of `FENCELOCK_OPEN_READ_ONLY`, `FENCELOCK_OPEN_NO_HISTORY`,
/// `FENCELOCK_OPEN_ALLOW_OWN_WAITS` and `FENCELOCK_OPEN_WRITE_LOG`.
/// A read-only store reads (get, keys, locks, lock, fence_token, holder checks) but refuses
/// every grant and write with `FENCELOCK_INVALID_ARGUMENT`; it never waits for the write lock,
/// creates nothing and needs no write permission (unless a crash left the file needing a
/// repair). With `FENCELOCK_OPEN_NO_HISTORY` the grants this store commits record no grant
/// history (through a server, the server's setting decides). With
/// `FENCELOCK_OPEN_ALLOW_OWN_WAITS` a waiting acquire for a lease the calling thread was granted
/// through this store waits instead of returning `FENCELOCK_WOULD_DEADLOCK`. With
/// `FENCELOCK_OPEN_WRITE_LOG` a multi-process store's fenced writes go through the redo log
/// beside the file, if this is the first process to open it (the first decides for all; the
/// others follow it, whatever their flag). `busy_timeout_ms` bounds
/// how long the open, and each later write that has no deadline of its own (a cancel handle's,
/// `fencelock_cancel_set_timeout`), waits for another process that holds the store (one paused
/// inside a commit or inside its open); 0 means the default of 10 s. `cancel` (NULL for none) ends a waiting open with `FENCELOCK_CANCELLED`.
///
/// Returns the codes of `fencelock_store_open_with`, and `FENCELOCK_TIMEOUT` and
/// `FENCELOCK_CANCELLED`; `FENCELOCK_INVALID_ARGUMENT` also for unknown flags, and
/// `FENCELOCK_IO` for a read-only open of a missing file.
///
/// Thread-safe; blocks the calling thread only.
///
/// # Safety
/// Every pointer is NULL or valid as described.
// cbindgen copies this comment into fencelock.h, which a lint alone should not change.
#[allow(clippy::doc_markdown)]
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_open_cancellable(
    path: *const c_char,
    mode: i32,
    flags: u32,
    max_value_len: u64,
    busy_timeout_ms: u64,
    cancel: *const fencelock_cancel,
    store_out: *mut *mut fencelock_store,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let path = name(path, "path")?;
            let store_out = Out::required(store_out, "store_out")?;
            let mode = match mode {
                FENCELOCK_MODE_MULTI_PROCESS => Mode::MultiProcess,
                FENCELOCK_MODE_SINGLE_PROCESS => Mode::SingleProcess,
                other => {
                    return Err(fencelock_error::new(
                        Status::InvalidArgument,
                        format!("unknown mode {other}"),
                    ))
                }
            };
            let max_value_len = match max_value_len {
                0 => DEFAULT_MAX_VALUE_LEN,
                // Larger than the address space is over the limit too; the engine says so.
                n => usize::try_from(n).unwrap_or(usize::MAX),
            };
            let known = FENCELOCK_OPEN_READ_ONLY
                | FENCELOCK_OPEN_NO_HISTORY
                | FENCELOCK_OPEN_ALLOW_OWN_WAITS
                | FENCELOCK_OPEN_WRITE_LOG;
            if flags & !known != 0 {
                return Err(fencelock_error::new(
                    Status::InvalidArgument,
                    format!("unknown open flags {flags:#x}"),
                ));
            }
            let busy_timeout = match busy_timeout_ms {
                0 => DEFAULT_BUSY_TIMEOUT,
                ms => millis(ms),
            };
            let store = Store::open_with(
                path,
                &Options {
                    mode,
                    max_value_len,
                    busy_timeout,
                    cancel: cancel.as_ref().map(|c| c.cancel.clone()),
                    read_only: flags & FENCELOCK_OPEN_READ_ONLY != 0,
                    history: flags & FENCELOCK_OPEN_NO_HISTORY == 0,
                    refuse_own_waits: flags & FENCELOCK_OPEN_ALLOW_OWN_WAITS == 0,
                    write_log: flags & FENCELOCK_OPEN_WRITE_LOG != 0,
                    ..Options::default()
                },
            )?;
            store_out.set(Box::into_raw(Box::new(fencelock_store { store })));
            Ok(())
        })
    }
}

/// Closes a store. NULL does nothing. Holders acquired from it stay valid: each keeps the
/// underlying database open until it is freed.
///
/// No other thread may use `store` during or after this call.
///
/// # Safety
/// `store` is NULL or a store from `fencelock_store_open*` not yet closed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_close(store: *mut fencelock_store) {
    // SAFETY: upheld by the caller.
    unsafe { free_boxed(store) }
}

/// Tries once to acquire the lock `name` (NUL-terminated UTF-8, 1 to 1024 bytes) for `ttl_ms`
/// milliseconds (1 ms to 30 days).
///
/// On success `*holder_out` receives a new holder, to be freed with `fencelock_holder_free`
/// (which releases the lease if still held); its token is higher than every earlier grant.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_LOCKED` (the error carries the holder's token, pid and time
/// left), `FENCELOCK_NULL_POINTER` (`store`, `name`, `holder_out`), `FENCELOCK_INVALID_ARGUMENT`,
/// `FENCELOCK_TIMEOUT` (another process held the store past the busy timeout), `FENCELOCK_REPLACED`
/// (the store file was replaced at its path), `FENCELOCK_FORKED`, `FENCELOCK_IO`,
/// `FENCELOCK_CORRUPT`, `FENCELOCK_STORAGE`, `FENCELOCK_PANIC`.
///
/// `fencelock_store_acquire_kind_cancellable` with `FENCELOCK_KIND_EXCLUSIVE` is its form with a
/// cancel handle.
///
/// Thread-safe.
///
/// Kept for one release, as a thin wrapper: it is `fencelock_store_acquire_opts` with `ttl_ms` set
/// in its options; call that instead.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_acquire(
    store: *const fencelock_store,
    name: *const c_char,
    ttl_ms: u64,
    holder_out: *mut *mut fencelock_holder,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    let options = fencelock_acquire_options::new(ttl_ms);
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

/// Acquires the lock `name` for `ttl_ms`, waiting up to `timeout_ms` for it to be free.
/// `timeout_ms` 0 tries once but reports `FENCELOCK_TIMEOUT` (not `FENCELOCK_LOCKED`) on
/// contention.
///
/// On success `*holder_out` receives a new holder, to be freed with `fencelock_holder_free`.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_TIMEOUT`, `FENCELOCK_NULL_POINTER` (`store`, `name`,
/// `holder_out`), `FENCELOCK_INVALID_ARGUMENT`, `FENCELOCK_REPLACED` (the store file was replaced
/// at its path), `FENCELOCK_FORKED`, `FENCELOCK_IO`, `FENCELOCK_CORRUPT`, `FENCELOCK_STORAGE`,
/// `FENCELOCK_PANIC`.
///
/// Thread-safe; blocks the calling thread only.
///
/// Kept for one release, as a thin wrapper: it is `fencelock_store_acquire_opts` with `ttl_ms`,
/// `FENCELOCK_ACQUIRE_WAIT` and `timeout_ms` set in its options; call that instead.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_acquire_wait(
    store: *const fencelock_store,
    name: *const c_char,
    ttl_ms: u64,
    timeout_ms: u64,
    holder_out: *mut *mut fencelock_holder,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        fencelock_store_acquire_wait_cancellable(
            store,
            name,
            ttl_ms,
            timeout_ms,
            std::ptr::null(),
            holder_out,
            err_out,
        )
    }
}

/// Like `fencelock_store_acquire_wait`, and ends within about a millisecond with
/// `FENCELOCK_CANCELLED`, changing nothing, once `cancel` fires (NULL: no cancel handle).
///
/// Returns the codes of `fencelock_store_acquire_wait`, and `FENCELOCK_CANCELLED`.
///
/// Thread-safe; blocks the calling thread only.
///
/// Kept for one release, as a thin wrapper: it is `fencelock_store_acquire_opts` with `ttl_ms`,
/// `FENCELOCK_ACQUIRE_WAIT`, `timeout_ms` and `cancel` set in its options; call that instead.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_acquire_wait_cancellable(
    store: *const fencelock_store,
    name: *const c_char,
    ttl_ms: u64,
    timeout_ms: u64,
    cancel: *const fencelock_cancel,
    holder_out: *mut *mut fencelock_holder,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    let options = fencelock_acquire_options {
        flags: FENCELOCK_ACQUIRE_WAIT,
        timeout_ms,
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

/// Acquires the lock `name` for `ttl_ms` and writes `value` under `key` with the new token,
/// in one transaction: both happen or neither. `key` is 1 to 1024 bytes; `value` may be empty
/// (then `value` may be NULL).
///
/// On success `*holder_out` receives a new holder, to be freed with `fencelock_holder_free`.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_LOCKED`, `FENCELOCK_STALE_TOKEN` (cannot happen for a token
/// just granted unless the store was tampered with), `FENCELOCK_NULL_POINTER` (`store`, `name`,
/// `holder_out`, or `key`/`value` NULL with a non-zero length), `FENCELOCK_INVALID_ARGUMENT` (empty
/// or long key, value over the limit, bad name or TTL), `FENCELOCK_TIMEOUT` (another process held
/// the store past the busy timeout; through the redo log, also a key written with higher tokens
/// until then), `FENCELOCK_LOCK_LOST` (through the redo log: stopped past its TTL between its
/// grant and its write, the lock granted to another who wrote the key first; nothing written),
/// `FENCELOCK_REPLACED` (the store file was replaced at its path), `FENCELOCK_FORKED`,
/// `FENCELOCK_IO`, `FENCELOCK_CORRUPT`, `FENCELOCK_STORAGE`, `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// Kept for one release, as a thin wrapper: it is `fencelock_store_acquire_opts` with `ttl_ms`,
/// `FENCELOCK_ACQUIRE_PUT`, `key` and `value` set in its options; call that instead.
///
/// # Safety
/// Every pointer is NULL or valid as described; `key` and `value` point to `key_len` and
/// `value_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_acquire_and_put(
    store: *const fencelock_store,
    name: *const c_char,
    ttl_ms: u64,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    holder_out: *mut *mut fencelock_holder,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        fencelock_store_acquire_and_put_cancellable(
            store,
            name,
            ttl_ms,
            key,
            key_len,
            value,
            value_len,
            std::ptr::null(),
            holder_out,
            err_out,
        )
    }
}

/// Like `fencelock_store_acquire_and_put`, its wait for another process that holds the store (or for its
/// server) ended within about a millisecond with `FENCELOCK_CANCELLED`, changing nothing, once
/// `cancel` fires (at once when it fired before), and bounded by the deadline of `cancel`
/// (`fencelock_cancel_set_timeout`) instead of the store's busy timeout. NULL: no cancel handle.
///
/// Returns the codes of `fencelock_store_acquire_and_put`, and `FENCELOCK_CANCELLED`.
///
/// Thread-safe; blocks the calling thread only.
///
/// Kept for one release, as a thin wrapper: it is `fencelock_store_acquire_opts` with `ttl_ms`,
/// `FENCELOCK_ACQUIRE_PUT`, `key`, `value` and `cancel` set in its options; call that instead.
///
/// # Safety
/// Every pointer is NULL or valid as described; `key` and `value` point to `key_len` and
/// `value_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_acquire_and_put_cancellable(
    store: *const fencelock_store,
    name: *const c_char,
    ttl_ms: u64,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    cancel: *const fencelock_cancel,
    holder_out: *mut *mut fencelock_holder,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    let options = fencelock_acquire_options {
        flags: FENCELOCK_ACQUIRE_PUT,
        cancel,
        key,
        key_len,
        value,
        value_len,
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

/// Stores `value` under `key` with `token`. Refused with `FENCELOCK_STALE_TOKEN` when the key
/// accepted a higher token before; an equal token is accepted. The token must have been
/// granted by this store.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_STALE_TOKEN` (the error carries the token and the highest
/// accepted), `FENCELOCK_NULL_POINTER` (`store`, or `key`/`value` NULL with a non-zero length),
/// `FENCELOCK_INVALID_ARGUMENT` (empty or long key, value over the limit, token 0 or never
/// granted), `FENCELOCK_TIMEOUT` (another process held the store past the busy timeout),
/// `FENCELOCK_REPLACED` (the store file was replaced at its path), `FENCELOCK_FORKED`,
/// `FENCELOCK_IO`, `FENCELOCK_CORRUPT`, `FENCELOCK_STORAGE`, `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described; `key` and `value` point to `key_len` and
/// `value_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_put(
    store: *const fencelock_store,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    token: u64,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        fencelock_store_put_cancellable(
            store,
            key,
            key_len,
            value,
            value_len,
            token,
            std::ptr::null(),
            err_out,
        )
    }
}

/// Like `fencelock_store_put`, its wait for another process that holds the store (or for its
/// server) ended within about a millisecond with `FENCELOCK_CANCELLED`, changing nothing, once
/// `cancel` fires (at once when it fired before), and bounded by the deadline of `cancel`
/// (`fencelock_cancel_set_timeout`) instead of the store's busy timeout. NULL: no cancel handle.
///
/// Returns the codes of `fencelock_store_put`, and `FENCELOCK_CANCELLED`.
///
/// Thread-safe; blocks the calling thread only.
///
/// # Safety
/// Every pointer is NULL or valid as described; `key` and `value` point to `key_len` and
/// `value_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_put_cancellable(
    store: *const fencelock_store,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    token: u64,
    cancel: *const fencelock_cancel,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let store = &handle(store, "store")?.store;
            let key = key_bytes(key, key_len, "key")?;
            let value = value_bytes(value, value_len)?;
            with_cancel(
                cancel,
                || store.put(key, value, token),
                |cancel| store.put_cancellable(key, value, token, cancel),
            )?;
            Ok(())
        })
    }
}

/// Reads the value under `key` and the token of the write that stored it.
///
/// On success `*value_out` and `*value_len_out` receive a new buffer, to be freed with
/// `fencelock_buffer_free(*value_out, *value_len_out)` (never with `free()`); a zero-length
/// value still gives a non-NULL pointer to free. `token_out` is optional (may be NULL).
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NOT_FOUND` (no value under the key),
/// `FENCELOCK_NULL_POINTER` (`store`, `value_out`, `value_len_out`, or `key` NULL with a
/// non-zero length), `FENCELOCK_INVALID_ARGUMENT` (empty or long key), `FENCELOCK_FORKED`,
/// `FENCELOCK_IO`, `FENCELOCK_CORRUPT`, `FENCELOCK_STORAGE`, `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described; `key` points to `key_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_get(
    store: *const fencelock_store,
    key: *const u8,
    key_len: usize,
    value_out: *mut *mut u8,
    value_len_out: *mut usize,
    token_out: *mut u64,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let store = handle(store, "store")?;
            let key = key_bytes(key, key_len, "key")?;
            let value_out = Out::required(value_out, "value_out")?;
            let value_len_out = Out::required(value_len_out, "value_len_out")?;
            let token_out = Out::optional(token_out);
            let Some(fenced) = store.store.get(key)? else {
                return Err(fencelock_error::new(
                    Status::NotFound,
                    "no value under the key".into(),
                ));
            };
            let (ptr, len) = buffer_into_raw(fenced.value);
            value_out.set(ptr);
            value_len_out.set(len);
            if let Some(token_out) = token_out {
                token_out.set(fenced.token);
            }
            Ok(())
        })
    }
}

/// Deletes `key`, fenced like `fencelock_store_put`: the key keeps the delete's token, so a
/// later stale write is still refused. `*existed_out` (optional, may be NULL) receives whether
/// the key held a value.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_STALE_TOKEN`, `FENCELOCK_NULL_POINTER` (`store`, or `key`
/// NULL with a non-zero length), `FENCELOCK_INVALID_ARGUMENT`, `FENCELOCK_TIMEOUT` (another process
/// held the store past the busy timeout), `FENCELOCK_REPLACED` (the store file was replaced at its
/// path), `FENCELOCK_FORKED`, `FENCELOCK_IO`, `FENCELOCK_CORRUPT`, `FENCELOCK_STORAGE`,
/// `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described; `key` points to `key_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_delete(
    store: *const fencelock_store,
    key: *const u8,
    key_len: usize,
    token: u64,
    existed_out: *mut bool,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        fencelock_store_delete_cancellable(
            store,
            key,
            key_len,
            token,
            std::ptr::null(),
            existed_out,
            err_out,
        )
    }
}

/// Like `fencelock_store_delete`, its wait for another process that holds the store (or for its
/// server) ended within about a millisecond with `FENCELOCK_CANCELLED`, changing nothing, once
/// `cancel` fires (at once when it fired before), and bounded by the deadline of `cancel`
/// (`fencelock_cancel_set_timeout`) instead of the store's busy timeout. NULL: no cancel handle.
///
/// Returns the codes of `fencelock_store_delete`, and `FENCELOCK_CANCELLED`.
///
/// Thread-safe; blocks the calling thread only.
///
/// # Safety
/// Every pointer is NULL or valid as described; `key` points to `key_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_delete_cancellable(
    store: *const fencelock_store,
    key: *const u8,
    key_len: usize,
    token: u64,
    cancel: *const fencelock_cancel,
    existed_out: *mut bool,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let store = &handle(store, "store")?.store;
            let key = key_bytes(key, key_len, "key")?;
            let existed_out = Out::optional(existed_out);
            let existed = with_cancel(
                cancel,
                || store.delete(key, token),
                |cancel| store.delete_cancellable(key, token, cancel),
            )?;
            if let Some(existed_out) = existed_out {
                existed_out.set(existed);
            }
            Ok(())
        })
    }
}

/// Checks `token` against the external fence `resource` (NUL-terminated UTF-8) and records it
/// as the highest seen when it is higher. An equal token passes. For guarding storage of your
/// own with fencelock's tokens.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_STALE_TOKEN`, `FENCELOCK_NULL_POINTER` (`store`, `resource`),
/// `FENCELOCK_INVALID_ARGUMENT` (bad name, token 0 or never granted), `FENCELOCK_TIMEOUT` (another
/// process held the store past the busy timeout), `FENCELOCK_REPLACED` (the store file was replaced
/// at its path), `FENCELOCK_FORKED`, `FENCELOCK_IO`, `FENCELOCK_CORRUPT`, `FENCELOCK_STORAGE`,
/// `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_fence(
    store: *const fencelock_store,
    resource: *const c_char,
    token: u64,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe { fencelock_store_fence_cancellable(store, resource, token, std::ptr::null(), err_out) }
}

/// Like `fencelock_store_fence`, its wait for another process that holds the store (or for its
/// server) ended within about a millisecond with `FENCELOCK_CANCELLED`, changing nothing, once
/// `cancel` fires (at once when it fired before), and bounded by the deadline of `cancel`
/// (`fencelock_cancel_set_timeout`) instead of the store's busy timeout. NULL: no cancel handle.
///
/// Returns the codes of `fencelock_store_fence`, and `FENCELOCK_CANCELLED`.
///
/// Thread-safe; blocks the calling thread only.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_fence_cancellable(
    store: *const fencelock_store,
    resource: *const c_char,
    token: u64,
    cancel: *const fencelock_cancel,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let store = &handle(store, "store")?.store;
            let resource = name(resource, "resource")?;
            with_cancel(
                cancel,
                || store.fence(resource, token),
                |cancel| store.fence_cancellable(resource, token, cancel),
            )?;
            Ok(())
        })
    }
}

/// The highest token the external fence `resource` has accepted. `*token_out` receives it, or
/// 0 when the resource has seen no token.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`store`, `resource`, `token_out`),
/// `FENCELOCK_INVALID_ARGUMENT`, `FENCELOCK_FORKED`, `FENCELOCK_IO`, `FENCELOCK_CORRUPT`,
/// `FENCELOCK_STORAGE`, `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_fence_token(
    store: *const fencelock_store,
    resource: *const c_char,
    token_out: *mut u64,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let store = handle(store, "store")?;
            let resource = name(resource, "resource")?;
            let token_out = Out::required(token_out, "token_out")?;
            let token = store.store.fence_token(resource)?;
            token_out.set(token.unwrap_or(0));
            Ok(())
        })
    }
}

/// The process id of the server (`fencelock serve`) that the store's operations go through
/// now, in `*pid_out`; 0 when the store uses the file itself.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`store`, `pid_out`), `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_server_pid(
    store: *const fencelock_store,
    pid_out: *mut u32,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let store = handle(store, "store")?;
            let pid_out = Out::required(pid_out, "pid_out")?;
            pid_out.set(store.store.server().unwrap_or(0));
            Ok(())
        })
    }
}

/// Every lock record with its state, in name order. On success `*list_out` receives a new
/// list, to be freed with `fencelock_lock_list_free`.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`store`, `list_out`), `FENCELOCK_FORKED`,
/// `FENCELOCK_IO`, `FENCELOCK_CORRUPT`, `FENCELOCK_STORAGE`, `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_locks(
    store: *const fencelock_store,
    list_out: *mut *mut fencelock_lock_list,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let store = handle(store, "store")?;
            let list_out = Out::required(list_out, "list_out")?;
            let locks = store.store.locks()?;
            list_out.set(fencelock_lock_list::into_raw(locks));
            Ok(())
        })
    }
}

/// The keys holding a value that start with `prefix` (`prefix_len` bytes; NULL with 0 for
/// every key), in byte order. On success `*list_out` receives a new list, to be freed with
/// `fencelock_key_list_free`.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`store`, `list_out`, or `prefix` NULL
/// with a non-zero length), `FENCELOCK_INVALID_ARGUMENT` (prefix over 1024 bytes),
/// `FENCELOCK_FORKED`, `FENCELOCK_IO`, `FENCELOCK_CORRUPT`, `FENCELOCK_STORAGE`,
/// `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described; `prefix` points to `prefix_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_keys(
    store: *const fencelock_store,
    prefix: *const u8,
    prefix_len: usize,
    list_out: *mut *mut fencelock_key_list,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let store = handle(store, "store")?;
            let prefix = key_bytes(prefix, prefix_len, "prefix")?;
            let list_out = Out::required(list_out, "list_out")?;
            let keys = store.store.keys(prefix)?;
            list_out.set(fencelock_key_list::into_raw(keys));
            Ok(())
        })
    }
}

/// Frees a buffer returned by `fencelock_store_get` or `fencelock_store_metrics_prometheus`, with the length returned with it. NULL
/// does nothing.
///
/// No other thread may use the buffer during or after this call.
///
/// # Safety
/// `ptr` is NULL or a buffer from this library, not yet freed, and `len` its length.
#[no_mangle]
pub unsafe extern "C" fn fencelock_buffer_free(ptr: *mut u8, len: usize) {
    guard_value((), || {
        if !ptr.is_null() {
            // SAFETY: upheld by the caller: the buffer came from `buffer_into_raw`, which
            // hands out a boxed slice of exactly `len` bytes.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
        }
    });
}

/// Hands a value to C as (pointer, length); the pointer is never NULL, even for no bytes.
pub(super) fn buffer_into_raw(value: Vec<u8>) -> (*mut u8, usize) {
    let len = value.len();
    let ptr = Box::into_raw(value.into_boxed_slice()).cast::<u8>();
    (ptr, len)
}
