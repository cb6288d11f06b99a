//! Layer 5, the engine boundary: what a backend of [`crate::Store`] is ([`Engine`]) and what a
//! lease it granted is ([`LeaseHandle`]), as `object_store`'s `ObjectStore` or SQLite's
//! `sqlite3_io_methods` are. The local engine (`local/`, a file of this host) and the etcd
//! engine (`etcd/`) implement them; `Store` and `Holder` (`api/`) hold one and forward to it.
//!
//! A feature a backend lacks is a default method that refuses with the typed error users see
//! (so a gap is decided at compile time, never a run-time panic). The state every lease has
//! (its name, kind, token, expiry and end) is one type, [`LeaseState`], so that what a holder
//! tells of its lease without asking the backend is written once.
//!
//! Imports the base and the rules only; the engines of layer 6 (`local/`, `etcd/`) implement it.

pub(crate) mod holds;
pub(crate) mod observe;
pub(crate) mod options;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::base::cancel::{thread_of, Cancel, Waiting, LOST_POLL};
use crate::base::clock;
use crate::base::error::{Error, Result};
use crate::base::thread::ThreadTag;
use crate::rules::history::HistoryEntry;
use crate::rules::info::{Fenced, LockInfo, StoreInfo, WaiterInfo};
use crate::rules::kind::Kind;
use crate::rules::metrics::Metrics;
use observe::Observer;

/// Which locks an acquire asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Locks<'a> {
    /// One lock, of the request's kind.
    One(&'a str),
    /// Every lock of the list exclusively, all or none in one transaction.
    All(&'a [&'a str]),
}

/// One acquire, as every public `acquire*` method of [`crate::Store`] asks for it.
#[derive(Clone, Copy)]
pub(crate) struct Acquire<'a> {
    pub locks: Locks<'a>,
    pub kind: Kind,
    pub ttl: Duration,
    /// A value to write with the new token in the grant's transaction: `(key, value)`.
    pub write: Option<(&'a [u8], &'a [u8])>,
    /// How long to wait for the locks; `None` tries once.
    pub wait: Option<Waiting<'a>>,
    /// The cancel handle of the call, waiting or not: it ends the wait for the locks and for a
    /// busy store, bounds both by its deadline, and may name the thread the call is for.
    pub cancel: Option<&'a Cancel>,
}

impl<'a> Acquire<'a> {
    /// A try-once acquire of `locks` as `kind` for `ttl`.
    pub(crate) fn new(locks: Locks<'a>, kind: Kind, ttl: Duration) -> Acquire<'a> {
        Acquire {
            locks,
            kind,
            ttl,
            write: None,
            wait: None,
            cancel: None,
        }
    }

    /// The wait of a commit of the grant: the wait for the locks, or for a try-once acquire
    /// the wait of a write ([`Waiting::bounded`] by the store's `busy_timeout`).
    pub(crate) fn commit_wait(&self, busy_timeout: Duration) -> Waiting<'a> {
        self.wait
            .unwrap_or_else(|| Waiting::bounded(busy_timeout, self.cancel))
    }

    /// The thread whose leases its grants are (`engine/holds.rs`).
    pub(crate) fn thread(&self) -> ThreadTag {
        thread_of(self.cancel)
    }
}

/// A backend of [`crate::Store`].
pub(crate) trait Engine: Send + Sync {
    /// The store file, or the etcd store's string.
    fn path(&self) -> &Path;

    /// The process id of the server this store's operations go through now, if one does.
    fn server(&self) -> Option<u32> {
        None
    }

    /// Grants the request: one lease a lock, in the order asked for.
    fn acquire(&self, request: &Acquire<'_>) -> Result<Vec<Arc<dyn LeaseHandle>>>;

    /// Writes (`Some`) or deletes (`None`) the value of `key` fenced by `token`; for a delete,
    /// whether the key held a value before (a put's answer is read by no caller, and an
    /// engine may leave it `false`). `cancel` ends its wait for a busy store, and bounds it.
    fn write(
        &self,
        key: &[u8],
        value: Option<&[u8]>,
        token: u64,
        cancel: Option<&Cancel>,
    ) -> Result<bool>;

    fn get(&self, key: &[u8]) -> Result<Option<Fenced>>;

    fn keys(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>>;

    /// Checks and records `token` at the fence `resource`; `cancel` as for [`Engine::write`].
    fn fence(&self, resource: &str, token: u64, cancel: Option<&Cancel>) -> Result<()>;

    fn fence_token(&self, resource: &str) -> Result<Option<u64>>;

    /// A mark of the fenced values under `prefix` as they are now, taken before they are read,
    /// for [`Engine::wait_values`].
    fn values_mark(&self, prefix: &[u8]) -> Result<u64>;

    /// Waits until a value under `prefix` may have changed since `mark` was taken, woken by
    /// the change (no polling, but where a backend says otherwise), or until `timeout`
    /// passes; whether it may have. It may also wake for a change elsewhere in the store (a
    /// local store's bell rings at every commit); the caller reads again. `cancel` ends the
    /// wait (within about [`LOST_POLL`]).
    fn wait_values(
        &self,
        prefix: &[u8],
        mark: u64,
        timeout: Duration,
        cancel: Option<&Cancel>,
    ) -> Result<bool>;

    /// Every lock record with its state, in name order.
    fn locks(&self) -> Result<Vec<LockInfo>>;

    /// Every grant the record of the lock `name` holds, latest first.
    fn lock_holders(&self, name: &str) -> Result<Vec<LockInfo>>;

    fn info(&self) -> Result<StoreInfo>;

    fn verify(&self) -> Result<()>;

    fn history(&self, _name: &str) -> Result<Vec<HistoryEntry>> {
        Err(not_kept("histories"))
    }

    /// The acquires queued waiting for the lock `name`, oldest first.
    fn waiters(&self, _name: &str) -> Result<Vec<WaiterInfo>> {
        Err(not_kept("waiting queues"))
    }

    fn metrics(&self) -> Result<Metrics> {
        Err(not_kept("metrics"))
    }

    fn set_observer(&self, _observer: Option<Arc<dyn Observer>>) -> Result<()> {
        Err(not_kept("observers"))
    }

    /// A [`crate::Store`] handle of this engine was made.
    fn handle_opened(&self) {}

    /// A [`crate::Store`] handle of this engine is being dropped.
    fn handle_dropped(&self) {}
}

/// The refusal of what only the local engine keeps.
pub(crate) fn not_kept(what: &str) -> Error {
    Error::invalid(format!(
        "{what} are kept only by a local store, not by an etcd store"
    ))
}

/// The scheme that names an etcd store instead of a file.
pub(crate) const ETCD_SCHEME: &str = "etcd://";

/// The etcd store string `path` is, if it is one.
pub(crate) fn etcd_string(path: &Path) -> Option<&str> {
    path.to_str().filter(|text| text.starts_with(ETCD_SCHEME))
}

/// A lease an engine granted, as [`crate::Holder`] holds it.
pub(crate) trait LeaseHandle: Send + Sync {
    /// What every lease has: name, kind, token, expiry, end.
    fn state(&self) -> &LeaseState;

    /// The engine that granted it.
    fn engine(&self) -> Arc<dyn Engine>;

    /// Renews the lease for `ttl` from now, while it is still this holder's; `cancel` as for
    /// [`Engine::write`].
    fn extend(&self, ttl: Duration, cancel: Option<&Cancel>) -> Result<()>;

    /// Whether the lease is still this holder's: not released, not expired, not taken over.
    fn is_held(&self) -> Result<bool>;

    /// Writes (`Some`) or deletes (`None`) `key` with the lease's token, checked against the
    /// lease in the same transaction; `cancel` as for [`Engine::write`].
    fn write(&self, key: &[u8], value: Option<&[u8]>, cancel: Option<&Cancel>) -> Result<bool>;

    /// Releases the lease; [`Error::LockLost`] (once the lease is let go) when it had been
    /// lost before this release; a second release changes nothing.
    fn release(&self) -> Result<()>;

    /// Renews the lease in the background every third of `ttl` until it is released or lost.
    fn keep_alive(self: Arc<Self>, ttl: Duration) -> Result<()>;
}

/// The end of a lease, as its waiters see it: set once it is known to be lost or released.
pub(crate) struct Signal {
    pub(crate) ended: Mutex<bool>,
    pub(crate) changed: Condvar,
}

impl Signal {
    /// Ends the lease; returns whether it had ended before.
    pub(crate) fn end(&self) -> bool {
        let was = std::mem::replace(&mut *self.ended.lock(), true);
        self.changed.notify_all();
        was
    }

    pub(crate) fn is_ended(&self) -> bool {
        *self.ended.lock()
    }
}

/// The state of a granted lease that its holder knows without asking the engine.
pub(crate) struct LeaseState {
    pub(crate) name: String,
    pub(crate) kind: Kind,
    pub(crate) token: u64,
    /// `CLOCK_BOOTTIME` ns at which the lease runs out, as this holder last set it.
    pub(crate) expires_ns: AtomicU64,
    pub(crate) released: AtomicBool,
    /// Shared with a keep-alive, which waits on it without holding the lease.
    pub(crate) signal: Arc<Signal>,
}

impl LeaseState {
    pub(crate) fn new(name: String, kind: Kind, token: u64, expires_ns: u64) -> LeaseState {
        LeaseState {
            name,
            kind,
            token,
            expires_ns: AtomicU64::new(expires_ns),
            released: AtomicBool::new(false),
            signal: Arc::new(Signal {
                ended: Mutex::new(false),
                changed: Condvar::new(),
            }),
        }
    }

    /// The error of a write or extend through a lease known to be lost or released.
    pub(crate) fn lost(&self) -> Error {
        Error::LockLost {
            token: self.token,
            current: None,
        }
    }

    /// Time left on the lease as this holder last set it; zero once it ran out.
    pub(crate) fn remaining(&self) -> Duration {
        Duration::from_nanos(
            self.expires_ns
                .load(Ordering::Acquire)
                .saturating_sub(clock::now_ns()),
        )
    }

    /// Whether the lease is known to be lost or released, or ran out. Reads no storage.
    pub(crate) fn is_lost(&self) -> bool {
        self.signal.is_ended() || self.remaining().is_zero()
    }

    /// Waits until the lease is known to be lost or released, or ran out, or `timeout`
    /// passes; returns whether it ended. With `cancel`, looks at it every [`LOST_POLL`].
    pub(crate) fn wait_lost(&self, timeout: Duration, cancel: Option<&Cancel>) -> Result<bool> {
        let deadline = crate::base::cancel::deadline(timeout, cancel);
        let mut ended = self.signal.ended.lock();
        loop {
            // A renewal moves the expiry on, so the wait is in slices up to the current one.
            let expires = self.expires_ns.load(Ordering::Acquire);
            let now = clock::now_ns();
            if *ended || now >= expires {
                return Ok(true);
            }
            crate::base::cancel::check(cancel)?;
            if now >= deadline {
                return Ok(false);
            }
            let mut slice = Duration::from_nanos(expires.min(deadline) - now);
            if cancel.is_some() {
                slice = slice.min(LOST_POLL);
            }
            let _ = self
                .signal
                .changed
                .wait_while_for(&mut ended, |ended| !*ended, slice);
        }
    }
}
