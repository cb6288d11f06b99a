//! The async API, behind the cargo feature `tokio` (as fs4's `tokio` feature): awaitable forms
//! of the waits, [`Lock::acquire_async`], [`LockAll::acquire_async`],
//! [`Holder::wait_lost_async`] and [`Holder::keep_alive_async`], each cancelled by dropping its
//! future (a `tokio::time::timeout` running out, a `select!` taking another branch, an aborted
//! task).
//!
//! Mechanism: every blocking call runs on tokio's blocking pool with a [`Cancel`] of its own,
//! which a guard held by the future fires when the future is dropped; the engine's wait looks at
//! it at least once a millisecond (a wait for a lost lease every 10 ms), ends with
//! [`Error::Cancelled`] and changes nothing. A grant that raced the cancel is dropped with the
//! finished task's output, and dropping a [`Holder`] releases it. So no wait outlives its future
//! by more than a poll, and none is granted a lock after its future is gone.
//!
//! Each call's cancel handle names a thread tag of its own ([`Cancel::set_thread`]): the pool
//! runs many tasks' calls on few threads, so a wait judged as the pool thread's could be refused
//! as [`Error::WouldDeadlock`] for another task's lease. Nothing is left to set by hand
//! ([`crate::Options::refuse_own_waits`] needs no change); in exchange a task that awaits a lock
//! it holds itself waits, as with `tokio::sync::Mutex`.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::api::holder::Holder;
use crate::api::lock::{Lock, LockAll};
use crate::base::cancel::Cancel;
use crate::base::error::{Error, Result};
use crate::base::limits::{MAX_TTL, MIN_KEEP_ALIVE_TTL};
use crate::base::thread::ThreadTag;

/// Fires its cancel handle when dropped, with the future that holds it.
struct FireOnDrop(Cancel);

impl Drop for FireOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// Runs `call` on tokio's blocking pool with a cancel handle that fires when the returned
/// future is dropped; `call` passes it to its fencelock wait.
async fn unblock<T: Send + 'static>(
    call: impl FnOnce(&Cancel) -> Result<T> + Send + 'static,
) -> Result<T> {
    let cancel = Cancel::new();
    cancel.set_thread(ThreadTag::fresh());
    let _fire = FireOnDrop(cancel.clone());
    match tokio::task::spawn_blocking(move || call(&cancel)).await {
        Ok(result) => result,
        Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
        // The runtime is shutting down and never ran the call: it changed nothing.
        Err(_) => Err(Error::Cancelled),
    }
}

/// The refusal of a cancel handle set on a builder whose async form is awaited.
fn no_cancel_handle() -> Error {
    Error::invalid(
        "an async acquire ends when its future is dropped; a cancel handle is for the blocking \
         acquire and try_acquire",
    )
}

impl<'a> Lock<'a> {
    /// [`Lock::acquire`] for async code: waits on tokio's blocking pool while the task awaits,
    /// and is cancelled by dropping the future (wrap it in `tokio::time::timeout` for a limit,
    /// or set [`Lock::timeout`]): the wait then ends within about a millisecond, changing
    /// nothing, and the lock is never granted by it. The future owns what it needs, so it can
    /// be spawned.
    ///
    /// # Errors
    ///
    /// As [`Lock::acquire`]; [`Error::InvalidArgument`] when a cancel handle was set
    /// ([`Lock::cancel`]): dropping the future is the async form's cancel.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// let held = store.lock("payment-export").try_acquire()?;
    /// let wait = store.lock("payment-export").acquire_async();
    /// // A timeout drops the future: the wait ends, and is never granted.
    /// assert!(tokio::time::timeout(Duration::from_millis(50), wait).await.is_err());
    /// drop(held);
    /// let holder = store.lock("payment-export").acquire_async().await?;
    /// assert_eq!(holder.name(), "payment-export");
    /// # Ok(()) }
    /// ```
    pub fn acquire_async(&self) -> impl Future<Output = Result<Holder>> + Send + 'static {
        self.grant_async(true)
    }

    /// [`Lock::try_acquire`] for async code: tries once on tokio's blocking pool (a grant
    /// commits to the store file, and may wait for a busy store), cancelled by dropping the
    /// future.
    ///
    /// # Errors
    ///
    /// As [`Lock::try_acquire`], and as [`Lock::acquire_async`] for a cancel handle.
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::Error;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let holder = store.lock("nightly").try_acquire_async().await?;
    /// let again = store.lock("nightly").try_acquire_async().await;
    /// assert!(matches!(again, Err(Error::Locked { token, .. }) if token == holder.token()));
    /// # Ok(()) }
    /// ```
    pub fn try_acquire_async(&self) -> impl Future<Output = Result<Holder>> + Send + 'static {
        self.grant_async(false)
    }

    fn grant_async(&self, wait: bool) -> impl Future<Output = Result<Holder>> + Send + 'static {
        let refused = self.settings.cancel.is_some();
        let store = self.store.clone();
        let name = self.name.to_owned();
        let write = self
            .write
            .map(|(key, value)| (key.to_vec(), value.to_vec()));
        let (kind, settings) = (self.kind, self.settings);
        let (ttl, timeout) = (settings.ttl, settings.timeout);
        async move {
            if refused {
                return Err(no_cancel_handle());
            }
            unblock(move |cancel| {
                let mut lock = store.lock(&name).kind(kind).ttl(ttl).cancel(cancel);
                if let Some(timeout) = timeout {
                    lock = lock.timeout(timeout);
                }
                if let Some((key, value)) = &write {
                    lock = lock.put(key, value);
                }
                if wait {
                    lock.acquire()
                } else {
                    lock.try_acquire()
                }
            })
            .await
        }
    }
}

impl<'a> LockAll<'a> {
    /// [`LockAll::acquire`] for async code, cancelled by dropping the future as
    /// [`Lock::acquire_async`] is.
    ///
    /// # Errors
    ///
    /// As [`LockAll::acquire`], and as [`Lock::acquire_async`] for a cancel handle.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let both = store.lock_all(&["a", "b"]).acquire_async().await?;
    /// assert_eq!(both.len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn acquire_async(&self) -> impl Future<Output = Result<Vec<Holder>>> + Send + 'static {
        self.grant_async(true)
    }

    /// [`LockAll::try_acquire`] for async code, cancelled by dropping the future.
    ///
    /// # Errors
    ///
    /// As [`LockAll::try_acquire`], and as [`Lock::acquire_async`] for a cancel handle.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let _b = store.lock("b").try_acquire()?;
    /// assert!(store.lock_all(&["a", "b"]).try_acquire_async().await.is_err());
    /// # Ok(()) }
    /// ```
    pub fn try_acquire_async(&self) -> impl Future<Output = Result<Vec<Holder>>> + Send + 'static {
        self.grant_async(false)
    }

    fn grant_async(
        &self,
        wait: bool,
    ) -> impl Future<Output = Result<Vec<Holder>>> + Send + 'static {
        let refused = self.settings.cancel.is_some();
        let store = self.store.clone();
        let names: Vec<String> = self.names.iter().map(|&name| name.to_owned()).collect();
        let (ttl, timeout) = (self.settings.ttl, self.settings.timeout);
        async move {
            if refused {
                return Err(no_cancel_handle());
            }
            unblock(move |cancel| {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                let mut lock = store.lock_all(&names).ttl(ttl).cancel(cancel);
                if let Some(timeout) = timeout {
                    lock = lock.timeout(timeout);
                }
                if wait {
                    lock.acquire()
                } else {
                    lock.try_acquire()
                }
            })
            .await
        }
    }
}

impl Holder {
    /// Resolves once the lease is known to be lost or released, as [`Holder::wait_lost`]
    /// tells: its TTL ran out without a renewal, an extend or write found it taken over, or it
    /// was released. The wait runs on tokio's blocking pool (it looks at its cancel every
    /// 10 ms); dropping the future ends it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let holder = store.lock("nightly").ttl(Duration::from_millis(50)).try_acquire()?;
    /// // Nothing renews the lease: it runs out.
    /// holder.wait_lost_async().await;
    /// assert!(holder.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn wait_lost_async(&self) -> impl Future<Output = ()> + Send + 'static {
        let lease = Arc::clone(self.lease());
        async move {
            let ended = unblock(move |cancel| lease.state().wait_lost(Duration::MAX, Some(cancel)));
            if ended.await.is_err() {
                // Never while the future is polled: only a runtime that is shutting down ends
                // the wait, and the lease was not seen lost.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Keeps the lease alive while the future is awaited (alone or as a branch of `select!`):
    /// renews it for `ttl` every third of `ttl`, and resolves once the lease ends: `Ok` when it
    /// was released, [`Error::LockLost`] when it was lost (an extend found it taken over, or
    /// it ran out while renewals failed). A renewal that fails for a passing reason (a busy
    /// store) is tried again at the next third. Dropping the future stops the renewals; the
    /// lease then lasts until its TTL runs out or it is released. Unlike
    /// [`Holder::keep_alive`], no thread is left behind.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] once the lease is lost; [`Error::Replaced`] when the store file was
    /// replaced; [`Error::InvalidArgument`] for a TTL outside [`crate::MIN_KEEP_ALIVE_TTL`] to
    /// [`crate::MAX_TTL`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let ttl = Duration::from_millis(300);
    /// let holder = store.lock("nightly").ttl(ttl).try_acquire()?;
    /// tokio::select! {
    ///     () = tokio::time::sleep(3 * ttl) => {} // long work
    ///     lost = holder.keep_alive_async(ttl) => panic!("lost: {lost:?}"),
    /// }
    /// assert!(holder.is_held()?);
    /// # Ok(()) }
    /// ```
    pub fn keep_alive_async(
        &self,
        ttl: Duration,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let lease = Arc::clone(self.lease());
        async move {
            if !(MIN_KEEP_ALIVE_TTL..=MAX_TTL).contains(&ttl) {
                return Err(Error::invalid(format!(
                    "keep-alive ttl {ttl:?} is outside {MIN_KEEP_ALIVE_TTL:?} to {MAX_TTL:?}"
                )));
            }
            loop {
                let state = lease.state();
                if state.released.load(Ordering::Acquire) {
                    return Ok(());
                }
                if state.is_lost() {
                    return Err(state.lost());
                }
                tokio::time::sleep(ttl / 3).await;
                if state.released.load(Ordering::Acquire) {
                    return Ok(());
                }
                let renewed = Arc::clone(&lease);
                match unblock(move |cancel| renewed.extend(ttl, Some(cancel))).await {
                    Ok(()) => {}
                    // Released meanwhile: the extend saw the end of a lease let go.
                    Err(_) if state.released.load(Ordering::Acquire) => return Ok(()),
                    Err(err @ (Error::LockLost { .. } | Error::Replaced(_))) => return Err(err),
                    // A passing failure: tried again at the next third, until the lease ran out.
                    Err(_) => {}
                }
            }
        }
    }
}
