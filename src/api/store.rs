//! The store: what a user opens, and every operation it offers, on whichever engine the path
//! names (a file of this host, `local/`; an etcd cluster, `etcd/`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::api::holder::Holder;
use crate::base::cancel::Cancel;
use crate::base::error::Result;
use crate::engine::observe::Observer;
use crate::engine::options::Options;
use crate::engine::{etcd_string, Acquire, Engine, Locks};
use crate::local::LocalEngine;
use crate::rules::history::HistoryEntry;
use crate::rules::info::{Fenced, LockInfo, StoreInfo, WaiterInfo};
use crate::rules::kind::Kind;
use crate::rules::metrics::Metrics;
// What the docs link to.
#[cfg(doc)]
use crate::{base::error::Error, rules::history::HISTORY_PER_LOCK, rules::kind::MAX_HOLDERS};

/// A fencelock store. Cheap to clone; every clone shares one open database, and a store is
/// `Send + Sync`.
///
/// When the last user of the store in this process goes (its last handle is dropped, or the
/// last of its holders, whichever is later), it records the releases this process made in the
/// grant history ([`Store::history`]; a release itself writes nothing): one write, which waits
/// at most half a second for the store and is skipped with [`Options::history`] off.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// let store = fencelock::Store::open(&path)?;
/// let worker = store.clone();
/// let token = std::thread::spawn(move || {
///     let holder = worker.acquire("nightly", Duration::from_secs(30))?;
///     holder.put(b"nightly/status", b"done")?;
///     Ok::<u64, fencelock::Error>(holder.token())
/// })
/// .join()
/// .unwrap()?;
/// assert_eq!(store.get(b"nightly/status")?.map(|f| f.token), Some(token));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Store {
    engine: Arc<dyn Engine>,
}

// Here rather than in holder.rs: a store makes holders, and a holder needs to know only the
// engine that granted it, so the holder's module does not import the store's.
impl Holder {
    /// The store that granted the lease.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let holder = fencelock::Store::open(&path)?.acquire("nightly", Duration::from_secs(30))?;
    /// let store = holder.store();
    /// store.put(b"nightly/report", b"done", holder.token())?;
    /// assert_eq!(store.path(), path);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn store(&self) -> Store {
        Store::new(self.engine())
    }
}

impl Clone for Store {
    fn clone(&self) -> Store {
        Store::new(Arc::clone(&self.engine))
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // The last user of the store in this process records its releases (`local/history.rs`): the
        // last handle, or else the last of its holders to be dropped.
        self.engine.handle_dropped();
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// A handle of the store `engine`.
    pub(crate) fn new(engine: Arc<dyn Engine>) -> Store {
        engine.handle_opened();
        Store { engine }
    }

    /// A mark of the fenced values under `prefix` now, taken before they are read
    /// ([`Engine::values_mark`]).
    pub(crate) fn values_mark(&self, prefix: &[u8]) -> Result<u64> {
        self.engine.values_mark(prefix)
    }

    /// Waits for a change of the values under `prefix` since `mark` ([`Engine::wait_values`]);
    /// whether one may have come.
    pub(crate) fn wait_values(
        &self,
        prefix: &[u8],
        mark: u64,
        timeout: Duration,
        cancel: Option<&Cancel>,
    ) -> Result<bool> {
        self.engine.wait_values(prefix, mark, timeout, cancel)
    }

    /// Every acquire of the API comes here. A timeout names the locks it waited for and how
    /// long, whichever backend (and, served, whichever process) ran out of time.
    pub(crate) fn acquire_many(&self, request: &Acquire<'_>) -> Result<Vec<Holder>> {
        let started = std::time::Instant::now();
        let leases = self.engine.acquire(request).map_err(|err| {
            let names = match request.locks {
                Locks::One(ref name) => std::slice::from_ref(name),
                Locks::All(names) => names,
            };
            err.waited_for(names, started.elapsed())
        })?;
        Ok(leases.into_iter().map(Holder::new).collect())
    }

    pub(crate) fn acquire_one(&self, request: &Acquire<'_>) -> Result<Holder> {
        self.acquire_many(request)?
            .pop()
            .ok_or_else(|| crate::Error::Storage("internal error: a grant without a lease".into()))
    }

    /// Opens the store at `path`, creating it if it does not exist, with default options.
    ///
    /// # Errors
    ///
    /// As [`Store::open_with`] with default options: [`Error::NotAStore`] for another program's
    /// file, [`Error::IncompatibleVersion`] for a store of a newer schema, [`Error::Corrupt`] for a
    /// damaged one (none of them is modified); [`Error::Timeout`] behind a process that holds the
    /// store past [`DEFAULT_BUSY_TIMEOUT`](crate::DEFAULT_BUSY_TIMEOUT); [`Error::InUse`] while a
    /// process holds it in [`Mode::SingleProcess`](crate::Mode::SingleProcess); [`Error::Io`] when
    /// the file cannot be created or read.
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::{Error, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("locks.db");
    /// let store = Store::open(&path)?;
    /// assert_eq!(store.path(), path);
    ///
    /// let notes = dir.path().join("notes.txt");
    /// std::fs::write(&notes, "not a store")?;
    /// assert!(matches!(Store::open(&notes), Err(Error::NotAStore(_))));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<Store> {
        Store::open_with(path, &Options::default())
    }

    /// Opens the store at `path`, creating it if it does not exist (unless `options.read_only`).
    ///
    /// A file that is not a fencelock store, one of a newer schema, or a damaged one gives an
    /// error, and is not modified. Behind another process that holds the store (paused inside a
    /// commit or inside its own open), the open waits at most `options.busy_timeout` and then
    /// fails with [`Error::Timeout`], or with [`Error::Cancelled`] once `options.cancel` fires.
    ///
    /// `path` may instead be an etcd store string, `etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`:
    /// with the cargo feature `etcd` it opens the store on that etcd cluster (README: "Beyond
    /// one host: etcd"); without it the open fails with [`Error::InvalidArgument`].
    ///
    /// # Errors
    ///
    /// [`Error::NotAStore`], [`Error::IncompatibleVersion`] or [`Error::Corrupt`] for a file
    /// that is not a store this library can use; [`Error::Timeout`] past
    /// `options.busy_timeout` and [`Error::Cancelled`] once `options.cancel` fires, behind a
    /// process that holds the store; [`Error::InUse`] when the store is open in another
    /// [`Mode`](crate::Mode) elsewhere, or in single-process mode; [`Error::InvalidArgument`]
    /// for options out of range or an etcd string without the `etcd` feature; [`Error::Io`]
    /// when the file cannot be opened (a read-only open of a missing store).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{Error, Options, Store};
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// Store::open(&path)?; // creates it
    /// let reader = Store::open_with(&path, &Options { read_only: true, ..Options::default() })?;
    /// assert!(matches!(
    ///     reader.acquire("nightly", Duration::from_secs(30)),
    ///     Err(Error::InvalidArgument(_))
    /// ));
    /// assert_eq!(reader.info()?.last_token, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// With the cargo feature `etcd`, a store on an etcd cluster (not run here: it needs one):
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use fencelock::{Options, Store};
    /// let urls = "etcd://10.0.0.1:2379,10.0.0.2:2379/jobs";
    /// let store = Store::open_with(urls, &Options::default())?;
    /// let holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_with(path: impl AsRef<Path>, options: &Options) -> Result<Store> {
        let path = path.as_ref();
        let engine: Arc<dyn Engine> = match etcd_string(path) {
            Some(text) => open_etcd(text, options)?,
            None => LocalEngine::open(path, options).map_err(|err| err.at_path("open", path))?,
        };
        Ok(Store::new(engine))
    }

    /// The store file (an etcd store's string).
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// assert_eq!(store.path(), path);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn path(&self) -> &Path {
        self.engine.path()
    }

    /// The process id of the server ([`crate::Server`]) that this store's operations go
    /// through now, or `None` when the store uses the file itself.
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::{Cancel, ServeOptions, Server, Store};
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// assert_eq!(Store::open(&path)?.server(), None);
    ///
    /// let cancel = Cancel::new();
    /// let options = ServeOptions { cancel: Some(cancel.clone()), ..ServeOptions::default() };
    /// let server = Server::start(&path, &options)?;
    /// let serving = std::thread::spawn(move || server.run(&options));
    /// assert_eq!(Store::open(&path)?.server(), Some(std::process::id()));
    /// cancel.cancel();
    /// serving.join().unwrap()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn server(&self) -> Option<u32> {
        self.engine.server()
    }

    /// Tries once to acquire the lock `name` for `ttl`. On contention returns
    /// [`Error::Locked`] with the current holder's token, pid and time left.
    ///
    /// Shorthand for `store.lock(name).ttl(ttl).try_acquire()` ([`Store::lock`]).
    ///
    /// # Errors
    ///
    /// [`Error::Locked`] while a live lease holds the lock; [`Error::InvalidArgument`] for an
    /// empty, too long or NUL-containing name or a TTL outside [`crate::MIN_TTL`] to
    /// [`crate::MAX_TTL`], and on a read-only store; [`Error::Timeout`] behind a process that holds
    /// the store past the busy timeout; [`Error::Replaced`] when the path names another file now;
    /// [`Error::Forked`] in a child of `fork()`; [`Error::Io`], [`Error::Corrupt`] or
    /// [`Error::Storage`] from the file.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// let holder = store.acquire("payment-export", Duration::from_secs(30))?;
    /// assert!(matches!(
    ///     store.acquire("payment-export", Duration::from_secs(30)),
    ///     Err(fencelock::Error::Locked { .. })
    /// ));
    /// holder.put(b"payments/today.csv", b"...")?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire(&self, name: &str, ttl: Duration) -> Result<Holder> {
        self.lock(name).ttl(ttl).try_acquire()
    }

    /// Acquires the lock `name` for `ttl`, waiting up to `timeout` for it to be free. Wakes at
    /// once when a holder of this process releases, within about a millisecond when a holder of
    /// another process releases or dies, and when the holder's lease expires. Returns
    /// [`Error::Timeout`] when the timeout passes first.
    ///
    /// Shorthand for `store.lock(name).ttl(ttl).timeout(timeout).acquire()` ([`Store::lock`]).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when `timeout` passes first; [`Error::WouldDeadlock`] at once when a
    /// holder this thread was granted through this store holds the lock
    /// ([`Options::refuse_own_waits`]); otherwise as [`Store::acquire`], but never
    /// [`Error::Locked`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{Error, Store};
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = Store::open(&path)?;
    /// let other = Store::open(&path)?; // as another process would
    /// let paused = other.acquire("nightly", Duration::from_millis(100))?;
    /// // Granted once the paused holder's lease runs out, with a higher token.
    /// let (ttl, timeout) = (Duration::from_secs(30), Duration::from_secs(10));
    /// let holder = store.acquire_wait("nightly", ttl, timeout)?;
    /// assert!(holder.token() > paused.token());
    /// assert!(matches!(
    ///     other.acquire_wait("nightly", Duration::from_secs(30), Duration::from_millis(10)),
    ///     Err(Error::Timeout { .. })
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_wait(&self, name: &str, ttl: Duration, timeout: Duration) -> Result<Holder> {
        self.lock(name).ttl(ttl).timeout(timeout).acquire()
    }

    /// Like [`Store::acquire_wait`], and ends within about a millisecond with
    /// [`Error::Cancelled`], changing nothing, once `cancel` fires (from any thread).
    ///
    /// Shorthand for `store.lock(name).ttl(ttl).timeout(timeout).cancel(cancel).acquire()`
    /// ([`Store::lock`]).
    ///
    /// # Errors
    ///
    /// [`Error::Cancelled`] once `cancel` fires; otherwise as [`Store::acquire_wait`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{Cancel, Error, Store};
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = Store::open(&path)?;
    /// let _held = Store::open(&path)?.acquire("nightly", Duration::from_secs(30))?;
    /// let cancel = Cancel::new();
    /// let waiter = {
    ///     let (store, cancel) = (store.clone(), cancel.clone());
    ///     let (ttl, timeout) = (Duration::from_secs(30), Duration::from_secs(600));
    ///     std::thread::spawn(move || {
    ///         store.acquire_wait_cancellable("nightly", ttl, timeout, &cancel)
    ///     })
    /// };
    /// cancel.cancel(); // from a signal handler, say
    /// assert!(matches!(waiter.join().unwrap(), Err(Error::Cancelled)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_wait_cancellable(
        &self,
        name: &str,
        ttl: Duration,
        timeout: Duration,
        cancel: &Cancel,
    ) -> Result<Holder> {
        self.lock(name)
            .ttl(ttl)
            .timeout(timeout)
            .cancel(cancel)
            .acquire()
    }

    /// Acquires the lock `name` and writes `value` under `key` with the new token, in one
    /// transaction: either both happen or neither.
    ///
    /// Shorthand for `store.lock(name).ttl(ttl).put(key, value).try_acquire()` ([`Store::lock`]).
    ///
    /// # Errors
    ///
    /// As [`Store::acquire`], and [`Error::InvalidArgument`] for an empty or too long key or a
    /// value over the store's limit; nothing is written when the grant is refused. Through the
    /// redo log ([`Options::write_log`](crate::Options::write_log)), also [`Error::LockLost`]
    /// (nothing written) when the call was stopped past its TTL between its grant and its write,
    /// and the lock was granted to another who wrote the key first.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// let ttl = Duration::from_secs(30);
    /// let holder = store.acquire_and_put("nightly", ttl, b"nightly/owner", b"host-a")?;
    /// let owner = store.get(b"nightly/owner")?.expect("written with the grant");
    /// assert_eq!(owner.value, b"host-a");
    /// assert_eq!(owner.token, holder.token());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_and_put(
        &self,
        name: &str,
        ttl: Duration,
        key: &[u8],
        value: &[u8],
    ) -> Result<Holder> {
        self.lock(name).ttl(ttl).put(key, value).try_acquire()
    }

    /// Like [`Store::acquire_and_put`], its wait for another process that holds the store ended by `cancel`
    /// ([`Error::Cancelled`], changing nothing; at once when it fired before) and bounded by its
    /// deadline ([`Cancel::set_timeout`]) instead of the busy timeout.
    ///
    /// Shorthand for `store.lock(name).ttl(ttl).put(key, value).cancel(cancel).try_acquire()`
    /// ([`Store::lock`]).
    ///
    /// # Errors
    ///
    /// [`Error::Cancelled`] once `cancel` fires; [`Error::Timeout`] at its deadline; otherwise
    /// as [`Store::acquire_and_put`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{Cancel, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path().join("locks.db"))?;
    /// let cancel = Cancel::new();
    /// cancel.set_timeout(Duration::from_secs(2));
    /// let ttl = Duration::from_secs(30);
    /// let holder =
    ///     store.acquire_and_put_cancellable("nightly", ttl, b"nightly/owner", b"host-a", &cancel)?;
    /// assert_eq!(store.get(b"nightly/owner")?.unwrap().token, holder.token());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_and_put_cancellable(
        &self,
        name: &str,
        ttl: Duration,
        key: &[u8],
        value: &[u8],
        cancel: &Cancel,
    ) -> Result<Holder> {
        self.lock(name)
            .ttl(ttl)
            .put(key, value)
            .cancel(cancel)
            .try_acquire()
    }

    /// Tries once to acquire `name` as `kind` for `ttl`: exclusively (as [`Store::acquire`]),
    /// shared, or one permit of a semaphore of `N` permits. Each grant is a lease of its own,
    /// with its own token (higher than every earlier grant of the store), liveness and TTL, and
    /// is released, extended, lost and fenced like an exclusive one. A grant that would hold
    /// the name together with live holders (another shared holder, another permit) waits its
    /// turn behind every queued waiting acquire of the name, so a stream of shared acquires
    /// does not starve a waiting exclusive one.
    ///
    /// Shorthand for `store.lock(name).kind(kind).ttl(ttl).try_acquire()` ([`Store::lock`]).
    ///
    /// # Errors
    ///
    /// [`Error::Locked`] while the name is held in a way that excludes this grant (an exclusive
    /// holder; a shared holder, for an exclusive acquire; every permit taken; a lock of another
    /// kind; an earlier waiter); [`Error::PermitsMismatch`] when live permits of the name were
    /// granted with another count; [`Error::InvalidArgument`] for a semaphore of 0 or more than
    /// [`MAX_HOLDERS`] permits; otherwise as [`Store::acquire`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::Kind;
    /// # let dir = tempfile::tempdir()?;
    /// let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let ttl = Duration::from_secs(30);
    /// let a = store.acquire_kind("gpu", Kind::Semaphore(2), ttl)?;
    /// let b = store.acquire_kind("gpu", Kind::Semaphore(2), ttl)?;
    /// assert!(b.token() > a.token());
    /// assert!(matches!(
    ///     store.acquire_kind("gpu", Kind::Semaphore(2), ttl),
    ///     Err(fencelock::Error::Locked { .. })
    /// ));
    /// assert!(matches!(
    ///     store.acquire_kind("gpu", Kind::Semaphore(3), ttl),
    ///     Err(fencelock::Error::PermitsMismatch { permits: 2, requested: 3 })
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_kind(&self, name: &str, kind: Kind, ttl: Duration) -> Result<Holder> {
        self.lock(name).kind(kind).ttl(ttl).try_acquire()
    }

    /// Like [`Store::acquire_kind`] (which [`Store::acquire`] is with [`Kind::Exclusive`]): tries
    /// once, and its wait for another process that holds the store ended by `cancel`
    /// ([`Error::Cancelled`], changing nothing; at once when it fired before) and bounded by its
    /// deadline ([`Cancel::set_timeout`]) instead of the busy timeout.
    /// `cancel` may also name the thread the lease is for ([`Cancel::set_thread`]).
    ///
    /// Shorthand for `store.lock(name).kind(kind).ttl(ttl).cancel(cancel).try_acquire()`
    /// ([`Store::lock`]).
    ///
    /// # Errors
    ///
    /// [`Error::Cancelled`] once `cancel` fires; [`Error::Timeout`] at its deadline; otherwise
    /// as [`Store::acquire_kind`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{Cancel, Error, Kind, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path().join("locks.db"))?;
    /// let ttl = Duration::from_secs(30);
    /// let cancel = Cancel::new();
    /// cancel.set_timeout(Duration::from_secs(2));
    /// let holder = store.acquire_kind_cancellable("nightly", Kind::Exclusive, ttl, &cancel)?;
    /// assert!(matches!(
    ///     store.acquire_kind_cancellable("nightly", Kind::Exclusive, ttl, &cancel),
    ///     Err(Error::Locked { token, .. }) if token == holder.token()
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_kind_cancellable(
        &self,
        name: &str,
        kind: Kind,
        ttl: Duration,
        cancel: &Cancel,
    ) -> Result<Holder> {
        self.lock(name)
            .kind(kind)
            .ttl(ttl)
            .cancel(cancel)
            .try_acquire()
    }

    /// Like [`Store::acquire_kind`], waiting up to `timeout` for its turn, as
    /// [`Store::acquire_wait`] does: waiting acquires of a name, of every kind, are granted
    /// oldest first across processes. A waiter of a semaphore looks again at least every
    /// millisecond, since any permit let go is its turn.
    ///
    /// Shorthand for `store.lock(name).kind(kind).ttl(ttl).timeout(timeout).acquire()`
    /// ([`Store::lock`]).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when `timeout` passes first; otherwise as [`Store::acquire_kind`],
    /// but never [`Error::Locked`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{Error, Kind, Store};
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = Store::open(&path)?;
    /// let ttl = Duration::from_secs(30);
    /// let reader = store.acquire_kind("config", Kind::Shared, ttl)?;
    /// let writers = Store::open(&path)?;
    /// let quick = Duration::from_millis(10);
    /// assert!(matches!(
    ///     writers.acquire_kind_wait("config", Kind::Exclusive, ttl, quick),
    ///     Err(Error::Timeout { .. })
    /// ));
    /// reader.release()?;
    /// let timeout = Duration::from_secs(10);
    /// let writer = writers.acquire_kind_wait("config", Kind::Exclusive, ttl, timeout)?;
    /// assert_eq!(writer.kind(), Kind::Exclusive);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_kind_wait(
        &self,
        name: &str,
        kind: Kind,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Holder> {
        self.lock(name)
            .kind(kind)
            .ttl(ttl)
            .timeout(timeout)
            .acquire()
    }

    /// Like [`Store::acquire_kind_wait`], and ends with [`Error::Cancelled`], changing
    /// nothing, once `cancel` fires.
    ///
    /// Shorthand for
    /// `store.lock(name).kind(kind).ttl(ttl).timeout(timeout).cancel(cancel).acquire()`
    /// ([`Store::lock`]).
    ///
    /// # Errors
    ///
    /// [`Error::Cancelled`] once `cancel` fires; otherwise as [`Store::acquire_kind_wait`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{Cancel, Error, Kind, Store};
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = Store::open(&path)?;
    /// let ttl = Duration::from_secs(30);
    /// let _writer = Store::open(&path)?.acquire("config", ttl)?;
    /// let cancel = Cancel::new();
    /// cancel.cancel(); // before the wait: it ends at its first look
    /// let timeout = Duration::from_secs(600);
    /// assert!(matches!(
    ///     store.acquire_kind_wait_cancellable("config", Kind::Shared, ttl, timeout, &cancel),
    ///     Err(Error::Cancelled)
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_kind_wait_cancellable(
        &self,
        name: &str,
        kind: Kind,
        ttl: Duration,
        timeout: Duration,
        cancel: &Cancel,
    ) -> Result<Holder> {
        self.lock(name)
            .kind(kind)
            .ttl(ttl)
            .timeout(timeout)
            .cancel(cancel)
            .acquire()
    }

    /// Tries once to acquire every lock of `names` exclusively for `ttl`, all or none, in one
    /// transaction. Deadlock-free by construction: it never holds some of the locks while it
    /// waits for others, so no order of names can deadlock with another acquire.
    ///
    /// Each lock gets a holder of its own, in the order of `names`, with its own token (the
    /// tokens follow each other), liveness and TTL: each is released, extended, lost and fenced
    /// on its own, exactly like a holder of [`Store::acquire`]. One token per name, rather than
    /// one for the grant, because a token fences the writes of one lease: with its own token,
    /// each name's lease stays an ordinary lease (a holder-checked write is checked against the
    /// lock it names, and releasing one lock leaves the others held), and every token is still
    /// higher than every earlier grant of any of the names.
    ///
    /// Shorthand for `store.lock_all(names).ttl(ttl).try_acquire()` ([`Store::lock_all`]).
    ///
    /// # Errors
    ///
    /// [`Error::Locked`] naming the first lock in `names` that a live lease holds (nothing is
    /// granted); [`Error::InvalidArgument`] for no names, more than [`MAX_HOLDERS`], a name
    /// given twice, or a name or TTL as [`Store::acquire`] refuses; otherwise as
    /// [`Store::acquire`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let held = store.acquire("b", Duration::from_secs(30))?;
    /// assert!(store.acquire_all(&["a", "b"], Duration::from_secs(30)).is_err());
    /// assert!(store.lock_info("a")?.is_none(), "all or none: a was not granted either");
    /// drop(held);
    /// let both = store.acquire_all(&["a", "b"], Duration::from_secs(30))?;
    /// assert_eq!(both[1].token(), both[0].token() + 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_all(&self, names: &[&str], ttl: Duration) -> Result<Vec<Holder>> {
        self.lock_all(names).ttl(ttl).try_acquire()
    }

    /// Like [`Store::acquire_all`]: tries once, and its wait for another process that holds the store ended by `cancel`
    /// ([`Error::Cancelled`], changing nothing; at once when it fired before) and bounded by its
    /// deadline ([`Cancel::set_timeout`]) instead of the busy timeout.
    ///
    /// Shorthand for `store.lock_all(names).ttl(ttl).cancel(cancel).try_acquire()`
    /// ([`Store::lock_all`]).
    ///
    /// # Errors
    ///
    /// [`Error::Cancelled`] once `cancel` fires; [`Error::Timeout`] at its deadline; otherwise
    /// as [`Store::acquire_all`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{Cancel, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path().join("locks.db"))?;
    /// let cancel = Cancel::new();
    /// cancel.set_timeout(Duration::from_secs(2));
    /// let both = store.acquire_all_cancellable(&["a", "b"], Duration::from_secs(30), &cancel)?;
    /// assert_eq!(both.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_all_cancellable(
        &self,
        names: &[&str],
        ttl: Duration,
        cancel: &Cancel,
    ) -> Result<Vec<Holder>> {
        self.lock_all(names).ttl(ttl).cancel(cancel).try_acquire()
    }

    /// Like [`Store::acquire_all`], waiting up to `timeout` until every lock is free at once.
    /// Its waits are not queued behind other waiters of the locks (it takes them whenever all
    /// are free together), and it holds none of them while it waits.
    ///
    /// Shorthand for `store.lock_all(names).ttl(ttl).timeout(timeout).acquire()`
    /// ([`Store::lock_all`]).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when `timeout` passes first; otherwise as [`Store::acquire_all`],
    /// but never [`Error::Locked`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::Store;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = Store::open(&path)?;
    /// let ttl = Duration::from_secs(30);
    /// let b = Store::open(&path)?.acquire("b", Duration::from_millis(100))?;
    /// // Both at once, when b's lease has run out.
    /// let both = store.acquire_all_wait(&["a", "b"], ttl, Duration::from_secs(10))?;
    /// assert_eq!([both[0].name(), both[1].name()], ["a", "b"]);
    /// assert!(both[1].token() > b.token());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_all_wait(
        &self,
        names: &[&str],
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Vec<Holder>> {
        self.lock_all(names).ttl(ttl).timeout(timeout).acquire()
    }

    /// Like [`Store::acquire_all_wait`], and ends with [`Error::Cancelled`], changing nothing,
    /// once `cancel` fires.
    ///
    /// Shorthand for `store.lock_all(names).ttl(ttl).timeout(timeout).cancel(cancel).acquire()`
    /// ([`Store::lock_all`]).
    ///
    /// # Errors
    ///
    /// [`Error::Cancelled`] once `cancel` fires; otherwise as [`Store::acquire_all_wait`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{Cancel, Error, Store};
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = Store::open(&path)?;
    /// let ttl = Duration::from_secs(30);
    /// let _b = Store::open(&path)?.acquire("b", ttl)?;
    /// let cancel = Cancel::new();
    /// cancel.cancel();
    /// let timeout = Duration::from_secs(600);
    /// assert!(matches!(
    ///     store.acquire_all_wait_cancellable(&["a", "b"], ttl, timeout, &cancel),
    ///     Err(Error::Cancelled)
    /// ));
    /// assert!(store.lock_info("a")?.is_none(), "nothing was granted");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_all_wait_cancellable(
        &self,
        names: &[&str],
        ttl: Duration,
        timeout: Duration,
        cancel: &Cancel,
    ) -> Result<Vec<Holder>> {
        self.lock_all(names)
            .ttl(ttl)
            .timeout(timeout)
            .cancel(cancel)
            .acquire()
    }

    /// Stores `value` under `key` with `token`. Refused with [`Error::StaleToken`] when the key
    /// accepted a higher token before; an equal token is accepted, so one holder can write many
    /// times. The token must have been granted by this store.
    ///
    /// # Errors
    ///
    /// [`Error::StaleToken`] when the key accepted a higher token; [`Error::InvalidArgument`]
    /// for token 0, a token above every grant, an empty or too long key or a value over the
    /// limit; [`Error::Timeout`] behind a process that holds the store past the busy timeout
    /// (the write may still land if that process had taken it into its commit); and the
    /// storage errors of [`Store::acquire`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::Error;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// let ttl = Duration::from_secs(30);
    /// let old = store.acquire("nightly", ttl)?.token(); // a holder that paused and lost it
    /// let new = store.acquire("nightly", ttl)?;
    /// store.put(b"nightly/report", b"fresh", new.token())?;
    /// assert!(matches!(
    ///     store.put(b"nightly/report", b"stale", old),
    ///     Err(Error::StaleToken { highest, .. }) if highest == new.token()
    /// ));
    /// assert_eq!(store.get(b"nightly/report")?.unwrap().value, b"fresh");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn put(&self, key: &[u8], value: &[u8], token: u64) -> Result<()> {
        self.engine.write(key, Some(value), token, None).map(|_| ())
    }

    /// Like [`Store::put`], its wait for another process that holds the store ended by `cancel`
    /// ([`Error::Cancelled`], changing nothing; at once when it fired before) and bounded by its
    /// deadline ([`Cancel::set_timeout`]) instead of the busy timeout.
    ///
    /// # Errors
    ///
    /// [`Error::Cancelled`] once `cancel` fires; [`Error::Timeout`] at its deadline; otherwise
    /// as [`Store::put`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{Cancel, Error, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path().join("locks.db"))?;
    /// let holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// let cancel = Cancel::new();
    /// cancel.set_timeout(Duration::from_secs(2));
    /// store.put_cancellable(b"nightly/report", b"done", holder.token(), &cancel)?;
    /// cancel.cancel();
    /// let late = store.put_cancellable(b"nightly/report", b"late", holder.token(), &cancel);
    /// assert!(matches!(late, Err(Error::Cancelled)));
    /// assert_eq!(store.get(b"nightly/report")?.unwrap().value, b"done");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn put_cancellable(
        &self,
        key: &[u8],
        value: &[u8],
        token: u64,
        cancel: &Cancel,
    ) -> Result<()> {
        self.engine
            .write(key, Some(value), token, Some(cancel))
            .map(|_| ())
    }

    /// Deletes `key`, fenced like [`Store::put`]. The key keeps the delete's token, so a stale
    /// write after the delete is still refused. Returns whether the key held a value.
    ///
    /// # Errors
    ///
    /// As [`Store::put`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// let holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// store.put(b"nightly/report", b"done", holder.token())?;
    /// assert!(store.delete(b"nightly/report", holder.token())?);
    /// assert!(!store.delete(b"nightly/report", holder.token())?, "nothing left to delete");
    /// assert_eq!(store.get(b"nightly/report")?, None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn delete(&self, key: &[u8], token: u64) -> Result<bool> {
        self.engine.write(key, None, token, None)
    }

    /// Like [`Store::delete`], its wait for another process that holds the store ended by `cancel`
    /// ([`Error::Cancelled`], changing nothing; at once when it fired before) and bounded by its
    /// deadline ([`Cancel::set_timeout`]) instead of the busy timeout.
    ///
    /// # Errors
    ///
    /// As [`Store::put_cancellable`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{Cancel, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path().join("locks.db"))?;
    /// let holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// store.put(b"nightly/report", b"draft", holder.token())?;
    /// let cancel = Cancel::new();
    /// cancel.set_timeout(Duration::from_secs(2));
    /// assert!(store.delete_cancellable(b"nightly/report", holder.token(), &cancel)?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn delete_cancellable(&self, key: &[u8], token: u64, cancel: &Cancel) -> Result<bool> {
        self.engine.write(key, None, token, Some(cancel))
    }

    /// The value under `key` and the token that wrote it, or `None` if there is none.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty or too long key; [`Error::Timeout`] while another
    /// process stays paused in the middle of writing the file's header; [`Error::Io`] or
    /// [`Error::Corrupt`] from the file.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::Fenced;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// assert_eq!(store.get(b"nightly/report")?, None);
    /// let holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// holder.put(b"nightly/report", b"done")?;
    /// let fenced = Fenced { value: b"done".to_vec(), token: holder.token() };
    /// assert_eq!(store.get(b"nightly/report")?, Some(fenced));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get(&self, key: &[u8]) -> Result<Option<Fenced>> {
        self.engine.get(key)
    }

    /// The keys holding a value that start with `prefix`, in byte order.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a prefix longer than a key may be; otherwise as
    /// [`Store::get`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// let holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// for key in [&b"jobs/2"[..], b"jobs/1", b"other"] {
    ///     holder.put(key, b"queued")?;
    /// }
    /// assert_eq!(store.keys(b"jobs/")?, [b"jobs/1".to_vec(), b"jobs/2".to_vec()]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn keys(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.engine.keys(prefix)
    }

    /// Checks `token` against the external fence `resource`, recording it as the highest seen
    /// when it is. Refused with [`Error::StaleToken`] when a higher token was seen before; an
    /// equal token passes. For guarding storage of the user's own with fencelock's tokens.
    ///
    /// # Errors
    ///
    /// [`Error::StaleToken`] when the resource accepted a higher token; otherwise as
    /// [`Store::put`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::Error;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// let ttl = Duration::from_secs(30);
    /// let old = store.acquire("upload", ttl)?.token(); // a holder that paused and lost it
    /// let new = store.acquire("upload", ttl)?;
    /// store.fence("s3://bucket/report.csv", new.token())?; // then upload
    /// assert!(matches!(
    ///     store.fence("s3://bucket/report.csv", old),
    ///     Err(Error::StaleToken { .. })
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fence(&self, resource: &str, token: u64) -> Result<()> {
        self.engine.fence(resource, token, None)
    }

    /// Like [`Store::fence`], its wait for another process that holds the store ended by `cancel`
    /// ([`Error::Cancelled`], changing nothing; at once when it fired before) and bounded by its
    /// deadline ([`Cancel::set_timeout`]) instead of the busy timeout.
    ///
    /// # Errors
    ///
    /// [`Error::Cancelled`] once `cancel` fires; [`Error::Timeout`] at its deadline; otherwise
    /// as [`Store::fence`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{Cancel, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path().join("locks.db"))?;
    /// let holder = store.acquire("upload", Duration::from_secs(30))?;
    /// let cancel = Cancel::new();
    /// cancel.set_timeout(Duration::from_secs(2));
    /// store.fence_cancellable("s3://bucket/report.csv", holder.token(), &cancel)?;
    /// assert_eq!(store.fence_token("s3://bucket/report.csv")?, Some(holder.token()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fence_cancellable(&self, resource: &str, token: u64, cancel: &Cancel) -> Result<()> {
        self.engine.fence(resource, token, Some(cancel))
    }

    /// The highest token the external fence `resource` has accepted, if any.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty or too long resource name; otherwise as
    /// [`Store::get`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// assert_eq!(store.fence_token("s3://bucket/report.csv")?, None);
    /// let holder = store.acquire("upload", Duration::from_secs(30))?;
    /// store.fence("s3://bucket/report.csv", holder.token())?;
    /// assert_eq!(store.fence_token("s3://bucket/report.csv")?, Some(holder.token()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fence_token(&self, resource: &str) -> Result<Option<u64>> {
        self.engine.fence_token(resource)
    }

    /// Every lock record with its state, in name order.
    ///
    /// # Errors
    ///
    /// As [`Store::get`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::LockState;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// let ttl = Duration::from_secs(30);
    /// let _a = store.acquire("a", ttl)?;
    /// store.acquire("b", ttl)?.release()?;
    /// let locks = store.locks()?;
    /// let states: Vec<_> = locks.iter().map(|l| (l.name.as_str(), l.state)).collect();
    /// assert_eq!(states, [("a", LockState::Held), ("b", LockState::Released)]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn locks(&self) -> Result<Vec<LockInfo>> {
        self.engine.locks()
    }

    /// What the store records of the lock `name`, if anything: its latest grant. For a
    /// semaphore or shared lock, [`Store::lock_holders`] lists every grant.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad lock name; otherwise as [`Store::get`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::LockState;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// assert_eq!(store.lock_info("nightly")?, None);
    /// let holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// let info = store.lock_info("nightly")?.expect("just granted");
    /// assert_eq!((info.token, info.pid), (holder.token(), std::process::id()));
    /// assert_eq!(info.state, LockState::Held);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn lock_info(&self, name: &str) -> Result<Option<LockInfo>> {
        Ok(self.lock_holders(name)?.into_iter().next())
    }

    /// Every grant the record of the lock `name` holds, latest first (one for an exclusive
    /// lock; the permits of a semaphore or the shared holders of a lock, live or not yet
    /// cleared). Empty when the store records nothing of it.
    ///
    /// # Errors
    ///
    /// As [`Store::lock`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::Kind;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// let ttl = Duration::from_secs(30);
    /// let first = store.acquire_kind("config", Kind::Shared, ttl)?;
    /// let second = store.acquire_kind("config", Kind::Shared, ttl)?;
    /// let tokens: Vec<u64> = store.lock_holders("config")?.iter().map(|l| l.token).collect();
    /// assert_eq!(tokens, [second.token(), first.token()]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn lock_holders(&self, name: &str) -> Result<Vec<LockInfo>> {
        self.engine.lock_holders(name)
    }

    /// The acquires of any process of this host queued waiting for the lock `name`, oldest
    /// first (the order they are served in): pid, place and how long each has waited. A waiter
    /// paused mid-wait is listed; one whose process died is not. Empty where waits are not
    /// queued (a store opened in single-process mode).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad lock name, or on an etcd store (etcd keeps its
    /// waiters as keys of its own).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// let _holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// assert!(store.waiters("nightly")?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn waiters(&self, name: &str) -> Result<Vec<WaiterInfo>> {
        self.engine.waiters(name)
    }

    /// Counts and settings of the store.
    ///
    /// # Errors
    ///
    /// As [`Store::get`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// let holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// holder.put(b"nightly/report", b"done")?;
    /// let info = store.info()?;
    /// assert_eq!((info.last_token, info.lock_records, info.keys), (holder.token(), 1, 1));
    /// assert_eq!(info.schema_version, fencelock::SCHEMA_VERSION);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn info(&self) -> Result<StoreInfo> {
        self.engine.info()
    }

    /// Checks the store's own invariants: every record decodes, and no lease, value or fence
    /// carries a token above the counter. Returns the first violation as [`Error::Corrupt`].
    ///
    /// # Errors
    ///
    /// [`Error::Corrupt`] naming the first violation; otherwise as [`Store::get`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// let holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// holder.put(b"nightly/report", b"done")?;
    /// assert!(store.verify().is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn verify(&self) -> Result<()> {
        self.engine.verify()
    }

    /// The grant history of the lock `name`, oldest first: its latest ended grants (up to
    /// [`HISTORY_PER_LOCK`]), then its current grants with their state now. Empty for a lock
    /// the store knows nothing of.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad lock name, and on an etcd store; otherwise the
    /// storage errors of [`crate::Store::get`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::Ending;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// let ttl = Duration::from_secs(30);
    /// let first = store.acquire("nightly", ttl)?;
    /// first.release()?;
    /// let second = store.acquire("nightly", ttl)?;
    /// let history = store.history("nightly")?;
    /// let endings: Vec<_> = history.iter().map(|e| (e.token, e.ending)).collect();
    /// assert_eq!(endings, [(first.token(), Ending::Released), (second.token(), Ending::Held)]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn history(&self, name: &str) -> Result<Vec<HistoryEntry>> {
        self.engine.history(name)
    }

    /// A snapshot of the store's counters: of every process on this host that has the store
    /// open (and of those that had, since [`Metrics::since`]), or of this open store alone, as
    /// [`Metrics::scope`] says. [`Metrics::prometheus`] renders it for Prometheus.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] on an etcd store (etcd exports metrics of its own).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// let _holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// assert!(store.acquire("nightly", Duration::from_secs(30)).is_err());
    /// let metrics = store.metrics()?;
    /// assert_eq!((metrics.grants, metrics.refused_locked), (1, 1));
    /// assert_eq!(metrics.live_exclusive, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn metrics(&self) -> Result<Metrics> {
        self.engine.metrics()
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
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    /// use fencelock::{Event, Observer};
    /// #[derive(Default)]
    /// struct Grants(Mutex<Vec<u64>>);
    /// impl Observer for Grants {
    ///     fn observe(&self, event: &Event<'_>) {
    ///         if let Event::Acquire { result: Ok(token), .. } = event {
    ///             self.0.lock().unwrap().push(*token);
    ///         }
    ///     }
    /// }
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// let grants = Arc::new(Grants::default());
    /// store.set_observer(Some(grants.clone()))?;
    /// let holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// assert_eq!(*grants.0.lock().unwrap(), [holder.token()]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_observer(&self, observer: Option<Arc<dyn Observer>>) -> Result<()> {
        self.engine.set_observer(observer)
    }
}

/// The etcd store `text`, or (without the `etcd` feature) the refusal.
#[cfg(feature = "etcd")]
fn open_etcd(text: &str, options: &Options) -> Result<Arc<dyn Engine>> {
    Ok(crate::etcd::EtcdEngine::open(text, options)?)
}

#[cfg(not(feature = "etcd"))]
fn open_etcd(text: &str, _options: &Options) -> Result<Arc<dyn Engine>> {
    Err(crate::Error::invalid(format!(
        "{text}: this fencelock was built without etcd support (cargo feature `etcd`)"
    )))
}
