//! A local store's leases: the grant's liveness lock, extending, releasing, whether a holder's
//! lease is current, and waiting for a holder to let go. The rules they follow are in
//! `rules/leases.rs`.

use std::sync::Arc;
use std::time::Duration;

use crate::base::cancel::Cancel;
use crate::base::clock;
use crate::base::error::{Error, Result};
use crate::base::limits::check_ttl;
use crate::rules::leases::is_live;
use crate::rules::ops::{unexpected, Done, Op};
use crate::storage::liveness::fresh_id;
use crate::store::Inner;

/// How often a waiting acquire tests whether the holder of another process let go.
const WAIT_POLL: Duration = Duration::from_millis(1);

impl Inner {
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
                Some(lease) => is_live(&**self, lease, clock::now_ns()),
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
