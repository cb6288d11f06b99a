//! The waiting queue (`queue.rs`): a release wakes the oldest waiter of its lock, and no waiter
//! sleeps through the release that would let it in (a model's wait has no timeout, so a lost
//! wake-up is a deadlock); with more waiters than places, the one without a place is woken as a
//! place frees, and the queued are granted oldest first.

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

use super::{check, Procs};
use crate::ring::Ring;

const LOCK: u64 = 7;
/// The queue's clock: one instant, so that no waiter looks stale.
const NOW: u64 = 1;

/// A waiter with liveness id `owner`: queues, then takes `held` when it is free, sleeping on its
/// entry in between, and hands it on as a release does (wakes the oldest waiter).
fn wait_and_take(ring: &Ring, procs: &Procs, held: &AtomicBool, owner: u64) -> u64 {
    let waiter = ring.enqueue(LOCK, owner, NOW, procs).expect("a place");
    let ticket = waiter.ticket;
    loop {
        let seen = ring.still_waiting(&waiter, NOW);
        if held
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            break;
        }
        ring.wait_turn(&waiter, seen, std::time::Duration::MAX);
    }
    ring.dequeue(waiter);
    held.store(false, Ordering::SeqCst);
    ring.wake_oldest(LOCK, NOW, procs);
    ticket
}

#[test]
fn a_release_wakes_a_waiter_and_every_waiter_gets_the_lock() {
    check(|| {
        let ring = Arc::new(Ring::heap());
        let procs = Arc::new(Procs::new(2));
        let held = Arc::new(AtomicBool::new(true));
        let waiters: Vec<_> = [1u64, 2]
            .into_iter()
            .map(|owner| {
                let (ring, procs, held) = (ring.clone(), procs.clone(), held.clone());
                thread::spawn(move || wait_and_take(&ring, &procs, &held, owner))
            })
            .collect();
        // The holder releases.
        held.store(false, Ordering::SeqCst);
        ring.wake_oldest(LOCK, NOW, &*procs);
        let mut tickets: Vec<u64> = waiters
            .into_iter()
            .map(|w| w.join().expect("a waiter"))
            .collect();
        tickets.sort_unstable();
        assert_eq!(tickets, [1, 2], "a ticket each, in order of queueing");
        assert_eq!(ring.queued(LOCK), 0);
    });
}

/// A waiter with liveness id `owner`, as `share/member.rs` waits: with a place (`waiter`) it
/// takes `held` only when no queued waiter holds an earlier ticket, sleeping on its entry in
/// between; without one (a full queue) it sleeps on the overflow word while the lock is held or
/// a queued waiter waits, and takes a place as one frees. Once it holds the lock it notes its
/// owner in `granted`, leaves the queue and hands the lock on as a release does. Returns the
/// ticket it was granted with (`u64::MAX` for none: granted without a place).
fn wait_in_turn(
    ring: &Ring,
    procs: &Procs,
    held: &AtomicBool,
    granted: &loom::sync::Mutex<Vec<u64>>,
    owner: u64,
    mut waiter: Option<crate::ring::Waiter>,
) -> u64 {
    loop {
        match &waiter {
            Some(place) => {
                let seen = ring.still_waiting(place, NOW);
                let first = !ring.waits_before(LOCK, Some(place.ticket), NOW, procs);
                if first
                    && held
                        .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok()
                {
                    break;
                }
                ring.wait_turn(place, seen, std::time::Duration::MAX);
            }
            None => {
                let blocked =
                    || held.load(Ordering::SeqCst) || ring.waits_before(LOCK, None, NOW, procs);
                if !blocked()
                    && held
                        .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok()
                {
                    break;
                }
                if ring.wait_overflow(std::time::Duration::MAX, blocked) {
                    waiter = ring.enqueue_if_free(LOCK, owner, NOW);
                }
            }
        }
    }
    granted.lock().expect("the grants").push(owner);
    let ticket = waiter.as_ref().map_or(u64::MAX, |place| place.ticket);
    if let Some(place) = waiter {
        ring.dequeue(place);
    }
    held.store(false, Ordering::SeqCst);
    ring.wake_oldest(LOCK, NOW, procs);
    ticket
}

/// The overflow path: three waiters and a queue of two places (`layout.rs` narrows it under
/// loom). The third sleeps without a place until a release frees one; every waiter is woken and
/// granted (no wake-up lost: a model's wait has no timeout), the queued ones oldest first, and
/// the one without a place only after them (it takes a place behind them, or waits while they
/// are queued).
// About 6 minutes at 2 preemptions on the loaded 2-core machine (four threads): run by make
// test-loom-long only.
#[test]
#[ignore = "slow: make test-loom-long runs it"]
fn a_waiter_without_a_place_is_woken_and_granted_after_the_queued_ones() {
    check(|| {
        let ring = Arc::new(Ring::heap());
        let procs = Arc::new(Procs::new(3));
        let held = Arc::new(AtomicBool::new(true));
        let granted = Arc::new(loom::sync::Mutex::new(Vec::new()));
        // Queued in this order while the lock is held: tickets 1 and 2, and no place for the
        // third.
        let places = [1u64, 2, 3].map(|owner| ring.enqueue(LOCK, owner, NOW, &*procs));
        assert!(places[0].is_some() && places[1].is_some() && places[2].is_none());
        let waiters: Vec<_> = [1u64, 2, 3]
            .into_iter()
            .zip(places)
            .map(|(owner, place)| {
                let (ring, procs, held, granted) =
                    (ring.clone(), procs.clone(), held.clone(), granted.clone());
                thread::spawn(move || wait_in_turn(&ring, &procs, &held, &granted, owner, place))
            })
            .collect();
        // The holder releases.
        held.store(false, Ordering::SeqCst);
        ring.wake_oldest(LOCK, NOW, &*procs);
        let tickets: Vec<u64> = waiters
            .into_iter()
            .map(|w| w.join().expect("a waiter"))
            .collect();
        assert_eq!(
            *granted.lock().expect("the grants"),
            [1, 2, 3],
            "granted out of turn"
        );
        assert_eq!(tickets[..2], [1, 2]);
        // The third was granted from the place the first left (ticket 3), or without one once
        // both had left.
        assert!(matches!(tickets[2], 3 | u64::MAX), "{tickets:?}");
        assert_eq!(ring.queued(LOCK), 0);
    });
}
