//! The waiting queue (`queue.rs`): a release wakes the oldest waiter of its lock, and no waiter
//! sleeps through the release that would let it in (a model's wait has no timeout, so a lost
//! wake-up is a deadlock).

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
