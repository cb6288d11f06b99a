//! What a local store tells about its operations as they end ([`Counters`]): counters in the
//! activity page (`ring/activity.rs`), and events for the [`Observer`] that the user sets on
//! the store.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use redb::ConcurrencyMode;

use crate::base::cancel::{check, Cancel, LOST_POLL};
use crate::base::clock;
use crate::base::error::{Error, Result};
use crate::engine::observe::{Event, Observer};
use crate::ring::activity::Activity;
use crate::rules::kind::Kind;
use crate::rules::metrics::Counter;
use crate::share::member::RingMember;
use crate::storage::commit::Committed;

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

/// The counters of a store and its observer: what it tells of its operations as they end.
pub(crate) struct Counters {
    /// The ring whose activity page the store counts into, shared by every process.
    ring: Option<Arc<RingMember>>,
    /// The page of a store without a shared ring.
    own: Box<Activity>,
    observer: RwLock<Option<Arc<dyn Observer>>>,
}

impl Counters {
    /// The counters of a store that has the shared ring `ring`, or none.
    pub(crate) fn new(ring: Option<Arc<RingMember>>) -> Counters {
        Counters {
            ring,
            own: Activity::private(),
            observer: RwLock::new(None),
        }
    }

    /// The page the store counts into: the ring's, shared by every process, or its own.
    pub(crate) fn activity(&self) -> &Activity {
        match &self.ring {
            Some(ring) => ring.ring().activity(),
            None => &self.own,
        }
    }

    /// Counts a transaction that ended: what it committed, or `None` when it committed nothing.
    pub(crate) fn commit(&self, committed: Option<Committed>) {
        let Some(committed) = committed else {
            return;
        };
        let activity = self.activity();
        activity.add(Counter::Commits, 1);
        activity.add(Counter::CommittedOps, committed.ops as u64);
        for (counter, n) in committed.ends.counts() {
            activity.add(counter, n);
        }
        // Last: the commit is visible to readers by now.
        activity.changed();
    }

    /// The change bell of the store now ([`Engine::values_mark`]): every commit rings it.
    ///
    /// [`Engine::values_mark`]: crate::engine::Engine::values_mark
    pub(crate) fn change_mark(&self) -> u64 {
        u64::from(self.activity().change_mark())
    }

    /// Waits for a commit after `mark` was taken ([`Engine::wait_values`]). A store that
    /// other processes may write (`mode`) but whose ring it cannot use (a read-only store)
    /// hears no bell of theirs: it returns after [`LOST_POLL`] instead, a poll.
    ///
    /// [`Engine::wait_values`]: crate::engine::Engine::wait_values
    pub(crate) fn wait_change(
        &self,
        mode: ConcurrencyMode,
        mark: u64,
        timeout: Duration,
        cancel: Option<&Cancel>,
    ) -> Result<bool> {
        let deadline = crate::base::cancel::deadline(timeout, cancel);
        if self.ring.is_none() && mode == ConcurrencyMode::MultiWriter {
            let left = Duration::from_nanos(deadline.saturating_sub(clock::now_ns()));
            std::thread::sleep(left.min(LOST_POLL));
            check(cancel)?;
            return Ok(!left.is_zero());
        }
        let activity = self.activity();
        // The bell wraps at 2^32 rings: a mark that many rings old reads as none.
        #[allow(clippy::cast_possible_truncation)] // the wrap is the point
        let mark = mark as u32;
        while activity.change_mark() == mark {
            check(cancel)?;
            let now = clock::now_ns();
            if now >= deadline {
                return Ok(false);
            }
            let mut slice = Duration::from_nanos(deadline - now);
            if cancel.is_some() {
                slice = slice.min(LOST_POLL);
            }
            activity.wait_change(mark, slice);
        }
        Ok(true)
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

    pub(crate) fn replace_observer(&self, observer: Option<Arc<dyn Observer>>) {
        *self.observer.write() = observer;
    }

    /// Counts and tells the end of an acquire of `names` as `kind`; `result` holds the token of
    /// each name, in order, when it was granted.
    pub(crate) fn acquired(
        &self,
        names: &[&str],
        kind: Kind,
        attempt: &Attempt,
        result: std::result::Result<Vec<u64>, &Error>,
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
            Ok(tokens) => {
                activity.add(Counter::Grants, tokens.len() as u64);
                for (name, token) in names.iter().zip(tokens) {
                    self.observe(&Event::Acquire {
                        name,
                        kind,
                        result: Ok(token),
                        waited,
                    });
                }
            }
            Err(err) => {
                let counter = match err {
                    Error::Locked { .. } => Some(Counter::RefusedLocked),
                    Error::Timeout { .. } => Some(Counter::RefusedTimeout),
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
