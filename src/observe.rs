//! What a store tells about its operations as they end: counters in the activity page
//! (metrics.rs), and events for an [`Observer`] that the user sets on the store.

use std::sync::Arc;
use std::time::Duration;

use crate::base::clock;
use crate::base::error::{Error, Result};
use crate::holder::Holder;
use crate::rules::kind::Kind;
use crate::rules::metrics::{Activity, Counter, Metrics, Scope};
use crate::storage::commit::Committed;
use crate::store::Inner;

/// Receives the events of a store's operations in this process ([`crate::Store::set_observer`]):
/// for example to feed a metrics system or a tracer.
///
/// `observe` runs on the thread whose operation the event tells of (for [`Event::Lost`] it
/// may be a keep-alive thread), after the operation, with no lock of the store held. It should
/// return quickly: the operation's caller waits for it.
pub trait Observer: Send + Sync {
    fn observe(&self, event: &Event<'_>);
}

/// An event of a store's operation.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<'a> {
    /// An acquire ended: granted with a token, or refused with the error its caller got.
    /// `waited` is how long it waited (zero for a try-once acquire). An `acquire_all` gives one
    /// event for each name.
    Acquire {
        name: &'a str,
        kind: Kind,
        result: std::result::Result<u64, &'a Error>,
        waited: Duration,
    },
    /// A holder released its lease (held as `kind`), `held` after the grant.
    Release {
        name: &'a str,
        kind: Kind,
        token: u64,
        held: Duration,
    },
    /// A holder learned its lease was lost (a write or extend found it taken over or expired,
    /// or its keep-alive ran out), `held` after the grant.
    Lost {
        name: &'a str,
        kind: Kind,
        token: u64,
        held: Duration,
    },
}

/// How an acquire call went, for the counters and the observer.
pub(crate) struct Attempt {
    started_ns: u64,
    /// Whether it had to wait (was refused at least once before it ended).
    pub(crate) waited: bool,
}

impl Attempt {
    pub(crate) fn start() -> Attempt {
        Attempt {
            started_ns: clock::now_ns(),
            waited: false,
        }
    }
}

fn since(ns: u64) -> Duration {
    Duration::from_nanos(clock::now_ns().saturating_sub(ns))
}

impl Inner {
    /// The page the store counts into: the ring's, shared by every process, or its own.
    pub(crate) fn activity(&self) -> &Activity {
        match &self.shared {
            Some(shared) => shared.ring().activity(),
            None => &self.own_activity,
        }
    }

    pub(crate) fn metrics(&self) -> Metrics {
        let scope = if self.shared.is_some() {
            Scope::Store
        } else {
            Scope::Process
        };
        self.activity().snapshot(scope)
    }

    /// Counts a transaction that ended: what it committed, or `None` when it committed nothing.
    pub(crate) fn counted_commit(&self, committed: Option<Committed>) {
        let Some(committed) = committed else {
            return;
        };
        let activity = self.activity();
        activity.add(Counter::Commits, 1);
        activity.add(Counter::CommittedOps, committed.ops as u64);
        for (counter, n) in committed.ends.counts() {
            activity.add(counter, n);
        }
    }

    fn observe(&self, event: &Event<'_>) {
        // Held through the call, so that replacing the observer waits for the calls of the
        // one it replaces (recursive: an observer may run store operations, which tell it more,
        // while a replacement waits).
        let observer = self.observer.read_recursive();
        if let Some(observer) = observer.as_ref() {
            // An observer's panic stays out of the operation (it may be a holder's drop).
            let _ = crate::base::quiet::catch(|| observer.observe(event));
        }
    }

    pub(crate) fn set_observer(&self, observer: Option<Arc<dyn Observer>>) {
        *self.observer.write() = observer;
    }

    /// Counts and tells the end of an acquire of `names` as `kind`; `result` holds a holder
    /// for each name, in order, when it was granted.
    pub(crate) fn acquired(
        &self,
        names: &[&str],
        kind: Kind,
        attempt: &Attempt,
        result: std::result::Result<&[Holder], &Error>,
    ) {
        let activity = self.activity();
        let waited = if attempt.waited {
            let waited = since(attempt.started_ns);
            activity.waited(waited);
            waited
        } else {
            Duration::ZERO
        };
        match result {
            Ok(holders) => {
                activity.add(Counter::Grants, holders.len() as u64);
                for holder in holders {
                    self.observe(&Event::Acquire {
                        name: holder.name(),
                        kind,
                        result: Ok(holder.token()),
                        waited,
                    });
                }
            }
            Err(err) => {
                let counter = match err {
                    Error::Locked { .. } => Some(Counter::RefusedLocked),
                    Error::Timeout => Some(Counter::RefusedTimeout),
                    Error::Cancelled => Some(Counter::RefusedCancelled),
                    // A child of fork() counts nothing into the parent's store.
                    Error::Forked => None,
                    _ => Some(Counter::RefusedOther),
                };
                if let Some(counter) = counter {
                    activity.add(counter, 1);
                }
                for name in names {
                    self.observe(&Event::Acquire {
                        name,
                        kind,
                        result: Err(err),
                        waited,
                    });
                }
            }
        }
    }

    /// Counts a write, fence or extend refused for a stale token or a lost lease.
    pub(crate) fn counted<T>(&self, result: Result<T>) -> Result<T> {
        match &result {
            Err(Error::StaleToken { .. }) => self.activity().add(Counter::StaleWrites, 1),
            Err(Error::LockLost { .. }) => self.activity().add(Counter::LockLost, 1),
            _ => {}
        }
        result
    }

    /// Counts and tells the release of the lease `token` of `name`, granted at `granted_ns`;
    /// not a lease known to be lost before, whose loss was told.
    pub(crate) fn released_lease(
        &self,
        name: &str,
        kind: Kind,
        token: u64,
        granted_ns: u64,
        lost: bool,
    ) {
        if !lost {
            self.activity().add(Counter::Releases, 1);
            self.observe(&Event::Release {
                name,
                kind,
                token,
                held: since(granted_ns),
            });
        }
    }

    pub(crate) fn lost_lease(&self, name: &str, kind: Kind, token: u64, granted_ns: u64) {
        self.observe(&Event::Lost {
            name,
            kind,
            token,
            held: since(granted_ns),
        });
    }
}

impl crate::Store {
    /// A snapshot of the store's counters: of every process on this host that has the store
    /// open (and of those that had, since [`Metrics::since`]), or of this open store alone, as
    /// [`Metrics::scope`] says. [`Metrics::prometheus`] renders it for Prometheus.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] on an etcd store (etcd exports metrics of its own).
    pub fn metrics(&self) -> Result<Metrics> {
        crate::backend::on_etcd!(self.inner, _remote => Err(not_kept_on_etcd("metrics")));
        Ok(self.inner.metrics())
    }

    /// Sets the observer that this process's operations on the store (on every clone of it,
    /// and on its holders) tell their ends to, replacing any before; `None` removes it. Returns
    /// once no call of the observer it replaced is still running, so what that observer uses
    /// may be freed then. An observer must not set the store's observer itself: it would wait
    /// for its own call to end.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] on an etcd store.
    pub fn set_observer(&self, observer: Option<Arc<dyn Observer>>) -> Result<()> {
        crate::backend::on_etcd!(self.inner, _remote => Err(not_kept_on_etcd("observers")));
        self.inner.set_observer(observer);
        Ok(())
    }
}

/// The refusal of what only the local engine keeps.
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub(crate) fn not_kept_on_etcd(what: &str) -> Error {
    Error::invalid(format!(
        "{what} are kept only by a local store, not by an etcd store"
    ))
}
