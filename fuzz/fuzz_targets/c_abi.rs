//! The C ABI with arbitrary bytes and lengths: names with and without NULs or valid UTF-8,
//! keys and values of any length within their buffers, NULL pointers with non-zero lengths,
//! any tokens and TTLs. Every call must return a known status, fill its error object exactly
//! when it fails, and never crash or leak (run under ASan to see leaks).

#![no_main]

use std::ffi::{c_char, CStr};
use std::ptr;

use arbitrary::Arbitrary;
use fencelock::ffi::*;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Bytes {
    data: Vec<u8>,
    /// Passed length: clamped to the buffer, except that `null` passes NULL with this length.
    len: u16,
    null: bool,
}

impl Bytes {
    fn ptr_len(&self) -> (*const u8, usize) {
        if self.null {
            (ptr::null(), usize::from(self.len) % 3)
        } else {
            (
                self.data.as_ptr(),
                usize::from(self.len).min(self.data.len()),
            )
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Call {
    Acquire {
        name: Vec<u8>,
        ttl_ms: u64,
    },
    AcquireWait {
        name: Vec<u8>,
        ttl_ms: u64,
        timeout_ms: u8,
    },
    AcquireAndPut {
        name: Vec<u8>,
        ttl_ms: u64,
        key: Bytes,
        value: Bytes,
    },
    Put {
        key: Bytes,
        value: Bytes,
        token: u64,
    },
    Get {
        key: Bytes,
        want_token: bool,
    },
    Delete {
        key: Bytes,
        token: u64,
    },
    Fence {
        resource: Vec<u8>,
        token: u64,
    },
    Keys {
        prefix: Bytes,
    },
    Locks,
    HolderPut {
        holder: u8,
        key: Bytes,
        value: Bytes,
    },
    HolderDelete {
        holder: u8,
        key: Bytes,
    },
    HolderExtend {
        holder: u8,
        ttl_ms: u64,
    },
    HolderRelease {
        holder: u8,
    },
    HolderFree {
        holder: u8,
    },
    /// Any kind code (an unknown one is refused) and permit count; with `timeout_ms`, waiting.
    AcquireKind {
        name: Vec<u8>,
        kind: i32,
        permits: u32,
        ttl_ms: u64,
        timeout_ms: Option<u8>,
    },
    /// Names (`None`: a NULL pointer in the array), possibly repeated; waiting when
    /// `timeout_ms` is not 0.
    AcquireAll {
        names: Vec<Option<Vec<u8>>>,
        ttl_ms: u64,
        timeout_ms: u8,
    },
}

/// A NUL-terminated copy of arbitrary bytes (an interior NUL ends the string early, as in C).
fn c_string(bytes: &[u8]) -> Vec<u8> {
    let mut owned = bytes.to_vec();
    owned.push(0);
    owned
}

/// Checks a status and its error object, and frees the object.
fn settle(status: fencelock_status, err: *mut fencelock_error) -> fencelock_status {
    assert!(
        (FENCELOCK_OK..=FENCELOCK_WOULD_DEADLOCK).contains(&status),
        "status {status}"
    );
    assert_ne!(status, FENCELOCK_PANIC, "a panic reached the C boundary");
    // SAFETY: `err` is NULL or an error object this library returned and nobody freed.
    unsafe {
        if status == FENCELOCK_OK {
            assert!(err.is_null(), "an error object on success");
        } else {
            assert!(!err.is_null(), "no error object on failure");
            assert_eq!(fencelock_error_status(err), status);
            let message = fencelock_error_message(err);
            assert!(!message.is_null());
            assert!(CStr::from_ptr(message).to_str().is_ok(), "message is UTF-8");
            fencelock_error_free(err);
        }
    }
    status
}

fuzz_target!(|calls: Vec<Call>| {
    let dir = tempfile::tempdir().unwrap();
    let path = c_string(dir.path().join("fuzz.db").to_str().unwrap().as_bytes());
    let mut store: *mut fencelock_store = ptr::null_mut();
    let mut holders: Vec<*mut fencelock_holder> = Vec::new();
    // SAFETY: every pointer passed below is NULL or valid for the call, as the ABI requires;
    // lengths never exceed their buffers except with NULL pointers, which must be refused.
    unsafe {
        let mut err = ptr::null_mut();
        let status = fencelock_store_open_with(path.as_ptr().cast(), 0, 64, &mut store, &mut err);
        assert_eq!(settle(status, err), FENCELOCK_OK);
        let holder_at = |holders: &Vec<*mut fencelock_holder>, i: u8| {
            (!holders.is_empty()).then(|| usize::from(i) % holders.len())
        };
        for call in calls.iter().take(48) {
            let mut err = ptr::null_mut();
            let status = match call {
                Call::Acquire { name, ttl_ms } => {
                    let name = c_string(name);
                    let mut holder = ptr::null_mut();
                    let status = fencelock_store_acquire(
                        store,
                        name.as_ptr().cast::<c_char>(),
                        *ttl_ms,
                        &mut holder,
                        &mut err,
                    );
                    if status == FENCELOCK_OK {
                        holders.push(holder);
                    }
                    status
                }
                Call::AcquireWait {
                    name,
                    ttl_ms,
                    timeout_ms,
                } => {
                    let name = c_string(name);
                    let mut holder = ptr::null_mut();
                    let status = fencelock_store_acquire_wait(
                        store,
                        name.as_ptr().cast(),
                        *ttl_ms,
                        u64::from(*timeout_ms % 4),
                        &mut holder,
                        &mut err,
                    );
                    if status == FENCELOCK_OK {
                        holders.push(holder);
                    }
                    status
                }
                Call::AcquireAndPut {
                    name,
                    ttl_ms,
                    key,
                    value,
                } => {
                    let name = c_string(name);
                    let (k, kl) = key.ptr_len();
                    let (v, vl) = value.ptr_len();
                    let mut holder = ptr::null_mut();
                    let status = fencelock_store_acquire_and_put(
                        store,
                        name.as_ptr().cast(),
                        *ttl_ms,
                        k,
                        kl,
                        v,
                        vl,
                        &mut holder,
                        &mut err,
                    );
                    if status == FENCELOCK_OK {
                        holders.push(holder);
                    }
                    status
                }
                Call::Put { key, value, token } => {
                    let (k, kl) = key.ptr_len();
                    let (v, vl) = value.ptr_len();
                    fencelock_store_put(store, k, kl, v, vl, *token, &mut err)
                }
                Call::Get { key, want_token } => {
                    let (k, kl) = key.ptr_len();
                    let mut value = ptr::null_mut();
                    let mut len = usize::MAX;
                    let mut token = 0u64;
                    let token_out = if *want_token {
                        &mut token as *mut u64
                    } else {
                        ptr::null_mut()
                    };
                    let status = fencelock_store_get(
                        store, k, kl, &mut value, &mut len, token_out, &mut err,
                    );
                    if status == FENCELOCK_OK {
                        assert!(!value.is_null() && len <= 64);
                        assert!(!*want_token || token > 0);
                        fencelock_buffer_free(value, len);
                    } else {
                        assert!(value.is_null() && len == usize::MAX, "outputs untouched");
                    }
                    status
                }
                Call::Delete { key, token } => {
                    let (k, kl) = key.ptr_len();
                    let mut existed = false;
                    fencelock_store_delete(store, k, kl, *token, &mut existed, &mut err)
                }
                Call::Fence { resource, token } => {
                    let resource = c_string(resource);
                    fencelock_store_fence(store, resource.as_ptr().cast(), *token, &mut err)
                }
                Call::Keys { prefix } => {
                    let (p, pl) = prefix.ptr_len();
                    let mut list = ptr::null_mut();
                    let status = fencelock_store_keys(store, p, pl, &mut list, &mut err);
                    if status == FENCELOCK_OK {
                        for i in 0..fencelock_key_list_len(list) {
                            let mut key = ptr::null();
                            let mut len = 0;
                            assert_eq!(
                                fencelock_key_list_get(list, i, &mut key, &mut len),
                                FENCELOCK_OK
                            );
                        }
                        fencelock_key_list_free(list);
                    }
                    status
                }
                Call::Locks => {
                    let mut list = ptr::null_mut();
                    let status = fencelock_store_locks(store, &mut list, &mut err);
                    if status == FENCELOCK_OK {
                        for i in 0..fencelock_lock_list_len(list) {
                            let mut info = std::mem::zeroed::<fencelock_lock_info>();
                            assert_eq!(fencelock_lock_list_get(list, i, &mut info), FENCELOCK_OK);
                            assert!(!info.name.is_null());
                            let (mut kind, mut permits) = (-1, 0);
                            assert_eq!(
                                fencelock_lock_list_kind(list, i, &mut kind, &mut permits),
                                FENCELOCK_OK
                            );
                            assert!((FENCELOCK_KIND_EXCLUSIVE..=FENCELOCK_KIND_SEMAPHORE)
                                .contains(&kind));
                            assert_eq!(permits > 0, kind == FENCELOCK_KIND_SEMAPHORE);
                        }
                        fencelock_lock_list_free(list);
                    }
                    status
                }
                Call::HolderPut { holder, key, value } => match holder_at(&holders, *holder) {
                    Some(i) => {
                        let (k, kl) = key.ptr_len();
                        let (v, vl) = value.ptr_len();
                        fencelock_holder_put(holders[i], k, kl, v, vl, &mut err)
                    }
                    None => FENCELOCK_OK,
                },
                Call::HolderDelete { holder, key } => match holder_at(&holders, *holder) {
                    Some(i) => {
                        let (k, kl) = key.ptr_len();
                        fencelock_holder_delete(holders[i], k, kl, ptr::null_mut(), &mut err)
                    }
                    None => FENCELOCK_OK,
                },
                Call::HolderExtend { holder, ttl_ms } => match holder_at(&holders, *holder) {
                    Some(i) => fencelock_holder_extend(holders[i], *ttl_ms, &mut err),
                    None => FENCELOCK_OK,
                },
                Call::HolderRelease { holder } => match holder_at(&holders, *holder) {
                    Some(i) => fencelock_holder_release(holders[i], &mut err),
                    None => FENCELOCK_OK,
                },
                Call::HolderFree { holder } => {
                    if let Some(i) = holder_at(&holders, *holder) {
                        fencelock_holder_free(holders.swap_remove(i));
                    }
                    FENCELOCK_OK
                }
                Call::AcquireKind {
                    name,
                    kind,
                    permits,
                    ttl_ms,
                    timeout_ms,
                } => {
                    let name = c_string(name);
                    let mut holder = ptr::null_mut();
                    let status = match timeout_ms {
                        None => fencelock_store_acquire_kind(
                            store,
                            name.as_ptr().cast(),
                            *kind % 4,
                            *permits % 8,
                            *ttl_ms,
                            &mut holder,
                            &mut err,
                        ),
                        Some(timeout) => fencelock_store_acquire_kind_wait(
                            store,
                            name.as_ptr().cast(),
                            *kind % 4,
                            *permits % 8,
                            *ttl_ms,
                            u64::from(*timeout % 4),
                            ptr::null(),
                            &mut holder,
                            &mut err,
                        ),
                    };
                    if status == FENCELOCK_OK {
                        assert_eq!(fencelock_holder_kind(holder), *kind % 4);
                        holders.push(holder);
                    } else {
                        assert!(holder.is_null(), "an output written on failure");
                    }
                    status
                }
                Call::AcquireAll {
                    names,
                    ttl_ms,
                    timeout_ms,
                } => {
                    let owned: Vec<Option<Vec<u8>>> = names
                        .iter()
                        .take(5)
                        .map(|n| n.as_deref().map(c_string))
                        .collect();
                    let pointers: Vec<*const c_char> = owned
                        .iter()
                        .map(|n| n.as_ref().map_or(ptr::null(), |n| n.as_ptr().cast()))
                        .collect();
                    let mut out = vec![ptr::null_mut(); pointers.len()];
                    let status = fencelock_store_acquire_all(
                        store,
                        pointers.as_ptr(),
                        pointers.len(),
                        *ttl_ms,
                        u64::from(*timeout_ms % 4),
                        ptr::null(),
                        out.as_mut_ptr(),
                        &mut err,
                    );
                    if status == FENCELOCK_OK {
                        for pair in out.windows(2) {
                            assert_eq!(
                                fencelock_holder_token(pair[1]),
                                fencelock_holder_token(pair[0]) + 1
                            );
                        }
                        holders.extend(out);
                    } else {
                        assert!(
                            out.iter().all(|h| h.is_null()),
                            "outputs written on failure"
                        );
                    }
                    status
                }
            };
            settle(status, err);
        }
        for holder in holders {
            fencelock_holder_free(holder);
        }
        fencelock_store_close(store);
    }
});
