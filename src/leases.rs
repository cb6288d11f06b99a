//! Lease rules: when a lease still excludes others, what state a lock record is in, the grant's
//! liveness lock, extending, releasing, waiting for a holder to let go, and pruning dead
//! records.

use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use redb::{ReadableTable, Table};

use crate::base::cancel::Cancel;
use crate::base::clock;
use crate::base::error::{Error, Result};
use crate::base::limits::check_ttl;
use crate::ops::{unexpected, Done, Op};
use crate::rules::info::{LockInfo, LockState};
use crate::rules::kind::Kind;
use crate::rules::record::{Lease, Record};
use crate::storage::liveness::fresh_id;
use crate::store::Inner;

/// Lease records examined for pruning by each grant; two per grant keeps dead records from
/// outnumbering the grants that made them.
const PRUNE_PER_GRANT: usize = 2;
/// How often a waiting acquire tests whether the holder of another process let go.
const WAIT_POLL: Duration = Duration::from_millis(1);

impl Inner {
    /// Whether `lease` still excludes others: granted in this boot, not expired, and its holder
    /// still holds the liveness lock.
    pub(crate) fn is_live(&self, lease: &Lease, now: u64) -> Result<bool> {
        Ok(lease.boot_id == self.boot_id
            && now < lease.expires_ns
            && self.live.is_held(lease.live)?)
    }

    /// What `record` tells of the name: one entry a grant it holds, latest first. A record of
    /// several holders lists every grant it still holds, live or not.
    pub(crate) fn describe_record(
        &self,
        name: &str,
        record: &Record,
        now: u64,
    ) -> Result<Vec<LockInfo>> {
        let mut holders = record.holders().to_vec();
        holders.sort_by_key(|lease| std::cmp::Reverse(lease.token));
        holders
            .iter()
            .map(|lease| self.describe(name, record.kind(), lease, now))
            .collect()
    }

    pub(crate) fn describe(
        &self,
        name: &str,
        kind: Kind,
        lease: &Lease,
        now: u64,
    ) -> Result<LockInfo> {
        let this_boot = lease.boot_id == self.boot_id;
        let state = if !this_boot {
            LockState::HolderDead
        } else if !self.live.is_held(lease.live)? {
            if lease.holder.is_alive() {
                LockState::Released
            } else {
                LockState::HolderDead
            }
        } else if now >= lease.expires_ns {
            LockState::Expired
        } else {
            LockState::Held
        };
        let wall = SystemTime::now();
        let at = |ns: u64| {
            if ns >= now {
                wall + Duration::from_nanos(ns - now)
            } else {
                wall - Duration::from_nanos(now - ns)
            }
        };
        Ok(LockInfo {
            name: name.to_owned(),
            token: lease.token,
            pid: lease.holder.pid,
            granted_at: at(lease.granted_ns),
            expires_at: at(lease.expires_ns),
            remaining: if this_boot {
                Duration::from_nanos(lease.expires_ns.saturating_sub(now))
            } else {
                Duration::ZERO
            },
            state,
            kind,
        })
    }

    /// Removes dead lease records, a few per grant, resuming where the last grant stopped, so
    /// that released and expired records do not pile up. Returns the records it removed.
    pub(crate) fn prune(
        &self,
        leases: &mut Table<&str, &[u8]>,
        now: u64,
        granting: &str,
    ) -> Result<Vec<(String, Record)>> {
        let mut cursor = self.prune_cursor.lock();
        let mut dead = Vec::new();
        let mut seen = 0;
        for entry in leases.range::<&str>((Bound::Excluded(cursor.as_str()), Bound::Unbounded))? {
            let (name, record) = entry?;
            seen += 1;
            let name = name.value().to_owned();
            if name != granting {
                let record = Record::decode(record.value())?;
                let mut live = false;
                for lease in record.holders() {
                    live |= self.is_live(lease, now)?;
                }
                if !live {
                    dead.push((name.clone(), record));
                }
            }
            *cursor = name;
            if seen == PRUNE_PER_GRANT {
                break;
            }
        }
        if seen < PRUNE_PER_GRANT {
            cursor.clear();
        }
        for (name, _) in &dead {
            leases.remove(name.as_str())?;
        }
        Ok(dead)
    }

    /// Waits until the liveness lock `live` is free or `until` (boot-time ns) passes;
    /// [`Error::Cancelled`] once `cancel` fires.
    pub(crate) fn wait_until_free(
        &self,
        live: u64,
        until: u64,
        cancel: Option<&Cancel>,
    ) -> Result<()> {
        loop {
            crate::base::cancel::check(cancel)?;
            let mut releases = self.releases.lock();
            let seen = *releases;
            if !self.live.is_held(live)? {
                return Ok(());
            }
            let now = clock::now_ns();
            if now >= until {
                return Ok(());
            }
            let slice = WAIT_POLL.min(Duration::from_nanos(until - now));
            while *releases == seen {
                if self.released.wait_for(&mut releases, slice).timed_out() {
                    break;
                }
            }
        }
    }

    /// Ends this process's hold of the lease of `name` whose liveness id is `live`, and wakes
    /// the lock's oldest waiter. No write: the record is cleared lazily. The caller has checked
    /// that this is not a child of `fork()`.
    pub(crate) fn release(&self, name: &str, live: u64, token: u64) -> Result<()> {
        // Noted before the lock is let go, so that the grant it lets in knows of it.
        self.note_release(name, token);
        if let Err(err) = self.live.unlock(live) {
            self.unnote_release(token);
            return Err(err.into());
        }
        *self.releases.lock() += 1;
        self.released.notify_all();
        self.wake_waiter(name);
        Ok(())
    }

    /// Checks that the lease `token` is held by the lock's current record, `current` (as its
    /// one lease, or as one of its grants), and unexpired.
    pub(crate) fn check_current(
        &self,
        current: Option<&Record>,
        token: u64,
        now: u64,
    ) -> Result<Lease> {
        match current.and_then(|record| record.holder(token)) {
            Some(lease) if lease.boot_id == self.boot_id && now < lease.expires_ns => Ok(*lease),
            _ => Err(Error::LockLost {
                token,
                current: current
                    .and_then(Record::latest)
                    .map(|lease| lease.token)
                    .filter(|&t| t != token),
            }),
        }
    }

    /// Sets a new expiry for the lease `token` of `name`, if it is still current.
    pub(crate) fn extend(self: &Arc<Self>, name: &str, token: u64, ttl: Duration) -> Result<u64> {
        check_ttl(ttl)?;
        let op = Op::Extend {
            name: name.to_owned(),
            token,
            ttl,
        };
        match self.submit(op, None)? {
            Done::Extended { expires_ns } => Ok(expires_ns),
            other => Err(unexpected(&other)),
        }
    }

    /// Whether the lease `token` of `name` is current, from a read transaction (no write).
    pub(crate) fn is_current(self: &Arc<Self>, name: &str, token: u64) -> Result<bool> {
        // A lease in a file that the path no longer names excludes nobody who opens the path.
        if self.check_file().is_err() {
            return Ok(false);
        }
        match self.lease_of(name)? {
            Some(record) => match record.holder(token) {
                Some(lease) => self.is_live(lease, clock::now_ns()),
                None => Ok(false),
            },
            None => Ok(false),
        }
    }
}

/// The liveness lock of a lease being requested: a fresh liveness id that the requesting store
/// locks before it asks for the grant, released again unless the grant is kept. A drop guard,
/// so a grant that fails, or a request that panics, releases it.
pub(crate) struct Grant {
    inner: Arc<Inner>,
    pub(crate) live: u64,
    kept: bool,
}

impl Grant {
    /// Locks a fresh liveness id for this store. An id whose byte another open file holds is
    /// another lease's: another is drawn.
    pub(crate) fn take(inner: &Arc<Inner>) -> Result<Grant> {
        for _ in 0..64 {
            let live = fresh_id()?;
            if inner.live.lock(live)? {
                return Ok(Grant {
                    inner: Arc::clone(inner),
                    live,
                    kept: false,
                });
            }
        }
        Err(Error::Storage(
            "no free liveness id could be drawn: 64 random ids were all held".into(),
        ))
    }

    /// The grant committed: the lock stays, for the holder to release.
    pub(crate) fn keep(mut self) -> u64 {
        self.kept = true;
        self.live
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        if !self.kept {
            let _ = self.inner.live.unlock(self.live);
        }
    }
}
