//! Which thread of this process was granted each live lease of a store, so that a wait that
//! only the waiting thread itself could end is refused at once ([`Error::WouldDeadlock`])
//! instead of waiting out its timeout or taking its own lease over when the TTL runs out.
//!
//! A lease is the thread's that called the acquire which granted it, from the grant until its
//! release (or its holder's drop), and a wait is the calling thread's; a [`Cancel`] given to
//! either may name another thread instead ([`Cancel::set_thread`]), for a binding that waits on
//! its caller's behalf from a helper thread. Only holders of this engine count: another open
//! of the store, another process and another thread of this one wait as before.
//!
//! [`Error::WouldDeadlock`]: crate::Error::WouldDeadlock
//! [`Cancel`]: crate::Cancel
//! [`Cancel::set_thread`]: crate::Cancel::set_thread

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::base::thread::ThreadTag;

pub(crate) struct Holds {
    /// Off ([`crate::Options::refuse_own_waits`]), nothing is kept and no lease is anyone's.
    enabled: bool,
    /// The granting thread of each lease not yet released, by token (unique in a store).
    owners: Mutex<HashMap<u64, ThreadTag>>,
}

impl Holds {
    pub(crate) fn new(enabled: bool) -> Holds {
        Holds {
            enabled,
            owners: Mutex::new(HashMap::new()),
        }
    }

    /// The lease `token` was granted to `thread`.
    pub(crate) fn granted(&self, token: u64, thread: ThreadTag) {
        if self.enabled {
            self.owners.lock().insert(token, thread);
        }
    }

    /// The lease `token` was let go.
    pub(crate) fn let_go(&self, token: u64) {
        if self.enabled {
            self.owners.lock().remove(&token);
        }
    }

    /// Whether the lease `token` was granted to `thread` and not let go since.
    pub(crate) fn is_mine(&self, token: u64, thread: ThreadTag) -> bool {
        self.enabled && self.owners.lock().get(&token) == Some(&thread)
    }
}
