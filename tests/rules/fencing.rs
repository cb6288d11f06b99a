//! The rules of leases, tokens and fenced values, within one process.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use fencelock::{Error, Holder, LockState, Store};

use crate::harness::{assert_held_by, assert_write_lost, Capability, Harness};

const LONG: Duration = Duration::from_secs(60);

crate::on_every_backend! {
    [
        every_grant_of_any_lock_gets_a_higher_token,
        contention_reports_the_current_holder,
        release_and_drop_free_the_lock_at_once,
        an_expired_lease_is_taken_over_and_its_holder_is_fenced_out,
        an_expired_but_untaken_lease_cannot_be_extended,
        a_release_after_the_lease_ran_out_reports_it_lost_once,
        a_wait_for_a_lock_this_thread_holds_is_refused_at_once,
        extend_renews_past_the_first_ttl_and_keeps_the_token,
        fenced_values_accept_equal_and_higher_tokens_only,
        tokens_never_granted_are_refused,
        a_delete_is_fenced_and_keeps_refusing_stale_writes,
        holder_writes_and_deletes_are_checked_against_the_lease,
        acquire_and_put_is_all_or_nothing,
        an_acquire_that_writes_waits_its_turn_and_writes_with_its_grant,
        a_lock_blocks_in_acquire_tries_once_in_try_acquire_and_is_reusable,
        external_fences_record_the_highest_token,
        keys_are_listed_by_prefix,
        lock_listing_tells_held_expired_and_released_apart,
        dead_lock_records_do_not_pile_up,
        the_token_counter_survives_reopening,
        a_waiting_acquire_wakes_when_the_holder_releases,
        a_waiting_acquire_times_out_and_waits_out_an_expiring_lease,
        threads_contending_on_one_lock_hold_it_one_at_a_time_in_token_order,
        waiting_acquires_are_granted_in_the_order_they_began_to_wait,
        concurrent_writes_of_many_threads_each_keep_their_result,
        keep_alive_renews_until_released_and_reports_the_end,
        keep_alive_reports_a_lease_taken_over,
        stores_opened_twice_in_one_process_see_each_others_leases,
        a_lease_that_runs_out_unrenewed_counts_as_lost,
        a_store_used_after_fork_reports_forked,
    ]
    file: [
        every_path_to_the_store_file_sees_the_same_leases,
        a_refused_acquire_writes_nothing,
        a_waiting_acquire_of_a_free_lock_is_granted_with_no_time_left,
    ]
    single_process: [
        single_process_mode_refuses_a_second_open,
        a_refused_acquire_writes_nothing,
        a_waiting_acquire_of_a_free_lock_is_granted_with_no_time_left,
    ]
    served: [
        a_refused_acquire_writes_nothing,
        a_waiting_acquire_of_a_free_lock_is_granted_with_no_time_left,
    ]
    etcd: [
        a_waiting_acquire_of_a_free_lock_is_granted_with_no_time_left,
        a_token_of_another_prefix_is_not_this_stores,
        a_keep_alive_at_another_ttl_moves_the_lease_at_once,
        the_sync_api_works_from_inside_a_tokio_runtime,
    ]
}

#[test]
fn store_and_holder_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Store>();
    check::<Holder>();
}

fn every_grant_of_any_lock_gets_a_higher_token(h: &Harness) {
    let store = h.store();
    let mut last = 0;
    for round in 0..5 {
        for name in ["a", "b", "c"] {
            let holder = store.acquire(name, LONG).unwrap();
            assert!(holder.token() > last, "round {round} lock {name}");
            last = holder.token();
        }
    }
    assert_eq!(store.info().unwrap().last_token, last);
}

fn contention_reports_the_current_holder(h: &Harness) {
    let store = h.store();
    let holder = store.acquire("job", LONG).unwrap();
    match store.acquire("job", LONG) {
        Err(Error::Locked {
            token,
            pid,
            remaining,
            ..
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

fn release_and_drop_free_the_lock_at_once(h: &Harness) {
    let store = h.store();
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

fn an_expired_lease_is_taken_over_and_its_holder_is_fenced_out(h: &Harness) {
    let store = h.store();
    let stale = store.acquire("payment-export", LONG).unwrap();
    stale.put(b"payments/today.csv", b"A, early").unwrap();
    stale.extend(h.short_ttl()).unwrap();
    h.expire(&stale);
    assert!(!stale.is_held().unwrap());
    assert!(stale.is_lost());

    let fresh = store.acquire("payment-export", LONG).unwrap();
    h.assert_next(stale.token(), fresh.token());
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
    for ttl in [LONG, h.short_ttl()] {
        assert!(matches!(stale.extend(ttl), Err(Error::LockLost { .. })));
    }
    let value = store.get(b"payments/today.csv").unwrap().unwrap();
    assert_eq!(value.value, b"B");
    assert_eq!(value.token, fresh.token());

    // The stale holder's release says the lease was lost, once, and leaves its successor's
    // lease alone.
    assert!(matches!(
        stale.release(),
        Err(Error::LockLost { token, current: Some(current) })
            if token == stale.token() && current == fresh.token()
    ));
    stale.release().unwrap();
    drop(stale);
    assert!(fresh.is_held().unwrap());
    assert_held_by(store.acquire("payment-export", LONG), fresh.token());
}

fn an_expired_but_untaken_lease_cannot_be_extended(h: &Harness) {
    let store = h.store();
    let holder = store.acquire("job", LONG).unwrap();
    holder.extend(LONG).unwrap();
    assert!(holder.is_held().unwrap());
    holder.extend(h.short_ttl()).unwrap();
    h.expire(&holder);
    assert!(
        matches!(holder.extend(LONG), Err(Error::LockLost { token, current: None }) if token == holder.token())
    );
    assert_write_lost(&store, &holder, b"k");
}

fn a_release_after_the_lease_ran_out_reports_it_lost_once(h: &Harness) {
    let store = h.store();
    let live = store.acquire("live", LONG).unwrap();
    let holder = store.acquire("job", h.short_ttl()).unwrap();
    h.expire(&holder);
    // Nobody took the lock over: the loss is the holder's own expiry.
    assert!(matches!(
        holder.release(),
        Err(Error::LockLost { token, current: None }) if token == holder.token()
    ));
    holder.release().unwrap();
    assert!(holder.is_lost());
    let next = store.acquire("job", LONG).unwrap();
    h.assert_next(live.token().max(holder.token()), next.token());
    // A live lease's release is no loss.
    live.release().unwrap();
    next.release().unwrap();
    next.release().unwrap();
    assert!(store.acquire("live", LONG).is_ok());
}

fn a_wait_for_a_lock_this_thread_holds_is_refused_at_once(h: &Harness) {
    let store = h.store();
    let holder = store.acquire("job", LONG).unwrap();
    // A try keeps its answer; a wait (of a minute) is refused at once, naming the holder.
    assert_held_by(store.acquire("job", LONG), holder.token());
    let own = |result: fencelock::Result<Holder>| match result {
        Err(Error::WouldDeadlock { name, token }) => {
            assert_eq!((name.as_str(), token), ("job", holder.token()));
        }
        other => panic!("expected WouldDeadlock, got {other:?}"),
    };
    own(store.acquire_wait("job", LONG, LONG));
    own(store.clone().acquire_wait("job", LONG, LONG));
    match store.acquire_all_wait(&["other", "job"], LONG, LONG) {
        Err(Error::WouldDeadlock { token, .. }) if token == holder.token() => {
            assert_eq!(
                store.acquire("other", LONG).unwrap().token(),
                holder.token() + 1
            );
        }
        Err(Error::InvalidArgument(_)) if !h.supports(Capability::Kinds) => {}
        other => panic!("an acquire_all waiting for this thread's lease: {other:?}"),
    }
    // Another open of the store in this thread waits as any other holder's waiter does.
    if h.supports(Capability::SecondOpen) {
        let other = h.another();
        assert!(matches!(
            other.acquire_wait("job", LONG, Duration::from_millis(20)),
            Err(Error::Timeout { .. })
        ));
    }
    // Another thread waits, and is granted the lock at the release.
    let waiter = {
        let store = store.clone();
        thread::spawn(move || store.acquire_wait("job", LONG, LONG).map(|h| h.token()))
    };
    thread::sleep(Duration::from_millis(50));
    holder.release().unwrap();
    assert!(waiter.join().unwrap().unwrap() > holder.token());
    // Released, the lease no longer counts as this thread's.
    drop(store.acquire_wait("job", LONG, LONG).unwrap());

    // Opened with `refuse_own_waits` off, this thread's own wait waits, as another's does.
    let lenient = h.fresh();
    let store = lenient.store_with(&fencelock::Options {
        refuse_own_waits: false,
        ..fencelock::Options::default()
    });
    let _held = store.acquire("job", LONG).unwrap();
    assert!(matches!(
        store.acquire_wait("job", LONG, Duration::from_millis(20)),
        Err(Error::Timeout { .. })
    ));
}

fn extend_renews_past_the_first_ttl_and_keeps_the_token(h: &Harness) {
    let store = h.store();
    // Renewed every quarter of its TTL for longer than the TTL: a pause of three quarters of
    // it (1.5 s) between two renewals is still safe.
    let ttl = h.short_ttl().max(Duration::from_secs(2));
    let holder = store.acquire("job", ttl).unwrap();
    for _ in 0..6 {
        thread::sleep(ttl / 4);
        holder.extend(ttl).unwrap();
    }
    assert!(holder.is_held().unwrap());
    // To a longer TTL, and back.
    holder.extend(LONG).unwrap();
    assert!(holder.remaining() > ttl);
    thread::sleep(ttl + ttl / 4);
    assert!(holder.is_held().unwrap());
    assert_eq!(
        store.lock_info("job").unwrap().unwrap().token,
        holder.token()
    );
    holder.extend(ttl).unwrap();
    assert!(holder.remaining() <= ttl);
    assert!(holder.is_held().unwrap());
}

fn fenced_values_accept_equal_and_higher_tokens_only(h: &Harness) {
    let store = h.store();
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

fn tokens_never_granted_are_refused(h: &Harness) {
    let store = h.store();
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

fn a_delete_is_fenced_and_keeps_refusing_stale_writes(h: &Harness) {
    let store = h.store();
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

fn holder_writes_and_deletes_are_checked_against_the_lease(h: &Harness) {
    let store = h.store();
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
    assert_write_lost(&store, &holder, b"x");
}

fn acquire_and_put_is_all_or_nothing(h: &Harness) {
    let store = h.store();
    let earlier = store.acquire("earlier", LONG).unwrap();
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
    // The value it wrote is fenced by its token like any other.
    assert!(matches!(
        store.put(b"k", b"stale", earlier.token()),
        Err(Error::StaleToken { highest, .. }) if highest == holder.token()
    ));
    holder.put(b"k", b"again").unwrap();
    // A refused write refuses the grant too: no lease, no token consumed.
    let before = store.info().unwrap().last_token;
    assert!(matches!(
        store.acquire_and_put("b", LONG, b"", b"v"),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(store.info().unwrap().last_token, before);
    assert!(store.lock_info("b").unwrap().is_none());
}

fn an_acquire_that_writes_waits_its_turn_and_writes_with_its_grant(h: &Harness) {
    let store = h.store();
    let first = store.lock("job").ttl(LONG).try_acquire().unwrap();
    let waiter = {
        let store = store.clone();
        thread::spawn(move || {
            let lock = store.lock("job").ttl(LONG).timeout(LONG);
            lock.put(b"job/owner", b"second")
                .acquire()
                .map(|h| h.token())
        })
    };
    // The wait has had the chance to begin; nothing is written while it waits.
    thread::sleep(Duration::from_millis(50));
    assert_eq!(store.get(b"job/owner").unwrap(), None);
    first.release().unwrap();
    let token = waiter.join().unwrap().unwrap();
    h.assert_next(first.token(), token);
    let got = store.get(b"job/owner").unwrap().unwrap();
    assert_eq!((got.value.as_slice(), got.token), (&b"second"[..], token));
    // Only an exclusive grant writes: another kind is refused before anything is asked.
    let before = store.info().unwrap().last_token;
    let shared = store.lock("other").kind(fencelock::Kind::Shared);
    for result in [
        shared.clone().put(b"k", b"v").try_acquire(),
        shared.put(b"k", b"v").timeout(LONG).acquire(),
    ] {
        assert!(
            matches!(result, Err(Error::InvalidArgument(_))),
            "{result:?}"
        );
    }
    assert_eq!(store.info().unwrap().last_token, before);
    assert_eq!(store.get(b"k").unwrap(), None);
}

fn a_lock_blocks_in_acquire_tries_once_in_try_acquire_and_is_reusable(h: &Harness) {
    let store = h.store();
    let lock = store.lock("job").ttl(LONG);
    let first = lock.try_acquire().unwrap();
    assert_held_by(lock.try_acquire(), first.token());
    // acquire() has no limit of its own: it waits as Mutex::lock does, until the release.
    let blocked = {
        let store = store.clone();
        thread::spawn(move || store.lock("job").ttl(LONG).acquire().map(|h| h.token()))
    };
    thread::sleep(Duration::from_millis(50));
    assert!(
        !blocked.is_finished(),
        "acquire() returned while the lock was held"
    );
    drop(first);
    let second = blocked.join().unwrap().unwrap();
    // The same Lock again: a new grant, with a higher token.
    let third = lock.acquire().unwrap();
    assert!(third.token() > second, "{} after {second}", third.token());
    assert_eq!(
        store.lock_info("job").unwrap().unwrap().token,
        third.token()
    );
}

fn external_fences_record_the_highest_token(h: &Harness) {
    let store = h.store();
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
    assert_eq!(store.fence_token("never").unwrap(), None);
    store.fence("another", t1).unwrap();
    store.verify().unwrap();
}

fn keys_are_listed_by_prefix(h: &Harness) {
    let store = h.store();
    let t = store.acquire("a", LONG).unwrap().token();
    for key in [&b"jobs/1"[..], b"jobs/2", b"jobz", b"other"] {
        store.put(key, b"v", t).unwrap();
    }
    store.delete(b"jobs/2", t).unwrap();
    assert_eq!(store.keys(b"jobs/").unwrap(), vec![b"jobs/1".to_vec()]);
    assert_eq!(store.keys(b"").unwrap().len(), 3);
    assert!(store.keys(b"nothing").unwrap().is_empty());
    let info = store.info().unwrap();
    assert_eq!((info.keys, info.fences), (3, 0));
}

/// Where the backend keeps the records of ended leases, `locks()` tells them apart; where it
/// does not (etcd), it lists the held locks alone.
fn lock_listing_tells_held_expired_and_released_apart(h: &Harness) {
    let store = h.store();
    let held = store.acquire("held", LONG).unwrap();
    let expired = store.acquire("expired", h.short_ttl()).unwrap();
    let released = store.acquire("released", LONG).unwrap();
    released.release().unwrap();
    h.expire(&expired);
    let locks = store.locks().unwrap();
    let state = |name: &str| locks.iter().find(|l| l.name == name).map(|l| l.state);
    assert_eq!(state("held"), Some(LockState::Held));
    if h.supports(Capability::EndedRecords) {
        assert_eq!(state("expired"), Some(LockState::Expired));
        assert_eq!(state("released"), Some(LockState::Released));
    } else {
        assert_eq!((state("expired"), state("released")), (None, None));
        assert!(store.lock_info("released").unwrap().is_none());
        assert_eq!(store.info().unwrap().lock_records, 1);
    }
    let info = store.lock_info("held").unwrap().unwrap();
    assert_eq!(info.token, held.token());
    assert_eq!(info.pid, std::process::id());
    assert!(info.expires_at > info.granted_at);
    assert_eq!(store.info().unwrap().last_token, released.token());
    assert_eq!(store.path(), h.path());
}

fn dead_lock_records_do_not_pile_up(h: &Harness) {
    let store = h.store();
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

fn the_token_counter_survives_reopening(h: &Harness) {
    let store = h.store();
    let token = store.acquire("a", LONG).unwrap().token();
    store.put(b"k", b"v", token).unwrap();
    drop(store);
    let store = h.reopen();
    assert!(store.acquire("a", LONG).unwrap().token() > token);
    assert_eq!(store.get(b"k").unwrap().unwrap().token, token);
    store.verify().unwrap();
}

fn a_waiting_acquire_wakes_when_the_holder_releases(h: &Harness) {
    let store = h.store();
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

/// A waiting acquire whose timeout has run out still takes a lock that is free, as a
/// try-once acquire would: a timeout bounds the wait for a holder, not the grant.
fn a_waiting_acquire_of_a_free_lock_is_granted_with_no_time_left(h: &Harness) {
    let store = h.store();
    let job = store.acquire_wait("job", LONG, Duration::ZERO).unwrap();
    assert!(job.is_held().unwrap());
    let shared = store.acquire_kind_wait("config", fencelock::Kind::Shared, LONG, Duration::ZERO);
    drop(h.if_supported(Capability::Kinds, shared));
    let both = store.acquire_all_wait(&["a", "b"], LONG, Duration::ZERO);
    drop(h.if_supported(Capability::Kinds, both));
}

fn a_waiting_acquire_times_out_and_waits_out_an_expiring_lease(h: &Harness) {
    let store = h.store();
    let _holder = store.acquire("job", LONG).unwrap();
    let short = store.acquire("short", h.short_ttl()).unwrap();
    // Waited for from another thread: this one's own waits are refused at once (see
    // a_wait_for_a_lock_this_thread_holds_is_refused_at_once).
    let waiter = store.clone();
    let next = thread::spawn(move || {
        assert!(matches!(
            waiter.acquire_wait("job", LONG, Duration::from_millis(30)),
            Err(Error::Timeout { .. })
        ));
        assert!(matches!(
            waiter.acquire_wait("job", LONG, Duration::ZERO),
            Err(Error::Timeout { .. })
        ));
        waiter
            .acquire_wait("short", LONG, Duration::from_secs(60))
            .unwrap()
    })
    .join()
    .unwrap();
    assert!(next.token() > short.token());
}

/// Needs the fair queue (not in single-process mode): the waiters of one lock are granted in
/// the order they began to wait, whatever order their wake-ups land in.
fn waiting_acquires_are_granted_in_the_order_they_began_to_wait(h: &Harness) {
    if !h.supports(Capability::FairQueue) {
        return;
    }
    let store = h.store();
    let holder = store.acquire("fifo", LONG).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let waiters: Vec<_> = (0..4)
        .map(|i| {
            let (store, order) = (store.clone(), order.clone());
            let waiter = thread::spawn(move || {
                let holder = store
                    .acquire_wait("fifo", LONG, Duration::from_secs(120))
                    .unwrap();
                order.lock().unwrap().push(i);
                holder.release().unwrap();
            });
            // Time for this waiter to begin its wait before the next one starts.
            thread::sleep(Duration::from_millis(300));
            waiter
        })
        .collect();
    drop(holder);
    for waiter in waiters {
        waiter.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3]);
}

fn threads_contending_on_one_lock_hold_it_one_at_a_time_in_token_order(h: &Harness) {
    let store = h.store();
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
                    holder
                        .put(b"counter", &holder.token().to_le_bytes())
                        .unwrap();
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
    let last = store.get(b"counter").unwrap().unwrap();
    assert_eq!(last.token, grants[79]);
    assert_eq!(last.value, grants[79].to_le_bytes());
}

fn concurrent_writes_of_many_threads_each_keep_their_result(h: &Harness) {
    let store = h.store();
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

fn keep_alive_renews_until_released_and_reports_the_end(h: &Harness) {
    let store = h.store();
    let ttl = h.short_ttl().max(Duration::from_secs(1));
    let holder = store.acquire("job", ttl).unwrap();
    holder.keep_alive(ttl).unwrap();
    assert!(!holder.wait_lost(ttl * 3));
    assert!(holder.is_held().unwrap());
    assert!(!holder.is_lost());
    assert!(matches!(
        store.acquire("job", ttl),
        Err(Error::Locked { .. })
    ));
    // A waiter takes the lock at the release.
    let taken = {
        let store = store.clone();
        thread::spawn(move || store.acquire_wait("job", LONG, LONG).map(|h| h.token()))
    };
    holder.release().unwrap();
    assert!(holder.wait_lost(Duration::ZERO));
    assert!(holder.is_lost());
    assert!(taken.join().unwrap().unwrap() > holder.token());
}

fn keep_alive_reports_a_lease_taken_over(h: &Harness) {
    let store = h.store();
    let holder = store.acquire("job", h.short_ttl()).unwrap();
    h.expire(&holder);
    let successor = store.acquire("job", LONG).unwrap();
    holder
        .keep_alive(h.short_ttl().max(Duration::from_millis(300)))
        .unwrap();
    assert!(holder.wait_lost(Duration::from_secs(30)));
    assert!(holder.is_lost());
    // The release of a lease the keep-alive found taken over says so, once.
    assert!(
        matches!(holder.release(), Err(Error::LockLost { token, .. }) if token == holder.token())
    );
    holder.release().unwrap();
    assert!(successor.is_held().unwrap());
}

fn stores_opened_twice_in_one_process_see_each_others_leases(h: &Harness) {
    let store = h.store();
    let other = h.another();
    let holder = store.acquire("job", LONG).unwrap();
    assert_held_by(other.acquire("job", LONG), holder.token());
    drop(holder);
    let next = other.acquire("job", LONG).unwrap();
    assert_held_by(store.acquire("job", LONG), next.token());
    // Another store is independent.
    let elsewhere = h.fresh();
    drop(elsewhere.store().acquire("job", LONG).unwrap());
}

fn a_lease_that_runs_out_unrenewed_counts_as_lost(h: &Harness) {
    let store = h.store();
    let holder = store.acquire("job", LONG).unwrap();
    assert!(!holder.is_lost());
    assert!(!holder.wait_lost(Duration::from_millis(1)));
    holder.extend(h.short_ttl()).unwrap();
    // Nobody took the lock over: the holder learns of the loss from its own expiry, and a
    // lease known to be lost stays lost.
    assert!(holder.wait_lost(Duration::from_secs(60)));
    assert!(holder.is_lost());
    assert!(matches!(holder.extend(LONG), Err(Error::LockLost { .. })));
    assert_write_lost(&store, &holder, b"k");
    assert!(holder.is_lost());
}

fn a_store_used_after_fork_reports_forked(h: &Harness) {
    let store = h.store();
    let holder = store.acquire("job", LONG).unwrap();
    // SAFETY: the child only calls into the library, which refuses before it waits on
    // anything of the parent's (threads the child does not have), then _exit()s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let forked = matches!(store.put(b"k", b"v", holder.token()), Err(Error::Forked))
            && matches!(holder.release(), Err(Error::Forked));
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe {
            libc::_exit(if forked {
                libc::EXIT_SUCCESS
            } else {
                libc::EXIT_FAILURE
            })
        };
    }
    let mut wstatus = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &raw mut wstatus, 0) }, pid);
    assert!(libc::WIFEXITED(wstatus) && libc::WEXITSTATUS(wstatus) == 0);
    // The child's attempt to release left the parent's lease alone.
    assert!(holder.is_held().unwrap());
    assert!(store.get(b"k").unwrap().is_none());
}

// ---- one backend's own ---------------------------------------------------------------------

fn every_path_to_the_store_file_sees_the_same_leases(h: &Harness) {
    let store = h.store();
    let path = h.file().unwrap();
    let dir = path.parent().unwrap();
    let symlink = dir.join("symlink.db");
    let hard_link = dir.join("hard-link.db");
    std::os::unix::fs::symlink(path, &symlink).unwrap();
    let holder = store.acquire("job", LONG).unwrap();
    assert_held_by(
        Store::open(&symlink).unwrap().acquire("job", LONG),
        holder.token(),
    );
    std::fs::hard_link(path, &hard_link).unwrap();
    match Store::open(&hard_link) {
        // The log is named after the file's one name (README, Limits): a file with two has
        // none, and another process would find another log beside its name.
        Err(err) if h.writes_through_the_log() => {
            assert_eq!(err.status(), fencelock::Status::InvalidArgument, "{err}");
            assert!(err.to_string().contains("2 names (hard links)"), "{err}");
        }
        opened => assert_held_by(opened.unwrap().acquire("job", LONG), holder.token()),
    }
}

/// Byte for byte, in the file.
fn a_refused_acquire_writes_nothing(h: &Harness) {
    let store = h.store();
    let path = h.file().unwrap();
    let _held = store.acquire("held", LONG).unwrap();
    store.acquire("gone", LONG).unwrap().release().unwrap();
    let before = std::fs::read(path).unwrap();
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
        std::fs::read(path).unwrap(),
        before,
        "a refusal changed the file"
    );
    assert!(store.lock_info("gone").unwrap().is_some());
}

fn single_process_mode_refuses_a_second_open(h: &Harness) {
    let store = h.store();
    let path = h.file().unwrap();
    let holder = store.acquire("job", LONG).unwrap();
    holder.put(b"k", b"v").unwrap();
    assert!(matches!(Store::open(path), Err(Error::InUse)));
    assert!(matches!(
        h.try_open(&fencelock::Options::default()),
        Err(Error::InUse)
    ));
    drop(holder);
    drop(store);
    h.close();
    // Once closed, the file opens in either mode.
    let store = Store::open(path).unwrap();
    assert_eq!(store.get(b"k").unwrap().unwrap().value, b"v");
}

/// etcd's tokens are revisions of the whole cluster: a later grant of another prefix is not
/// one of this store's tokens.
#[cfg(feature = "etcd")]
fn a_token_of_another_prefix_is_not_this_stores(h: &Harness) {
    let store = h.store();
    let token = store.acquire("a", LONG).unwrap().token();
    let elsewhere = h.fresh().store().acquire("a", LONG).unwrap().token();
    assert!(elsewhere > token);
    assert!(matches!(
        store.put(b"k", b"v", elsewhere),
        Err(Error::InvalidArgument(_))
    ));
    assert!(store.get(b"k").unwrap().is_none());
}

/// etcd leases have one TTL each: a keep-alive at another TTL moves the lock key onto a new
/// lease at once, keeping the token.
#[cfg(feature = "etcd")]
fn a_keep_alive_at_another_ttl_moves_the_lease_at_once(h: &Harness) {
    let store = h.store();
    let holder = store.acquire("other", h.short_ttl()).unwrap();
    holder.keep_alive(Duration::from_secs(3)).unwrap();
    assert!(holder.remaining() > h.short_ttl());
    assert_eq!(
        store.lock_info("other").unwrap().unwrap().token,
        holder.token()
    );
}

#[cfg(feature = "etcd")]
fn the_sync_api_works_from_inside_a_tokio_runtime(h: &Harness) {
    let store = h.store();
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
    assert!(store.lock_info("job").unwrap().is_none());
}
