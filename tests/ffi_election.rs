//! The C ABI of leader election called directly from Rust: campaign, leader, proclaim, the
//! blocking observe with its timeout and cancel handle, fenced writes, resign, and the
//! refusals (NULL pointers, bad names and margins, nobody leading) that write no output.

use std::ffi::{c_char, CStr, CString};
use std::ptr::{null, null_mut};

use fencelock::ffi::*;

type ErrPtr = *mut fencelock_error;

/// Runs a call that must succeed; panics with the error's message otherwise.
fn ok(call: impl FnOnce(*mut ErrPtr) -> fencelock_status) {
    let mut err: ErrPtr = null_mut();
    let status = call(&raw mut err);
    if status != FENCELOCK_OK {
        // SAFETY: a failure wrote a live error object.
        let message = unsafe { CStr::from_ptr(fencelock_error_message(err)) };
        panic!("expected OK, got {status}: {message:?}");
    }
    assert!(err.is_null(), "success leaves *err_out untouched");
}

/// Runs a call that must fail with `status`; frees its error object.
fn fails(status: fencelock_status, call: impl FnOnce(*mut ErrPtr) -> fencelock_status) {
    let mut err: ErrPtr = null_mut();
    assert_eq!(call(&raw mut err), status);
    assert!(!err.is_null(), "a failure writes *err_out");
    // SAFETY: the error object was just made by the library.
    unsafe {
        assert_eq!(fencelock_error_status(err), status);
        fencelock_error_free(err);
    }
}

fn c(text: &str) -> CString {
    CString::new(text).expect("no NUL")
}

struct Store {
    _dir: tempfile::TempDir,
    store: *mut fencelock_store,
}

impl Drop for Store {
    fn drop(&mut self) {
        // SAFETY: open, used by nothing else any more.
        unsafe { fencelock_store_close(self.store) };
    }
}

fn temp_store() -> Store {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = c(dir.path().join("locks.db").to_str().expect("UTF-8"));
    let mut store = null_mut();
    // SAFETY: valid pointers.
    ok(|err| unsafe { fencelock_store_open(path.as_ptr(), &raw mut store, err) });
    Store { _dir: dir, store }
}

fn campaign(store: *const fencelock_store, name: &CStr, value: &[u8]) -> *mut fencelock_leadership {
    let mut leadership = null_mut();
    // SAFETY: valid pointers.
    ok(|err| unsafe {
        fencelock_store_campaign(
            store,
            name.as_ptr(),
            value.as_ptr(),
            value.len(),
            30_000,
            0,
            u64::MAX,
            null(),
            &raw mut leadership,
            err,
        )
    });
    assert!(!leadership.is_null());
    leadership
}

/// Term, version and value of a leader object, which is freed.
fn read_leader(leader: *mut fencelock_leader) -> (u64, u64, Vec<u8>, u32) {
    assert!(!leader.is_null());
    // SAFETY: a live leader object, freed last.
    unsafe {
        let mut len = 0usize;
        let ptr = fencelock_leader_value(leader, &raw mut len);
        let value = std::slice::from_raw_parts(ptr, len).to_vec();
        let read = (
            fencelock_leader_term(leader),
            fencelock_leader_version(leader),
            value,
            fencelock_leader_pid(leader),
        );
        assert!(fencelock_leader_since_unix_ms(leader) > 0);
        assert_eq!(CStr::from_ptr(fencelock_leader_name(leader)), c"jobs");
        fencelock_leader_free(leader);
        read
    }
}

#[test]
fn campaign_leader_proclaim_observe_and_resign() {
    let store = temp_store();
    let name = c"jobs";
    let mut watch = null_mut();
    // SAFETY: valid pointers throughout; every object is freed once.
    unsafe {
        ok(|err| fencelock_store_observe_leader(store.store, name.as_ptr(), &raw mut watch, err));
        // Nobody leads: the current leader is not found, and the watch times out.
        let mut leader = null_mut();
        fails(FENCELOCK_NOT_FOUND, |err| {
            fencelock_store_leader(store.store, name.as_ptr(), &raw mut leader, err)
        });
        fails(FENCELOCK_TIMEOUT, |err| {
            fencelock_leader_watch_next(watch, 10, null(), &raw mut leader, err)
        });
        assert!(leader.is_null(), "no output on failure");

        let leadership = campaign(store.store, name, b"node-a");
        let term = fencelock_leadership_term(leadership);
        assert!(term > 0);
        assert_eq!(CStr::from_ptr(fencelock_leadership_name(leadership)), name);
        assert!(!fencelock_leadership_is_lost(leadership));
        let pid = std::process::id();
        ok(|err| fencelock_store_leader(store.store, name.as_ptr(), &raw mut leader, err));
        assert_eq!(read_leader(leader), (term, 1, b"node-a".to_vec(), pid));
        ok(|err| fencelock_leader_watch_next(watch, 10_000, null(), &raw mut leader, err));
        assert_eq!(read_leader(leader), (term, 1, b"node-a".to_vec(), pid));

        ok(|err| fencelock_leadership_proclaim(leadership, b"node-a:2".as_ptr(), 8, err));
        ok(|err| fencelock_leader_watch_next(watch, 10_000, null(), &raw mut leader, err));
        assert_eq!(read_leader(leader), (term, 2, b"node-a:2".to_vec(), pid));

        // Fenced writes by the term.
        ok(|err| fencelock_leadership_put(leadership, b"k".as_ptr(), 1, b"v".as_ptr(), 1, err));
        let mut existed = false;
        ok(|err| fencelock_leadership_delete(leadership, b"k".as_ptr(), 1, &raw mut existed, err));
        assert!(existed);
        ok(|err| fencelock_leadership_fence(leadership, c"s3://b/x".as_ptr(), err));
        let mut fenced = 0u64;
        ok(|err| {
            fencelock_store_fence_token(store.store, c"s3://b/x".as_ptr(), &raw mut fenced, err)
        });
        assert_eq!(fenced, term);

        let mut lost = true;
        ok(|err| fencelock_leadership_wait_lost(leadership, 10, null(), &raw mut lost, err));
        assert!(!lost);
        ok(|err| fencelock_leadership_resign(leadership, err));
        assert!(fencelock_leadership_is_lost(leadership));
        ok(|err| fencelock_leadership_wait_lost(leadership, 10, null(), &raw mut lost, err));
        assert!(lost);
        fails(FENCELOCK_LOCK_LOST, |err| {
            fencelock_leadership_put(leadership, b"k".as_ptr(), 1, b"late".as_ptr(), 4, err)
        });
        fails(FENCELOCK_LOCK_LOST, |err| {
            fencelock_leadership_proclaim(leadership, b"late".as_ptr(), 4, err)
        });
        fails(FENCELOCK_NOT_FOUND, |err| {
            fencelock_store_leader(store.store, name.as_ptr(), &raw mut leader, err)
        });

        // The next term, as the watch tells it.
        let next = campaign(store.store, name, b"node-b");
        assert!(fencelock_leadership_term(next) > term);
        ok(|err| fencelock_leader_watch_next(watch, 10_000, null(), &raw mut leader, err));
        let (next_term, version, value, _) = read_leader(leader);
        assert_eq!(
            (next_term, version, value),
            (fencelock_leadership_term(next), 1, b"node-b".to_vec())
        );

        fencelock_leadership_free(next);
        fencelock_leadership_free(leadership);
        fencelock_leader_watch_free(watch);
    }
}

#[test]
fn waits_end_at_their_cancel_handle_and_leave_nothing() {
    let store = temp_store();
    let name = c"jobs";
    // SAFETY: valid pointers throughout; every object is freed once.
    unsafe {
        let leadership = campaign(store.store, name, b"a");
        let mut cancel = null_mut();
        ok(|err| fencelock_cancel_new(&raw mut cancel, err));
        fencelock_cancel_fire(cancel);
        let mut other = null_mut();
        fails(FENCELOCK_CANCELLED, |err| {
            fencelock_store_campaign(
                store.store,
                name.as_ptr(),
                null(),
                0,
                30_000,
                0,
                u64::MAX,
                cancel,
                &raw mut other,
                err,
            )
        });
        assert!(other.is_null());
        let mut lost = false;
        fails(FENCELOCK_CANCELLED, |err| {
            fencelock_leadership_wait_lost(leadership, 600_000, cancel, &raw mut lost, err)
        });
        let mut watch = null_mut();
        ok(|err| fencelock_store_observe_leader(store.store, name.as_ptr(), &raw mut watch, err));
        let mut leader = null_mut();
        ok(|err| fencelock_leader_watch_next(watch, 10_000, null(), &raw mut leader, err));
        fencelock_leader_free(leader);
        leader = null_mut();
        fails(FENCELOCK_CANCELLED, |err| {
            fencelock_leader_watch_next(watch, 600_000, cancel, &raw mut leader, err)
        });
        assert!(leader.is_null());
        // On the thread that leads, a campaign would wait for itself; on another thread it
        // gives up at its timeout. Either leaves the leader as it was.
        let try_campaign = |store: usize| {
            let mut other = null_mut();
            let mut err: ErrPtr = null_mut();
            let status = fencelock_store_campaign(
                store as *const fencelock_store,
                c"jobs".as_ptr(),
                null(),
                0,
                30_000,
                0,
                20,
                null(),
                &raw mut other,
                &raw mut err,
            );
            assert!(other.is_null() && !err.is_null());
            fencelock_error_free(err);
            status
        };
        let shared = store.store as usize;
        assert_eq!(try_campaign(shared), FENCELOCK_WOULD_DEADLOCK);
        let elsewhere = std::thread::spawn(move || try_campaign(shared))
            .join()
            .unwrap();
        assert_eq!(elsewhere, FENCELOCK_TIMEOUT);
        ok(|err| fencelock_store_leader(store.store, name.as_ptr(), &raw mut leader, err));
        assert_eq!(
            fencelock_leader_term(leader),
            fencelock_leadership_term(leadership)
        );
        fencelock_leader_free(leader);
        fencelock_cancel_free(cancel);
        fencelock_leader_watch_free(watch);
        fencelock_leadership_free(leadership);
    }
}

#[test]
fn bad_arguments_are_refused_and_write_nothing() {
    let store = temp_store();
    let mut leadership = null_mut();
    let campaign_with = |name: *const c_char, ttl_ms: u64, margin_ms: u64, out| {
        // SAFETY: the pointers are valid or NULL, as each case says.
        move |err| unsafe {
            fencelock_store_campaign(
                store.store,
                name,
                null(),
                0,
                ttl_ms,
                margin_ms,
                u64::MAX,
                null(),
                out,
                err,
            )
        }
    };
    fails(
        FENCELOCK_NULL_POINTER,
        campaign_with(null(), 30_000, 0, &raw mut leadership),
    );
    fails(
        FENCELOCK_NULL_POINTER,
        campaign_with(c"jobs".as_ptr(), 30_000, 0, null_mut()),
    );
    fails(
        FENCELOCK_INVALID_ARGUMENT,
        campaign_with(c"".as_ptr(), 30_000, 0, &raw mut leadership),
    );
    // A margin over half the TTL, and a TTL keep-alive cannot renew.
    fails(
        FENCELOCK_INVALID_ARGUMENT,
        campaign_with(c"jobs".as_ptr(), 30_000, 20_000, &raw mut leadership),
    );
    fails(
        FENCELOCK_INVALID_ARGUMENT,
        campaign_with(c"jobs".as_ptr(), 1, 0, &raw mut leadership),
    );
    let long = c(&"n".repeat(1000));
    fails(
        FENCELOCK_INVALID_ARGUMENT,
        campaign_with(long.as_ptr(), 30_000, 0, &raw mut leadership),
    );
    assert!(leadership.is_null());
    // SAFETY: valid or NULL pointers, as each case says.
    unsafe {
        let mut leader = null_mut();
        fails(FENCELOCK_NULL_POINTER, |err| {
            fencelock_store_leader(null(), c"jobs".as_ptr(), &raw mut leader, err)
        });
        fails(FENCELOCK_NULL_POINTER, |err| {
            fencelock_store_leader(store.store, c"jobs".as_ptr(), null_mut(), err)
        });
        let mut watch = null_mut();
        fails(FENCELOCK_NULL_POINTER, |err| {
            fencelock_store_observe_leader(store.store, null(), &raw mut watch, err)
        });
        fails(FENCELOCK_NULL_POINTER, |err| {
            fencelock_leader_watch_next(null(), 0, null(), &raw mut leader, err)
        });
        fails(FENCELOCK_NULL_POINTER, |err| {
            fencelock_leadership_resign(null(), err)
        });
        fails(FENCELOCK_NULL_POINTER, |err| {
            fencelock_leadership_proclaim(null(), null(), 0, err)
        });
        assert!(leader.is_null() && watch.is_null());
        // Getters of NULL, and frees of NULL.
        assert_eq!(fencelock_leadership_term(null()), 0);
        assert!(fencelock_leadership_is_lost(null()));
        assert!(fencelock_leader_value(null(), null_mut()).is_null());
        fencelock_leadership_free(null_mut());
        fencelock_leader_free(null_mut());
        fencelock_leader_watch_free(null_mut());
    }
}
