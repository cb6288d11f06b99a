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
use crate::rules::info::{Fenced, LockInfo, StoreInfo};
use crate::rules::kind::Kind;
use crate::rules::metrics::Metrics;

/// A fencelock store. Cheap to clone; every clone shares one open database, and a store is
/// `Send + Sync`.
///
/// When the last user of the store in this process goes (its last handle is dropped, or the
/// last of its holders, whichever is later), it records the releases this process made in the
/// grant history ([`Store::history`]; a release itself writes nothing): one write, which waits
/// at most half a second for the store and is skipped with [`Options::history`] off.
pub struct Store {
    engine: Arc<dyn Engine>,
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

    fn acquire_many(&self, request: &Acquire<'_>) -> Result<Vec<Holder>> {
        Ok(self
            .engine
            .acquire(request)?
            .into_iter()
            .map(Holder::new)
            .collect())
    }

    fn acquire_one(&self, request: &Acquire<'_>) -> Result<Holder> {
        self.acquire_many(request)?
            .pop()
            .ok_or_else(|| crate::Error::Storage("internal error: a grant without a lease".into()))
    }

    /// Opens the store at `path`, creating it if it does not exist, with default options.
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
    pub fn open_with(path: impl AsRef<Path>, options: &Options) -> Result<Store> {
        let path = path.as_ref();
        let engine: Arc<dyn Engine> = match etcd_string(path) {
            Some(text) => open_etcd(text, options)?,
            None => LocalEngine::open(path, options)?,
        };
        Ok(Store::new(engine))
    }

    /// The store file (an etcd store's string).
    #[must_use]
    pub fn path(&self) -> &Path {
        self.engine.path()
    }

    /// The process id of the server ([`crate::Server`]) that this store's operations go
    /// through now, or `None` when the store uses the file itself.
    #[must_use]
    pub fn server(&self) -> Option<u32> {
        self.engine.server()
    }

    /// Tries once to acquire the lock `name` for `ttl`. On contention returns
    /// [`Error::Locked`] with the current holder's token, pid and time left.
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
        self.acquire_one(&Acquire::new(Locks::One(name), Kind::Exclusive, ttl))
    }

    /// Acquires the lock `name` for `ttl`, waiting up to `timeout` for it to be free. Wakes at
    /// once when a holder of this process releases, within about a millisecond when a holder of
    /// another process releases or dies, and when the holder's lease expires. Returns
    /// [`Error::Timeout`] when the timeout passes first.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when `timeout` passes first; otherwise as [`Store::acquire`], but
    /// never [`Error::Locked`].
    pub fn acquire_wait(&self, name: &str, ttl: Duration, timeout: Duration) -> Result<Holder> {
        self.acquire_one(
            &Acquire::new(Locks::One(name), Kind::Exclusive, ttl).waiting(timeout, None),
        )
    }

    /// Like [`Store::acquire_wait`], and ends within about a millisecond with
    /// [`Error::Cancelled`], changing nothing, once `cancel` fires (from any thread).
    pub fn acquire_wait_cancellable(
        &self,
        name: &str,
        ttl: Duration,
        timeout: Duration,
        cancel: &Cancel,
    ) -> Result<Holder> {
        let request = Acquire::new(Locks::One(name), Kind::Exclusive, ttl);
        self.acquire_one(&request.waiting(timeout, Some(cancel)))
    }

    /// Acquires the lock `name` and writes `value` under `key` with the new token, in one
    /// transaction: either both happen or neither.
    ///
    /// # Errors
    ///
    /// As [`Store::acquire`], and [`Error::InvalidArgument`] for an empty or too long key or a
    /// value over the store's limit; nothing is written when the grant is refused.
    pub fn acquire_and_put(
        &self,
        name: &str,
        ttl: Duration,
        key: &[u8],
        value: &[u8],
    ) -> Result<Holder> {
        self.acquire_one(&Acquire {
            write: Some((key, value)),
            ..Acquire::new(Locks::One(name), Kind::Exclusive, ttl)
        })
    }

    /// Tries once to acquire `name` as `kind` for `ttl`: exclusively (as [`Store::acquire`]),
    /// shared, or one permit of a semaphore of `N` permits. Each grant is a lease of its own,
    /// with its own token (higher than every earlier grant of the store), liveness and TTL, and
    /// is released, extended, lost and fenced like an exclusive one. A grant that would hold
    /// the name together with live holders (another shared holder, another permit) waits its
    /// turn behind every queued waiting acquire of the name, so a stream of shared acquires
    /// does not starve a waiting exclusive one.
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
        self.acquire_one(&Acquire::new(Locks::One(name), kind, ttl))
    }

    /// Like [`Store::acquire_kind`], waiting up to `timeout` for its turn, as
    /// [`Store::acquire_wait`] does: waiting acquires of a name, of every kind, are granted
    /// oldest first across processes. A waiter of a semaphore looks again at least every
    /// millisecond, since any permit let go is its turn.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when `timeout` passes first; otherwise as [`Store::acquire_kind`],
    /// but never [`Error::Locked`].
    pub fn acquire_kind_wait(
        &self,
        name: &str,
        kind: Kind,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Holder> {
        self.acquire_one(&Acquire::new(Locks::One(name), kind, ttl).waiting(timeout, None))
    }

    /// Like [`Store::acquire_kind_wait`], and ends with [`Error::Cancelled`], changing
    /// nothing, once `cancel` fires.
    pub fn acquire_kind_wait_cancellable(
        &self,
        name: &str,
        kind: Kind,
        ttl: Duration,
        timeout: Duration,
        cancel: &Cancel,
    ) -> Result<Holder> {
        let request = Acquire::new(Locks::One(name), kind, ttl);
        self.acquire_one(&request.waiting(timeout, Some(cancel)))
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
    /// assert!(store.lock("a")?.is_none(), "all or none: a was not granted either");
    /// drop(held);
    /// let both = store.acquire_all(&["a", "b"], Duration::from_secs(30))?;
    /// assert_eq!(both[1].token(), both[0].token() + 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_all(&self, names: &[&str], ttl: Duration) -> Result<Vec<Holder>> {
        self.acquire_many(&Acquire::new(Locks::All(names), Kind::Exclusive, ttl))
    }

    /// Like [`Store::acquire_all`], waiting up to `timeout` until every lock is free at once.
    /// Its waits are not queued behind other waiters of the locks (it takes them whenever all
    /// are free together), and it holds none of them while it waits.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when `timeout` passes first; otherwise as [`Store::acquire_all`],
    /// but never [`Error::Locked`].
    pub fn acquire_all_wait(
        &self,
        names: &[&str],
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Vec<Holder>> {
        self.acquire_many(
            &Acquire::new(Locks::All(names), Kind::Exclusive, ttl).waiting(timeout, None),
        )
    }

    /// Like [`Store::acquire_all_wait`], and ends with [`Error::Cancelled`], changing nothing,
    /// once `cancel` fires.
    pub fn acquire_all_wait_cancellable(
        &self,
        names: &[&str],
        ttl: Duration,
        timeout: Duration,
        cancel: &Cancel,
    ) -> Result<Vec<Holder>> {
        let request = Acquire::new(Locks::All(names), Kind::Exclusive, ttl);
        self.acquire_many(&request.waiting(timeout, Some(cancel)))
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
    pub fn put(&self, key: &[u8], value: &[u8], token: u64) -> Result<()> {
        self.engine.write(key, Some(value), token).map(|_| ())
    }

    /// Deletes `key`, fenced like [`Store::put`]. The key keeps the delete's token, so a stale
    /// write after the delete is still refused. Returns whether the key held a value.
    ///
    /// # Errors
    ///
    /// As [`Store::put`].
    pub fn delete(&self, key: &[u8], token: u64) -> Result<bool> {
        self.engine.write(key, None, token)
    }

    /// The value under `key` and the token that wrote it, or `None` if there is none.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty or too long key; [`Error::Timeout`] while another
    /// process stays paused in the middle of writing the file's header; [`Error::Io`] or
    /// [`Error::Corrupt`] from the file.
    pub fn get(&self, key: &[u8]) -> Result<Option<Fenced>> {
        self.engine.get(key)
    }

    /// The keys holding a value that start with `prefix`, in byte order.
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
    pub fn fence(&self, resource: &str, token: u64) -> Result<()> {
        self.engine.fence(resource, token)
    }

    /// The highest token the external fence `resource` has accepted, if any.
    pub fn fence_token(&self, resource: &str) -> Result<Option<u64>> {
        self.engine.fence_token(resource)
    }

    /// Every lock record with its state, in name order.
    pub fn locks(&self) -> Result<Vec<LockInfo>> {
        self.engine.locks()
    }

    /// What the store records of the lock `name`, if anything: its latest grant. For a
    /// semaphore or shared lock, [`Store::lock_holders`] lists every grant.
    pub fn lock(&self, name: &str) -> Result<Option<LockInfo>> {
        Ok(self.lock_holders(name)?.into_iter().next())
    }

    /// Every grant the record of the lock `name` holds, latest first (one for an exclusive
    /// lock; the permits of a semaphore or the shared holders of a lock, live or not yet
    /// cleared). Empty when the store records nothing of it.
    pub fn lock_holders(&self, name: &str) -> Result<Vec<LockInfo>> {
        self.engine.lock_holders(name)
    }

    /// Counts and settings of the store.
    pub fn info(&self) -> Result<StoreInfo> {
        self.engine.info()
    }

    /// Checks the store's own invariants: every record decodes, and no lease, value or fence
    /// carries a token above the counter. Returns the first violation as [`Error::Corrupt`].
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
