//! The C ABI called directly from Rust: NULL pointers, bad UTF-8, the panic boundary,
//! out-parameters left untouched on failure, and every status code reachable from C.
#![allow(clippy::too_many_lines)]
// Every call here is a call of the C ABI, unsafe by its contract, and every one keeps the same
// rule: the handles passed are live (made by the library, not yet freed) or NULL on purpose,
// and the out-pointers point to locals. Said once here rather than at each of 140 blocks.
#![allow(clippy::undocumented_unsafe_blocks)]

use std::ffi::{c_char, CStr, CString};
use std::path::Path;
use std::ptr::{null, null_mut};
use std::thread::sleep;
use std::time::Duration;

use fencelock::ffi::*;

type ErrPtr = *mut fencelock_error;

/// Status, message and numbers of an error object, which is freed.
#[derive(Debug)]
struct Failure {
    status: fencelock_status,
    message: String,
    token: u64,
    highest: u64,
    pid: u32,
    remaining_ms: u64,
    os_code: i32,
}

/// Takes the error written to `*err`, checks its status agrees with `status`, and frees it.
fn take(status: fencelock_status, err: ErrPtr) -> Failure {
    assert_ne!(status, FENCELOCK_OK, "expected a failure");
    assert!(!err.is_null(), "a failure writes *err_out");
    // SAFETY: `err` was just returned by the library.
    unsafe {
        let failure = Failure {
            status: fencelock_error_status(err),
            message: CStr::from_ptr(fencelock_error_message(err))
                .to_str()
                .expect("UTF-8 message")
                .to_owned(),
            token: fencelock_error_token(err),
            highest: fencelock_error_highest(err),
            pid: fencelock_error_pid(err),
            remaining_ms: fencelock_error_remaining_ms(err),
            os_code: fencelock_error_os_code(err),
        };
        fencelock_error_free(err);
        assert_eq!(failure.status, status);
        failure
    }
}

/// Runs a fallible call with an error out-parameter and returns its failure.
fn fails(call: impl FnOnce(*mut ErrPtr) -> fencelock_status) -> Failure {
    let mut err: ErrPtr = null_mut();
    let status = call(&raw mut err);
    take(status, err)
}

/// Runs a fallible call that must succeed, and checks it leaves `*err_out` alone: it starts
/// out holding a live error object (a failing call would free it, so it must be a real one).
fn ok(call: impl FnOnce(*mut ErrPtr) -> fencelock_status) {
    let mut err: ErrPtr = null_mut();
    let mut store = null_mut();
    // SAFETY: the pointers are valid; a NULL path is refused with an error object.
    let refused = unsafe { fencelock_store_open(null(), &raw mut store, &raw mut err) };
    assert_eq!(refused, FENCELOCK_NULL_POINTER);
    let earlier = err;
    let status = call(&raw mut err);
    assert!(
        status == FENCELOCK_OK,
        "expected OK, got {:?}",
        take(status, err)
    );
    assert_eq!(err, earlier, "success leaves *err_out untouched");
    // SAFETY: `err` is the error object of the refused open, not yet freed.
    unsafe { fencelock_error_free(err) };
}

fn c(text: &str) -> CString {
    CString::new(text).expect("no NUL")
}

struct TempStore {
    _dir: tempfile::TempDir,
    path: CString,
    store: *mut fencelock_store,
}

impl Drop for TempStore {
    fn drop(&mut self) {
        // SAFETY: the store is open and used by nothing else any more.
        unsafe { fencelock_store_close(self.store) };
    }
}

fn open_at(path: &CStr) -> *mut fencelock_store {
    let mut store = null_mut();
    // SAFETY: valid pointers.
    ok(|err| unsafe { fencelock_store_open(path.as_ptr(), &raw mut store, err) });
    assert!(!store.is_null());
    store
}

fn temp_store() -> TempStore {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = c(dir.path().join("locks.db").to_str().expect("UTF-8 path"));
    let store = open_at(&path);
    TempStore {
        _dir: dir,
        path,
        store,
    }
}

fn acquire(store: *const fencelock_store, name: &str, ttl_ms: u64) -> *mut fencelock_holder {
    let name = c(name);
    let mut holder = null_mut();
    // SAFETY: valid pointers.
    ok(|err| unsafe {
        fencelock_store_acquire(store, name.as_ptr(), ttl_ms, &raw mut holder, err)
    });
    assert!(!holder.is_null());
    holder
}

/// The value and token under `key`.
fn get(store: *const fencelock_store, key: &[u8]) -> Result<(Vec<u8>, u64), Failure> {
    let (mut ptr, mut len, mut token) = (null_mut(), 0usize, 0u64);
    let mut err: ErrPtr = null_mut();
    // SAFETY: valid pointers.
    let status = unsafe {
        fencelock_store_get(
            store,
            key.as_ptr(),
            key.len(),
            &raw mut ptr,
            &raw mut len,
            &raw mut token,
            &raw mut err,
        )
    };
    if status != FENCELOCK_OK {
        return Err(take(status, err));
    }
    assert!(!ptr.is_null(), "a value is never a NULL pointer");
    // SAFETY: the library returned `len` bytes at `ptr`.
    let value = unsafe { std::slice::from_raw_parts(ptr, len) }.to_vec();
    // SAFETY: freed once, with its length.
    unsafe { fencelock_buffer_free(ptr, len) };
    Ok((value, token))
}

fn put(store: *const fencelock_store, key: &[u8], value: &[u8], token: u64) -> fencelock_status {
    // SAFETY: valid pointers; no error wanted.
    unsafe {
        fencelock_store_put(
            store,
            key.as_ptr(),
            key.len(),
            value.as_ptr(),
            value.len(),
            token,
            null_mut(),
        )
    }
}

const NOT_UTF8: &[u8] = b"bad\xff\xfename\0";

fn not_utf8() -> *const c_char {
    NOT_UTF8.as_ptr().cast()
}

#[test]
fn version_and_status_strings_are_static_and_total() {
    // SAFETY: both functions return static NUL-terminated strings.
    unsafe {
        let version = CStr::from_ptr(fencelock_version()).to_str().unwrap();
        assert_eq!(version, env!("CARGO_PKG_VERSION"));
        for code in FENCELOCK_OK..=FENCELOCK_WOULD_DEADLOCK {
            let text = CStr::from_ptr(fencelock_status_str(code)).to_str().unwrap();
            assert!(!text.is_empty() && text != "unknown status", "code {code}");
        }
        assert_eq!(
            CStr::from_ptr(fencelock_status_str(FENCELOCK_OK)).to_str(),
            Ok("ok")
        );
        for code in [-1, 20, 1000, i32::MIN, i32::MAX] {
            assert_eq!(
                CStr::from_ptr(fencelock_status_str(code)).to_str(),
                Ok("unknown status")
            );
        }
        // The same pointer every time: never freed, never reallocated.
        assert_eq!(fencelock_status_str(3), fencelock_status_str(3));
    }
}

#[test]
fn fenced_values_round_trip_and_refuse_stale_tokens() {
    let t = temp_store();
    let first = acquire(t.store, "payment-export", 60_000);
    // SAFETY: valid holder.
    let n = unsafe { fencelock_holder_token(first) };
    assert!(n > 0);
    // SAFETY: valid holder; the name lives as long as the holder.
    let name = unsafe { CStr::from_ptr(fencelock_holder_name(first)) };
    assert_eq!(name.to_str(), Ok("payment-export"));

    assert_eq!(put(t.store, b"k", b"v1", n), FENCELOCK_OK);
    assert_eq!(get(t.store, b"k").unwrap(), (b"v1".to_vec(), n));

    // SAFETY: valid holder.
    ok(|err| unsafe { fencelock_holder_release(first, err) });
    ok(|err| unsafe { fencelock_holder_release(first, err) }); // idempotent
    let second = acquire(t.store, "payment-export", 60_000);
    // SAFETY: valid holder.
    let n1 = unsafe { fencelock_holder_token(second) };
    assert!(n1 > n);
    assert_eq!(put(t.store, b"k", b"v2", n1), FENCELOCK_OK);

    let stale = fails(|err| unsafe {
        fencelock_store_put(t.store, b"k".as_ptr(), 1, b"old".as_ptr(), 3, n, err)
    });
    assert_eq!((stale.token, stale.highest), (n, n1));
    assert!(stale.message.contains("stale token"), "{}", stale.message);
    assert_eq!(get(t.store, b"k").unwrap(), (b"v2".to_vec(), n1));

    // A zero-length value is a value; NULL is allowed for it.
    // SAFETY: NULL with length 0 is allowed.
    let status =
        unsafe { fencelock_store_put(t.store, b"e".as_ptr(), 1, null(), 0, n1, null_mut()) };
    assert_eq!(status, FENCELOCK_OK);
    assert_eq!(get(t.store, b"e").unwrap(), (Vec::new(), n1));

    // Fenced delete: the key keeps the token, existed_out is optional.
    let mut existed = false;
    ok(|err| unsafe {
        fencelock_store_delete(t.store, b"e".as_ptr(), 1, n1, &raw mut existed, err)
    });
    assert!(existed);
    ok(|err| unsafe { fencelock_store_delete(t.store, b"e".as_ptr(), 1, n1, null_mut(), err) });
    let gone = get(t.store, b"e").unwrap_err();
    assert_eq!(gone.status, FENCELOCK_NOT_FOUND);
    let stale = fails(|err| unsafe {
        fencelock_store_delete(t.store, b"k".as_ptr(), 1, n, null_mut(), err)
    });
    assert_eq!(stale.status, FENCELOCK_STALE_TOKEN);

    // SAFETY: freed once each.
    unsafe {
        fencelock_holder_free(first);
        fencelock_holder_free(second);
    }
}

#[test]
fn locked_lock_lost_and_timeout_carry_their_numbers() {
    let t = temp_store();
    let name = c("job");
    let holder = acquire(t.store, "job", 60_000);
    // SAFETY: valid holder.
    let token = unsafe { fencelock_holder_token(holder) };

    let mut out = std::ptr::dangling_mut::<fencelock_holder>();
    let locked = fails(|err| unsafe {
        fencelock_store_acquire(t.store, name.as_ptr(), 1000, &raw mut out, err)
    });
    assert_eq!(
        out,
        std::ptr::dangling_mut::<fencelock_holder>(),
        "holder_out untouched on failure"
    );
    assert_eq!(locked.token, token);
    assert_eq!(locked.pid, std::process::id());
    assert!(locked.remaining_ms > 0 && locked.remaining_ms <= 60_000);
    assert_eq!(locked.highest, 0);

    // A wait of no time times out; a longer wait of the holder's own thread is refused at
    // once, naming the holder's token.
    let timed_out = fails(|err| unsafe {
        fencelock_store_acquire_wait(t.store, name.as_ptr(), 1000, 0, &raw mut out, err)
    });
    assert_eq!(timed_out.status, FENCELOCK_TIMEOUT);
    let own = fails(|err| unsafe {
        fencelock_store_acquire_wait(t.store, name.as_ptr(), 1000, 60_000, &raw mut out, err)
    });
    assert_eq!(own.status, FENCELOCK_WOULD_DEADLOCK);
    assert_eq!(own.token, token);
    assert_eq!(out, std::ptr::dangling_mut::<fencelock_holder>());
    // From another thread the wait waits, here until its timeout.
    let store = Shared(t.store.cast_const());
    let waited = std::thread::spawn(move || {
        let store = store;
        let mut out = null_mut();
        fails(|err| unsafe {
            fencelock_store_acquire_wait(store.0, c"job".as_ptr(), 1000, 20, &raw mut out, err)
        })
        .status
    })
    .join()
    .unwrap();
    assert_eq!(waited, FENCELOCK_TIMEOUT);
    let locked_put = fails(|err| unsafe {
        fencelock_store_acquire_and_put(
            t.store,
            name.as_ptr(),
            1000,
            b"k".as_ptr(),
            1,
            b"v".as_ptr(),
            1,
            &raw mut out,
            err,
        )
    });
    assert_eq!(locked_put.status, FENCELOCK_LOCKED);
    assert_eq!(get(t.store, b"k").unwrap_err().status, FENCELOCK_NOT_FOUND);

    // A short lease runs out; a new holder takes over; the old one is told it lost the lock.
    let short = acquire(t.store, "short", 5);
    // SAFETY: valid holder.
    let old = unsafe { fencelock_holder_token(short) };
    sleep(Duration::from_millis(30));
    let short_name = c("short");
    let mut taker = null_mut();
    ok(|err| unsafe {
        fencelock_store_acquire_wait(
            t.store,
            short_name.as_ptr(),
            60_000,
            5_000,
            &raw mut taker,
            err,
        )
    });
    // SAFETY: valid holder.
    let new = unsafe { fencelock_holder_token(taker) };
    let lost = fails(|err| unsafe {
        fencelock_holder_put(short, b"k".as_ptr(), 1, b"v".as_ptr(), 1, err)
    });
    assert_eq!(lost.status, FENCELOCK_LOCK_LOST);
    assert_eq!((lost.token, lost.highest), (old, new));
    let lost = fails(|err| unsafe { fencelock_holder_extend(short, 1000, err) });
    assert_eq!(lost.status, FENCELOCK_LOCK_LOST);
    let lost =
        fails(|err| unsafe { fencelock_holder_delete(short, b"k".as_ptr(), 1, null_mut(), err) });
    assert_eq!(lost.status, FENCELOCK_LOCK_LOST);
    let mut held = true;
    ok(|err| unsafe { fencelock_holder_is_held(short, &raw mut held, err) });
    assert!(!held);
    let mut ended = false;
    ok(|err| unsafe { fencelock_holder_wait_lost(short, 0, &raw mut ended, err) });
    assert!(ended, "a LOCK_LOST write marks the holder lost");

    // The new holder writes, extends, deletes.
    ok(|err| unsafe { fencelock_holder_put(taker, b"k".as_ptr(), 1, b"v".as_ptr(), 1, err) });
    assert_eq!(get(t.store, b"k").unwrap(), (b"v".to_vec(), new));
    ok(|err| unsafe { fencelock_holder_extend(taker, 60_000, err) });
    ok(|err| unsafe { fencelock_holder_is_held(taker, &raw mut held, err) });
    assert!(held);
    let mut existed = false;
    ok(|err| unsafe { fencelock_holder_delete(taker, b"k".as_ptr(), 1, &raw mut existed, err) });
    assert!(existed);
    // SAFETY: freed once each.
    unsafe {
        fencelock_holder_free(holder);
        fencelock_holder_free(short);
        fencelock_holder_free(taker);
    }
}

#[test]
fn acquire_and_put_keep_alive_and_wait_lost() {
    let t = temp_store();
    let name = c("both");
    let mut holder = null_mut();
    ok(|err| unsafe {
        fencelock_store_acquire_and_put(
            t.store,
            name.as_ptr(),
            60_000,
            b"key".as_ptr(),
            3,
            null(),
            0,
            &raw mut holder,
            err,
        )
    });
    // SAFETY: valid holder.
    let token = unsafe { fencelock_holder_token(holder) };
    assert_eq!(get(t.store, b"key").unwrap(), (Vec::new(), token));

    ok(|err| unsafe { fencelock_holder_keep_alive(holder, 300, err) });
    ok(|err| unsafe { fencelock_holder_keep_alive(holder, 300, err) }); // again: no change
    let bad = fails(|err| unsafe { fencelock_holder_keep_alive(holder, 2, err) });
    assert_eq!(bad.status, FENCELOCK_INVALID_ARGUMENT);
    let mut lost = true;
    ok(|err| unsafe { fencelock_holder_wait_lost(holder, 10, &raw mut lost, err) });
    assert!(!lost);
    ok(|err| unsafe { fencelock_holder_release(holder, err) });
    ok(|err| unsafe { fencelock_holder_wait_lost(holder, 10_000, &raw mut lost, err) });
    assert!(lost, "release ends the lease");
    // SAFETY: freed once.
    unsafe { fencelock_holder_free(holder) };
}

#[test]
fn fences_lists_and_keys() {
    let t = temp_store();
    let a = acquire(t.store, "a", 60_000);
    let b = acquire(t.store, "b", 60_000);
    // SAFETY: valid holders.
    let (ta, tb) = unsafe { (fencelock_holder_token(a), fencelock_holder_token(b)) };
    let resource = c("bucket/x");
    let mut seen = 7u64;
    ok(|err| unsafe {
        fencelock_store_fence_token(t.store, resource.as_ptr(), &raw mut seen, err)
    });
    assert_eq!(seen, 0);
    ok(|err| unsafe { fencelock_store_fence(t.store, resource.as_ptr(), tb, err) });
    ok(|err| unsafe { fencelock_store_fence(t.store, resource.as_ptr(), tb, err) });
    let stale = fails(|err| unsafe { fencelock_store_fence(t.store, resource.as_ptr(), ta, err) });
    assert_eq!(stale.status, FENCELOCK_STALE_TOKEN);
    assert_eq!((stale.token, stale.highest), (ta, tb));
    ok(|err| unsafe {
        fencelock_store_fence_token(t.store, resource.as_ptr(), &raw mut seen, err)
    });
    assert_eq!(seen, tb);

    let mut locks = null_mut();
    ok(|err| unsafe { fencelock_store_locks(t.store, &raw mut locks, err) });
    // SAFETY: valid list, read then freed once.
    unsafe {
        assert_eq!(fencelock_lock_list_len(locks), 2);
        let mut info: fencelock_lock_info = std::mem::zeroed();
        assert_eq!(
            fencelock_lock_list_get(locks, 0, &raw mut info),
            FENCELOCK_OK
        );
        assert_eq!(CStr::from_ptr(info.name).to_str(), Ok("a"));
        assert_eq!(info.token, ta);
        assert_eq!(info.pid, std::process::id());
        assert_eq!(info.state, FENCELOCK_LOCK_HELD);
        assert!(info.remaining_ms > 0);
        assert!(info.expires_unix_ms > info.granted_unix_ms);
        let before = info.token;
        assert_eq!(
            fencelock_lock_list_get(locks, 2, &raw mut info),
            FENCELOCK_INVALID_ARGUMENT
        );
        assert_eq!(info.token, before, "info_out untouched on failure");
        assert_eq!(
            fencelock_lock_list_get(locks, 0, null_mut()),
            FENCELOCK_NULL_POINTER
        );
        assert_eq!(
            fencelock_lock_list_get(null(), 0, &raw mut info),
            FENCELOCK_NULL_POINTER
        );
        assert_eq!(fencelock_lock_list_len(null()), 0);
        fencelock_lock_list_free(locks);
        fencelock_lock_list_free(null_mut());
    }
    ok(|err| unsafe { fencelock_holder_release(a, err) });
    ok(|err| unsafe { fencelock_store_locks(t.store, &raw mut locks, err) });
    // SAFETY: valid list, read then freed once.
    unsafe {
        let mut info: fencelock_lock_info = std::mem::zeroed();
        assert_eq!(
            fencelock_lock_list_get(locks, 0, &raw mut info),
            FENCELOCK_OK
        );
        assert_eq!(info.state, FENCELOCK_LOCK_RELEASED);
        fencelock_lock_list_free(locks);
    }

    for key in [&b"jobs/1"[..], b"jobs/2", b"other"] {
        assert_eq!(put(t.store, key, b"v", tb), FENCELOCK_OK);
    }
    let mut keys = null_mut();
    ok(|err| unsafe { fencelock_store_keys(t.store, b"jobs/".as_ptr(), 5, &raw mut keys, err) });
    // SAFETY: valid list, read then freed once.
    unsafe {
        assert_eq!(fencelock_key_list_len(keys), 2);
        let (mut ptr, mut len) = (null(), 0usize);
        assert_eq!(
            fencelock_key_list_get(keys, 1, &raw mut ptr, &raw mut len),
            FENCELOCK_OK
        );
        assert_eq!(std::slice::from_raw_parts(ptr, len), b"jobs/2");
        let (ptr_before, len_before) = (ptr, len);
        assert_eq!(
            fencelock_key_list_get(keys, 2, &raw mut ptr, &raw mut len),
            FENCELOCK_INVALID_ARGUMENT
        );
        assert_eq!((ptr, len), (ptr_before, len_before));
        assert_eq!(
            fencelock_key_list_get(keys, 0, null_mut(), &raw mut len),
            FENCELOCK_NULL_POINTER
        );
        assert_eq!(
            fencelock_key_list_get(keys, 0, &raw mut ptr, null_mut()),
            FENCELOCK_NULL_POINTER
        );
        assert_eq!(
            fencelock_key_list_get(null(), 0, &raw mut ptr, &raw mut len),
            FENCELOCK_NULL_POINTER
        );
        assert_eq!(fencelock_key_list_len(null()), 0);
        fencelock_key_list_free(keys);
        fencelock_key_list_free(null_mut());
    }
    ok(|err| unsafe { fencelock_store_keys(t.store, null(), 0, &raw mut keys, err) });
    // SAFETY: valid list, freed once.
    unsafe {
        assert_eq!(fencelock_key_list_len(keys), 3);
        fencelock_key_list_free(keys);
        fencelock_holder_free(a);
        fencelock_holder_free(b);
    }
}

#[test]
#[allow(clippy::many_single_char_names)] // Short names keep each call of the table on a line.
fn every_null_pointer_argument_is_refused() {
    type Call<'a> = (&'a str, Box<dyn Fn(*mut ErrPtr) -> fencelock_status + 'a>);
    let t = temp_store();
    let s = t.store;
    let holder = acquire(s, "h", 60_000);
    let token = unsafe { fencelock_holder_token(holder) };
    let name = c("n");
    let n = name.as_ptr();
    let k = b"key".as_ptr();
    let v = b"val".as_ptr();
    let mut store_out = null_mut();
    let mut holder_out = null_mut();
    let mut buf = null_mut();
    let mut len = 0usize;
    let mut flag = false;
    let mut locks = null_mut();
    let mut keys = null_mut();
    let mut number = 0u64;
    let (so, ho, bo, lo, fo) = (
        &raw mut store_out,
        &raw mut holder_out,
        &raw mut buf,
        &raw mut len,
        &raw mut flag,
    );
    let (lko, kyo, nu) = (&raw mut locks, &raw mut keys, &raw mut number);

    // SAFETY (all calls): every non-NULL pointer is valid; the NULL one is the subject.
    let calls: Vec<Call> = vec![
        (
            "open path",
            Box::new(|e| unsafe { fencelock_store_open(null(), so, e) }),
        ),
        (
            "open store_out",
            Box::new(|e| unsafe { fencelock_store_open(t.path.as_ptr(), null_mut(), e) }),
        ),
        (
            "open_with path",
            Box::new(|e| unsafe { fencelock_store_open_with(null(), 0, 0, so, e) }),
        ),
        (
            "open_with store_out",
            Box::new(|e| unsafe {
                fencelock_store_open_with(t.path.as_ptr(), 0, 0, null_mut(), e)
            }),
        ),
        (
            "acquire store",
            Box::new(|e| unsafe { fencelock_store_acquire(null(), n, 10, ho, e) }),
        ),
        (
            "acquire name",
            Box::new(|e| unsafe { fencelock_store_acquire(s, null(), 10, ho, e) }),
        ),
        (
            "acquire holder_out",
            Box::new(|e| unsafe { fencelock_store_acquire(s, n, 10, null_mut(), e) }),
        ),
        (
            "acquire_wait store",
            Box::new(|e| unsafe { fencelock_store_acquire_wait(null(), n, 10, 0, ho, e) }),
        ),
        (
            "acquire_wait name",
            Box::new(|e| unsafe { fencelock_store_acquire_wait(s, null(), 10, 0, ho, e) }),
        ),
        (
            "acquire_wait holder_out",
            Box::new(|e| unsafe { fencelock_store_acquire_wait(s, n, 10, 0, null_mut(), e) }),
        ),
        (
            "acquire_and_put store",
            Box::new(|e| unsafe {
                fencelock_store_acquire_and_put(null(), n, 10, k, 3, v, 3, ho, e)
            }),
        ),
        (
            "acquire_and_put name",
            Box::new(|e| unsafe {
                fencelock_store_acquire_and_put(s, null(), 10, k, 3, v, 3, ho, e)
            }),
        ),
        (
            "acquire_and_put key",
            Box::new(|e| unsafe {
                fencelock_store_acquire_and_put(s, n, 10, null(), 3, v, 3, ho, e)
            }),
        ),
        (
            "acquire_and_put value",
            Box::new(|e| unsafe {
                fencelock_store_acquire_and_put(s, n, 10, k, 3, null(), 3, ho, e)
            }),
        ),
        (
            "acquire_and_put holder_out",
            Box::new(|e| unsafe {
                fencelock_store_acquire_and_put(s, n, 10, k, 3, v, 3, null_mut(), e)
            }),
        ),
        (
            "put store",
            Box::new(|e| unsafe { fencelock_store_put(null(), k, 3, v, 3, token, e) }),
        ),
        (
            "put key",
            Box::new(|e| unsafe { fencelock_store_put(s, null(), 3, v, 3, token, e) }),
        ),
        (
            "put value",
            Box::new(|e| unsafe { fencelock_store_put(s, k, 3, null(), 3, token, e) }),
        ),
        (
            "get store",
            Box::new(|e| unsafe { fencelock_store_get(null(), k, 3, bo, lo, nu, e) }),
        ),
        (
            "get key",
            Box::new(|e| unsafe { fencelock_store_get(s, null(), 3, bo, lo, nu, e) }),
        ),
        (
            "get value_out",
            Box::new(|e| unsafe { fencelock_store_get(s, k, 3, null_mut(), lo, nu, e) }),
        ),
        (
            "get value_len_out",
            Box::new(|e| unsafe { fencelock_store_get(s, k, 3, bo, null_mut(), nu, e) }),
        ),
        (
            "delete store",
            Box::new(|e| unsafe { fencelock_store_delete(null(), k, 3, token, fo, e) }),
        ),
        (
            "delete key",
            Box::new(|e| unsafe { fencelock_store_delete(s, null(), 3, token, fo, e) }),
        ),
        (
            "fence store",
            Box::new(|e| unsafe { fencelock_store_fence(null(), n, token, e) }),
        ),
        (
            "fence resource",
            Box::new(|e| unsafe { fencelock_store_fence(s, null(), token, e) }),
        ),
        (
            "fence_token store",
            Box::new(|e| unsafe { fencelock_store_fence_token(null(), n, nu, e) }),
        ),
        (
            "fence_token resource",
            Box::new(|e| unsafe { fencelock_store_fence_token(s, null(), nu, e) }),
        ),
        (
            "fence_token token_out",
            Box::new(|e| unsafe { fencelock_store_fence_token(s, n, null_mut(), e) }),
        ),
        (
            "locks store",
            Box::new(|e| unsafe { fencelock_store_locks(null(), lko, e) }),
        ),
        (
            "locks list_out",
            Box::new(|e| unsafe { fencelock_store_locks(s, null_mut(), e) }),
        ),
        (
            "keys store",
            Box::new(|e| unsafe { fencelock_store_keys(null(), k, 3, kyo, e) }),
        ),
        (
            "keys prefix",
            Box::new(|e| unsafe { fencelock_store_keys(s, null(), 3, kyo, e) }),
        ),
        (
            "keys list_out",
            Box::new(|e| unsafe { fencelock_store_keys(s, k, 3, null_mut(), e) }),
        ),
        (
            "extend holder",
            Box::new(|e| unsafe { fencelock_holder_extend(null(), 10, e) }),
        ),
        (
            "is_held holder",
            Box::new(|e| unsafe { fencelock_holder_is_held(null(), fo, e) }),
        ),
        (
            "is_held held_out",
            Box::new(|e| unsafe { fencelock_holder_is_held(holder, null_mut(), e) }),
        ),
        (
            "remaining_ms holder",
            Box::new(|e| unsafe { fencelock_holder_remaining_ms(null(), nu, e) }),
        ),
        (
            "remaining_ms remaining_ms_out",
            Box::new(|e| unsafe { fencelock_holder_remaining_ms(holder, null_mut(), e) }),
        ),
        (
            "holder_put holder",
            Box::new(|e| unsafe { fencelock_holder_put(null(), k, 3, v, 3, e) }),
        ),
        (
            "holder_put key",
            Box::new(|e| unsafe { fencelock_holder_put(holder, null(), 3, v, 3, e) }),
        ),
        (
            "holder_put value",
            Box::new(|e| unsafe { fencelock_holder_put(holder, k, 3, null(), 3, e) }),
        ),
        (
            "holder_delete holder",
            Box::new(|e| unsafe { fencelock_holder_delete(null(), k, 3, fo, e) }),
        ),
        (
            "holder_delete key",
            Box::new(|e| unsafe { fencelock_holder_delete(holder, null(), 3, fo, e) }),
        ),
        (
            "release holder",
            Box::new(|e| unsafe { fencelock_holder_release(null(), e) }),
        ),
        (
            "keep_alive holder",
            Box::new(|e| unsafe { fencelock_holder_keep_alive(null(), 300, e) }),
        ),
        (
            "wait_lost holder",
            Box::new(|e| unsafe { fencelock_holder_wait_lost(null(), 0, fo, e) }),
        ),
        (
            "wait_lost lost_out",
            Box::new(|e| unsafe { fencelock_holder_wait_lost(holder, 0, null_mut(), e) }),
        ),
    ];
    for (what, call) in &calls {
        let failure = fails(call);
        assert_eq!(failure.status, FENCELOCK_NULL_POINTER, "{what}");
        assert!(
            failure.message.contains("is NULL"),
            "{what}: {}",
            failure.message
        );
        // Without an error out-parameter the status is the same.
        assert_eq!(call(null_mut()), FENCELOCK_NULL_POINTER, "{what}");
    }
    drop(calls);
    // Nothing was written, acquired or opened by any refused call.
    assert!(
        store_out.is_null()
            && holder_out.is_null()
            && buf.is_null()
            && locks.is_null()
            && keys.is_null()
    );
    assert_eq!((len, flag, number), (0, false, 0));
    assert_eq!(get(s, b"key").unwrap_err().status, FENCELOCK_NOT_FOUND);
    let mut free_again = null_mut();
    ok(|err| unsafe { fencelock_store_acquire(s, n, 1000, &raw mut free_again, err) });

    // The infallible accessors and the destructors accept NULL.
    // SAFETY: NULL is documented for each.
    unsafe {
        assert_eq!(fencelock_holder_token(null()), 0);
        assert!(fencelock_holder_name(null()).is_null());
        assert_eq!(fencelock_error_status(null()), FENCELOCK_NULL_POINTER);
        assert!(fencelock_error_message(null()).is_null());
        assert_eq!(fencelock_error_token(null()), 0);
        assert_eq!(fencelock_error_highest(null()), 0);
        assert_eq!(fencelock_error_pid(null()), 0);
        assert_eq!(fencelock_error_remaining_ms(null()), 0);
        assert_eq!(fencelock_error_os_code(null()), 0);
        fencelock_error_free(null_mut());
        fencelock_holder_free(null_mut());
        fencelock_store_close(null_mut());
        fencelock_buffer_free(null_mut(), 0);
        fencelock_buffer_free(null_mut(), 10);
        fencelock_holder_free(free_again);
        fencelock_holder_free(holder);
    }
}

#[test]
fn bad_arguments_are_invalid_argument_and_write_nothing() {
    type Call<'a> = (&'a str, Box<dyn Fn(*mut ErrPtr) -> fencelock_status + 'a>);
    let t = temp_store();
    let s = t.store;
    let holder = acquire(s, "h", 60_000);
    let token = unsafe { fencelock_holder_token(holder) };
    let mut holder_out = std::ptr::dangling_mut::<fencelock_holder>();
    let mut store_out = std::ptr::dangling_mut::<fencelock_store>();
    let mut buf = std::ptr::dangling_mut::<u8>();
    let mut keys_out = std::ptr::dangling_mut::<fencelock_key_list>();
    let (mut len, mut number) = (5usize, 5u64);
    let (ho, so, bo, ko) = (
        &raw mut holder_out,
        &raw mut store_out,
        &raw mut buf,
        &raw mut keys_out,
    );
    let (lo, nu) = (&raw mut len, &raw mut number);
    let dir_path = c("/tmp");
    let name = c("n");
    let long = c(&"x".repeat(1025));
    let long_key = vec![b'k'; 1025];
    let big = vec![0u8; 16 * 1024 * 1024 + 1];
    let k = b"key".as_ptr();

    // SAFETY (all calls): every pointer is valid for its length.
    let calls: Vec<Call> = vec![
        (
            "open path not UTF-8",
            Box::new(|e| unsafe { fencelock_store_open(not_utf8(), so, e) }),
        ),
        (
            "open a directory",
            Box::new(|e| unsafe { fencelock_store_open(dir_path.as_ptr(), so, e) }),
        ),
        (
            "open_with unknown mode",
            Box::new(|e| unsafe { fencelock_store_open_with(t.path.as_ptr(), 2, 0, so, e) }),
        ),
        (
            "open_with value limit",
            Box::new(|e| unsafe {
                fencelock_store_open_with(t.path.as_ptr(), 0, (1 << 30) + 1, so, e)
            }),
        ),
        (
            "acquire name not UTF-8",
            Box::new(|e| unsafe { fencelock_store_acquire(s, not_utf8(), 10, ho, e) }),
        ),
        (
            "acquire empty name",
            Box::new(|e| unsafe { fencelock_store_acquire(s, c"".as_ptr(), 10, ho, e) }),
        ),
        (
            "acquire long name",
            Box::new(|e| unsafe { fencelock_store_acquire(s, long.as_ptr(), 10, ho, e) }),
        ),
        (
            "acquire ttl 0",
            Box::new(|e| unsafe { fencelock_store_acquire(s, name.as_ptr(), 0, ho, e) }),
        ),
        (
            "acquire ttl too long",
            Box::new(|e| unsafe { fencelock_store_acquire(s, name.as_ptr(), u64::MAX, ho, e) }),
        ),
        (
            "acquire_wait name not UTF-8",
            Box::new(|e| unsafe { fencelock_store_acquire_wait(s, not_utf8(), 10, 0, ho, e) }),
        ),
        (
            "acquire_and_put empty key",
            Box::new(|e| unsafe {
                fencelock_store_acquire_and_put(s, name.as_ptr(), 10, null(), 0, null(), 0, ho, e)
            }),
        ),
        (
            "acquire_and_put big value",
            Box::new(|e| unsafe {
                fencelock_store_acquire_and_put(
                    s,
                    name.as_ptr(),
                    10,
                    k,
                    3,
                    big.as_ptr(),
                    big.len(),
                    ho,
                    e,
                )
            }),
        ),
        (
            "put empty key",
            Box::new(|e| unsafe { fencelock_store_put(s, null(), 0, null(), 0, token, e) }),
        ),
        (
            "put long key",
            Box::new(|e| unsafe {
                fencelock_store_put(s, long_key.as_ptr(), long_key.len(), null(), 0, token, e)
            }),
        ),
        (
            "put big value",
            Box::new(|e| unsafe {
                fencelock_store_put(s, k, 3, big.as_ptr(), big.len(), token, e)
            }),
        ),
        (
            "put token 0",
            Box::new(|e| unsafe { fencelock_store_put(s, k, 3, null(), 0, 0, e) }),
        ),
        (
            "put token never granted",
            Box::new(|e| unsafe { fencelock_store_put(s, k, 3, null(), 0, token + 100, e) }),
        ),
        (
            "get empty key",
            Box::new(|e| unsafe { fencelock_store_get(s, null(), 0, bo, lo, nu, e) }),
        ),
        (
            "delete token 0",
            Box::new(|e| unsafe { fencelock_store_delete(s, k, 3, 0, null_mut(), e) }),
        ),
        (
            "fence resource not UTF-8",
            Box::new(|e| unsafe { fencelock_store_fence(s, not_utf8(), token, e) }),
        ),
        (
            "fence token never granted",
            Box::new(|e| unsafe { fencelock_store_fence(s, name.as_ptr(), token + 100, e) }),
        ),
        (
            "fence_token resource not UTF-8",
            Box::new(|e| unsafe { fencelock_store_fence_token(s, not_utf8(), nu, e) }),
        ),
        (
            "keys long prefix",
            Box::new(|e| unsafe {
                fencelock_store_keys(s, long_key.as_ptr(), long_key.len(), ko, e)
            }),
        ),
        (
            "extend ttl 0",
            Box::new(|e| unsafe { fencelock_holder_extend(holder, 0, e) }),
        ),
        (
            "holder_put empty key",
            Box::new(|e| unsafe { fencelock_holder_put(holder, null(), 0, null(), 0, e) }),
        ),
        (
            "holder_put big value",
            Box::new(|e| unsafe { fencelock_holder_put(holder, k, 3, big.as_ptr(), big.len(), e) }),
        ),
        (
            "holder_delete empty key",
            Box::new(|e| unsafe { fencelock_holder_delete(holder, null(), 0, null_mut(), e) }),
        ),
        (
            "keep_alive ttl too short",
            Box::new(|e| unsafe { fencelock_holder_keep_alive(holder, 1, e) }),
        ),
    ];
    for (what, call) in &calls {
        let failure = fails(call);
        assert_eq!(
            failure.status, FENCELOCK_INVALID_ARGUMENT,
            "{what}: {}",
            failure.message
        );
        assert!(
            failure.message.starts_with("invalid argument")
                || failure.message.contains("UTF-8")
                || failure.message.contains("mode"),
            "{what}: {}",
            failure.message
        );
    }
    drop(calls);
    assert_eq!(
        holder_out,
        std::ptr::dangling_mut::<fencelock_holder>(),
        "outputs untouched on failure"
    );
    assert_eq!(store_out, std::ptr::dangling_mut::<fencelock_store>());
    assert_eq!(buf, std::ptr::dangling_mut::<u8>());
    assert_eq!(keys_out, std::ptr::dangling_mut::<fencelock_key_list>());
    assert_eq!((len, number), (5, 5));
    let mut keys = null_mut();
    ok(|err| unsafe { fencelock_store_keys(s, null(), 0, &raw mut keys, err) });
    // SAFETY: valid list; freed once. The holder too.
    unsafe {
        assert_eq!(
            fencelock_key_list_len(keys),
            0,
            "no refused call wrote a key"
        );
        fencelock_key_list_free(keys);
        fencelock_holder_free(holder);
    }
}

#[test]
fn get_leaves_outputs_untouched_when_not_found() {
    let t = temp_store();
    let (mut ptr, mut len, mut token) = (std::ptr::dangling_mut::<u8>(), 77usize, 99u64);
    let failure = fails(|err| unsafe {
        fencelock_store_get(
            t.store,
            b"nope".as_ptr(),
            4,
            &raw mut ptr,
            &raw mut len,
            &raw mut token,
            err,
        )
    });
    assert_eq!(failure.status, FENCELOCK_NOT_FOUND);
    assert_eq!((ptr, len, token), (std::ptr::dangling_mut::<u8>(), 77, 99));
    // token_out is optional.
    let holder = acquire(t.store, "w", 60_000);
    let n = unsafe { fencelock_holder_token(holder) };
    assert_eq!(put(t.store, b"yes", b"abc", n), FENCELOCK_OK);
    ok(|err| unsafe {
        fencelock_store_get(
            t.store,
            b"yes".as_ptr(),
            3,
            &raw mut ptr,
            &raw mut len,
            null_mut(),
            err,
        )
    });
    // SAFETY: the library returned `len` bytes at `ptr`; freed once with its length.
    unsafe {
        assert_eq!(std::slice::from_raw_parts(ptr, len), b"abc");
        fencelock_buffer_free(ptr, len);
        fencelock_holder_free(holder);
    }
}

#[test]
fn the_panic_boundary_turns_a_panic_into_a_status() {
    let mut err: ErrPtr = null_mut();
    // SAFETY: `err` is a valid out-parameter.
    let status = unsafe { guard(&raw mut err, || panic!("deliberate test panic")) };
    let failure = take(status, err);
    assert_eq!(failure.status, FENCELOCK_PANIC);
    assert!(
        failure.message.contains("deliberate test panic"),
        "{}",
        failure.message
    );
    // A formatted payload (a String) is kept too, and NULL err_out is fine.
    let status = unsafe { guard(null_mut(), || panic!("formatted {}", 42)) };
    assert_eq!(status, FENCELOCK_PANIC);
    assert_eq!(guard_value(7, || panic!("infallible")), 7);
    assert_eq!(guard_value(7, || 8), 8);
}

#[test]
fn open_reports_io_not_a_store_incompatible_and_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = std::ptr::dangling_mut::<fencelock_store>();
    let open = |path: &Path, store: *mut *mut fencelock_store, mode: i32| {
        let path = c(path.to_str().unwrap());
        fails(|err| unsafe { fencelock_store_open_with(path.as_ptr(), mode, 0, store, err) })
    };

    let missing_dir = dir.path().join("no/such/dir/locks.db");
    let failure = open(&missing_dir, &raw mut store, 0);
    assert_eq!(failure.status, FENCELOCK_IO);
    assert_eq!(failure.os_code, libc::ENOENT, "{failure:?}");

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a database at all").unwrap();
    let failure = open(&text, &raw mut store, 0);
    assert_eq!(failure.status, FENCELOCK_NOT_A_STORE);
    assert_eq!(failure.os_code, 0);
    assert_eq!(
        std::fs::read_to_string(&text).unwrap(),
        "not a database at all"
    );

    // A fencelock store written by a newer schema.
    let newer = dir.path().join("newer.db");
    {
        let db = redb::Database::create(&newer).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let def: redb::TableDefinition<&str, u64> =
                redb::TableDefinition::new("fencelock.meta");
            let mut meta = txn.open_table(def).unwrap();
            meta.insert("schema_version", fencelock::SCHEMA_VERSION + 1)
                .unwrap();
        }
        txn.commit().unwrap();
    }
    assert_eq!(
        open(&newer, &raw mut store, 0).status,
        FENCELOCK_INCOMPATIBLE_VERSION
    );

    // Single-process mode excludes a second open of the file.
    let single = c(dir.path().join("single.db").to_str().unwrap());
    let mut first = null_mut();
    ok(|err| unsafe {
        fencelock_store_open_with(
            single.as_ptr(),
            FENCELOCK_MODE_SINGLE_PROCESS,
            1024,
            &raw mut first,
            err,
        )
    });
    let in_use = open(
        Path::new(single.to_str().unwrap()),
        &raw mut store,
        FENCELOCK_MODE_MULTI_PROCESS,
    );
    assert_eq!(in_use.status, FENCELOCK_IN_USE, "{}", in_use.message);
    assert_eq!(
        store,
        std::ptr::dangling_mut::<fencelock_store>(),
        "store_out untouched on failure"
    );

    // The value limit of open_with applies.
    let holder = acquire(first, "x", 60_000);
    let n = unsafe { fencelock_holder_token(holder) };
    assert_eq!(put(first, b"k", &[0; 1025], n), FENCELOCK_INVALID_ARGUMENT);
    assert_eq!(put(first, b"k", &[0; 1024], n), FENCELOCK_OK);
    // SAFETY: freed once each.
    unsafe {
        fencelock_holder_free(holder);
        fencelock_store_close(first);
    }
}

#[test]
fn holders_outlive_their_store_handle() {
    let t = temp_store();
    let path = t.path.clone();
    let store = open_at(&path);
    let holder = acquire(store, "outlives", 60_000);
    // SAFETY: closed once; the holder keeps the database open.
    unsafe { fencelock_store_close(store) };
    ok(|err| unsafe { fencelock_holder_put(holder, b"k".as_ptr(), 1, b"v".as_ptr(), 1, err) });
    let n = unsafe { fencelock_holder_token(holder) };
    assert_eq!(get(t.store, b"k").unwrap(), (b"v".to_vec(), n));
    // Freeing the holder releases the lease.
    unsafe { fencelock_holder_free(holder) };
    let again = acquire(t.store, "outlives", 60_000);
    unsafe { fencelock_holder_free(again) };
}

#[test]
fn a_store_used_after_fork_reports_forked() {
    let t = temp_store();
    // SAFETY: the child only calls into the library (which returns before touching storage
    // when it sees the new pid) and then _exit()s without unwinding or running destructors.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let status = put(t.store, b"k", b"v", 1);
        unsafe { libc::_exit(status) };
    }
    let mut wstatus = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &raw mut wstatus, 0) }, pid);
    assert!(libc::WIFEXITED(wstatus));
    assert_eq!(libc::WEXITSTATUS(wstatus), FENCELOCK_FORKED);
}

/// A `*const` handle that may cross to another thread (the C ABI's handles are thread-safe).
struct Shared<T>(*const T);
// SAFETY: the handles the tests share are documented as safe to use from many threads.
unsafe impl<T> Send for Shared<T> {}

#[test]
fn a_cancel_handle_ends_waits_with_cancelled_and_nothing_changes() {
    let t = temp_store();
    // Granted to another thread: this one's wait for a lease of its own would be refused.
    let store = Shared(t.store.cast_const());
    let holder = std::thread::spawn(move || {
        let store = store;
        Shared(acquire(store.0, "job", 60_000).cast_const())
    })
    .join()
    .unwrap()
    .0
    .cast_mut();
    let mut cancel = null_mut();
    // SAFETY: valid pointers throughout; each handle is freed once, after its last use.
    unsafe {
        ok(|err| fencelock_cancel_new(&raw mut cancel, err));
        let firing = Shared(cancel.cast_const());
        let fire = std::thread::spawn(move || {
            let firing = firing;
            sleep(Duration::from_millis(50));
            fencelock_cancel_fire(firing.0);
        });
        let name = c("job");
        let mut waiter: *mut fencelock_holder = null_mut();
        let failure = fails(|err| {
            fencelock_store_acquire_wait_cancellable(
                t.store,
                name.as_ptr(),
                60_000,
                600_000,
                cancel,
                &raw mut waiter,
                err,
            )
        });
        fire.join().unwrap();
        assert_eq!(failure.status, FENCELOCK_CANCELLED);
        assert!(waiter.is_null(), "holder_out untouched on failure");
        let mut lost = true;
        let failure = fails(|err| {
            fencelock_holder_wait_lost_cancellable(holder, 600_000, cancel, &raw mut lost, err)
        });
        assert_eq!(failure.status, FENCELOCK_CANCELLED);
        assert!(lost, "lost_out untouched on failure");
        let mut held = false;
        ok(|err| fencelock_holder_is_held(holder, &raw mut held, err));
        assert!(held);
        // A fired handle ends an open at once; NULL handles are no-ops or no handle at all.
        let mut other = null_mut();
        let failure = fails(|err| {
            fencelock_store_open_cancellable(
                t.path.as_ptr(),
                FENCELOCK_MODE_MULTI_PROCESS,
                0,
                0,
                0,
                cancel,
                &raw mut other,
                err,
            )
        });
        assert_eq!(failure.status, FENCELOCK_CANCELLED);
        assert!(other.is_null());
        ok(|err| {
            fencelock_store_open_cancellable(
                t.path.as_ptr(),
                FENCELOCK_MODE_MULTI_PROCESS,
                0,
                0,
                250,
                null(),
                &raw mut other,
                err,
            )
        });
        fencelock_store_close(other);
        fencelock_cancel_fire(null());
        fencelock_cancel_free(cancel);
        fencelock_cancel_free(null_mut());
        assert_eq!(
            fails(|err| fencelock_cancel_new(null_mut(), err)).status,
            FENCELOCK_NULL_POINTER
        );
        fencelock_holder_free(holder);
    }
}

#[test]
fn lock_kinds_map_their_arguments_and_errors_and_write_outputs_only_on_success() {
    let t = temp_store();
    let pool = c("pool");
    let mut holder: *mut fencelock_holder = null_mut();
    // SAFETY: valid store and pointers throughout; holders are freed once.
    unsafe {
        ok(|err| {
            fencelock_store_acquire_kind(
                t.store,
                pool.as_ptr(),
                FENCELOCK_KIND_SEMAPHORE,
                1,
                60_000,
                &raw mut holder,
                err,
            )
        });
        assert_eq!(fencelock_holder_kind(holder), FENCELOCK_KIND_SEMAPHORE);
        assert_eq!(fencelock_holder_permits(holder), 1);
        let mut untouched = std::ptr::dangling_mut::<fencelock_holder>();
        let failure = fails(|err| {
            fencelock_store_acquire_kind(
                t.store,
                pool.as_ptr(),
                FENCELOCK_KIND_SEMAPHORE,
                4,
                60_000,
                &raw mut untouched,
                err,
            )
        });
        assert_eq!(failure.status, FENCELOCK_PERMITS_MISMATCH);
        assert_eq!((failure.token, failure.highest), (1, 4));
        assert_eq!(untouched, std::ptr::dangling_mut::<fencelock_holder>());
        let failure = fails(|err| {
            fencelock_store_acquire_kind(
                t.store,
                pool.as_ptr(),
                3,
                0,
                60_000,
                &raw mut untouched,
                err,
            )
        });
        assert_eq!(failure.status, FENCELOCK_INVALID_ARGUMENT);
        assert!(
            failure.message.contains("unknown lock kind 3"),
            "{}",
            failure.message
        );
        fencelock_holder_free(holder);

        let names = [c("x"), c("y")];
        let pointers = [names[0].as_ptr(), names[1].as_ptr()];
        let mut holders = [null_mut::<fencelock_holder>(); 2];
        ok(|err| {
            fencelock_store_acquire_all(
                t.store,
                pointers.as_ptr(),
                2,
                60_000,
                0,
                null(),
                holders.as_mut_ptr(),
                err,
            )
        });
        assert_eq!(
            fencelock_holder_token(holders[1]),
            fencelock_holder_token(holders[0]) + 1
        );
        let mut again = [std::ptr::dangling_mut::<fencelock_holder>(); 2];
        let failure = fails(|err| {
            fencelock_store_acquire_all(
                t.store,
                pointers.as_ptr(),
                2,
                60_000,
                0,
                null(),
                again.as_mut_ptr(),
                err,
            )
        });
        assert_eq!(failure.status, FENCELOCK_LOCKED);
        assert_eq!(failure.token, fencelock_holder_token(holders[0]));
        assert_eq!(again, [std::ptr::dangling_mut::<fencelock_holder>(); 2]);
        for holder in holders {
            fencelock_holder_free(holder);
        }
    }
}

/// A count or length above its limit (a careless `len - 1` of 0 is `SIZE_MAX`) is refused
/// with `INVALID_ARGUMENT` before its pointer is read, and nothing is written: the array
/// behind each pointer here has one element. (Reading `SIZE_MAX` elements is undefined
/// behaviour; in this debug build the slice's own check aborts the test.)
#[test]
fn counts_and_lengths_above_their_limits_are_refused_before_the_pointer_is_read() {
    type Call<'a> = (String, Box<dyn Fn(*mut ErrPtr) -> fencelock_status + 'a>);
    let t = temp_store();
    let s = t.store;
    let holder = acquire(s, "h", 60_000);
    let one = c("a");
    let a_name = one.as_ptr();
    let names = [a_name];
    let byte = [b'k'];
    let b = byte.as_ptr();
    let max = FENCELOCK_MAX_HOLDERS as usize;
    let mut holders_out = [std::ptr::dangling_mut::<fencelock_holder>()];
    let mut holder_out = std::ptr::dangling_mut::<fencelock_holder>();
    let mut buf = std::ptr::dangling_mut::<u8>();
    let mut keys_out = std::ptr::dangling_mut::<fencelock_key_list>();
    let (mut len, mut token, mut existed) = (5usize, 5u64, true);
    let (hso, ho, bo, ko) = (
        holders_out.as_mut_ptr(),
        &raw mut holder_out,
        &raw mut buf,
        &raw mut keys_out,
    );
    let (lo, to, eo) = (&raw mut len, &raw mut token, &raw mut existed);
    let long = fencelock::MAX_VALUE_LEN_LIMIT + 1;

    let mut calls: Vec<Call> = Vec::new();
    for count in [0, max + 1, usize::MAX] {
        for timeout_ms in [0, 10] {
            calls.push((
                format!("acquire_all count {count} timeout {timeout_ms}"),
                // SAFETY: `names` and `holders_out` hold one element; the count is refused first.
                Box::new(move |e| unsafe {
                    fencelock_store_acquire_all(
                        s,
                        names.as_ptr(),
                        count,
                        1000,
                        timeout_ms,
                        null(),
                        hso,
                        e,
                    )
                }),
            ));
        }
    }
    for key_len in [fencelock::MAX_NAME_LEN + 1, usize::MAX] {
        // SAFETY (all calls): the lengths are refused before `b` (one byte) is read.
        calls.extend::<[Call; 7]>([
            (
                format!("store_put key_len {key_len}"),
                Box::new(move |e| unsafe { fencelock_store_put(s, b, key_len, b, 1, 1, e) }),
            ),
            (
                format!("store_get key_len {key_len}"),
                Box::new(move |e| unsafe { fencelock_store_get(s, b, key_len, bo, lo, to, e) }),
            ),
            (
                format!("store_delete key_len {key_len}"),
                Box::new(move |e| unsafe { fencelock_store_delete(s, b, key_len, 1, eo, e) }),
            ),
            (
                format!("store_keys prefix_len {key_len}"),
                Box::new(move |e| unsafe { fencelock_store_keys(s, b, key_len, ko, e) }),
            ),
            (
                format!("acquire_and_put key_len {key_len}"),
                Box::new(move |e| unsafe {
                    fencelock_store_acquire_and_put(s, a_name, 1000, b, key_len, b, 1, ho, e)
                }),
            ),
            (
                format!("holder_put key_len {key_len}"),
                Box::new(move |e| unsafe { fencelock_holder_put(holder, b, key_len, b, 1, e) }),
            ),
            (
                format!("holder_delete key_len {key_len}"),
                Box::new(move |e| unsafe { fencelock_holder_delete(holder, b, key_len, eo, e) }),
            ),
        ]);
    }
    for value_len in [long, usize::MAX] {
        // SAFETY (all calls): the lengths are refused before `b` (one byte) is read.
        calls.extend::<[Call; 3]>([
            (
                format!("store_put value_len {value_len}"),
                Box::new(move |e| unsafe { fencelock_store_put(s, b, 1, b, value_len, 1, e) }),
            ),
            (
                format!("acquire_and_put value_len {value_len}"),
                Box::new(move |e| unsafe {
                    fencelock_store_acquire_and_put(s, a_name, 1000, b, 1, b, value_len, ho, e)
                }),
            ),
            (
                format!("holder_put value_len {value_len}"),
                Box::new(move |e| unsafe { fencelock_holder_put(holder, b, 1, b, value_len, e) }),
            ),
        ]);
    }
    for (what, call) in &calls {
        let failure = fails(call);
        assert_eq!(
            failure.status, FENCELOCK_INVALID_ARGUMENT,
            "{what}: {failure:?}"
        );
    }
    // The refusals are the Rust API's own.
    let dir = tempfile::tempdir().unwrap();
    let rust = fencelock::Store::open(dir.path().join("locks.db")).unwrap();
    let refused = |result: fencelock::Result<()>| result.unwrap_err().to_string();
    assert_eq!(
        fails(&calls[0].1).message,
        refused(rust.acquire_all(&[], Duration::from_secs(1)).map(drop))
    );
    let long_key = vec![b'k'; fencelock::MAX_NAME_LEN + 1];
    let put = &calls
        .iter()
        .find(|(what, _)| what.starts_with("store_put key_len"))
        .unwrap()
        .1;
    assert_eq!(fails(put).message, refused(rust.put(&long_key, b"v", 1)));
    assert_eq!(holders_out, [std::ptr::dangling_mut::<fencelock_holder>()]);
    assert_eq!(holder_out, std::ptr::dangling_mut::<fencelock_holder>());
    assert_eq!(buf, std::ptr::dangling_mut::<u8>());
    assert_eq!(keys_out, std::ptr::dangling_mut::<fencelock_key_list>());
    assert_eq!((len, token, existed), (5, 5, true));
    // Nothing was granted or written.
    assert_eq!(get(s, b"k").unwrap_err().status, FENCELOCK_NOT_FOUND);
    let a = acquire(s, "a", 1000);
    // SAFETY: each holder is freed once.
    unsafe {
        fencelock_holder_free(a);
        fencelock_holder_free(holder);
    }
}
