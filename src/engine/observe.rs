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
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
/// use fencelock::{Event, Observer};
/// #[derive(Default)]
/// struct Refusals(AtomicU64);
/// impl Observer for Refusals {
///     fn observe(&self, event: &Event<'_>) {
///         if let Event::Acquire { result: Err(_), .. } = event {
///             self.0.fetch_add(1, Ordering::Relaxed);
///         }
///     }
/// }
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// # let store = fencelock::Store::open(&path)?;
/// let refusals = Arc::new(Refusals::default());
/// store.set_observer(Some(refusals.clone()))?;
/// let _holder = store.acquire("nightly", Duration::from_secs(30))?;
/// assert!(store.acquire("nightly", Duration::from_secs(30)).is_err());
/// assert_eq!(refusals.0.load(Ordering::Relaxed), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Observer: Send + Sync {
    /// Called with each event, on the thread of the operation, after it ended; a slow observer
    /// slows that operation.
    fn observe(&self, event: &Event<'_>);
}

/// An event of a store's operation.
///
/// # Examples
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use fencelock::{Event, Observer};
/// #[derive(Default)]
/// struct Log(Mutex<Vec<String>>);
/// impl Observer for Log {
///     fn observe(&self, event: &Event<'_>) {
///         let line = match event {
///             Event::Acquire { name, result: Ok(token), .. } => format!("{name} granted {token}"),
///             Event::Release { name, token, .. } => format!("{name} released {token}"),
///             other => format!("{other:?}"),
///         };
///         self.0.lock().unwrap().push(line);
///     }
/// }
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// # let store = fencelock::Store::open(&path)?;
/// let log = Arc::new(Log::default());
/// store.set_observer(Some(log.clone()))?;
/// store.acquire("nightly", Duration::from_secs(30))?.release()?;
/// assert_eq!(*log.0.lock().unwrap(), ["nightly granted 1", "nightly released 1"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<'a> {
    /// An acquire ended: granted with a token, or refused with the error its caller got.
    /// `waited` is how long it waited (zero for a try-once acquire). An `acquire_all` gives one
    /// event for each name.
    Acquire {
        /// The lock's name.
        name: &'a str,
        /// The kind asked for.
        kind: Kind,
        /// The token granted, or the error the caller got.
        result: std::result::Result<u64, &'a Error>,
        /// How long the acquire waited.
        waited: Duration,
    },
    /// A holder released its lease (held as `kind`), `held` after the grant.
    Release {
        /// The lock's name.
        name: &'a str,
        /// The kind the lease was held as.
        kind: Kind,
        /// The lease's token.
        token: u64,
        /// How long after its grant the lease was released.
        held: Duration,
    },
    /// A holder learned its lease was lost (a write or extend found it taken over or expired,
    /// or its keep-alive ran out), `held` after the grant.
    Lost {
        /// The lock's name.
        name: &'a str,
        /// The kind the lease was held as.
        kind: Kind,
        /// The lost lease's token.
        token: u64,
        /// How long after its grant the holder learned of the loss.
        held: Duration,
    },
}
