//! The releases of this process, told at once to its threads that wait for a lock
//! ([`Released`]): a count that every release bumps, and a condition variable.

use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::base::error::Result;

/// Bumped at every release in this process, so that in-process waiters wake at once rather
/// than at their next look.
pub(crate) struct Released {
    count: Mutex<u64>,
    changed: Condvar,
}

impl Released {
    pub(crate) fn new() -> Released {
        Released {
            count: Mutex::new(0),
            changed: Condvar::new(),
        }
    }

    /// Tells every waiting thread of a release.
    pub(crate) fn tell(&self) {
        *self.count.lock() += 1;
        self.changed.notify_all();
    }

    /// Waits while `look` asks to (`Some(slice)`: for at most `slice`, or until a release of
    /// this process), then looks again; returns once it says the wait is over (`None`), or its
    /// error. A release between a look and the sleep after it is not missed: the look runs with
    /// the count held.
    pub(crate) fn wait_while(
        &self,
        mut look: impl FnMut() -> Result<Option<Duration>>,
    ) -> Result<()> {
        loop {
            let mut count = self.count.lock();
            let seen = *count;
            let Some(slice) = look()? else {
                return Ok(());
            };
            while *count == seen {
                if self.changed.wait_for(&mut count, slice).timed_out() {
                    break;
                }
            }
        }
    }
}
