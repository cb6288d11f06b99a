//! The async API, behind the cargo feature `tokio` (as fs4's `tokio` feature): awaitable forms
//! of the waits, [`Lock::acquire_async`], [`LockAll::acquire_async`],
//! [`Holder::wait_lost_async`] and [`Holder::keep_alive_async`], and of the election's,
//! [`Store::campaign_async`], [`Leadership::wait_lost_async`] and [`LeaderStream::next_change`], each
//! cancelled by dropping its future (a `tokio::time::timeout` running out, a `select!` taking
//! another branch, an aborted task).
//!
//! Mechanism: every blocking call runs on tokio's blocking pool with a [`Cancel`] of its own,
//! which a guard held by the future fires when the future is dropped; the engine's wait looks at
//! it at least once a millisecond (a wait for a lost lease every 10 ms), ends with
//! [`Error::Cancelled`] and changes nothing. A grant that raced the cancel is dropped with the
//! finished task's output, and dropping a [`Holder`] releases it. So no wait outlives its future
//! by more than a poll, and none is granted a lock after its future is gone. A campaign granted
//! as its future is dropped is resigned with the dropped [`Leadership`] (a term that began and
//! ended at once); one cancelled while it waits leaves nothing behind. A change an observer's
//! wait found as its future was dropped stays in its [`LeaderStream`] for the next call.
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

use parking_lot::Mutex;

use crate::api::election::{CampaignOptions, Leader, LeaderWatch, Leadership};
use crate::api::holder::Holder;
use crate::api::lock::{Lock, LockAll};
use crate::api::store::Store;
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

impl Lock<'_> {
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

impl LockAll<'_> {
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
                #[allow(clippy::match_same_arms)] // Each outcome with its reason.
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

impl Store {
    /// [`Store::campaign`] for async code: waits on tokio's blocking pool while the task
    /// awaits, and is cancelled by dropping the future (wrap it in `tokio::time::timeout`, or
    /// set `options.timeout`): a wait cancelled so ends within about a millisecond and leaves
    /// nothing behind; a campaign granted just as its future was dropped is resigned at once.
    /// The future owns what it needs, so it can be spawned.
    ///
    /// # Errors
    ///
    /// As [`Store::campaign`]; [`Error::InvalidArgument`] when `options.cancel` is set:
    /// dropping the future is the async form's cancel.
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::CampaignOptions;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let leadership = store
    ///     .campaign_async("scheduler", b"10.0.0.7:8080", &CampaignOptions::default())
    ///     .await?;
    /// assert_eq!(store.leader("scheduler")?.map(|l| l.term), Some(leadership.term()));
    /// # Ok(()) }
    /// ```
    pub fn campaign_async(
        &self,
        name: &str,
        value: &[u8],
        options: &CampaignOptions,
    ) -> impl Future<Output = Result<Leadership>> + Send + 'static {
        let (store, name, value) = (self.clone(), name.to_owned(), value.to_vec());
        let options = options.clone();
        async move {
            if options.cancel.is_some() {
                return Err(Error::invalid(
                    "an async campaign ends when its future is dropped; a cancel handle is for \
                     the blocking campaign",
                ));
            }
            unblock(move |cancel| {
                let options = CampaignOptions {
                    cancel: Some(cancel.clone()),
                    ..options
                };
                store.campaign(&name, &value, &options)
            })
            .await
        }
    }

    /// [`Store::observe_leader`] for async code: a [`LeaderStream`] of the changes of the
    /// election `name`, whose [`LeaderStream::next_change`] is awaited (the first read runs on tokio's
    /// blocking pool).
    ///
    /// # Errors
    ///
    /// As [`Store::observe_leader`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let mut leaders = store.observe_leader_async("scheduler").await?;
    /// let leadership = store.campaign_async("scheduler", b"a", &Default::default()).await?;
    /// assert_eq!(leaders.next_change().await?.term, leadership.term());
    /// # Ok(()) }
    /// ```
    pub fn observe_leader_async(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<LeaderStream>> + Send + 'static {
        let (store, name) = (self.clone(), name.to_owned());
        async move {
            let watch = unblock(move |_| store.observe_leader(&name)).await?;
            Ok(LeaderStream {
                watch: Arc::new(Mutex::new(watch)),
            })
        }
    }
}

impl Leadership {
    /// Resolves once the leadership ends for its holder, as [`Leadership::wait_lost`] tells
    /// (resigned, its lease lost, or less than the safety margin left on it). The wait runs
    /// on tokio's blocking pool (it looks at its cancel every 10 ms); dropping the future ends
    /// it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let leadership = store.campaign_async("scheduler", b"", &Default::default()).await?;
    /// let lost = leadership.wait_lost_async();
    /// leadership.holder().release()?; // as if the lease were lost
    /// lost.await;
    /// assert!(leadership.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn wait_lost_async(&self) -> impl Future<Output = ()> + Send + 'static {
        let wait = self.lost_waiter();
        async move {
            if unblock(move |cancel| wait(Duration::MAX, cancel))
                .await
                .is_err()
            {
                // Never while the future is polled: only a runtime that is shutting down ends
                // the wait, and the leadership was not seen ended.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// The changes of an election's leader for async code ([`Store::observe_leader_async`]): the
/// same changes as a [`LeaderWatch`] tells, one [`LeaderStream::next_change`] at a time.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
/// let mut leaders = store.observe_leader_async("scheduler").await?;
/// let quiet = tokio::time::timeout(Duration::from_millis(50), leaders.next_change()).await;
/// assert!(quiet.is_err(), "nobody leads");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LeaderStream {
    /// Shared with the blocking task of a pending `next`; a change it found stays here.
    watch: Arc<Mutex<LeaderWatch>>,
}

impl LeaderStream {
    /// The next change of the leader, as [`LeaderWatch::next_change`] tells them (the current
    /// leader first, if one leads; then each new term and proclaim in order), waiting as long
    /// as it takes: wrap it in `tokio::time::timeout` for a limit. The wait runs on tokio's
    /// blocking pool, woken by the change; dropping the future ends it, and a change it had
    /// found is told by the next call instead.
    ///
    /// # Errors
    ///
    /// As [`LeaderWatch::next_change`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let mut leaders = store.observe_leader_async("scheduler").await?;
    /// let leadership = store.campaign_async("scheduler", b"a", &Default::default()).await?;
    /// let first = leaders.next_change().await?;
    /// leadership.proclaim(b"a, ready")?;
    /// let second = leaders.next_change().await?;
    /// assert_eq!((first.term, second.term), (leadership.term(), leadership.term()));
    /// assert_eq!(second.value, b"a, ready");
    /// # Ok(()) }
    /// ```
    pub fn next_change(&mut self) -> impl Future<Output = Result<Leader>> + Send + 'static {
        let watch = Arc::clone(&self.watch);
        async move {
            loop {
                let filling = Arc::clone(&watch);
                unblock(move |cancel| filling.lock().fill(Duration::MAX, Some(cancel))).await?;
                // Taken here, in the poll that sees the wait end: a future dropped before it
                // leaves the change in the watch.
                if let Some(leader) = watch.lock().take_pending() {
                    return Ok(leader);
                }
            }
        }
    }
}
