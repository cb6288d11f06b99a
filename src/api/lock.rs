//! The acquire builder, with std's habits: [`Store::lock`] names a lock and returns a
//! [`Lock`], whose setters say how to take it (TTL, wait, kind, a write, a cancel handle), and
//! whose [`Lock::acquire`] blocks until it is granted, as `Mutex::lock` and `File::lock` do,
//! while [`Lock::try_acquire`] tries once, as `try_lock` does. [`Store::lock_all`] is the same
//! for several locks taken all or none ([`LockAll`]).
//!
//! Every acquire of the public API is one engine request ([`Acquire`]) that a builder fills in;
//! the `Store::acquire*` methods are shorthands for builders. A combination the engine cannot
//! grant as one request (a write with a shared lock or a permit) is refused here, before
//! anything is asked of the store.

use std::time::Duration;

use crate::api::holder::Holder;
use crate::api::store::Store;
use crate::base::cancel::{Cancel, Waiting};
use crate::base::error::{Error, Result};
use crate::engine::{Acquire, Locks};
use crate::rules::kind::Kind;

/// The lease length of a [`Lock`] or [`LockAll`] whose TTL is not set: 30 seconds, as in the
/// Python and Go bindings.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// What a builder asks for, whichever the locks.
#[derive(Clone, Copy, Debug)]
pub(super) struct Settings<'a> {
    pub(super) ttl: Duration,
    /// The limit of a blocking acquire's wait; `None` waits as long as it takes.
    pub(super) timeout: Option<Duration>,
    pub(super) cancel: Option<&'a Cancel>,
}

impl<'a> Settings<'a> {
    fn new() -> Settings<'a> {
        Settings {
            ttl: DEFAULT_TTL,
            timeout: None,
            cancel: None,
        }
    }

    /// The engine request for `locks` as `kind`, waiting (`wait`) or trying once.
    fn request(self, locks: Locks<'a>, kind: Kind, wait: bool) -> Acquire<'a> {
        let waiting =
            wait.then(|| Waiting::new(self.timeout.unwrap_or(Duration::MAX), self.cancel));
        Acquire {
            wait: waiting,
            cancel: self.cancel,
            ..Acquire::new(locks, kind, self.ttl)
        }
    }
}

/// A lock of a store, and how to take it; made by [`Store::lock`]. Nothing happens until
/// [`Lock::acquire`] (which waits) or [`Lock::try_acquire`] (which tries once). A `Lock` can be
/// kept and acquired again and again: each acquire is a new grant with a new token.
///
/// Unset, a lock is exclusive ([`Kind::Exclusive`]), has a lease of [`DEFAULT_TTL`], waits
/// without a limit in [`Lock::acquire`], writes nothing and has no cancel handle.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use fencelock::{Error, Store};
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// let store = Store::open(&path)?;
/// let export = store.lock("payment-export").ttl(Duration::from_secs(30));
/// let holder = export.acquire()?; // waits while another holder has it, as Mutex::lock
/// assert!(matches!(export.try_acquire(), Err(Error::Locked { .. })));
/// drop(holder);
/// let next = export.try_acquire()?; // a new grant, with a higher token
/// assert_eq!(next.name(), "payment-export");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
#[must_use = "a Lock does nothing until acquire() or try_acquire()"]
pub struct Lock<'a> {
    pub(super) store: &'a Store,
    pub(super) name: &'a str,
    pub(super) kind: Kind,
    pub(super) write: Option<(&'a [u8], &'a [u8])>,
    pub(super) settings: Settings<'a>,
}

// The builders' constructors on the store are here, beside the builders, so that the store's
// file does not import this one (no circle between the two).
impl Store {
    /// The lock `name` of this store, to acquire as the returned [`Lock`]'s setters say:
    /// `store.lock(name).ttl(..).timeout(..).kind(..).acquire()` blocks until the lock is
    /// granted, as `Mutex::lock` and `File::lock` do; `.try_acquire()` tries once, as
    /// `try_lock` does. Every `acquire*` method is a shorthand for one of these. (The record
    /// of a lock is [`Store::lock_info`].)
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{Error, Kind};
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// let holder = store.lock("payment-export").ttl(Duration::from_secs(30)).acquire()?;
    /// let other = fencelock::Store::open(&path)?; // as another process would
    /// let reader = other.lock("payment-export").kind(Kind::Shared);
    /// let quick = reader.clone().timeout(Duration::from_millis(10));
    /// assert!(matches!(quick.acquire(), Err(Error::Timeout { .. })));
    /// holder.release()?;
    /// assert_eq!(reader.try_acquire()?.kind(), Kind::Shared);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn lock<'a>(&'a self, name: &'a str) -> Lock<'a> {
        Lock::new(self, name)
    }

    /// The locks `names`, to acquire exclusively all or none in one transaction as the
    /// returned [`LockAll`]'s setters say: `.acquire()` waits until every one is free at once,
    /// `.try_acquire()` tries once. See [`Store::acquire_all`] for the rules.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let holders = store.lock_all(&["a", "b"]).ttl(Duration::from_secs(30)).try_acquire()?;
    /// assert_eq!(holders.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn lock_all<'a>(&'a self, names: &'a [&'a str]) -> LockAll<'a> {
        LockAll::new(self, names)
    }
}

impl<'a> Lock<'a> {
    pub(crate) fn new(store: &'a Store, name: &'a str) -> Lock<'a> {
        Lock {
            store,
            name,
            kind: Kind::Exclusive,
            write: None,
            settings: Settings::new(),
        }
    }

    /// The lease length of each grant, from [`crate::MIN_TTL`] to [`crate::MAX_TTL`]
    /// (checked when the lock is acquired); [`DEFAULT_TTL`] unless set.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let holder = store.lock("nightly").ttl(Duration::from_secs(5)).try_acquire()?;
    /// assert!(holder.remaining() <= Duration::from_secs(5));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Lock<'a> {
        self.settings.ttl = ttl;
        self
    }

    /// How long [`Lock::acquire`] waits for the lock before it gives up with
    /// [`Error::Timeout`]; without it, it waits as long as it takes. [`Lock::try_acquire`]
    /// never waits for the lock, whatever the timeout.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::Error;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// let other = fencelock::Store::open(&path)?; // as another process would
    /// let _held = other.lock("nightly").try_acquire()?;
    /// let quick = store.lock("nightly").timeout(Duration::from_millis(10));
    /// assert!(matches!(quick.acquire(), Err(Error::Timeout { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Lock<'a> {
        self.settings.timeout = Some(timeout);
        self
    }

    /// How the grant holds the name: exclusively (the default), shared, or as one permit of a
    /// semaphore (see [`Store::acquire_kind`] for the rules of each).
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::Kind;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let gpu = store.lock("gpu").kind(Kind::Semaphore(2));
    /// let (a, b) = (gpu.try_acquire()?, gpu.try_acquire()?);
    /// assert!(gpu.try_acquire().is_err(), "both permits are taken");
    /// assert_eq!(a.kind(), Kind::Semaphore(2));
    /// # drop(b);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn kind(mut self, kind: Kind) -> Lock<'a> {
        self.kind = kind;
        self
    }

    /// Writes `value` under `key` with the new token in the grant's own transaction: the grant
    /// and the write both happen or neither does (what [`Store::acquire_and_put`] does). Only
    /// an exclusive grant writes: with another kind the acquire is refused with
    /// [`Error::InvalidArgument`].
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let holder = store.lock("nightly").put(b"nightly/owner", b"host-a").acquire()?;
    /// let owner = store.get(b"nightly/owner")?.expect("written with the grant");
    /// assert_eq!((owner.value.as_slice(), owner.token), (&b"host-a"[..], holder.token()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn put(mut self, key: &'a [u8], value: &'a [u8]) -> Lock<'a> {
        self.write = Some((key, value));
        self
    }

    /// A handle that ends the acquire from another thread ([`Error::Cancelled`], changing
    /// nothing) and bounds it by its deadline ([`Cancel::set_timeout`]): the wait for the lock,
    /// and the wait of either form for another process that holds the store. It may also name
    /// the thread the lease is for ([`Cancel::set_thread`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::{Cancel, Error};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let _held = store.lock("nightly").try_acquire()?;
    /// let cancel = Cancel::new();
    /// let waiter = {
    ///     let (store, cancel) = (store.clone(), cancel.clone());
    ///     std::thread::spawn(move || store.lock("nightly").cancel(&cancel).acquire().map(drop))
    /// };
    /// cancel.cancel(); // from a signal thread, say
    /// assert!(matches!(waiter.join().unwrap(), Err(Error::Cancelled)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cancel(mut self, cancel: &'a Cancel) -> Lock<'a> {
        self.settings.cancel = Some(cancel);
        self
    }

    /// Acquires the lock, waiting while it is held until it is granted, the
    /// [timeout](Lock::timeout) passes or the [cancel handle](Lock::cancel) fires. Waiting
    /// acquires of a name, of every kind, are granted oldest first across processes; a waiter
    /// wakes at once when a holder of this process releases, within about a millisecond when one
    /// of another process releases or dies, and when the holder's lease runs out.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when the timeout passes first; [`Error::Cancelled`] once the cancel
    /// handle fires; [`Error::WouldDeadlock`] at once when a holder this thread was granted
    /// through this store holds the lock ([`crate::Options::refuse_own_waits`]);
    /// [`Error::InvalidArgument`] for a write with a lock that is not exclusive; otherwise as
    /// [`Store::acquire_kind`] (with its write, as [`Store::acquire_and_put`]), but never
    /// [`Error::Locked`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::Store;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = Store::open(&path)?;
    /// let other = Store::open(&path)?; // as another process would
    /// let paused = other.lock("nightly").ttl(Duration::from_millis(100)).try_acquire()?;
    /// // Granted once the paused holder's lease runs out, with a higher token.
    /// let holder = store.lock("nightly").timeout(Duration::from_secs(10)).acquire()?;
    /// assert!(holder.token() > paused.token());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire(&self) -> Result<Holder> {
        self.grant(true)
    }

    /// Tries once to acquire the lock. While it is held, in a way that excludes this grant,
    /// returns [`Error::Locked`] with the current holder's token, pid and time left.
    ///
    /// # Errors
    ///
    /// [`Error::Locked`] while it is held; [`Error::InvalidArgument`] for a write with a lock
    /// that is not exclusive; otherwise as [`Store::acquire_kind`] (with its write, as
    /// [`Store::acquire_and_put`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::Error;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let holder = store.lock("nightly").try_acquire()?;
    /// match store.lock("nightly").try_acquire() {
    ///     Err(Error::Locked { token, .. }) => assert_eq!(token, holder.token()),
    ///     other => panic!("expected Locked, got {other:?}"),
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_acquire(&self) -> Result<Holder> {
        self.grant(false)
    }

    fn grant(&self, wait: bool) -> Result<Holder> {
        self.store.acquire_one(&self.request(wait)?)
    }

    /// The engine request, or the refusal of a combination no grant can be.
    fn request(&self, wait: bool) -> Result<Acquire<'a>> {
        if self.write.is_some() && self.kind != Kind::Exclusive {
            return Err(Error::invalid(format!(
                "an acquire that writes a value takes the lock exclusively, not as {:?}",
                self.kind
            )));
        }
        Ok(Acquire {
            write: self.write,
            ..self
                .settings
                .request(Locks::One(self.name), self.kind, wait)
        })
    }
}

/// Several locks of a store, taken exclusively all or none in one transaction; made by
/// [`Store::lock_all`]. Nothing happens until [`LockAll::acquire`] (which waits until every lock
/// is free at once) or [`LockAll::try_acquire`] (which tries once). Deadlock-free by
/// construction: it never holds some of the locks while it waits for others. Each lock gets a
/// holder of its own, in the order of the names, with its own token, lease and TTL (see
/// [`Store::acquire_all`]).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// # let dir = tempfile::tempdir()?;
/// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
/// let both = store.lock_all(&["a", "b"]).ttl(Duration::from_secs(30)).acquire()?;
/// assert_eq!([both[0].name(), both[1].name()], ["a", "b"]);
/// assert_eq!(both[1].token(), both[0].token() + 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
#[must_use = "a LockAll does nothing until acquire() or try_acquire()"]
pub struct LockAll<'a> {
    pub(super) store: &'a Store,
    pub(super) names: &'a [&'a str],
    pub(super) settings: Settings<'a>,
}

impl<'a> LockAll<'a> {
    pub(crate) fn new(store: &'a Store, names: &'a [&'a str]) -> LockAll<'a> {
        LockAll {
            store,
            names,
            settings: Settings::new(),
        }
    }

    /// The lease length of each lock's grant, as [`Lock::ttl`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let both = store.lock_all(&["a", "b"]).ttl(Duration::from_secs(5)).try_acquire()?;
    /// assert!(both.iter().all(|h| h.remaining() <= Duration::from_secs(5)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> LockAll<'a> {
        self.settings.ttl = ttl;
        self
    }

    /// How long [`LockAll::acquire`] waits until every lock is free at once, as
    /// [`Lock::timeout`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::Error;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// let _b = fencelock::Store::open(&path)?.lock("b").try_acquire()?; // as another process
    /// let quick = store.lock_all(&["a", "b"]).timeout(Duration::from_millis(10));
    /// assert!(matches!(quick.acquire(), Err(Error::Timeout { .. })));
    /// assert!(store.lock_info("a")?.is_none(), "all or none: a was not granted either");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> LockAll<'a> {
        self.settings.timeout = Some(timeout);
        self
    }

    /// A handle that ends the acquire from another thread, as [`Lock::cancel`].
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::{Cancel, Error};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let _b = store.lock("b").try_acquire()?;
    /// let cancel = Cancel::new();
    /// cancel.cancel(); // before the wait: it ends at its first look
    /// let both = store.lock_all(&["a", "b"]).cancel(&cancel);
    /// assert!(matches!(both.acquire(), Err(Error::Cancelled)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cancel(mut self, cancel: &'a Cancel) -> LockAll<'a> {
        self.settings.cancel = Some(cancel);
        self
    }

    /// Acquires every lock, waiting until all are free at once, the timeout passes or the cancel
    /// handle fires. Its waits are not queued behind other waiters of the locks (it takes them
    /// whenever all are free together), and it holds none of them while it waits.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`], [`Error::Cancelled`]; otherwise as [`Store::acquire_all`], but
    /// never [`Error::Locked`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::Store;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = Store::open(&path)?;
    /// let b = Store::open(&path)?.lock("b").ttl(Duration::from_millis(100)).try_acquire()?;
    /// // Both at once, when b's lease has run out.
    /// let both = store.lock_all(&["a", "b"]).timeout(Duration::from_secs(10)).acquire()?;
    /// assert!(both[1].token() > b.token());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire(&self) -> Result<Vec<Holder>> {
        self.store.acquire_many(&self.request(true))
    }

    /// Tries once to acquire every lock, all or none.
    ///
    /// # Errors
    ///
    /// [`Error::Locked`] naming the first lock that a live lease holds (nothing is granted);
    /// otherwise as [`Store::acquire_all`].
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::Error;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let b = store.lock("b").try_acquire()?;
    /// assert!(matches!(
    ///     store.lock_all(&["a", "b"]).try_acquire(),
    ///     Err(Error::Locked { token, .. }) if token == b.token()
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_acquire(&self) -> Result<Vec<Holder>> {
        self.store.acquire_many(&self.request(false))
    }

    fn request(&self, wait: bool) -> Acquire<'a> {
        self.settings
            .request(Locks::All(self.names), Kind::Exclusive, wait)
    }
}
