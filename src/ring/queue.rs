//! The waiting queue: where acquires that wait for a lock take a ticket, so that a release
//! wakes the oldest live waiter of its lock (fairness across processes), and where a waiter
//! without a place (a full queue) sleeps on the overflow word.
//!
//! An entry's state word:
//!
//! | state | meaning | who moves it on |
//! |---|---|---|
//! | FREE | nobody's | an enqueuer claims it (FREE -> CLAIMED) |
//! | CLAIMED | being filled by its enqueuer | that enqueuer (-> WAITING, Release: its fields first) |
//! | WAITING | a waiter of `lock` with `ticket` | the waiter when it leaves; an enqueuer that finds its owner dead or long gone |
//!
//! Model: `models/queue.rs` (make test-loom): releases and waiters, no wake-up lost; and (make
//! test-loom-long) the overflow path, three waiters for two places, granted oldest first.

use std::time::Duration;

use super::layout::{WaiterEntry, WAITERS};
use super::sync::{fence, futex_wait, futex_wake, futex_wake_some, Live, Ordering};
use super::Ring;

/// A waiter that has not shown it is still waiting for this long (it may be paused) is passed
/// over, so that a paused waiter cannot hold a lock up.
pub(super) const WAITER_STALE_NS: u64 = 50_000_000;

const ENTRY_FREE: u32 = 0;
const ENTRY_CLAIMED: u32 = 1;
const ENTRY_WAITING: u32 = 2;

/// A waiting acquire's place in the queue.
#[derive(Debug)]
pub(crate) struct Waiter {
    index: usize,
    pub(crate) ticket: u64,
}

/// A waiter as the views of the queue see it ([`Ring::waiters_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Queued {
    /// Its place: a lower ticket was queued earlier.
    pub(crate) ticket: u64,
    /// The waiting process (0 for none recorded).
    pub(crate) pid: u32,
    /// When it took its place (`CLOCK_BOOTTIME` ns).
    pub(crate) since_ns: u64,
}

/// The queue's name of a lock: a 64-bit FNV-1a hash of its name. Two locks that share a hash
/// only share their queue's order, never a lease.
pub(crate) fn lock_hash(name: &str) -> u64 {
    bytes_hash(&[name.as_bytes()])
}

/// The same hash (FNV-1a) of the bytes of `parts`, one after the other: the key index's
/// (`share/keys.rs`), over a namespace and a key.
pub(crate) fn bytes_hash(parts: &[&[u8]]) -> u64 {
    parts
        .iter()
        .flat_map(|part| part.iter())
        .fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
}

impl Ring {
    fn waiter(&self, index: usize) -> &WaiterEntry {
        self.view.waiter(index)
    }

    /// Queues a waiting acquire of `lock` by the store with liveness id `owner`, with the next
    /// ticket. `None` when the queue is full even after dropping dead and long-gone waiters;
    /// the acquire then waits without a place.
    pub(crate) fn enqueue(
        &self,
        lock: u64,
        owner: u64,
        now: u64,
        live: &impl Live,
    ) -> Option<Waiter> {
        self.enqueue_in(lock, owner, now, Some(live as &dyn Live))
    }

    /// As [`Ring::enqueue`], into a free entry only (dead waiters are not looked for, which
    /// tests a liveness lock per entry): what a waiter without a place tries at each release.
    pub(crate) fn enqueue_if_free(&self, lock: u64, owner: u64, now: u64) -> Option<Waiter> {
        self.enqueue_in(lock, owner, now, None)
    }

    fn enqueue_in(
        &self,
        lock: u64,
        owner: u64,
        now: u64,
        sweep: Option<&dyn Live>,
    ) -> Option<Waiter> {
        for pass in 0..2 {
            for index in 0..WAITERS {
                let entry = self.waiter(index);
                if entry
                    .state
                    .compare_exchange(
                        ENTRY_FREE,
                        ENTRY_CLAIMED,
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    )
                    .is_err()
                {
                    continue;
                }
                let ticket = self.header().tickets.fetch_add(1, Ordering::AcqRel) + 1;
                entry.lock.store(lock, Ordering::Relaxed);
                entry.ticket.store(ticket, Ordering::Relaxed);
                entry.owner.store(owner, Ordering::Relaxed);
                entry.seen_ns.store(now, Ordering::Relaxed);
                entry
                    .pid
                    .store(u64::from(std::process::id()), Ordering::Relaxed);
                entry.since_ns.store(now, Ordering::Relaxed);
                entry.state.store(ENTRY_WAITING, Ordering::Release);
                return Some(Waiter { index, ticket });
            }
            let live = sweep?;
            if pass == 0 {
                for index in 0..WAITERS {
                    let entry = self.waiter(index);
                    let owner = entry.owner.load(Ordering::Relaxed);
                    let gone = now.saturating_sub(entry.seen_ns.load(Ordering::Relaxed))
                        > 200 * WAITER_STALE_NS;
                    if entry.state.load(Ordering::Acquire) == ENTRY_WAITING
                        && (gone || !live.is_held(owner).unwrap_or(true))
                    {
                        let _ = entry.state.compare_exchange(
                            ENTRY_WAITING,
                            ENTRY_FREE,
                            Ordering::AcqRel,
                            Ordering::Relaxed,
                        );
                    }
                }
            }
        }
        None
    }

    /// Shows that `waiter` still waits; returns the word to sleep on. Call it before each look
    /// at whether the lock is free.
    pub(crate) fn still_waiting(&self, waiter: &Waiter, now: u64) -> u32 {
        let entry = self.waiter(waiter.index);
        entry.seen_ns.store(now, Ordering::Relaxed);
        let seen = entry.wake.load(Ordering::Acquire);
        // The waiter's half of a store-then-load handshake with `wake_oldest`: its entry
        // (stored WAITING at `enqueue`) before its look at the lock, against the releaser's
        // release before its look at the queue. With a SeqCst fence on both sides, at least one
        // sees the other: the waiter sees the release, or the releaser sees the entry and wakes
        // it. With Release and Acquire alone both may miss, and the waiter sleeps through the
        // release until its poll (the loom model of the queue found it: a deadlock there).
        fence(Ordering::SeqCst);
        seen
    }

    /// Leaves the queue.
    #[allow(clippy::needless_pass_by_value)] // Takes the place: it is no one's after this.
    pub(crate) fn dequeue(&self, waiter: Waiter) {
        self.waiter(waiter.index)
            .state
            .store(ENTRY_FREE, Ordering::Release);
    }

    /// Whether a live waiter of `lock` that still shows it waits holds an earlier ticket than
    /// `ticket` (than any, with `None`).
    pub(crate) fn waits_before(
        &self,
        lock: u64,
        ticket: Option<u64>,
        now: u64,
        live: &impl Live,
    ) -> bool {
        self.oldest(lock, now, live)
            .is_some_and(|(_, oldest)| ticket.is_none_or(|ticket| oldest < ticket))
    }

    /// The index and ticket of the oldest live, current waiter of `lock`.
    fn oldest(&self, lock: u64, now: u64, live: &impl Live) -> Option<(usize, u64)> {
        let mut oldest: Option<(usize, u64)> = None;
        for index in 0..WAITERS {
            let entry = self.waiter(index);
            if entry.state.load(Ordering::Acquire) != ENTRY_WAITING
                || entry.lock.load(Ordering::Relaxed) != lock
                || now.saturating_sub(entry.seen_ns.load(Ordering::Relaxed)) > WAITER_STALE_NS
            {
                continue;
            }
            let ticket = entry.ticket.load(Ordering::Relaxed);
            if oldest.is_some_and(|(_, t)| t < ticket) {
                continue;
            }
            if live
                .is_held(entry.owner.load(Ordering::Relaxed))
                .unwrap_or(true)
            {
                oldest = Some((index, ticket));
            }
        }
        oldest
    }

    /// How many waiting acquires are queued, of any lock, by stores that are still open (a
    /// paused waiter counts; the entry of a dead one, not swept yet, does not).
    pub(crate) fn queued_waiters(&self, live: &impl Live) -> usize {
        (0..WAITERS)
            .filter(|&i| {
                let entry = self.waiter(i);
                entry.state.load(Ordering::Acquire) == ENTRY_WAITING
                    && live
                        .is_held(entry.owner.load(Ordering::Relaxed))
                        .unwrap_or(true)
            })
            .count()
    }

    /// The waiters of `lock` queued by stores that are still open (a paused waiter counts, as
    /// in [`Ring::queued_waiters`]), oldest ticket first: what the views of the queue show.
    /// Each entry is read field by field (Relaxed, after the state's Acquire, which pairs with
    /// the enqueuer's Release of WAITING): an entry freed and taken again meanwhile may show
    /// the next waiter's pid beside this one's ticket, which a view may show for one refresh;
    /// no grant reads these.
    pub(crate) fn waiters_of(&self, lock: u64, live: &impl Live) -> Vec<Queued> {
        let mut queued: Vec<Queued> = (0..WAITERS)
            .filter_map(|i| {
                let entry = self.waiter(i);
                let waiting = entry.state.load(Ordering::Acquire) == ENTRY_WAITING
                    && entry.lock.load(Ordering::Relaxed) == lock
                    && live
                        .is_held(entry.owner.load(Ordering::Relaxed))
                        .unwrap_or(true);
                waiting.then(|| Queued {
                    ticket: entry.ticket.load(Ordering::Relaxed),
                    pid: u32::try_from(entry.pid.load(Ordering::Relaxed)).unwrap_or(0),
                    since_ns: entry.since_ns.load(Ordering::Relaxed),
                })
            })
            .collect();
        queued.sort_by_key(|waiter| waiter.ticket);
        queued
    }

    /// How many waiters of `lock` are queued, current or not.
    #[cfg(test)]
    pub(crate) fn queued(&self, lock: u64) -> usize {
        (0..WAITERS)
            .filter(|&i| {
                let entry = self.waiter(i);
                entry.state.load(Ordering::Acquire) == ENTRY_WAITING
                    && entry.lock.load(Ordering::Relaxed) == lock
            })
            .count()
    }

    /// Wakes the oldest waiter of `lock`, if there is one: its lock was released.
    pub(crate) fn wake_oldest(&self, lock: u64, now: u64, live: &impl Live) {
        // The releaser's half of the handshake of `still_waiting`: its release (made before
        // this call) before its look at the queue.
        fence(Ordering::SeqCst);
        let header = self.header();
        if header.overflow_sleepers.load(Ordering::SeqCst) != 0 {
            // One sleeper: a release frees at most one place in the queue (its holder's, if
            // it was granted from the queue), and waking every sleeper at every release would
            // cost each of them a look at the queue for nothing. The others look again within
            // their poll.
            header.overflow.fetch_add(1, Ordering::SeqCst);
            futex_wake_some(&header.overflow, 1);
        }
        if let Some((index, _)) = self.oldest(lock, now, live) {
            let entry = self.waiter(index);
            entry.wake.fetch_add(1, Ordering::AcqRel);
            futex_wake(&entry.wake);
        }
    }

    /// Sleeps until `waiter` is woken (its word is no longer `seen`) or `timeout` passes.
    pub(crate) fn wait_turn(&self, waiter: &Waiter, seen: u32, timeout: Duration) {
        futex_wait(&self.waiter(waiter.index).wake, seen, timeout);
    }

    /// Sleeps, as a waiter without a place in the queue, until a release of any lock or
    /// `timeout`, unless `blocked` (asked once this waiter counts as sleeping, so that a
    /// release meanwhile wakes it) says it is not blocked any more. Returns whether a release
    /// woke it.
    pub(crate) fn wait_overflow(&self, timeout: Duration, blocked: impl FnOnce() -> bool) -> bool {
        let header = self.header();
        header.overflow_sleepers.fetch_add(1, Ordering::SeqCst);
        // The sleeper's half of a store-then-load handshake with `wake_oldest`: its count
        // before its look at the lock (`blocked`), against the releaser's release before its
        // look at the count. With a SeqCst fence on both sides at least one sees the other; the
        // loads of `blocked` are Acquire (the queue's entries), outside the SeqCst order of the
        // count's own operations, and both could miss: the sleeper slept through the release
        // until its poll (the loom model of the overflow path found it: a deadlock there).
        fence(Ordering::SeqCst);
        let seen = header.overflow.load(Ordering::SeqCst);
        if blocked() {
            futex_wait(&header.overflow, seen, timeout);
        }
        header.overflow_sleepers.fetch_sub(1, Ordering::SeqCst);
        header.overflow.load(Ordering::SeqCst) != seen
    }
}
