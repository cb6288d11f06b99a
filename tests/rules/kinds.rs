//! Semaphores, shared locks and atomic multi-lock acquires, within one process. A backend
//! without them would refuse each with `InvalidArgument`, which the first acquire of a kind in
//! each body checks; the rules across real processes are in tests/processes.rs.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fencelock::{Cancel, Error, Holder, Kind, LockState, Store, MAX_HOLDERS};

use crate::common;
use crate::harness::{assert_held_by, Capability::FairQueue, Capability::Kinds, Harness};

const TTL: Duration = Duration::from_secs(60);
const LONG: Duration = Duration::from_secs(60);

crate::on_every_backend! {
    [
        a_semaphore_grants_n_permits_each_with_its_own_higher_token_and_refuses_the_next,
        another_permit_count_while_permits_are_live_is_refused_and_changes_nothing,
        bad_permit_counts_are_refused_before_anything_is_written,
        each_permit_expires_extends_and_writes_on_its_own,
        a_waiting_permit_acquire_gets_the_first_permit_let_go,
        many_threads_never_hold_more_than_n_permits,
        kinds_exclude_each_other_on_one_name,
        shared_holders_share_and_exclude_an_exclusive_holder,
        a_shared_holder_is_refused_holder_checked_writes_but_its_token_fences,
        a_waiting_exclusive_acquire_is_not_starved_by_a_stream_of_shared_ones,
        an_acquire_of_several_locks_is_all_or_none,
        bad_lists_of_names_are_refused,
        waiting_multi_lock_acquires_in_opposite_orders_never_deadlock,
        only_a_wait_that_this_threads_own_leases_block_is_refused,
    ]
}

fn sem(n: u32) -> Kind {
    Kind::Semaphore(n)
}

// ---- semaphores ----------------------------------------------------------------------------

fn a_semaphore_grants_n_permits_each_with_its_own_higher_token_and_refuses_the_next(h: &Harness) {
    let store = h.store();
    let before = store.acquire("other", TTL).unwrap().token();
    let Some(first) = h.if_supported(Kinds, store.acquire_kind("pool", sem(3), TTL)) else {
        return;
    };
    let permits: Vec<_> = std::iter::once(first)
        .chain((1..3).map(|_| store.acquire_kind("pool", sem(3), TTL).unwrap()))
        .collect();
    let tokens: Vec<u64> = permits.iter().map(Holder::token).collect();
    h.assert_next(before, tokens[0]);
    h.assert_next(tokens[0], tokens[1]);
    h.assert_next(tokens[1], tokens[2]);
    assert!(permits.iter().all(|p| p.kind() == sem(3)));
    match store.acquire_kind("pool", sem(3), TTL) {
        Err(Error::Locked { token, .. }) => assert!(tokens.contains(&token)),
        other => panic!("a fourth permit of three: {other:?}"),
    }
    // Releasing one permit frees exactly one place.
    permits[1].release().unwrap();
    let again = store.acquire_kind("pool", sem(3), TTL).unwrap();
    assert!(again.token() > tokens[2]);
    assert!(matches!(
        store.acquire_kind("pool", sem(3), TTL),
        Err(Error::Locked { .. })
    ));
    assert!(permits[0].is_held().unwrap());
    assert!(!permits[1].is_held().unwrap());
    assert!(again.is_held().unwrap());
}

fn another_permit_count_while_permits_are_live_is_refused_and_changes_nothing(h: &Harness) {
    let store = h.store();
    let Some(a) = h.if_supported(Kinds, store.acquire_kind("pool", sem(2), TTL)) else {
        return;
    };
    let info = store.info().unwrap();
    let grants = |store: &Store| -> Vec<_> {
        let infos = store.lock_holders("pool").unwrap();
        infos
            .into_iter()
            .map(|i| (i.token, i.state, i.kind))
            .collect()
    };
    let holders = grants(&store);
    for requested in [1, 3] {
        match store.acquire_kind("pool", sem(requested), TTL) {
            Err(err @ Error::PermitsMismatch { permits: 2, .. }) => {
                assert_eq!(err.status(), fencelock::Status::PermitsMismatch);
                assert_eq!(err.status() as i32, 18);
                assert!(err.to_string().contains("count of 2"), "{err}");
            }
            other => panic!("a count of {requested} against 2: {other:?}"),
        }
        assert!(matches!(
            store.acquire_kind_wait("pool", sem(requested), TTL, LONG),
            Err(Error::PermitsMismatch { permits: 2, .. })
        ));
    }
    assert_eq!(store.info().unwrap().last_token, info.last_token);
    assert_eq!(grants(&store), holders);
    // Once no permit is live, the next acquire sets the count anew.
    drop(a);
    let b = store.acquire_kind("pool", sem(1), TTL).unwrap();
    assert_eq!(b.kind(), sem(1));
    assert!(matches!(
        store.acquire_kind("pool", sem(1), TTL),
        Err(Error::Locked { .. })
    ));
}

fn bad_permit_counts_are_refused_before_anything_is_written(h: &Harness) {
    let store = h.store();
    for permits in [0, MAX_HOLDERS + 1, u32::MAX] {
        assert!(matches!(
            store.acquire_kind("pool", sem(permits), TTL),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert_eq!(store.info().unwrap().last_token, 0);
    assert!(store.locks().unwrap().is_empty());
    let _largest = h.if_supported(Kinds, store.acquire_kind("pool", sem(MAX_HOLDERS), TTL));
}

fn each_permit_expires_extends_and_writes_on_its_own(h: &Harness) {
    let store = h.store();
    let Some(short) = h.if_supported(Kinds, store.acquire_kind("pool", sem(2), h.short_ttl()))
    else {
        return;
    };
    let long = store.acquire_kind("pool", sem(2), TTL).unwrap();
    long.put(b"k", b"long").unwrap();
    assert!(short.wait_lost(LONG));
    // The expired permit's place is free (on etcd once etcd ended the lease, a moment after
    // the holder's own clock did); the live one is untouched.
    h.expire(&short);
    let third = store.acquire_kind("pool", sem(2), TTL).unwrap();
    assert!(long.is_held().unwrap());
    assert!(matches!(short.extend(TTL), Err(Error::LockLost { .. })));
    assert!(matches!(
        short.put(b"other", b"v"),
        Err(Error::LockLost { .. })
    ));
    long.extend(TTL).unwrap();
    third.extend(TTL).unwrap();
    // Holder-checked writes of permits are fenced by their tokens as ever.
    third.put(b"k", b"third").unwrap();
    assert!(matches!(
        long.put(b"k", b"stale"),
        Err(Error::StaleToken { .. })
    ));
    assert!(matches!(
        store.put(b"k", b"stale", long.token()),
        Err(Error::StaleToken { .. })
    ));
    assert_eq!(store.get(b"k").unwrap().unwrap().value, b"third");
    let states: Vec<_> = store
        .lock_holders("pool")
        .unwrap()
        .into_iter()
        .map(|info| (info.token, info.state, info.kind))
        .collect();
    assert!(states.contains(&(third.token(), LockState::Held, sem(2))));
    assert!(states.contains(&(long.token(), LockState::Held, sem(2))));
    // The expired permit's first release says it was lost; the live permits release quietly.
    assert!(
        matches!(short.release(), Err(Error::LockLost { token, .. }) if token == short.token())
    );
    short.release().unwrap();
    long.release().unwrap();
    third.release().unwrap();
}

fn a_waiting_permit_acquire_gets_the_first_permit_let_go(h: &Harness) {
    let store = h.store();
    let Some(a) = h.if_supported(Kinds, store.acquire_kind("pool", sem(2), TTL)) else {
        return;
    };
    let b = store.acquire_kind("pool", sem(2), TTL).unwrap();
    let waiter = {
        let store = store.clone();
        std::thread::spawn(move || store.acquire_kind_wait("pool", sem(2), TTL, LONG))
    };
    // Whichever permit goes, the waiter gets its place; here the second one.
    std::thread::sleep(Duration::from_millis(20));
    drop(b);
    let c = waiter.join().unwrap().unwrap();
    assert!(c.token() > a.token());
    assert!(a.is_held().unwrap() && c.is_held().unwrap());
    let cancel = Cancel::new();
    cancel.cancel();
    assert!(matches!(
        store.acquire_kind_wait_cancellable("pool", sem(2), TTL, LONG, &cancel),
        Err(Error::Cancelled)
    ));
    assert!(matches!(
        store.acquire_kind_wait("pool", sem(2), TTL, Duration::from_millis(5)),
        Err(Error::Timeout { .. })
    ));
}

fn many_threads_never_hold_more_than_n_permits(h: &Harness) {
    let store = h.store();
    if h.if_supported(Kinds, store.acquire_kind("pool", sem(2), TTL))
        .is_none()
    {
        return;
    }
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let (store, inside, most) = (store.clone(), inside.clone(), most.clone());
            std::thread::spawn(move || {
                let mut last = 0;
                for _ in 0..15 {
                    let permit = store.acquire_kind_wait("pool", sem(2), TTL, LONG).unwrap();
                    assert!(permit.token() > last);
                    last = permit.token();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::yield_now();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    drop(permit);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert!(most.load(Ordering::SeqCst) <= 2);
}

fn kinds_exclude_each_other_on_one_name(h: &Harness) {
    let store = h.store();
    let exclusive = store.acquire("name", TTL).unwrap();
    for kind in [Kind::Shared, sem(4)] {
        match store.acquire_kind("name", kind, TTL) {
            Err(Error::Locked { token, .. }) if token == exclusive.token() => {}
            Err(Error::InvalidArgument(_)) if !h.supports(Kinds) => return,
            other => panic!("{kind:?} beside an exclusive holder: {other:?}"),
        }
    }
    drop(exclusive);
    let permit = store.acquire_kind("name", sem(4), TTL).unwrap();
    assert_held_by(store.acquire("name", TTL), permit.token());
    assert!(matches!(
        store.acquire_kind("name", Kind::Shared, TTL),
        Err(Error::Locked { .. })
    ));
    drop(permit);
    // A name whose holders are all gone is free for any kind.
    let shared = store.acquire_kind("name", Kind::Shared, TTL).unwrap();
    assert_eq!(store.lock_info("name").unwrap().unwrap().kind, Kind::Shared);
    drop(shared);
    let exclusive = store.acquire_kind("name", Kind::Exclusive, TTL).unwrap();
    assert_eq!(exclusive.kind(), Kind::Exclusive);
    assert_eq!(
        store.lock_info("name").unwrap().unwrap().kind,
        Kind::Exclusive
    );
}

// ---- shared locks --------------------------------------------------------------------------

fn shared_holders_share_and_exclude_an_exclusive_holder(h: &Harness) {
    let store = h.store();
    let Some(first) = h.if_supported(Kinds, store.acquire_kind("config", Kind::Shared, TTL)) else {
        return;
    };
    let readers: Vec<_> = std::iter::once(first)
        .chain((1..5).map(|_| store.acquire_kind("config", Kind::Shared, TTL).unwrap()))
        .collect();
    for pair in readers.windows(2) {
        assert!(pair[1].token() > pair[0].token());
    }
    assert!(matches!(
        store.acquire("config", TTL),
        Err(Error::Locked { .. })
    ));
    assert_eq!(store.lock_holders("config").unwrap().len(), 5);
    let mut readers = readers.into_iter();
    let last = readers.next_back().unwrap();
    drop(readers);
    // One shared holder left still excludes an exclusive one.
    assert_held_by(store.acquire("config", TTL), last.token());
    drop(last);
    let writer = store.acquire("config", TTL).unwrap();
    assert_held_by(
        store.acquire_kind("config", Kind::Shared, TTL),
        writer.token(),
    );
}

fn a_shared_holder_is_refused_holder_checked_writes_but_its_token_fences(h: &Harness) {
    let store = h.store();
    let Some(reader) = h.if_supported(Kinds, store.acquire_kind("config", Kind::Shared, TTL))
    else {
        return;
    };
    assert!(matches!(
        reader.put(b"k", b"v"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        reader.delete(b"k"),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(store.get(b"k").unwrap(), None);
    // A fenced write with the token itself is the caller's to make, as for any token.
    store.put(b"k", b"v", reader.token()).unwrap();
    store.fence("bucket", reader.token()).unwrap();
    reader.extend(TTL).unwrap();
    assert!(reader.is_held().unwrap());
}

/// Needs the fair queue: without it (single-process mode) a stream of shared acquires may
/// keep joining while the exclusive one waits.
fn a_waiting_exclusive_acquire_is_not_starved_by_a_stream_of_shared_ones(h: &Harness) {
    let store = h.store();
    let Some(reader) = h.if_supported(Kinds, store.acquire_kind("config", Kind::Shared, TTL))
    else {
        return;
    };
    if !h.supports(FairQueue) {
        return;
    }
    let writer = {
        let store = store.clone();
        std::thread::spawn(move || store.acquire_wait("config", TTL, LONG))
    };
    // Shared acquires join the live reader until the writer is queued; from then on they
    // stand behind it.
    common::join_shared_until_refused(&store, "config");
    let late_reader = {
        let store = store.clone();
        std::thread::spawn(move || store.acquire_kind_wait("config", Kind::Shared, TTL, LONG))
    };
    assert!(matches!(
        store.acquire_kind("config", Kind::Shared, TTL),
        Err(Error::Locked { .. })
    ));
    drop(reader);
    let writer = writer.join().unwrap().unwrap();
    // The later shared waiter goes only after the writer.
    let token = writer.token();
    drop(writer);
    let late = late_reader.join().unwrap().unwrap();
    assert!(late.token() > token);
}

// ---- atomic multi-lock acquire -------------------------------------------------------------

fn an_acquire_of_several_locks_is_all_or_none(h: &Harness) {
    let store = h.store();
    let b = store.acquire("b", TTL).unwrap();
    let before = store.info().unwrap().last_token;
    match store.acquire_all(&["a", "b", "c"], TTL) {
        Err(Error::Locked { token, .. }) => assert_eq!(token, b.token()),
        Err(Error::InvalidArgument(_)) if !h.supports(Kinds) => return,
        other => panic!("{other:?}"),
    }
    assert_eq!(store.info().unwrap().last_token, before);
    assert!(store.lock_info("a").unwrap().is_none() && store.lock_info("c").unwrap().is_none());
    drop(b);
    let all = store.acquire_all(&["a", "b", "c"], TTL).unwrap();
    let names: Vec<_> = all.iter().map(|h| h.name().to_owned()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    // A token each, in list order.
    h.assert_next(before, all[0].token());
    h.assert_next(all[0].token(), all[1].token());
    h.assert_next(all[1].token(), all[2].token());
    // Each is a lease of its own.
    all[1].release().unwrap();
    assert!(all[0].is_held().unwrap() && all[2].is_held().unwrap());
    all[0].put(b"k", b"v").unwrap();
    let b_again = store.acquire("b", TTL).unwrap();
    assert!(b_again.token() > all[2].token());
}

fn bad_lists_of_names_are_refused(h: &Harness) {
    let store = h.store();
    for names in [&[][..], &["a", "a"][..], &["a", ""][..], &["a", "b\0"][..]] {
        assert!(
            matches!(
                store.acquire_all(names, TTL),
                Err(Error::InvalidArgument(_))
            ),
            "{names:?}"
        );
    }
    assert!(store.locks().unwrap().is_empty());
}

fn waiting_multi_lock_acquires_in_opposite_orders_never_deadlock(h: &Harness) {
    let store = h.store();
    let Some(first) = h.if_supported(Kinds, store.acquire_all(&["a", "b"], TTL)) else {
        return;
    };
    drop(first);
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = [["a", "b"], ["b", "a"], ["b", "a"]]
        .into_iter()
        .map(|names| {
            let (store, stop) = (store.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rounds = 0;
                while rounds < 20 || !stop.load(Ordering::Relaxed) {
                    let held = store.acquire_all_wait(&names, TTL, LONG).unwrap();
                    assert!(held.iter().all(|h| h.is_held().unwrap()));
                    drop(held);
                    rounds += 1;
                    if rounds >= 20 {
                        break;
                    }
                }
                rounds
            })
        })
        .collect();
    // An exclusive holder of one of them in between: the waits take both or neither.
    let one = store.acquire_wait("a", TTL, LONG).unwrap();
    assert!(matches!(
        store.acquire_all(&["b", "a"], TTL),
        Err(Error::Locked { .. })
    ));
    drop(one);
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        assert_eq!(thread.join().unwrap(), 20);
    }
    let cancel = Cancel::new();
    let held = store.acquire("b", TTL).unwrap();
    let waiter = {
        let (store, cancel) = (store.clone(), cancel.clone());
        std::thread::spawn(move || {
            store.acquire_all_wait_cancellable(&["a", "b"], TTL, LONG, &cancel)
        })
    };
    cancel.cancel();
    assert!(matches!(waiter.join().unwrap(), Err(Error::Cancelled)));
    drop(held);
    // The cancelled wait holds nothing: both locks are free.
    let _both = store.acquire_all(&["a", "b"], TTL).unwrap();
}

// ---- waits for this thread's own leases ----------------------------------------------------

fn only_a_wait_that_this_threads_own_leases_block_is_refused(h: &Harness) {
    let store = h.store();
    let Some(reader) = h.if_supported(Kinds, store.acquire_kind("config", Kind::Shared, TTL))
    else {
        return;
    };
    let own = |result: fencelock::Result<Holder>, tokens: &[u64]| match result {
        Err(Error::WouldDeadlock { token, .. }) if tokens.contains(&token) => {}
        other => panic!("expected WouldDeadlock by one of {tokens:?}, got {other:?}"),
    };
    // A shared wait while this thread holds the lock shared is granted: it does not wait.
    let second = store
        .acquire_kind_wait("config", Kind::Shared, TTL, LONG)
        .unwrap();
    // An exclusive one would wait for both, and a permit for a lock of another kind too.
    let readers = [reader.token(), second.token()];
    own(store.acquire_wait("config", TTL, LONG), &readers);
    own(
        store.acquire_kind_wait("config", sem(2), TTL, LONG),
        &readers,
    );

    drop((reader, second));
    // A permit wait for a lock this thread holds exclusively would wait for it.
    let exclusive = store.acquire("config", TTL).unwrap();
    own(
        store.acquire_kind_wait("config", sem(2), TTL, LONG),
        &[exclusive.token()],
    );
    drop(exclusive);

    // A permit wait with a free permit is granted; with every permit this thread's, refused.
    let first = store.acquire_kind("pool", sem(2), TTL).unwrap();
    let other = store.acquire_kind_wait("pool", sem(2), TTL, LONG).unwrap();
    own(
        store.acquire_kind_wait("pool", sem(2), TTL, LONG),
        &[first.token(), other.token()],
    );
    // With one permit another thread's, a wait waits (for it): here, until its timeout.
    other.release().unwrap();
    let theirs = {
        let store = store.clone();
        std::thread::spawn(move || store.acquire_kind("pool", sem(2), TTL).unwrap())
            .join()
            .unwrap()
    };
    assert!(matches!(
        store.acquire_kind_wait("pool", sem(2), TTL, Duration::from_millis(20)),
        Err(Error::Timeout { .. })
    ));
    drop(theirs);
    let next = store.acquire_kind_wait("pool", sem(2), TTL, LONG).unwrap();
    assert!(next.token() > first.token());
}
