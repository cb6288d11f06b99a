//! Leases obtained ahead of need, so that an uncontended grant waits for one round trip: its
//! transaction puts the lock key with a lease granted earlier in the background, instead of
//! a `LeaseGrant` first and the transaction after it.
//!
//! etcd counts a lease's TTL from its `LeaseGrant` or its last keep-alive, not from the put that
//! attaches a key to it, so a lease that waited in the pool has less than its TTL left:
//!
//! - A lease asked for less than a twentieth of its TTL ago (and less than a second) is used
//!   as it is: the holder counts it from before its `LeaseGrant` or last keep-alive was sent, so
//!   the lease a grant carries has at least its TTL left counted from before the grant's
//!   transaction was sent, less that twentieth (at most 1 s). Under a steady stream of grants
//!   every grant is of this kind: one transaction and nothing else.
//! - An older one is renewed by a keep-alive sent together with the transaction (two requests
//!   in flight, still one round trip of waiting): etcd renews the lease for its whole TTL when
//!   the keep-alive arrives, after it was sent, so the holder counts its lease from before
//!   both were sent and the grant carries its whole TTL. A grant whose transaction landed but
//!   whose keep-alive was not answered undoes itself (revokes the lease) and fails, rather
//!   than carry a lease of less time than asked.
//! - A release deletes the lock key in one transaction (while it is still the grant's) and puts
//!   the lease, which then carries nothing, back here, so that a store granting and releasing
//!   in a loop reuses its few leases instead of asking for one per grant.
//! - A pooled lease is used only while at least half its TTL is left by this process's clock,
//!   counted from before its `LeaseGrant` was sent: its keep-alive then lands long before etcd
//!   could end it. An older one is dropped (revoked, unless it has ended anyway) and the next
//!   tried; with none left, the grant asks for a lease first, two round trips as without a pool.
//!   A lease that etcd ended meanwhile all the same (revoked by hand) fails the transaction
//!   (`lease not found`) and the grant tries again.
//! - Nothing renews a lease while it waits here: a lease this process forgets (a refill landing
//!   after the store closed and failing to revoke, the process killed) ends at its TTL, and no
//!   lock key is put with it while it is here: the only put with a pooled lease is the grant's,
//!   which first takes the lease out of the pool, and a lease comes back only with its key
//!   deleted (a released holder's) or never put (a refused grant's).
//! - One pool per TTL in use, started by the first grant of that TTL, at most [`DEPTH`] leases
//!   each, refilled on the background runtime (`runtime.rs`) when grants took half; at most
//!   [`TTLS`] TTLs, the least recently used pool is dropped for a new one. A refused grant puts
//!   its lease back, so waiting acquires take no leases.
//! - While the engine has no [`crate::Store`] handle (the last one closed), the pool holds
//!   nothing: closing revokes what it held, and refills landing after that revoke theirs.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::Client;
use parking_lot::Mutex;

use super::runtime::{self, block_for};
use crate::base::clock;

/// Leases kept ready per TTL.
const DEPTH: usize = 4;
/// TTLs kept ready at once.
const TTLS: usize = 4;

/// A lease granted ahead of need.
pub(crate) struct Pooled {
    pub(crate) id: i64,
    /// Its TTL, in seconds.
    pub(crate) secs: i64,
    /// `CLOCK_BOOTTIME` ns before its `LeaseGrant` (or last keep-alive) was sent.
    pub(crate) asked_ns: u64,
}

impl Pooled {
    /// Whether it is young enough at `now_ns` for a grant to carry it unrenewed: asked for less
    /// than a twentieth of its TTL ago, and less than a second.
    pub(crate) fn is_young(&self, now_ns: u64) -> bool {
        now_ns.saturating_sub(self.asked_ns) < (secs_ns(self.secs) / 20).min(1_000_000_000)
    }

    /// Whether at least half its TTL is left at `now_ns`.
    fn is_fresh(&self, now_ns: u64) -> bool {
        now_ns.saturating_sub(self.asked_ns) < secs_ns(self.secs) / 2
    }

    /// Whether etcd may still keep it at `now_ns` (a second for the TTL's start on etcd's side).
    fn may_live(&self, now_ns: u64) -> bool {
        now_ns.saturating_sub(self.asked_ns) < secs_ns(self.secs) + 1_000_000_000
    }
}

/// The engine's pool of leases.
pub(crate) struct Pool {
    shared: Arc<Shared>,
}

struct Shared {
    client: Client,
    /// The limit of each background call, the store's busy timeout.
    timeout: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The engine's open [`crate::Store`] handles; none, none is pooled.
    handles: usize,
    /// Counts takes, to find the least recently used TTL.
    uses: u64,
    ttls: Vec<Ready>,
}

/// The leases of one TTL.
struct Ready {
    secs: i64,
    leases: VecDeque<Pooled>,
    /// Refills under way.
    filling: usize,
    used: u64,
}

impl Pool {
    pub(crate) fn new(client: Client, timeout: Duration) -> Pool {
        Pool {
            shared: Arc::new(Shared {
                client,
                timeout,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// A `Store` handle of the engine was made.
    pub(crate) fn handle_opened(&self) {
        self.shared.state.lock().handles += 1;
    }

    /// A `Store` handle of the engine is being dropped; the last one revokes the pool.
    pub(crate) fn handle_dropped(&self) {
        let drained: Vec<Pooled> = {
            let mut state = self.shared.state.lock();
            state.handles = state.handles.saturating_sub(1);
            if state.handles > 0 {
                return;
            }
            state
                .ttls
                .iter_mut()
                .flat_map(|ready| ready.leases.drain(..))
                .collect()
        };
        let now = clock::now_ns();
        let ids: Vec<i64> = drained
            .iter()
            .filter(|lease| lease.may_live(now))
            .map(|lease| lease.id)
            .collect();
        if ids.is_empty() {
            return;
        }
        // Waited for, so that a process that closes its store and exits leaves none behind.
        let mut client = self.shared.client.clone();
        let _ = block_for(self.shared.timeout, async move {
            for id in ids {
                let _ = client.lease_revoke(id).await;
            }
            Ok(())
        });
    }

    /// A lease of `secs` with at least half its TTL left, if one is ready; starts the pool of
    /// that TTL, and refills it, in the background.
    pub(crate) fn take(&self, secs: i64) -> Option<Pooled> {
        let now = clock::now_ns();
        let mut stale = Vec::new();
        let (found, refills) = {
            let mut state = self.shared.state.lock();
            if state.handles == 0 {
                return None;
            }
            state.uses += 1;
            let uses = state.uses;
            let index = match state.ttls.iter().position(|ready| ready.secs == secs) {
                Some(index) => index,
                None => {
                    if state.ttls.len() >= TTLS {
                        let oldest = (0..state.ttls.len())
                            .min_by_key(|&i| state.ttls[i].used)
                            .expect("TTLS > 0");
                        stale.extend(state.ttls.swap_remove(oldest).leases);
                    }
                    state.ttls.push(Ready {
                        secs,
                        leases: VecDeque::new(),
                        filling: 0,
                        used: uses,
                    });
                    state.ttls.len() - 1
                }
            };
            let ready = &mut state.ttls[index];
            ready.used = uses;
            let mut found = None;
            while let Some(lease) = ready.leases.pop_front() {
                if lease.is_fresh(now) {
                    found = Some(lease);
                    break;
                }
                stale.push(lease);
            }
            // Refilled below half the depth only, so that one taken and given back by its
            // release (a grant-and-release loop) starts no refill.
            let have = ready.leases.len() + ready.filling;
            let refills = if have < DEPTH / 2 { DEPTH - have } else { 0 };
            ready.filling += refills;
            (found, refills)
        };
        self.revoke_later(stale.into_iter().filter(|lease| lease.may_live(now)));
        for _ in 0..refills {
            self.refill(secs);
        }
        found
    }

    /// Puts back a lease that carries no key (a refused grant's, a released holder's), or
    /// revokes it when the pool is closed or full.
    pub(crate) fn put_back(&self, lease: Pooled) {
        let refused = {
            let mut state = self.shared.state.lock();
            let open = state.handles > 0;
            match state.ttls.iter_mut().find(|ready| ready.secs == lease.secs) {
                Some(ready) if open && ready.leases.len() < DEPTH => {
                    ready.leases.push_back(lease);
                    None
                }
                _ => Some(lease),
            }
        };
        self.revoke_later(refused);
    }

    /// Revokes a lease that is not put back.
    pub(crate) fn discard(&self, lease: Pooled) {
        self.revoke_later(Some(lease));
    }

    /// Grants a lease of `secs` in the background and pools it.
    fn refill(&self, secs: i64) {
        let shared = Arc::clone(&self.shared);
        let started = runtime::spawn(async move {
            let asked_ns = clock::now_ns();
            let mut client = shared.client.clone();
            let granted =
                tokio::time::timeout(shared.timeout, client.lease_grant(secs, None)).await;
            let id = match granted {
                Ok(Ok(granted)) if granted.ttl() == secs => Some(granted.id()),
                // A TTL the cluster raises: the grant itself refuses it, nothing is pooled.
                Ok(Ok(granted)) => {
                    let _ = client.lease_revoke(granted.id()).await;
                    None
                }
                _ => None,
            };
            let refused = {
                let mut state = shared.state.lock();
                let open = state.handles > 0;
                let ready = state.ttls.iter_mut().find(|ready| ready.secs == secs);
                match (ready, id) {
                    (Some(ready), Some(id)) if open && ready.leases.len() < DEPTH => {
                        ready.filling = ready.filling.saturating_sub(1);
                        ready.leases.push_back(Pooled { id, secs, asked_ns });
                        None
                    }
                    (Some(ready), id) => {
                        ready.filling = ready.filling.saturating_sub(1);
                        id
                    }
                    (None, id) => id,
                }
            };
            if let Some(id) = refused {
                let _ = client.lease_revoke(id).await;
            }
        });
        if started.is_err() {
            // No runtime (a forked child): the grant asks for its lease itself.
            let mut state = self.shared.state.lock();
            if let Some(ready) = state.ttls.iter_mut().find(|ready| ready.secs == secs) {
                ready.filling = ready.filling.saturating_sub(1);
            }
        }
    }

    /// Revokes `leases` in the background.
    fn revoke_later(&self, leases: impl IntoIterator<Item = Pooled>) {
        let ids: Vec<i64> = leases.into_iter().map(|lease| lease.id).collect();
        if ids.is_empty() {
            return;
        }
        let mut client = self.shared.client.clone();
        let timeout = self.shared.timeout;
        let _ = runtime::spawn(async move {
            for id in ids {
                let _ = tokio::time::timeout(timeout, client.lease_revoke(id)).await;
            }
        });
    }
}

pub(crate) fn secs_ns(secs: i64) -> u64 {
    u64::try_from(secs)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
}
