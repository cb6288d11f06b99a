//! This process's seat in its store's request ring (`ring/`): the liveness id that names it as
//! a requester and a combiner, whether a server serves the store, and a waiting acquire's place
//! in its lock's queue. How writes travel through the ring is the local engine's
//! (`local/route.rs`).

use std::fs;
use std::path::Path;
use std::time::Duration;

use crate::base::cancel::Cancel;
use crate::base::cancel::Waiting;
use crate::base::clock;
use crate::base::error::{Error, Result};
use crate::ring::{lock_hash, Ring, Stamp, Taken, Waiter, PAYLOAD};
use crate::rules::record::Lease;
use crate::share::wire::{encode_answer, WIRE_VERSION};
use crate::storage::liveness::Liveness;
use std::sync::atomic::Ordering;

/// This process's use of the ring of its store.
pub(crate) struct RingMember {
    /// This process's claim on the ring's lease map, held while the store is open (see
    /// `Liveness::claim_map`). Declared first, so dropped before the ring: the last user
    /// removes the ring as it drops it, and a store opened meanwhile (a new ring, a new map)
    /// must not find this claim on the old map still held, or it would be refused as if it
    /// could not see the memory others use.
    _claim: Option<fs::File>,
    ring: Ring,
    /// The liveness id this store holds as long as it is open: it names it as a requester and
    /// as a combiner.
    id: u64,
}

impl RingMember {
    /// Whether a server serves the store (or is about to, waiting for the stores open on the
    /// file to move over): then every operation goes through it.
    pub(crate) fn served(&self, live: &Liveness) -> bool {
        self.ring
            .server()
            .is_some_and(|(id, _)| self.is_other(id, live))
    }

    /// Whether a server waits to start, for the stores that have the file open to close it:
    /// they then close their handle after each operation.
    pub(crate) fn wanted(&self, live: &Liveness) -> bool {
        self.is_other(self.ring.wanted(), live)
    }

    /// Whether a server is recorded in the ring, or waits to start, whether or not it lives:
    /// one that starts, stops or was just killed may hold the file for a moment.
    pub(crate) fn in_transition(&self) -> bool {
        self.ring.server().is_some() || self.ring.wanted() != 0
    }

    /// Whether `id` is the liveness id of another live store.
    fn is_other(&self, id: u64, live: &Liveness) -> bool {
        id != 0 && id != self.id && live.is_held(id).unwrap_or(false)
    }

    /// The process id of the server that serves the store, if one does.
    pub(crate) fn server_pid(&self, live: &Liveness) -> Option<u32> {
        let (id, pid) = self.ring.server()?;
        self.is_other(id, live).then_some(pid)
    }

    pub(crate) fn ring(&self) -> &Ring {
        &self.ring
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Wakes the requesters of posted requests after a commit, so that one combines next.
    pub(crate) fn wake(&self) {
        self.ring.wake_posted();
    }

    /// The ring of the store file at `path`, with a liveness id of this store's; with
    /// `claim`, also this process's claim on the ring's lease map, made within `claim`'s wait
    /// (refused when processes use another map of the file). Why the ring cannot be used, if
    /// it cannot.
    pub(crate) fn join(
        path: &Path,
        live: &Liveness,
        boot_id: [u8; 16],
        claim: Option<Waiting<'_>>,
    ) -> Result<RingMember> {
        let store = fs::metadata(path)?;
        let ring = open_ring(path, &store, boot_id).map_err(|err| {
            Error::Storage(format!(
                "the shared memory of {} (its ring in /dev/shm) cannot be used: {err}",
                path.display()
            ))
        })?;
        let claim = match claim {
            Some(waiting) => {
                let opening =
                    Liveness::lock_for_open(path, false, || waiting.step())?.ok_or(Error::InUse)?;
                let table = ring.map_header().table_id.load(Ordering::Acquire);
                let claimed = Liveness::claim_map(path, table)?;
                drop(opening);
                Some(claimed)
            }
            None => None,
        };
        let id = live.lock_fresh(path)?;
        Ok(RingMember {
            _claim: claim,
            ring,
            id,
        })
    }
}

/// A waiting acquire's place in its lock's queue in the ring; leaves the queue when dropped.
pub(crate) struct Place<'a> {
    live: &'a Liveness,
    member: &'a RingMember,
    waiter: Option<Waiter>,
    lock: u64,
}

impl Place<'_> {
    /// Its ticket; without a place (a full queue), behind every queued waiter.
    pub(crate) fn ticket(&self) -> u64 {
        self.waiter.as_ref().map_or(u64::MAX, |w| w.ticket)
    }

    /// Waits until it may be this waiter's turn: the lease `lease` (the lock's record when the
    /// wait began) is no longer live, and no earlier waiter waits; or `until` passes. Woken at
    /// once by a release of the lock in any process; tests the holder's liveness every
    /// millisecond (a holder may die). A waiter without a place (a full queue) sleeps until a
    /// release of any lock, taking a place as one frees, and tests the holder every
    /// [`OVERFLOW_POLL`]: it never spins.
    pub(crate) fn wait_turn(
        &mut self,
        lease: Option<&Lease>,
        until: u64,
        cancel: Option<&Cancel>,
    ) -> Result<()> {
        let ring = &self.member.ring;
        let held = |now: u64| -> Result<bool> {
            Ok(match lease {
                Some(lease) => now < lease.expires_ns && self.live.is_held(lease.live)?,
                None => false,
            })
        };
        loop {
            crate::base::cancel::check(cancel)?;
            // A cut ring's queue is zeros, in which nobody waits before anyone.
            ring.intact()?;
            let now = clock::now_ns();
            if now >= until {
                return Ok(());
            }
            let Some(waiter) = &self.waiter else {
                // Its turn comes once the lease is gone and no queued waiter waits first.
                let blocked = |now: u64| -> Result<bool> {
                    Ok(held(now)? || ring.waits_before(self.lock, None, now, self.live))
                };
                if !blocked(now)? {
                    return Ok(());
                }
                let end = lease.map_or(until, |lease| until.min(lease.expires_ns));
                // Behind queued waiters of the lock, the first of them watches the holder.
                let poll = if ring.waits_before(self.lock, None, now, self.live) {
                    OVERFLOW_BEHIND_QUEUE
                } else {
                    OVERFLOW_POLL
                };
                let slice = Duration::from_nanos(end.saturating_sub(now)).min(poll);
                let woken = ring.wait_overflow(slice, || blocked(now).unwrap_or(false));
                if woken {
                    self.waiter = ring.enqueue_if_free(self.lock, self.member.id, clock::now_ns());
                }
                continue;
            };
            let seen = ring.still_waiting(waiter, now);
            let first = !ring.waits_before(self.lock, Some(waiter.ticket), now, self.live);
            if first && !held(now)? {
                return Ok(());
            }
            // Only the first waiter watches the holder every millisecond: a holder's death lets
            // it in, not the others. They sleep until a release, or the waiter before them
            // leaving, wakes them, and show now and then that they still wait; so that with
            // many waiters the wait costs little CPU. A wait that may be cancelled looks at
            // its handle every millisecond.
            let poll = if first || cancel.is_some() {
                crate::base::cancel::POLL
            } else {
                QUEUED_SLICE
            };
            let slice = Duration::from_nanos(until - now).min(poll);
            ring.wait_turn(waiter, seen, slice);
        }
    }
}

/// How often a waiter without a place in the queue tests whether the lock's holder died.
const OVERFLOW_POLL: Duration = Duration::from_millis(10);
/// As [`OVERFLOW_POLL`], while queued waiters of the lock wait before it: the first of them
/// watches the holder, and a release wakes a sleeper as a place in the queue frees.
const OVERFLOW_BEHIND_QUEUE: Duration = Duration::from_millis(40);
/// How long a queued waiter behind another one of its lock sleeps at most: inside the time
/// after which a waiter that has not shown it still waits is passed over
/// (`ring::WAITER_STALE_NS`, 50 ms), with room for a loaded machine's scheduling delays.
const QUEUED_SLICE: Duration = Duration::from_millis(20);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if let Some(waiter) = self.waiter.take() {
            self.member.ring.dequeue(waiter);
            // The next waiter may be waiting behind this one.
            self.member
                .ring
                .wake_oldest(self.lock, clock::now_ns(), self.live);
        }
    }
}

/// The ring of the store file at `path`, with metadata `store`, in `/dev/shm`, for this boot
/// and this library's wire format.
pub(crate) fn open_ring(
    path: &Path,
    store: &fs::Metadata,
    boot_id: [u8; 16],
) -> std::io::Result<Ring> {
    let stamp = Stamp {
        boot_id,
        version: WIRE_VERSION,
    };
    let nonce = crate::storage::file::ring_nonce(path)?;
    Ring::open(Path::new("/dev/shm"), store, nonce, stamp)
}

impl RingMember {
    /// Publishes `reply` to the request `taken`; a reply that cannot travel (a bulk file that
    /// cannot be written) is answered with that failure instead.
    pub(crate) fn publish(&self, taken: &Taken, reply: &[u8]) {
        if let Err(err) = self.ring.publish(taken, reply) {
            let failed = encode_answer(&Err(err.into()));
            let _ = self
                .ring
                .publish(taken, &failed[..failed.len().min(PAYLOAD)]);
        }
    }

    /// A place in the waiting queue of the lock `name`, for a store whose liveness is `live`.
    pub(crate) fn queue_up<'a>(&'a self, name: &str, live: &'a Liveness) -> Place<'a> {
        let lock = lock_hash(name);
        let waiter = self.ring.enqueue(lock, self.id, clock::now_ns(), live);
        Place {
            live,
            member: self,
            waiter,
            lock,
        }
    }
}
