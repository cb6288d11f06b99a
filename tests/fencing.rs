//! The rules of leases, tokens and fenced values, within one process.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use fencelock::{Error, LockState, Store};

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(50);

fn expire(ttl: Duration) {
    thread::sleep(ttl + Duration::from_millis(30));
}

#[test]
fn store_and_holder_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Store>();
    check::<fencelock::Holder>();
}

#[test]
fn every_grant_of_any_lock_gets_a_higher_token() {
    let (_dir, _path, store) = common::temp_store();
    let mut last = 0;
    for round in 0..5 {
        for name in ["a", "b", "c"] {
            let holder = store.acquire(name, LONG).unwrap();
            assert!(holder.token() > last, "round {round} lock {name}");
            last = holder.token();
        }
    }
}

#[test]
fn contention_reports_the_current_holder() {
    let (_dir, _path, store) = common::temp_store();
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
    // Other locks are independent.
    let _other = store.acquire("other-job", LONG).unwrap();
}

#[test]
fn release_and_drop_free_the_lock_at_once() {
    let (_dir, _path, store) = common::temp_store();
    let first = store.acquire("job", LONG).unwrap();
    first.release().unwrap();
    first.release().unwrap(); // idempotent
    let second = store.acquire("job", LONG).unwrap();
    assert!(second.token() > first.token());
    drop(second);
    let third = store.acquire("job", LONG).unwrap();
    assert!(!first.is_held().unwrap());
    assert!(third.is_held().unwrap());
}

#[test]
fn an_expired_lease_is_taken_over_and_its_holder_is_fenced_out() {
    let (_dir, _path, store) = common::temp_store();
    let stale = store.acquire("payment-export", LONG).unwrap();
    stale.put(b"payments/today.csv", b"A, early").unwrap();
    stale.extend(SHORT).unwrap();
    expire(SHORT);
    assert!(!stale.is_held().unwrap());

    let fresh = store.acquire("payment-export", LONG).unwrap();
    assert_eq!(fresh.token(), stale.token() + 1);
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
    assert!(matches!(stale.extend(LONG), Err(Error::LockLost { .. })));
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
fn an_expired_but_untaken_lease_cannot_be_extended() {
    let (_dir, _path, store) = common::temp_store();
    let holder = store.acquire("job", LONG).unwrap();
    holder.extend(LONG).unwrap();
    assert!(holder.is_held().unwrap());
    holder.extend(SHORT).unwrap();
    expire(SHORT);
    assert!(
        matches!(holder.extend(LONG), Err(Error::LockLost { token, current: None }) if token == holder.token())
    );
    assert!(matches!(
        holder.put(b"k", b"v"),
        Err(Error::LockLost { .. })
    ));
    assert!(store.get(b"k").unwrap().is_none());
}

#[test]
fn fenced_values_accept_equal_and_higher_tokens_only() {
    let (_dir, _path, store) = common::temp_store();
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
    // Binary keys and empty values are fine.
    store.put(&[0, 255, 10], b"", t2).unwrap();
    assert_eq!(store.get(&[0, 255, 10]).unwrap().unwrap().value, b"");
    assert!(store.get(b"missing").unwrap().is_none());
}

#[test]
fn tokens_never_granted_are_refused() {
    let (_dir, _path, store) = common::temp_store();
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
}

#[test]
fn a_delete_is_fenced_and_keeps_refusing_stale_writes() {
    let (_dir, _path, store) = common::temp_store();
    let t1 = store.acquire("a", LONG).unwrap().token();
    let t2 = store.acquire("b", LONG).unwrap().token();
    store.put(b"k", b"v", t2).unwrap();
    assert!(matches!(
        store.delete(b"k", t1),
        Err(Error::StaleToken { .. })
    ));
    assert!(store.get(b"k").unwrap().is_some());
    assert!(store.delete(b"k", t2).unwrap());
    assert!(!store.delete(b"k", t2).unwrap());
    assert!(store.get(b"k").unwrap().is_none());
    assert!(matches!(
        store.put(b"k", b"stale", t1),
        Err(Error::StaleToken { highest, .. }) if highest == t2
    ));
    assert!(store.keys(b"").unwrap().is_empty());
}

#[test]
fn holder_writes_and_deletes_are_checked_against_the_lease() {
    let (_dir, _path, store) = common::temp_store();
    let holder = store.acquire("a", LONG).unwrap();
    holder.put(b"k", b"v").unwrap();
    assert_eq!(store.get(b"k").unwrap().unwrap().token, holder.token());
    assert!(holder.delete(b"k").unwrap());
    // A later grant of another lock writes the key; this holder's token is now stale for it.
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
}

#[test]
fn acquire_and_put_is_all_or_nothing() {
    let (_dir, _path, store) = common::temp_store();
    let holder = store.acquire_and_put("a", LONG, b"k", b"first").unwrap();
    let got = store.get(b"k").unwrap().unwrap();
    assert_eq!(
        (got.value.as_slice(), got.token),
        (&b"first"[..], holder.token())
    );
    assert!(matches!(
        store.acquire_and_put("a", LONG, b"k", b"second"),
        Err(Error::Locked { .. })
    ));
    assert_eq!(store.get(b"k").unwrap().unwrap().value, b"first");
    // A refused write refuses the grant too: no lease, no token consumed.
    let before = store.info().unwrap().last_token;
    assert!(matches!(
        store.acquire_and_put("b", LONG, b"", b"v"),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(store.info().unwrap().last_token, before);
    assert!(store.lock("b").unwrap().is_none());
}

#[test]
fn external_fences_record_the_highest_token() {
    let (_dir, _path, store) = common::temp_store();
    let t1 = store.acquire("a", LONG).unwrap().token();
    let t2 = store.acquire("b", LONG).unwrap().token();
    store.fence("s3://bucket/payments", t1).unwrap();
    store.fence("s3://bucket/payments", t1).unwrap();
    store.fence("s3://bucket/payments", t2).unwrap();
    assert!(matches!(
        store.fence("s3://bucket/payments", t1),
        Err(Error::StaleToken { token, highest }) if token == t1 && highest == t2
    ));
    assert_eq!(store.fence_token("s3://bucket/payments").unwrap(), Some(t2));
    store.fence("another", t1).unwrap();
}

#[test]
fn keys_are_listed_by_prefix() {
    let (_dir, _path, store) = common::temp_store();
    let t = store.acquire("a", LONG).unwrap().token();
    for key in [&b"jobs/1"[..], b"jobs/2", b"jobz", b"other"] {
        store.put(key, b"v", t).unwrap();
    }
    store.delete(b"jobs/2", t).unwrap();
    assert_eq!(store.keys(b"jobs/").unwrap(), vec![b"jobs/1".to_vec()]);
    assert_eq!(store.keys(b"").unwrap().len(), 3);
    assert!(store.keys(b"nothing").unwrap().is_empty());
}

#[test]
fn lock_listing_tells_held_expired_and_released_apart() {
    let (_dir, _path, store) = common::temp_store();
    let held = store.acquire("held", LONG).unwrap();
    let expired = store.acquire("expired", SHORT).unwrap();
    let released = store.acquire("released", LONG).unwrap();
    released.release().unwrap();
    expire(SHORT);
    let locks = store.locks().unwrap();
    let state = |name: &str| locks.iter().find(|l| l.name == name).map(|l| l.state);
    assert_eq!(state("held"), Some(LockState::Held));
    assert_eq!(state("expired"), Some(LockState::Expired));
    assert_eq!(state("released"), Some(LockState::Released));
    let info = store.lock("held").unwrap().unwrap();
    assert_eq!(info.token, held.token());
    assert_eq!(info.pid, std::process::id());
    assert!(info.expires_at > info.granted_at);
    drop(expired);
}

#[test]
fn dead_lock_records_do_not_pile_up() {
    let (_dir, _path, store) = common::temp_store();
    for i in 0..300 {
        store
            .acquire(&format!("job-{i}"), LONG)
            .unwrap()
            .release()
            .unwrap();
    }
    let live: Vec<_> = (0..5)
        .map(|i| store.acquire(&format!("live-{i}"), LONG).unwrap())
        .collect();
    for _ in 0..300 {
        store.acquire("hot", LONG).unwrap().release().unwrap();
    }
    let info = store.info().unwrap();
    assert!(
        info.lock_records < 20,
        "{} lock records remain",
        info.lock_records
    );
    for holder in &live {
        assert!(holder.is_held().unwrap(), "pruning removed a live lease");
    }
}

#[test]
fn the_token_counter_survives_reopening() {
    let (dir, path, store) = common::temp_store();
    let token = store.acquire("a", LONG).unwrap().token();
    store.put(b"k", b"v", token).unwrap();
    drop(store);
    let store = Store::open(&path).unwrap();
    assert!(store.acquire("a", LONG).unwrap().token() > token);
    assert_eq!(store.get(b"k").unwrap().unwrap().token, token);
    store.verify().unwrap();
    drop(dir);
}

#[test]
fn a_waiting_acquire_wakes_when_the_holder_releases() {
    let (_dir, _path, store) = common::temp_store();
    let holder = store.acquire("job", LONG).unwrap();
    let waiter = {
        let store = store.clone();
        thread::spawn(move || store.acquire_wait("job", LONG, Duration::from_secs(60)))
    };
    thread::sleep(Duration::from_millis(50));
    let token = holder.token();
    holder.release().unwrap();
    let next = waiter.join().unwrap().unwrap();
    assert!(next.token() > token);
}

#[test]
fn a_waiting_acquire_times_out_and_waits_out_an_expiring_lease() {
    let (_dir, _path, store) = common::temp_store();
    let _holder = store.acquire("job", LONG).unwrap();
    assert!(matches!(
        store.acquire_wait("job", LONG, Duration::from_millis(30)),
        Err(Error::Timeout)
    ));
    assert!(matches!(
        store.acquire_wait("job", LONG, Duration::ZERO),
        Err(Error::Timeout)
    ));
    let short = store.acquire("short", SHORT).unwrap();
    let next = store
        .acquire_wait("short", LONG, Duration::from_secs(60))
        .unwrap();
    assert!(next.token() > short.token());
}

#[test]
fn threads_contending_on_one_lock_hold_it_one_at_a_time_in_token_order() {
    let (_dir, _path, store) = common::temp_store();
    let inside = Arc::new(AtomicUsize::new(0));
    let grants = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (store, inside, grants) = (store.clone(), inside.clone(), grants.clone());
            thread::spawn(move || {
                for _ in 0..10 {
                    let holder = store
                        .acquire_wait("hot", LONG, Duration::from_secs(120))
                        .unwrap();
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    grants.lock().unwrap().push(holder.token());
                    holder.put(b"counter", b"x").unwrap();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    holder.release().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let grants = grants.lock().unwrap();
    assert_eq!(grants.len(), 80);
    assert!(grants.windows(2).all(|w| w[0] < w[1]), "{grants:?}");
}

#[test]
fn concurrent_writes_of_many_threads_each_keep_their_result() {
    let (_dir, _path, store) = common::temp_store();
    let low = store.acquire("low", LONG).unwrap().token();
    let high = store.acquire("high", LONG).unwrap().token();
    store.put(b"contested", b"high", high).unwrap();
    let threads: Vec<_> = (0..8u8)
        .map(|i| {
            let store = store.clone();
            thread::spawn(move || {
                let own = store.put(&[b'k', i], &[i], low);
                let stale = store.put(b"contested", &[i], low);
                (own, stale)
            })
        })
        .collect();
    for thread in threads {
        let (own, stale) = thread.join().unwrap();
        own.unwrap();
        assert!(matches!(stale, Err(Error::StaleToken { .. })));
    }
    assert_eq!(store.keys(b"k").unwrap().len(), 8);
    assert_eq!(store.get(b"contested").unwrap().unwrap().value, b"high");
}

#[test]
fn keep_alive_renews_until_released_and_reports_the_end() {
    let (_dir, _path, store) = common::temp_store();
    let ttl = Duration::from_secs(1);
    let holder = store.acquire("job", ttl).unwrap();
    holder.keep_alive(ttl).unwrap();
    thread::sleep(ttl * 3);
    assert!(holder.is_held().unwrap());
    assert!(!holder.is_lost());
    assert!(matches!(
        store.acquire("job", ttl),
        Err(Error::Locked { .. })
    ));
    holder.release().unwrap();
    assert!(holder.wait_lost(Duration::from_secs(5)));
    let _next = store.acquire("job", ttl).unwrap();
}

#[test]
fn keep_alive_reports_a_lease_taken_over() {
    let (_dir, _path, store) = common::temp_store();
    let ttl = Duration::from_millis(300);
    let holder = store.acquire("job", SHORT).unwrap();
    expire(SHORT);
    let _successor = store.acquire("job", LONG).unwrap();
    holder.keep_alive(ttl).unwrap();
    assert!(holder.wait_lost(Duration::from_secs(30)));
    assert!(holder.is_lost());
}

#[test]
fn stores_opened_twice_in_one_process_see_each_others_leases() {
    let (_dir, path, store) = common::temp_store();
    let other = Store::open(&path).unwrap();
    let holder = store.acquire("job", LONG).unwrap();
    assert!(matches!(
        other.acquire("job", LONG),
        Err(Error::Locked { .. })
    ));
    drop(holder);
    let _next = other.acquire("job", LONG).unwrap();
}

#[test]
fn single_process_mode_refuses_a_second_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let options = fencelock::Options {
        mode: fencelock::Mode::SingleProcess,
        ..fencelock::Options::default()
    };
    let store = Store::open_with(&path, &options).unwrap();
    let holder = store.acquire("job", LONG).unwrap();
    holder.put(b"k", b"v").unwrap();
    assert!(matches!(Store::open(&path), Err(Error::InUse)));
    assert!(matches!(
        Store::open_with(&path, &options),
        Err(Error::InUse)
    ));
    drop(holder);
    drop(store);
    // Once closed, the file opens in either mode.
    let store = Store::open(&path).unwrap();
    assert_eq!(store.get(b"k").unwrap().unwrap().value, b"v");
}

#[test]
fn every_path_to_the_store_file_sees_the_same_leases() {
    let (dir, path, store) = common::temp_store();
    let symlink = dir.path().join("symlink.db");
    let hard_link = dir.path().join("hard-link.db");
    std::os::unix::fs::symlink(&path, &symlink).unwrap();
    std::fs::hard_link(&path, &hard_link).unwrap();
    let holder = store.acquire("job", LONG).unwrap();
    for other in [&symlink, &hard_link] {
        let other = Store::open(other).unwrap();
        assert!(
            matches!(other.acquire("job", LONG), Err(Error::Locked { token, .. }) if token == holder.token()),
            "{other:?}"
        );
    }
}

#[test]
fn a_refused_acquire_writes_nothing() {
    let (_dir, path, store) = common::temp_store();
    let _held = store.acquire("held", LONG).unwrap();
    store.acquire("gone", LONG).unwrap().release().unwrap();
    let before = std::fs::read(&path).unwrap();
    for _ in 0..3 {
        assert!(matches!(
            store.acquire("held", LONG),
            Err(Error::Locked { .. })
        ));
        assert!(matches!(
            store.acquire_and_put("held", LONG, b"k", b"v"),
            Err(Error::Locked { .. })
        ));
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "a refusal changed the file"
    );
    assert!(store.lock("gone").unwrap().is_some());
}

#[test]
fn a_lease_that_runs_out_unrenewed_counts_as_lost() {
    let (_dir, _path, store) = common::temp_store();
    let holder = store.acquire("job", LONG).unwrap();
    assert!(!holder.is_lost());
    assert!(!holder.wait_lost(Duration::from_millis(1)));
    holder.extend(SHORT).unwrap();
    // Nobody took the lock over: the holder learns of the loss from its own expiry.
    assert!(holder.wait_lost(Duration::from_secs(60)));
    assert!(holder.is_lost());
    assert!(matches!(holder.extend(LONG), Err(Error::LockLost { .. })));
}
