//! What the rules need to know of the engine that applies them, and no more.
//!
//! A lease's liveness is a fact of the host (its boot, its holder's liveness lock), a waiting
//! acquire's turn a fact of the waiting queue, a release's time a fact of the store's memory of
//! releases. The engine that runs an operation knows them; the rules ask through this trait,
//! defined here so that the rules never name the engine (as etcd's `lease` package defines the
//! `TxnDelete` it needs rather than importing `mvcc`).

use parking_lot::Mutex;

use crate::base::error::Result;
use crate::rules::record::Record;

pub(crate) trait Context {
    /// This boot's id: a lease granted in another boot is dead.
    fn boot_id(&self) -> [u8; 16];

    /// Whether some open file (of any process) holds the liveness lock `live`.
    fn is_held(&self, live: u64) -> Result<bool>;

    /// Whether a waiter of the lock `name` that still shows it waits holds an earlier ticket
    /// than `ticket` (`u64::MAX`: than any). Always `false` where waits are not queued.
    fn waits_before(&self, name: &str, ticket: u64, now: u64) -> bool;

    /// When the lease `token` was released (`CLOCK_BOOTTIME` ns), if the store still knows.
    fn released_at(&self, token: u64) -> Option<u64>;

    /// Whether grants and extends may commit without an fsync: their records need not outlive
    /// the process that commits them (single-process mode).
    fn relaxed(&self) -> bool;

    /// Whether grants record the ends of the leases they replace in the lock's history.
    fn keeps_history(&self) -> bool;

    /// Where the pruning of dead lease records resumes: the last name it looked at.
    fn prune_cursor(&self) -> &Mutex<String>;

    /// Where the history's sweep of too many locks resumes.
    fn history_cursor(&self) -> &Mutex<String>;

    /// The record of the lock `name` in the store's shared memory, where the leases of the
    /// store are kept there (multi-process mode); `None` where they are in the leases table.
    fn shared_lease(&self, name: &str) -> Option<Result<Option<Record>>>;

    /// The last token the store's shared memory handed out, where tokens come from there.
    fn shared_last_token(&self) -> Option<u64>;
}

/// The store's lease map, where its leases are kept in shared memory: the one place an
/// operation writes outside its tables. Only the apply step of an operation is given it
/// ([`crate::rules::ops::Checked::apply`]); a check sees the engine through [`Context`] alone,
/// which has no way to write it, so a check that refuses has written nothing, here or in the
/// tables.
pub(crate) trait LeaseMap {
    /// Grants the lock `name` exclusively for `ttl` to `holder` (liveness lock `live`) in the
    /// lease map: its token and expiry, or the refusal (the map is not the transaction's: the
    /// lock may have changed since the check), which writes nothing. A grant of `holder` with
    /// `live` that the record holds already is that grant. Fails where the leases are in the
    /// leases table.
    fn grant_exclusive(
        &self,
        name: &str,
        ttl: std::time::Duration,
        holder: crate::base::clock::ProcessId,
        live: u64,
        ticket: Option<u64>,
    ) -> Result<(u64, u64)>;
}

/// A host for the rules' tests: each lease's liveness lock is held for the first `held` looks
/// and free after them (its process killed meanwhile), `waiting` says whether a waiter is
/// queued before anyone, no lease is in shared memory, and every token counts as granted (the
/// tests choose them).
#[cfg(test)]
#[derive(Default)]
pub(crate) struct TestHost {
    pub(crate) held: std::cell::Cell<u32>,
    pub(crate) waiting: bool,
    pub(crate) prune: Mutex<String>,
    pub(crate) history: Mutex<String>,
}

#[cfg(test)]
impl Context for TestHost {
    fn boot_id(&self) -> [u8; 16] {
        [0; 16]
    }
    fn is_held(&self, _live: u64) -> Result<bool> {
        let left = self.held.get();
        self.held.set(left.saturating_sub(1));
        Ok(left > 0)
    }
    fn waits_before(&self, _name: &str, _ticket: u64, _now: u64) -> bool {
        self.waiting
    }
    fn released_at(&self, _token: u64) -> Option<u64> {
        None
    }
    fn relaxed(&self) -> bool {
        false
    }
    fn keeps_history(&self) -> bool {
        false
    }
    fn prune_cursor(&self) -> &Mutex<String> {
        &self.prune
    }
    fn history_cursor(&self) -> &Mutex<String> {
        &self.history
    }
    fn shared_lease(&self, _name: &str) -> Option<Result<Option<Record>>> {
        None
    }
    fn shared_last_token(&self) -> Option<u64> {
        Some(u64::MAX)
    }
}
