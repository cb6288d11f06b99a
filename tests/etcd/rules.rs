//! The rules of leases, tokens and fenced values, on one etcd node.

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use fencelock::{Cancel, Error, LockState, ETCD_MIN_TTL};

use crate::cluster::Cluster;

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = ETCD_MIN_TTL;

/// Waits until etcd has ended the lease of `holder` (it checks expiries every 500 ms).
fn expire(holder: &fencelock::Holder) {
    thread::sleep(SHORT);
    while holder.is_held().unwrap() {
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn every_grant_of_any_lock_gets_a_higher_token() {
    let etcd = Cluster::single();
    let store = etcd.open("t");
    let mut last = 0;
    for round in 0..3 {
        for name in ["a", "b", "c"] {
            let holder = store.acquire(name, LONG).unwrap();
            assert!(holder.token() > last, "round {round} lock {name}");
            last = holder.token();
        }
    }
    assert_eq!(store.info().unwrap().last_token, last);
}

#[test]
fn contention_reports_the_current_holder_and_release_frees_at_once() {
    let etcd = Cluster::single();
    let store = etcd.open("t");
    let holder = store.acquire("job", LONG).unwrap();
    match store.acquire("job", LONG) {
        Err(Error::Locked {
            token,
            pid,
            remaining,
        }) => {
            assert_eq!(token, holder.token());
            assert_eq!(pid, std::process::id());
            assert!(remaining > Duration::ZERO && remaining <= LONG);
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    let _other = store.acquire("other-job", LONG).unwrap();
    holder.release().unwrap();
    holder.release().unwrap(); // idempotent
    let second = store.acquire("job", LONG).unwrap();
    assert!(second.token() > holder.token());
    drop(second);
    let third = store.acquire("job", LONG).unwrap();
    assert!(!holder.is_held().unwrap());
    assert!(third.is_held().unwrap());
    // Another store of the same prefix sees the same lock; another prefix does not.
    assert!(matches!(
        etcd.open("t").acquire("job", LONG),
        Err(Error::Locked { token, .. }) if token == third.token()
    ));
    drop(etcd.open("other").acquire("job", LONG).unwrap());
}

/// The seed walkthrough: A holds `payment-export` with token N and pauses; its lease ends; B
/// acquires with a higher token and writes; A's writes with N are refused; B's data stays.
#[test]
fn an_expired_lease_is_taken_over_and_its_holder_is_fenced_out() {
    let etcd = Cluster::single();
    let store = etcd.open("t");
    let stale = store.acquire("payment-export", SHORT).unwrap();
    stale.put(b"payments/today.csv", b"A, early").unwrap();
    expire(&stale);
    assert!(stale.is_lost());

    let fresh = etcd.open("t").acquire("payment-export", LONG).unwrap();
    assert!(fresh.token() > stale.token());
    fresh.put(b"payments/today.csv", b"B").unwrap();

    assert!(matches!(
        stale.put(b"payments/today.csv", b"A, late"),
        Err(Error::LockLost { token, current: Some(current) })
            if token == stale.token() && current == fresh.token()
    ));
    assert!(matches!(
        store.put(b"payments/today.csv", b"A, late", stale.token()),
        Err(Error::StaleToken { token, highest }) if token == stale.token() && highest == fresh.token()
    ));
    let extended = stale.extend(SHORT);
    assert!(
        matches!(extended, Err(Error::LockLost { .. })),
        "{extended:?}"
    );
    let value = store.get(b"payments/today.csv").unwrap().unwrap();
    assert_eq!(value.value, b"B");
    assert_eq!(value.token, fresh.token());

    // The stale holder's release leaves its successor's lease alone.
    stale.release().unwrap();
    drop(stale);
    assert!(fresh.is_held().unwrap());
    assert!(matches!(
        store.acquire("payment-export", LONG),
        Err(Error::Locked { token, .. }) if token == fresh.token()
    ));
}

#[test]
fn extend_renews_and_moves_to_another_ttl_keeping_the_token() {
    let etcd = Cluster::single();
    let store = etcd.open("t");
    let holder = store.acquire("job", SHORT).unwrap();
    // Renewed past the first lease's end: still held, same token.
    for _ in 0..3 {
        thread::sleep(Duration::from_secs(1));
        holder.extend(SHORT).unwrap();
    }
    assert!(holder.is_held().unwrap());
    holder.extend(LONG).unwrap();
    assert!(holder.remaining() > SHORT);
    thread::sleep(SHORT + Duration::from_secs(1));
    assert!(holder.is_held().unwrap());
    assert_eq!(store.lock("job").unwrap().unwrap().token, holder.token());
    holder.extend(SHORT).unwrap();
    expire(&holder);
    assert!(matches!(
        holder.extend(LONG),
        Err(Error::LockLost { token, current: None }) if token == holder.token()
    ));
    assert!(matches!(
        holder.put(b"k", b"v"),
        Err(Error::LockLost { .. })
    ));
    assert!(store.get(b"k").unwrap().is_none());
}

#[test]
fn fenced_values_deletes_and_fences_accept_equal_and_higher_tokens_only() {
    let etcd = Cluster::single();
    let store = etcd.open("t");
    let t1 = store.acquire("a", LONG).unwrap().token();
    let t2 = store.acquire("b", LONG).unwrap().token();
    store.put(b"k", b"one", t1).unwrap();
    store.put(b"k", b"one again", t1).unwrap();
    store.put(b"k", b"two", t2).unwrap();
    assert!(matches!(
        store.put(b"k", b"late", t1),
        Err(Error::StaleToken { token, highest }) if token == t1 && highest == t2
    ));
    let got = store.get(b"k").unwrap().unwrap();
    assert_eq!((got.value.as_slice(), got.token), (&b"two"[..], t2));
    store.put(&[0, 255, 10], b"", t2).unwrap();
    assert_eq!(store.get(&[0, 255, 10]).unwrap().unwrap().value, b"");
    assert!(store.get(b"missing").unwrap().is_none());

    // A delete is fenced and keeps refusing stale writes.
    assert!(matches!(
        store.delete(b"k", t1),
        Err(Error::StaleToken { .. })
    ));
    assert!(store.delete(b"k", t2).unwrap());
    assert!(!store.delete(b"k", t2).unwrap());
    assert!(store.get(b"k").unwrap().is_none());
    assert!(matches!(
        store.put(b"k", b"stale", t1),
        Err(Error::StaleToken { highest, .. }) if highest == t2
    ));

    store.fence("s3://bucket/payments", t1).unwrap();
    store.fence("s3://bucket/payments", t1).unwrap();
    store.fence("s3://bucket/payments", t2).unwrap();
    assert!(matches!(
        store.fence("s3://bucket/payments", t1),
        Err(Error::StaleToken { token, highest }) if token == t1 && highest == t2
    ));
    assert_eq!(store.fence_token("s3://bucket/payments").unwrap(), Some(t2));
    assert_eq!(store.fence_token("never").unwrap(), None);
    store.verify().unwrap();
}

#[test]
fn tokens_never_granted_are_refused() {
    let etcd = Cluster::single();
    let store = etcd.open("t");
    let token = store.acquire("a", LONG).unwrap().token();
    for forged in [0, token + 1, u64::MAX] {
        assert!(
            matches!(
                store.put(b"k", b"v", forged),
                Err(Error::InvalidArgument(_))
            ),
            "{forged}"
        );
        assert!(
            matches!(store.fence("r", forged), Err(Error::InvalidArgument(_))),
            "{forged}"
        );
    }
    assert!(store.get(b"k").unwrap().is_none());
    assert_eq!(store.fence_token("r").unwrap(), None);
    // A token of another prefix's grant is not this store's.
    let elsewhere = etcd.open("other").acquire("a", LONG).unwrap().token();
    assert!(matches!(
        store.put(b"k", b"v", elsewhere),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn holder_writes_and_acquire_and_put_are_checked_and_all_or_nothing() {
    let etcd = Cluster::single();
    let store = etcd.open("t");
    let holder = store.acquire("a", LONG).unwrap();
    holder.put(b"k", b"v").unwrap();
    assert_eq!(store.get(b"k").unwrap().unwrap().token, holder.token());
    assert!(holder.delete(b"k").unwrap());
    let later = store.acquire("b", LONG).unwrap();
    later.put(b"k", b"later").unwrap();
    assert!(matches!(
        holder.put(b"k", b"v"),
        Err(Error::StaleToken { .. })
    ));
    holder.release().unwrap();
    assert!(matches!(
        holder.put(b"x", b"v"),
        Err(Error::LockLost { .. })
    ));
    assert!(store.get(b"x").unwrap().is_none());

    let first = store.acquire_and_put("c", LONG, b"job", b"first").unwrap();
    let got = store.get(b"job").unwrap().unwrap();
    assert_eq!(
        (got.value.as_slice(), got.token),
        (&b"first"[..], first.token())
    );
    assert!(matches!(
        store.acquire_and_put("c", LONG, b"job", b"second"),
        Err(Error::Locked { .. })
    ));
    assert_eq!(store.get(b"job").unwrap().unwrap().value, b"first");
    // The acquire-and-put's record is fenced by its token like any other.
    assert!(matches!(
        store.put(b"job", b"stale", later.token()),
        Err(Error::StaleToken { highest, .. }) if highest == first.token()
    ));
    first.put(b"job", b"again").unwrap();
    let before = store.info().unwrap().last_token;
    assert!(matches!(
        store.acquire_and_put("d", LONG, b"", b"v"),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(store.info().unwrap().last_token, before);
    assert!(store.lock("d").unwrap().is_none());
}

#[test]
fn keys_locks_and_info_list_what_etcd_holds() {
    let etcd = Cluster::single();
    let store = etcd.open("t");
    let a = store.acquire("a", LONG).unwrap();
    let t = a.token();
    for key in [&b"jobs/1"[..], b"jobs/2", b"jobz", b"other"] {
        store.put(key, b"v", t).unwrap();
    }
    store.delete(b"jobs/2", t).unwrap();
    assert_eq!(store.keys(b"jobs/").unwrap(), vec![b"jobs/1".to_vec()]);
    assert_eq!(store.keys(b"").unwrap().len(), 3);
    let b = store.acquire("b", LONG).unwrap();
    let locks = store.locks().unwrap();
    assert_eq!(
        locks
            .iter()
            .map(|l| (l.name.as_str(), l.token, l.state))
            .collect::<Vec<_>>(),
        [("a", t, LockState::Held), ("b", b.token(), LockState::Held)]
    );
    b.release().unwrap();
    assert!(store.lock("b").unwrap().is_none());
    let info = store.info().unwrap();
    assert_eq!((info.lock_records, info.keys, info.fences), (1, 3, 0));
    assert_eq!(info.last_token, b.token());
    assert_eq!(store.path(), std::path::Path::new(&etcd.url("t")));
}

#[test]
fn a_waiting_acquire_wakes_on_release_and_on_expiry_and_can_be_cancelled() {
    let etcd = Cluster::single();
    let store = etcd.open("t");
    let holder = store.acquire("job", LONG).unwrap();
    let waiter = {
        let store = store.clone();
        thread::spawn(move || store.acquire_wait("job", LONG, LONG).map(|h| h.token()))
    };
    thread::sleep(Duration::from_millis(300));
    holder.release().unwrap();
    let token = waiter.join().unwrap().unwrap();
    assert!(token > holder.token());

    // The waiter's holder was dropped in its thread: free again. An expiring lease is waited out.
    let short = store.acquire("job", SHORT).unwrap();
    let next = store.acquire_wait("job", LONG, LONG).unwrap();
    assert!(next.token() > short.token());
    assert!(matches!(
        store.acquire_wait("job", LONG, Duration::from_millis(300)),
        Err(Error::Timeout)
    ));
    let cancel = Cancel::new();
    let waiting = {
        let (store, cancel) = (store.clone(), cancel.clone());
        thread::spawn(move || {
            store
                .acquire_wait_cancellable("job", LONG, LONG, &cancel)
                .map(drop)
        })
    };
    thread::sleep(Duration::from_millis(300));
    cancel.cancel();
    assert!(matches!(waiting.join().unwrap(), Err(Error::Cancelled)));
    assert!(next.is_held().unwrap());
}

#[test]
fn threads_contending_on_one_lock_hold_it_one_at_a_time() {
    let etcd = Cluster::single();
    let store = etcd.open("t");
    let inside = Arc::new(Mutex::new(false));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (store, inside, tokens) = (store.clone(), inside.clone(), tokens.clone());
            thread::spawn(move || {
                for _ in 0..3 {
                    let holder = store.acquire_wait("job", LONG, LONG).unwrap();
                    assert!(!std::mem::replace(&mut *inside.lock().unwrap(), true));
                    tokens.lock().unwrap().push(holder.token());
                    holder.put(b"k", &holder.token().to_le_bytes()).unwrap();
                    *inside.lock().unwrap() = false;
                    holder.release().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), 12);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert_eq!(
        store.get(b"k").unwrap().unwrap().token,
        *tokens.last().unwrap()
    );
}

#[test]
fn keep_alive_renews_until_released_and_reports_a_lost_lease() {
    let etcd = Cluster::single();
    let store = etcd.open("t");
    let holder = store.acquire("job", SHORT).unwrap();
    holder.keep_alive(SHORT).unwrap();
    assert!(!holder.wait_lost(SHORT * 2));
    assert!(holder.is_held().unwrap());
    // A keep-alive at another TTL moves the lease first.
    let other = store.acquire("other", SHORT).unwrap();
    other.keep_alive(Duration::from_secs(3)).unwrap();
    assert!(other.remaining() > SHORT);
    holder.release().unwrap();
    assert!(holder.wait_lost(Duration::ZERO));
    assert!(holder.is_lost());
    // A waiter takes the lock at the release.
    let lease = store.lock("other").unwrap().unwrap();
    assert_eq!(lease.token, other.token());
    let taken = {
        let store = store.clone();
        thread::spawn(move || store.acquire_wait("other", LONG, LONG).map(|h| h.token()))
    };
    other.release().unwrap();
    assert!(taken.join().unwrap().unwrap() > other.token());
}

#[test]
fn a_paused_holder_whose_keep_alive_stops_is_told_it_lost_the_lease() {
    let etcd = Cluster::single();
    let store = etcd.open("t");
    let holder = store.acquire("job", SHORT).unwrap();
    holder.keep_alive(SHORT).unwrap();
    // Every member stops answering: renewals fail and the lease runs out on this side.
    for member in &etcd.members {
        member.signal(libc::SIGSTOP);
    }
    assert!(holder.wait_lost(LONG));
    for member in &etcd.members {
        member.signal(libc::SIGCONT);
    }
    assert!(holder.is_lost());
}

#[test]
fn a_store_used_after_fork_reports_forked() {
    let etcd = Cluster::single();
    let store = etcd.open("t");
    let holder = store.acquire("job", LONG).unwrap();
    // SAFETY: the child only calls into the library, which refuses before waiting on the
    // parent's runtime (whose threads the child does not have), then _exit()s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let forked = matches!(store.put(b"k", b"v", holder.token()), Err(Error::Forked))
            && matches!(holder.release(), Err(Error::Forked));
        unsafe { libc::_exit(if forked { 0 } else { 1 }) };
    }
    let mut wstatus = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &raw mut wstatus, 0) }, pid);
    assert!(libc::WIFEXITED(wstatus) && libc::WEXITSTATUS(wstatus) == 0);
    // The child's attempt to release left the parent's lease alone.
    assert!(holder.is_held().unwrap());
    assert!(store.get(b"k").unwrap().is_none());
}

#[test]
fn the_sync_api_works_from_inside_a_tokio_runtime() {
    let etcd = Cluster::single();
    let store = etcd.open("t");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let token = runtime.block_on(async {
        let holder = store.acquire("job", LONG).unwrap();
        holder.put(b"k", b"v").unwrap();
        holder.token()
        // The holder drops, and releases, inside the runtime too.
    });
    assert_eq!(store.get(b"k").unwrap().unwrap().token, token);
    assert!(store.lock("job").unwrap().is_none());
}
