//! The holder of a granted lease: what the lease is, and what its holder can do with it, on
//! whichever engine granted it.

use std::sync::Arc;
use std::time::Duration;

use crate::base::cancel::Cancel;
use crate::base::error::Result;
use crate::engine::{Engine, LeaseHandle};
use crate::rules::kind::Kind;
// What the docs link to.
#[cfg(doc)]
use crate::base::error::Error;

/// A granted lease. Its [`token`](Holder::token) is higher than that of every earlier grant of
/// any lock of the store. Dropping the holder releases the lease.
///
/// A holder is `Send + Sync`: one thread may write while another extends or releases.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// let store = fencelock::Store::open(&path)?;
/// {
///     let holder = store.acquire("nightly", Duration::from_secs(30))?;
///     holder.put(b"nightly/report", b"done")?;
/// } // dropped: released
/// assert!(store.acquire("nightly", Duration::from_secs(30)).is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "dropping the holder releases the lock at once; keep it while the work runs"]
pub struct Holder {
    lease: Arc<dyn LeaseHandle>,
}

impl std::fmt::Debug for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Holder")
            .field("name", &self.name())
            .field("token", &self.token())
            .finish_non_exhaustive()
    }
}

impl Holder {
    /// The engine that granted the lease (the store's, for [`Holder::store`]).
    pub(crate) fn engine(&self) -> Arc<dyn Engine> {
        self.lease.engine()
    }

    pub(crate) fn new(lease: Arc<dyn LeaseHandle>) -> Holder {
        Holder { lease }
    }

    /// The lease, for the async forms (`api/async_tokio.rs`), which take it to the blocking pool.
    #[cfg(feature = "tokio")]
    pub(crate) fn lease(&self) -> &Arc<dyn LeaseHandle> {
        &self.lease
    }

    /// The fencing token of this lease.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// let first = store.acquire("nightly", Duration::from_secs(30))?;
    /// let token = first.token();
    /// drop(first);
    /// let second = store.acquire("nightly", Duration::from_secs(30))?;
    /// assert!(second.token() > token);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn token(&self) -> u64 {
        self.lease.state().token
    }

    /// The lock's name.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// # let store = fencelock::Store::open(&path)?;
    /// let holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// assert_eq!(holder.name(), "nightly");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn name(&self) -> &str {
        &self.lease.state().name
    }

    /// How the lease holds the name: exclusive, shared, or a permit of a semaphore.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::Kind;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// # let store = fencelock::Store::open(&path)?;
    /// let holder = store.acquire_kind("gpu", Kind::Semaphore(4), Duration::from_secs(30))?;
    /// assert_eq!(holder.kind(), Kind::Semaphore(4));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn kind(&self) -> Kind {
        self.lease.state().kind
    }

    /// Time left on the lease as this holder last set it; zero once it ran out. Whether another
    /// holder took over is answered by [`Holder::is_held`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// # let store = fencelock::Store::open(&path)?;
    /// let holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// let left = holder.remaining();
    /// assert!(left > Duration::ZERO && left <= Duration::from_secs(30));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn remaining(&self) -> Duration {
        self.lease.state().remaining()
    }

    /// Renews the lease for `ttl` from now, only while this holder still owns it; otherwise
    /// [`Error::LockLost`].
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] when the lease expired, was taken over or was released;
    /// [`Error::InvalidArgument`] for a TTL out of range; [`Error::Timeout`] behind a process
    /// that holds the store past the busy timeout; storage errors as [`Store::acquire`](crate::Store::acquire).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::Error;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// # let store = fencelock::Store::open(&path)?;
    /// let holder = store.acquire("nightly", Duration::from_secs(1))?;
    /// holder.extend(Duration::from_secs(60))?;
    /// assert!(holder.remaining() > Duration::from_secs(30));
    /// holder.release()?;
    /// assert!(matches!(holder.extend(Duration::from_secs(60)), Err(Error::LockLost { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn extend(&self, ttl: Duration) -> Result<()> {
        self.lease.extend(ttl, None)
    }

    /// Like [`Holder::extend`], its wait for another process that holds the store ended by `cancel`
    /// ([`Error::Cancelled`], changing nothing; at once when it fired before) and bounded by its
    /// deadline ([`Cancel::set_timeout`]) instead of the busy timeout.
    ///
    /// # Errors
    ///
    /// [`Error::Cancelled`] once `cancel` fires; [`Error::Timeout`] at its deadline; otherwise
    /// as [`Holder::extend`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::Cancel;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let holder = store.acquire("nightly", Duration::from_secs(1))?;
    /// let cancel = Cancel::new();
    /// cancel.set_timeout(Duration::from_secs(2));
    /// holder.extend_cancellable(Duration::from_secs(60), &cancel)?;
    /// assert!(holder.remaining() > Duration::from_secs(30));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn extend_cancellable(&self, ttl: Duration, cancel: &Cancel) -> Result<()> {
        self.lease.extend(ttl, Some(cancel))
    }

    /// Whether this holder still holds the lease: not released, not expired, not taken over.
    /// Reads only; writes nothing.
    ///
    /// # Errors
    ///
    /// As [`Store::get`](crate::Store::get).
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// # let store = fencelock::Store::open(&path)?;
    /// let holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// assert!(holder.is_held()?);
    /// holder.release()?;
    /// assert!(!holder.is_held()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_held(&self) -> Result<bool> {
        self.lease.is_held()
    }

    /// Writes `value` under `key` with this holder's token, checking in the same transaction
    /// that the lease is still current ([`Error::LockLost`] otherwise) and that the key accepted
    /// no higher token ([`Error::StaleToken`]).
    ///
    /// A permit of a semaphore writes like an exclusive holder, checked against its own permit.
    /// A shared holder is refused ([`Error::InvalidArgument`], nothing written): a shared lock
    /// promises each of its holders that nobody writes what it guards while they hold it, and a
    /// write checked against a shared lease would break that promise for the other shared
    /// holders. A shared holder that must write acquires the lock exclusively.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] when the lease is no longer this holder's; [`Error::StaleToken`] when
    /// the key accepted a higher token; [`Error::InvalidArgument`] for a shared holder;
    /// otherwise as [`Store::put`](crate::Store::put).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{Error, Store};
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = Store::open(&path)?;
    /// let paused = store.acquire("nightly", Duration::from_millis(100))?;
    /// paused.put(b"nightly/report", b"v1")?;
    /// // Its lease runs out (a GC pause, say) and another process takes the lock over.
    /// let (ttl, timeout) = (Duration::from_secs(30), Duration::from_secs(10));
    /// let next = Store::open(&path)?.acquire_wait("nightly", ttl, timeout)?;
    /// next.put(b"nightly/report", b"v2")?;
    /// assert!(matches!(paused.put(b"nightly/report", b"v1, late"), Err(Error::LockLost { .. })));
    /// assert_eq!(store.get(b"nightly/report")?.unwrap().value, b"v2");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.lease.write(key, Some(value), None).map(|_| ())
    }

    /// Like [`Holder::put`], its wait for another process that holds the store ended by `cancel`
    /// ([`Error::Cancelled`], changing nothing; at once when it fired before) and bounded by its
    /// deadline ([`Cancel::set_timeout`]) instead of the busy timeout.
    ///
    /// # Errors
    ///
    /// [`Error::Cancelled`] once `cancel` fires; [`Error::Timeout`] at its deadline; otherwise
    /// as [`Holder::put`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::Cancel;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// let cancel = Cancel::new();
    /// cancel.set_timeout(Duration::from_secs(2));
    /// holder.put_cancellable(b"nightly/report", b"done", &cancel)?;
    /// assert_eq!(store.get(b"nightly/report")?.unwrap().value, b"done");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn put_cancellable(&self, key: &[u8], value: &[u8], cancel: &Cancel) -> Result<()> {
        self.lease.write(key, Some(value), Some(cancel)).map(|_| ())
    }

    /// Deletes `key` with this holder's token, checked like [`Holder::put`]. Returns whether the
    /// key held a value.
    ///
    /// # Errors
    ///
    /// As [`Holder::put`].
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// # let store = fencelock::Store::open(&path)?;
    /// let holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// holder.put(b"nightly/report", b"draft")?;
    /// assert!(holder.delete(b"nightly/report")?);
    /// assert_eq!(store.get(b"nightly/report")?, None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        self.lease.write(key, None, None)
    }

    /// Like [`Holder::delete`], its wait for another process that holds the store ended by `cancel`
    /// ([`Error::Cancelled`], changing nothing; at once when it fired before) and bounded by its
    /// deadline ([`Cancel::set_timeout`]) instead of the busy timeout.
    ///
    /// # Errors
    ///
    /// As [`Holder::put_cancellable`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::Cancel;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// holder.put(b"nightly/report", b"draft")?;
    /// let cancel = Cancel::new();
    /// cancel.set_timeout(Duration::from_secs(2));
    /// assert!(holder.delete_cancellable(b"nightly/report", &cancel)?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn delete_cancellable(&self, key: &[u8], cancel: &Cancel) -> Result<bool> {
        self.lease.write(key, None, Some(cancel))
    }

    /// Releases the lease. Takes effect at once for every process, without an fsync. A stale
    /// holder's release never touches its successor's lease.
    ///
    /// The first release of a lease that was lost before it (it expired, or another holder took
    /// the lock over) frees what is still this holder's and then reports the loss as
    /// [`Error::LockLost`], as redis-py's `LockNotOwnedError` or redsync's
    /// `ErrLockAlreadyExpired` do: the work done under the lease may have overlapped another
    /// holder's. Its fenced writes after the loss were refused; side effects that no fence
    /// checked (a file written, a message sent) must be checked by the caller. Any later
    /// release is a no-op that returns `Ok`.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] at the first release of a lease lost before it; [`Error::Forked`] in
    /// a child of `fork()` (the lease stays the parent's); [`Error::Io`] if the kernel refuses
    /// to drop the lock.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{Error, Store};
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = Store::open(&path)?;
    /// let holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// holder.release()?;
    /// holder.release()?; // a no-op
    /// let lost = store.acquire("nightly", Duration::from_millis(100))?;
    /// let (ttl, timeout) = (Duration::from_secs(30), Duration::from_secs(10));
    /// let _next = Store::open(&path)?.acquire_wait("nightly", ttl, timeout)?;
    /// assert!(matches!(lost.release(), Err(Error::LockLost { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn release(&self) -> Result<()> {
        self.lease.release()
    }

    /// Keeps the lease alive in a background thread: renews it for `ttl` every third of `ttl`
    /// until it is released or lost. Use [`Holder::wait_lost`] or [`Holder::is_lost`] to learn
    /// of a loss. Calling it again changes nothing.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a TTL outside [`crate::MIN_KEEP_ALIVE_TTL`] to
    /// [`crate::MAX_TTL`]; [`Error::Io`] when the thread cannot be started. A lease that is lost
    /// already is not kept alive, and gives `Ok`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// # let store = fencelock::Store::open(&path)?;
    /// let ttl = Duration::from_millis(300);
    /// let holder = store.acquire("nightly", ttl)?;
    /// holder.keep_alive(ttl)?;
    /// std::thread::sleep(3 * ttl); // long work
    /// assert!(holder.is_held()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn keep_alive(&self, ttl: Duration) -> Result<()> {
        Arc::clone(&self.lease).keep_alive(ttl)
    }

    /// Whether the lease is known to be lost or released: its TTL ran out without a renewal,
    /// an extend or write found it taken over, or it was released. Reads no storage.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// # let store = fencelock::Store::open(&path)?;
    /// let holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// assert!(!holder.is_lost());
    /// holder.release()?;
    /// assert!(holder.is_lost());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn is_lost(&self) -> bool {
        self.lease.state().is_lost()
    }

    /// Blocks until the lease is known to be lost or released (as [`Holder::is_lost`] tells),
    /// or `timeout` passes. Returns whether it ended.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// # let store = fencelock::Store::open(&path)?;
    /// let holder = store.acquire("nightly", Duration::from_millis(50))?;
    /// // Nothing renews the lease: it runs out.
    /// assert!(holder.wait_lost(Duration::from_secs(10)));
    /// assert!(holder.is_lost());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    #[allow(clippy::missing_panics_doc)] // Only a cancel handle cancels, and there is none.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        self.lease
            .state()
            .wait_lost(timeout, None)
            .expect("a wait without a cancel handle is never cancelled")
    }

    /// Like [`Holder::wait_lost`], and ends within about 10 ms with [`Error::Cancelled`] once
    /// `cancel` fires (from any thread).
    ///
    /// # Errors
    ///
    /// [`Error::Cancelled`] once `cancel` fires.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{Cancel, Error};
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// # let store = fencelock::Store::open(&path)?;
    /// let holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// let cancel = Cancel::new();
    /// let watcher = {
    ///     let cancel = cancel.clone();
    ///     let timeout = Duration::from_secs(600);
    ///     std::thread::spawn(move || holder.wait_lost_cancellable(timeout, &cancel))
    /// };
    /// cancel.cancel();
    /// assert!(matches!(watcher.join().unwrap(), Err(Error::Cancelled)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn wait_lost_cancellable(&self, timeout: Duration, cancel: &Cancel) -> Result<bool> {
        self.lease.state().wait_lost(timeout, Some(cancel))
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.release();
    }
}
