//! What a store tells a user's observer of its operations as they end.

use std::time::Duration;

use crate::base::error::Error;
use crate::rules::kind::Kind;

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
