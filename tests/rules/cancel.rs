//! Cancel handles: a wait ended from another thread returns `Cancelled` and changes nothing.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use fencelock::{Cancel, Error, Options, Store};

use crate::harness::Harness;

crate::on_every_backend! {
    [
        a_cancelled_acquire_wait_ends_and_leaves_lock_and_counter_alone,
        a_cancelled_wait_for_a_lost_lease_ends,
        an_uncancelled_wait_still_sees_a_release,
        a_fired_handle_ends_an_open_before_it_touches_the_store,
    ]
}

/// Runs `f` in a thread and returns its result. The bound is generous: it catches a wait that
/// never ends, not a slow one.
fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = mpsc::channel();
    thread::spawn(move || done.send(f()).unwrap());
    result
        .recv_timeout(Duration::from_secs(120))
        .expect("the wait did not end after its cancel handle fired")
}

/// Waits up to 10 minutes for the lock "job", ending when `cancel` fires; the granted token.
fn wait_for_job(store: &Store, cancel: &Cancel) -> fencelock::Result<u64> {
    store
        .acquire_wait_cancellable(
            "job",
            Duration::from_secs(60),
            Duration::from_secs(600),
            cancel,
        )
        .map(|h| h.token())
}

/// Fires `cancel` from another thread after a moment.
fn fire_soon(cancel: &Cancel) {
    let cancel = cancel.clone();
    thread::spawn(move || {
        thread::sleep(Duration::from_millis(50));
        cancel.cancel();
    });
}

fn a_cancelled_acquire_wait_ends_and_leaves_lock_and_counter_alone(h: &Harness) {
    let store = h.store();
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    let before = store.info().unwrap().last_token;
    let cancel = Cancel::new();
    fire_soon(&cancel);
    let (waiter, handle) = (store.clone(), cancel.clone());
    let result = bounded(move || wait_for_job(&waiter, &handle));
    assert!(matches!(result, Err(Error::Cancelled)), "{result:?}");
    assert!(cancel.is_cancelled());
    assert_eq!(
        store.lock_info("job").unwrap().unwrap().token,
        holder.token()
    );
    assert_eq!(store.info().unwrap().last_token, before);
    assert!(holder.is_held().unwrap());

    // A fired handle ends a later wait before it takes anything, even a free lock.
    holder.release().unwrap();
    let again = store.acquire_wait_cancellable(
        "job",
        Duration::from_secs(60),
        Duration::from_secs(1),
        &cancel,
    );
    assert!(matches!(again, Err(Error::Cancelled)), "{again:?}");
    assert_eq!(store.info().unwrap().last_token, before);
    // Without a handle the same wait succeeds.
    let next = store
        .acquire_wait("job", Duration::from_secs(60), Duration::from_secs(1))
        .unwrap();
    h.assert_next(before, next.token());
}

fn a_cancelled_wait_for_a_lost_lease_ends(h: &Harness) {
    let store = h.store();
    let holder = store.acquire("job", Duration::from_secs(600)).unwrap();
    let cancel = Cancel::new();
    fire_soon(&cancel);
    let handle = cancel.clone();
    let result = bounded(move || {
        let lost = holder.wait_lost_cancellable(Duration::from_secs(600), &handle);
        (lost, holder.is_held().unwrap())
    });
    assert!(matches!(result.0, Err(Error::Cancelled)), "{:?}", result.0);
    assert!(result.1, "cancelling the wait left the lease held");
}

fn an_uncancelled_wait_still_sees_a_release(h: &Harness) {
    let store = h.store();
    let holder = store.acquire("job", Duration::from_secs(600)).unwrap();
    let cancel = Cancel::new();
    let (waiter, handle) = (store.clone(), cancel.clone());
    let wait = thread::spawn(move || wait_for_job(&waiter, &handle));
    thread::sleep(Duration::from_millis(20));
    let token = holder.token();
    holder.release().unwrap();
    h.assert_next(token, wait.join().unwrap().unwrap());
    assert!(!cancel.is_cancelled());
}

fn a_fired_handle_ends_an_open_before_it_touches_the_store(h: &Harness) {
    let cancel = Cancel::new();
    cancel.cancel();
    let options = Options {
        cancel: Some(cancel),
        ..Options::default()
    };
    let unopened = h.unopened_file().map(std::path::Path::to_path_buf);
    assert!(matches!(h.try_open(&options), Err(Error::Cancelled)));
    if let Some(path) = unopened {
        assert!(!path.exists(), "a cancelled open created the store");
    }
    // The handle is for the open only: a store opened without it is unaffected.
    let _job = h.store().acquire("job", Duration::from_secs(60)).unwrap();
}
