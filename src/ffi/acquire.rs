//! `fencelock_acquire_options` and `fencelock_store_acquire_opts`: every acquire of the C ABI
//! as one call with an options struct, as `sqlite3_open_v2` takes flags. The struct is tagged
//! with its size, so that it can grow: a program built with an older header passes a smaller
//! struct (every field it lacks is taken as zero, its default), one built with a newer header a
//! larger one, accepted when the fields this library does not know are zero (as Linux's
//! `openat2` reads its `struct open_how`). The other acquire entry points fill the struct in.

use std::ffi::c_char;
use std::mem::{offset_of, size_of, MaybeUninit};

use super::kinds::kind_of;
use super::store::fencelock_store;
use super::{
    fencelock_cancel, fencelock_error, fencelock_holder, fencelock_status, guard, handle,
    key_bytes, millis, null, value_bytes, Out, FENCELOCK_KIND_SEMAPHORE,
};
use crate::Status;
use crate::{Error, MAX_HOLDERS};

/// Flag of `fencelock_acquire_options`: wait for the lock(s) up to `timeout_ms` (`UINT64_MAX`:
/// without a limit) instead of trying once. A wait gives up with `FENCELOCK_TIMEOUT`, never
/// `FENCELOCK_LOCKED`.
pub const FENCELOCK_ACQUIRE_WAIT: u64 = 1;
/// Flag of `fencelock_acquire_options`: write `value` under `key` with the new token in the
/// grant's own transaction (both happen or neither). One exclusive lock only.
pub const FENCELOCK_ACQUIRE_PUT: u64 = 2;

/// How `fencelock_store_acquire_opts` acquires. Zero every field, set `size` to
/// `sizeof(fencelock_acquire_options)` and `ttl_ms`, then what differs from the defaults (one
/// exclusive lock, tried once, no write, no cancel handle):
///
/// ```c
/// fencelock_acquire_options options = {
///     .size = sizeof(fencelock_acquire_options),
///     .ttl_ms = 30000,
///     .flags = FENCELOCK_ACQUIRE_WAIT,
///     .timeout_ms = 10000,
/// };
/// ```
///
/// Fields a later version adds come after these, and zero is their default.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fencelock_acquire_options {
    /// `sizeof(fencelock_acquire_options)` as the caller's header has it.
    pub size: usize,
    /// The lease length of each grant, 1 ms to 30 days.
    pub ttl_ms: u64,
    /// With `FENCELOCK_ACQUIRE_WAIT`, how long to wait (`UINT64_MAX`: without a limit); must be
    /// 0 without it.
    pub timeout_ms: u64,
    /// 0 or a bitwise or of `FENCELOCK_ACQUIRE_WAIT` and `FENCELOCK_ACQUIRE_PUT`.
    pub flags: u64,
    /// `FENCELOCK_KIND_EXCLUSIVE` (0), `FENCELOCK_KIND_SHARED` or `FENCELOCK_KIND_SEMAPHORE`;
    /// several names are exclusive only.
    pub kind: i32,
    /// The permit count of a `FENCELOCK_KIND_SEMAPHORE` (1 to `FENCELOCK_MAX_HOLDERS`); 0 for
    /// another kind.
    pub permits: u32,
    /// Ends the call once it fires (`FENCELOCK_CANCELLED`, changing nothing) and bounds it by
    /// its deadline (`fencelock_cancel_set_timeout`): the wait for the locks, and the wait of a
    /// try for another process that holds the store, instead of the store's busy timeout. It
    /// may name the thread the leases are for (`fencelock_cancel_set_thread`). NULL: none.
    pub cancel: *const fencelock_cancel,
    /// With `FENCELOCK_ACQUIRE_PUT`, the key (1 to 1024 bytes) and the value (may be empty:
    /// then `value` may be NULL) to write; both NULL and 0 without it.
    pub key: *const u8,
    pub key_len: usize,
    pub value: *const u8,
    pub value_len: usize,
}

impl fencelock_acquire_options {
    /// The defaults with `ttl_ms`: one exclusive lock, tried once, no write, no cancel handle.
    pub(super) fn new(ttl_ms: u64) -> fencelock_acquire_options {
        fencelock_acquire_options {
            size: size_of::<fencelock_acquire_options>(),
            ttl_ms,
            timeout_ms: 0,
            flags: 0,
            kind: super::FENCELOCK_KIND_EXCLUSIVE,
            permits: 0,
            cancel: std::ptr::null(),
            key: std::ptr::null(),
            key_len: 0,
            value: std::ptr::null(),
            value_len: 0,
        }
    }
}

/// The size of the first `fencelock_acquire_options`, which every caller's struct has.
const OPTIONS_V1_SIZE: usize = 80;
const _: () = assert!(offset_of!(fencelock_acquire_options, value_len) + 8 == OPTIONS_V1_SIZE);
// No padding, which a later field could hide in without changing the size.
const _: () = assert!(size_of::<fencelock_acquire_options>() == OPTIONS_V1_SIZE);
/// The largest `size` read: a garbage size is refused before any byte past the struct is read.
const OPTIONS_MAX_SIZE: usize = 4096;

fn invalid(message: String) -> fencelock_error {
    fencelock_error::new(Status::InvalidArgument, message)
}

/// The caller's options as this library knows them: the fields its struct has, zeros for the
/// rest; refused when `size` is not a size of the struct or it sets fields unknown here.
///
/// # Safety
/// `options` points to a `size_t`, and to `options->size` readable bytes when that is at most
/// `OPTIONS_MAX_SIZE`.
unsafe fn read_options(
    options: *const fencelock_acquire_options,
) -> Result<fencelock_acquire_options, fencelock_error> {
    // SAFETY: upheld by the caller: the first field is there whatever the version.
    let size = unsafe { options.cast::<usize>().read_unaligned() };
    if !(OPTIONS_V1_SIZE..=OPTIONS_MAX_SIZE).contains(&size) {
        return Err(invalid(format!(
            "options->size {size} is not the size of a fencelock_acquire_options (at least \
             {OPTIONS_V1_SIZE} bytes): set it to sizeof(fencelock_acquire_options)"
        )));
    }
    let ours = size_of::<fencelock_acquire_options>();
    // SAFETY: upheld by the caller: `size` bytes are readable, and `size` is at most 4096.
    let bytes = unsafe { std::slice::from_raw_parts(options.cast::<u8>(), size) };
    if bytes
        .get(ours..)
        .is_some_and(|rest| rest.iter().any(|&b| b != 0))
    {
        return Err(invalid(format!(
            "options of {size} bytes set fields this library ({ours} bytes, version {}) does not \
             know: use a library as new as the header",
            crate::VERSION
        )));
    }
    let mut known = MaybeUninit::<fencelock_acquire_options>::zeroed();
    let len = size.min(ours);
    // SAFETY: `len` bytes of each are valid; the struct holds integers and raw pointers only,
    // for which every byte pattern is a value (zeros past the caller's fields).
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), known.as_mut_ptr().cast::<u8>(), len);
        Ok(known.assume_init())
    }
}

/// Acquires the locks `names` (an array of `count` NUL-terminated UTF-8 names, 1 to
/// `FENCELOCK_MAX_HOLDERS`, no name twice) as `options` says: the one entry point of every
/// acquire. One name is one lock of any kind, tried once or waited for in its turn (waiting
/// acquires of a name, of every kind, are granted oldest first across processes), with an
/// optional write in the grant's transaction (`FENCELOCK_ACQUIRE_PUT`). Several names are taken
/// exclusively, all or none in one transaction: deadlock-free by construction, since it never
/// holds some while it waits for others (nor does it queue behind other waiters).
///
/// On success `holders_out[0..count]` receive one new holder per name, in the order of `names`,
/// each with its own token (higher than every earlier grant), lease and TTL, each to be freed
/// with `fencelock_holder_free` (which releases it); on failure nothing is written. For one
/// lock: `fencelock_store_acquire_opts(store, &name, 1, &options, &holder, &err)`.
///
/// Returns `FENCELOCK_OK`; `FENCELOCK_LOCKED` (a try, while a live lease holds a lock in a way
/// that excludes the grant: the error names that holder), `FENCELOCK_PERMITS_MISMATCH`,
/// `FENCELOCK_TIMEOUT` (a wait's `timeout_ms`, the cancel's deadline, or the busy timeout
/// behind another process that holds the store), `FENCELOCK_CANCELLED`,
/// `FENCELOCK_WOULD_DEADLOCK` (a wait for a lease this thread holds through this store);
/// `FENCELOCK_LOCK_LOST` (with `FENCELOCK_ACQUIRE_PUT`, through the redo log: stopped past its
/// TTL between its grant and its write, the lock granted to another who wrote the key first;
/// nothing written); `FENCELOCK_NULL_POINTER` (`store`, `names`, a name, `options`, `holders_out`, or `key` or
/// `value` NULL with a non-zero length); `FENCELOCK_INVALID_ARGUMENT` (`options->size` not a
/// size of the struct, or fields set that this library does not know, refused before anything
/// else is read; unknown flags or kind; permits with a kind other than a semaphore; a timeout
/// without `FENCELOCK_ACQUIRE_WAIT`; a key or value without `FENCELOCK_ACQUIRE_PUT`; a write with
/// another kind than exclusive or with several names; another kind than exclusive with several
/// names; a `count` of 0 or above `FENCELOCK_MAX_HOLDERS`, refused before `names` is read; a
/// name twice; a bad name, TTL, key or value); `FENCELOCK_REPLACED`, `FENCELOCK_FORKED`,
/// `FENCELOCK_IO`, `FENCELOCK_CORRUPT`, `FENCELOCK_STORAGE`, `FENCELOCK_PANIC`.
///
/// Thread-safe; blocks the calling thread only.
///
/// # Safety
/// Every pointer is NULL or valid as described: `names` points to `count` name pointers,
/// `holders_out` to room for `count` holder pointers, `options` to `options->size` readable
/// bytes, `key` and `value` to `key_len` and `value_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_acquire_opts(
    store: *const fencelock_store,
    names: *const *const c_char,
    count: usize,
    options: *const fencelock_acquire_options,
    holders_out: *mut *mut fencelock_holder,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let store = &handle(store, "store")?.store;
            if names.is_null() {
                return Err(null("names"));
            }
            if options.is_null() {
                return Err(null("options"));
            }
            let holders_out = Out::required(holders_out, "holders_out")?;
            // Before `names` is read: a count out of range (`SIZE_MAX` from a careless
            // `n - 1`) is the engine's refusal, not a read past the array.
            if count == 0 || count > MAX_HOLDERS as usize {
                return Err(Error::InvalidArgument(format!(
                    "an acquire of several locks names 1 to {MAX_HOLDERS} of them, not {count}"
                ))
                .into());
            }
            let options = read_options(options)?;
            let what = if count == 1 { "name" } else { "a name" };
            let names = std::slice::from_raw_parts(names, count)
                .iter()
                .map(|&name| super::name(name, what))
                .collect::<Result<Vec<_>, _>>()?;
            let holders = acquire(store, &names, &options)?;
            let raw: Vec<*mut fencelock_holder> = holders
                .into_iter()
                .map(fencelock_holder::into_raw)
                .collect();
            holders_out.set_all(&raw);
            Ok(())
        })
    }
}

/// The acquire `options` ask for, of `names`, as the Rust builder makes it.
///
/// # Safety
/// The pointers of `options` are NULL or valid as `fencelock_store_acquire_opts` describes.
unsafe fn acquire(
    store: &crate::Store,
    names: &[&str],
    options: &fencelock_acquire_options,
) -> Result<Vec<crate::Holder>, fencelock_error> {
    let known = FENCELOCK_ACQUIRE_WAIT | FENCELOCK_ACQUIRE_PUT;
    if options.flags & !known != 0 {
        return Err(invalid(format!(
            "unknown acquire flags {:#x}",
            options.flags & !known
        )));
    }
    let wait = options.flags & FENCELOCK_ACQUIRE_WAIT != 0;
    if !wait && options.timeout_ms != 0 {
        return Err(invalid(format!(
            "timeout_ms {} without FENCELOCK_ACQUIRE_WAIT: set the flag to wait",
            options.timeout_ms
        )));
    }
    if options.kind != FENCELOCK_KIND_SEMAPHORE && options.permits != 0 {
        return Err(invalid(format!(
            "permits {} with kind {}: a permit count is a semaphore's",
            options.permits, options.kind
        )));
    }
    let kind = kind_of(options.kind, options.permits)?;
    let write = if options.flags & FENCELOCK_ACQUIRE_PUT != 0 {
        // SAFETY: upheld by the caller.
        Some(unsafe {
            (
                key_bytes(options.key, options.key_len, "key")?,
                value_bytes(options.value, options.value_len)?,
            )
        })
    } else {
        let given = !options.key.is_null()
            || options.key_len != 0
            || !options.value.is_null()
            || options.value_len != 0;
        if given {
            return Err(invalid(
                "a key or value without FENCELOCK_ACQUIRE_PUT: set the flag to write".into(),
            ));
        }
        None
    };
    // SAFETY: upheld by the caller.
    let cancel = unsafe { options.cancel.as_ref() }.map(|cancel| &cancel.cancel);
    let (ttl, timeout) = (millis(options.ttl_ms), millis(options.timeout_ms));
    if let [name] = names {
        let mut lock = store.lock(name).kind(kind).ttl(ttl).timeout(timeout);
        if let Some(cancel) = cancel {
            lock = lock.cancel(cancel);
        }
        if let Some((key, value)) = write {
            lock = lock.put(key, value);
        }
        let holder = if wait {
            lock.acquire()
        } else {
            lock.try_acquire()
        }?;
        return Ok(vec![holder]);
    }
    if write.is_some() || kind != crate::Kind::Exclusive {
        return Err(invalid(format!(
            "an acquire of {} locks takes them exclusively and writes nothing",
            names.len()
        )));
    }
    let mut locks = store.lock_all(names).ttl(ttl).timeout(timeout);
    if let Some(cancel) = cancel {
        locks = locks.cancel(cancel);
    }
    Ok(if wait {
        locks.acquire()
    } else {
        locks.try_acquire()
    }?)
}
