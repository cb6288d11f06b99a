//! `fencelock_lock_list`, `fencelock_waiter_list` and `fencelock_key_list`: results of listing a
//! store.

use std::ffi::{c_char, CString};
use std::time::{SystemTime, UNIX_EPOCH};

use super::{
    fencelock_error, fencelock_status, fencelock_store, free_boxed, guard, handle, name, read_or,
    Out, FENCELOCK_LOCK_EXPIRED, FENCELOCK_LOCK_HELD, FENCELOCK_LOCK_HOLDER_DEAD,
    FENCELOCK_LOCK_RELEASED,
};
use crate::Status;
use crate::{LockInfo, LockState, WaiterInfo};

/// What the store records of one lock.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fencelock_lock_info {
    /// The lock's name, NUL-terminated UTF-8; valid while the list lives.
    pub name: *const c_char,
    /// The token of the last grant.
    pub token: u64,
    /// The holder's process id.
    pub pid: u32,
    /// One of `FENCELOCK_LOCK_HELD`, `_EXPIRED`, `_RELEASED`, `_HOLDER_DEAD`.
    pub state: i32,
    /// When the lease was granted, in milliseconds since the Unix epoch (wall-clock estimate).
    pub granted_unix_ms: i64,
    /// When the lease expires or expired, in milliseconds since the Unix epoch (estimate).
    pub expires_unix_ms: i64,
    /// Time left before expiry in milliseconds; 0 once expired.
    pub remaining_ms: u64,
}

/// A list of lock records from `fencelock_store_locks`; freed with `fencelock_lock_list_free`.
/// Immutable, so safe to read from many threads at once.
pub struct fencelock_lock_list {
    /// Owns the names the entries of `infos` point into; a `CString`'s bytes do not move.
    _names: Vec<CString>,
    infos: Vec<fencelock_lock_info>,
    /// The kind and permit count of each entry, apart from `fencelock_lock_info`, whose size
    /// programs built with an older header rely on.
    kinds: Vec<(i32, u32)>,
}

/// An acquire queued waiting for a lock (`fencelock_store_waiters`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fencelock_waiter_info {
    /// The lock's name, NUL-terminated UTF-8; valid while the list lives.
    pub name: *const c_char,
    /// The waiting process's id.
    pub pid: u32,
    /// Its place in the queue: a lower ticket waits longer and is served first.
    pub ticket: u64,
    /// When it took its place, in milliseconds since the Unix epoch (wall-clock estimate).
    pub waiting_since_unix_ms: i64,
    /// How long it has waited, in milliseconds.
    pub waited_ms: u64,
}

/// The waiters of a lock from `fencelock_store_waiters`, oldest first; freed with
/// `fencelock_waiter_list_free`. Immutable, so safe to read from many threads at once.
pub struct fencelock_waiter_list {
    /// Owns the names the entries of `infos` point into; a `CString`'s bytes do not move.
    _names: Vec<CString>,
    infos: Vec<fencelock_waiter_info>,
}

impl fencelock_waiter_list {
    fn into_raw(waiters: Vec<WaiterInfo>) -> *mut fencelock_waiter_list {
        let mut names = Vec::with_capacity(waiters.len());
        let mut infos = Vec::with_capacity(waiters.len());
        for waiter in waiters {
            // Lock names are checked UTF-8 without NUL bytes before they are listed.
            let name = CString::new(waiter.name).expect("lock names contain no NUL byte");
            infos.push(fencelock_waiter_info {
                name: name.as_ptr(),
                pid: waiter.pid,
                ticket: waiter.ticket,
                waiting_since_unix_ms: unix_ms(waiter.waiting_since),
                waited_ms: u64::try_from(waiter.waited.as_millis()).unwrap_or(u64::MAX),
            });
            names.push(name);
        }
        Box::into_raw(Box::new(fencelock_waiter_list {
            _names: names,
            infos,
        }))
    }
}

/// The acquires of any process of this host queued waiting for the lock `name`, oldest first
/// (the order they are served in); empty for a store opened in single-process mode, whose
/// waits are not queued. On success `*list_out` receives a new list, to be freed with
/// `fencelock_waiter_list_free`.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`store`, `name`, `list_out`),
/// `FENCELOCK_INVALID_ARGUMENT` (a bad lock name, an etcd store), `FENCELOCK_FORKED`,
/// `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described; `name` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_waiters(
    store: *const fencelock_store,
    name: *const c_char,
    list_out: *mut *mut fencelock_waiter_list,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let store = handle(store, "store")?;
            let lock = self::name(name, "name")?;
            let list_out = Out::required(list_out, "list_out")?;
            let waiters = store.store.waiters(lock)?;
            list_out.set(fencelock_waiter_list::into_raw(waiters));
            Ok(())
        })
    }
}

/// The number of entries of `list`; 0 for NULL.
///
/// Thread-safe.
///
/// # Safety
/// `list` is NULL or a list from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_waiter_list_len(list: *const fencelock_waiter_list) -> usize {
    // SAFETY: upheld by the caller.
    unsafe { read_or(list, 0, |list| list.infos.len()) }
}

/// Copies entry `index` of `list` to `*info_out`. Its `name` points into the list and is valid
/// until `fencelock_waiter_list_free(list)`.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`list`, `info_out`),
/// `FENCELOCK_INVALID_ARGUMENT` (`index` out of range), `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_waiter_list_get(
    list: *const fencelock_waiter_list,
    index: usize,
    info_out: *mut fencelock_waiter_info,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(std::ptr::null_mut(), || {
            let list = handle(list, "list")?;
            let info_out = Out::required(info_out, "info_out")?;
            let info = list
                .infos
                .get(index)
                .ok_or_else(|| out_of_range(index, list.infos.len()))?;
            info_out.set(*info);
            Ok(())
        })
    }
}

/// Frees a waiter list. NULL does nothing.
///
/// No other thread may use `list` during or after this call.
///
/// # Safety
/// `list` is NULL or a list from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_waiter_list_free(list: *mut fencelock_waiter_list) {
    // SAFETY: upheld by the caller.
    unsafe { free_boxed(list) }
}

/// A list of keys from `fencelock_store_keys`; freed with `fencelock_key_list_free`.
/// Immutable, so safe to read from many threads at once.
pub struct fencelock_key_list {
    keys: Vec<Vec<u8>>,
}

impl fencelock_lock_list {
    pub(super) fn into_raw(locks: Vec<LockInfo>) -> *mut fencelock_lock_list {
        let mut names = Vec::with_capacity(locks.len());
        let mut infos = Vec::with_capacity(locks.len());
        let mut kinds = Vec::with_capacity(locks.len());
        for lock in locks {
            // Lock names are checked UTF-8 without NUL bytes before they are granted.
            let name = CString::new(lock.name).expect("lock names contain no NUL byte");
            infos.push(fencelock_lock_info {
                name: name.as_ptr(),
                token: lock.token,
                pid: lock.pid,
                state: match lock.state {
                    LockState::Held => FENCELOCK_LOCK_HELD,
                    LockState::Expired => FENCELOCK_LOCK_EXPIRED,
                    LockState::Released => FENCELOCK_LOCK_RELEASED,
                    LockState::HolderDead => FENCELOCK_LOCK_HOLDER_DEAD,
                },
                granted_unix_ms: unix_ms(lock.granted_at),
                expires_unix_ms: unix_ms(lock.expires_at),
                remaining_ms: u64::try_from(lock.remaining.as_millis()).unwrap_or(u64::MAX),
            });
            kinds.push(super::kinds::kind_code(lock.kind));
            names.push(name);
        }
        Box::into_raw(Box::new(fencelock_lock_list {
            _names: names,
            infos,
            kinds,
        }))
    }
}

impl fencelock_key_list {
    pub(super) fn into_raw(keys: Vec<Vec<u8>>) -> *mut fencelock_key_list {
        Box::into_raw(Box::new(fencelock_key_list { keys }))
    }
}

/// Milliseconds since the Unix epoch, negative before it.
pub(super) fn unix_ms(at: SystemTime) -> i64 {
    match at.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

/// Milliseconds since the Unix epoch of `at`, 0 when not known.
pub(super) fn unix_ms_or_zero(at: Option<SystemTime>) -> i64 {
    at.map_or(0, unix_ms)
}

fn out_of_range(index: usize, len: usize) -> fencelock_error {
    fencelock_error::new(
        Status::InvalidArgument,
        format!("index {index} is out of range for a list of {len}"),
    )
}

/// The number of entries of `list`; 0 for NULL.
///
/// Thread-safe.
///
/// # Safety
/// `list` is NULL or a list from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_lock_list_len(list: *const fencelock_lock_list) -> usize {
    // SAFETY: upheld by the caller.
    unsafe { read_or(list, 0, |list| list.infos.len()) }
}

/// Copies entry `index` of `list` to `*info_out`. Its `name` points into the list and is valid
/// until `fencelock_lock_list_free(list)`.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`list`, `info_out`),
/// `FENCELOCK_INVALID_ARGUMENT` (`index` out of range), `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_lock_list_get(
    list: *const fencelock_lock_list,
    index: usize,
    info_out: *mut fencelock_lock_info,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(std::ptr::null_mut(), || {
            let list = handle(list, "list")?;
            let info_out = Out::required(info_out, "info_out")?;
            let info = list
                .infos
                .get(index)
                .ok_or_else(|| out_of_range(index, list.infos.len()))?;
            info_out.set(*info);
            Ok(())
        })
    }
}

/// Writes the kind of entry `index` of `list` to `*kind_out` (`FENCELOCK_KIND_EXCLUSIVE`,
/// `_SHARED` or `_SEMAPHORE`) and its name's permit count to `*permits_out` (0 unless a
/// semaphore). A semaphore or shared lock lists one entry per grant it holds, under one name.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`list`, `kind_out`, `permits_out`),
/// `FENCELOCK_INVALID_ARGUMENT` (`index` out of range), `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_lock_list_kind(
    list: *const fencelock_lock_list,
    index: usize,
    kind_out: *mut i32,
    permits_out: *mut u32,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(std::ptr::null_mut(), || {
            let list = handle(list, "list")?;
            let kind_out = Out::required(kind_out, "kind_out")?;
            let permits_out = Out::required(permits_out, "permits_out")?;
            let (kind, permits) = *list
                .kinds
                .get(index)
                .ok_or_else(|| out_of_range(index, list.kinds.len()))?;
            kind_out.set(kind);
            permits_out.set(permits);
            Ok(())
        })
    }
}

/// Frees a lock list. NULL does nothing.
///
/// No other thread may use `list` during or after this call.
///
/// # Safety
/// `list` is NULL or a list from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_lock_list_free(list: *mut fencelock_lock_list) {
    // SAFETY: upheld by the caller.
    unsafe { free_boxed(list) }
}

/// The number of keys of `list`; 0 for NULL.
///
/// Thread-safe.
///
/// # Safety
/// `list` is NULL or a list from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_key_list_len(list: *const fencelock_key_list) -> usize {
    // SAFETY: upheld by the caller.
    unsafe { read_or(list, 0, |list| list.keys.len()) }
}

/// Key `index` of `list`: `*key_out` receives a pointer to its bytes (valid until
/// `fencelock_key_list_free(list)`; never free it yourself) and `*key_len_out` its length.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`list`, `key_out`, `key_len_out`),
/// `FENCELOCK_INVALID_ARGUMENT` (`index` out of range), `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_key_list_get(
    list: *const fencelock_key_list,
    index: usize,
    key_out: *mut *const u8,
    key_len_out: *mut usize,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(std::ptr::null_mut(), || {
            let list = handle(list, "list")?;
            let key_out = Out::required(key_out, "key_out")?;
            let key_len_out = Out::required(key_len_out, "key_len_out")?;
            let key = list
                .keys
                .get(index)
                .ok_or_else(|| out_of_range(index, list.keys.len()))?;
            key_out.set(key.as_ptr());
            key_len_out.set(key.len());
            Ok(())
        })
    }
}

/// Frees a key list. NULL does nothing.
///
/// No other thread may use `list` during or after this call.
///
/// # Safety
/// `list` is NULL or a list from this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fencelock_key_list_free(list: *mut fencelock_key_list) {
    // SAFETY: upheld by the caller.
    unsafe { free_boxed(list) }
}
