//! The holder of a granted lease.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::backend::{on_etcd, Backend, RemoteLease};
use crate::base::cancel::Cancel;
use crate::base::clock;
use crate::base::error::{Error, Result};
use crate::rules::kind::Kind;
use crate::store::{Inner, Store};

/// A granted lease. Its [`token`](Holder::token) is higher than that of every earlier grant of
/// any lock of the store. Dropping the holder releases the lease.
///
/// A holder is `Send + Sync`: one thread may write while another extends or releases.
#[must_use = "dropping the holder releases the lock at once; keep it while the work runs"]
pub struct Holder {
    state: Backend<Arc<State>, RemoteLease>,
}

/// The end of a holder's lease, as its waiters see it.
struct Signal {
    ended: Mutex<bool>,
    changed: Condvar,
}

struct State {
    inner: Arc<Inner>,
    name: String,
    kind: Kind,
    token: u64,
    /// The liveness id whose lock this holder holds.
    live: u64,
    expires_ns: AtomicU64,
    /// When it was granted (about: when this process learned of the grant).
    granted_ns: u64,
    released: AtomicBool,
    /// Set once the lease is known to be lost or released; waited on by `wait_lost` and by the
    /// keep-alive thread, which holds it but not the state (see `keep_alive`).
    signal: Arc<Signal>,
    keeper: Mutex<Option<thread::JoinHandle<()>>>,
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
    pub(crate) fn new(
        inner: Arc<Inner>,
        name: String,
        kind: Kind,
        token: u64,
        live: u64,
        expires_ns: u64,
    ) -> Holder {
        Holder {
            state: Backend::Local(Arc::new(State {
                inner,
                name,
                kind,
                token,
                live,
                expires_ns: AtomicU64::new(expires_ns),
                granted_ns: clock::now_ns(),
                released: AtomicBool::new(false),
                signal: Arc::new(Signal {
                    ended: Mutex::new(false),
                    changed: Condvar::new(),
                }),
                keeper: Mutex::new(None),
            })),
        }
    }

    #[cfg(feature = "etcd")]
    pub(crate) fn etcd(lease: RemoteLease) -> Holder {
        Holder {
            state: Backend::Etcd(lease),
        }
    }

    /// The fencing token of this lease.
    #[must_use]
    pub fn token(&self) -> u64 {
        on_etcd!(self.state, lease => lease.token);
        self.state.token
    }

    /// The lock's name.
    #[must_use]
    pub fn name(&self) -> &str {
        on_etcd!(self.state, lease => &lease.name);
        &self.state.name
    }

    /// How the lease holds the name: exclusive, shared, or a permit of a semaphore.
    #[must_use]
    pub fn kind(&self) -> Kind {
        on_etcd!(self.state, _lease => Kind::Exclusive);
        self.state.kind
    }

    /// The store that granted the lease.
    #[must_use]
    pub fn store(&self) -> Store {
        on_etcd!(self.state, lease => Store { inner: Backend::Etcd(Arc::clone(&lease.remote)) });
        Store::local(Arc::clone(&self.state.inner))
    }

    /// Time left on the lease as this holder last set it; zero once it ran out. Whether another
    /// holder took over is answered by [`Holder::is_held`].
    #[must_use]
    pub fn remaining(&self) -> Duration {
        on_etcd!(self.state, lease => lease.remaining());
        Duration::from_nanos(
            self.state
                .expires_ns
                .load(Ordering::Acquire)
                .saturating_sub(clock::now_ns()),
        )
    }

    /// Renews the lease for `ttl` from now, only while this holder still owns it; otherwise
    /// [`Error::LockLost`].
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] when the lease expired, was taken over or was released;
    /// [`Error::InvalidArgument`] for a TTL out of range; [`Error::Timeout`] behind a process
    /// that holds the store past the busy timeout; storage errors as [`Store::acquire`].
    pub fn extend(&self, ttl: Duration) -> Result<()> {
        on_etcd!(self.state, lease => lease.extend(ttl));
        self.state.extend(ttl)
    }

    /// Whether this holder still holds the lease: not released, not expired, not taken over.
    /// Reads only; writes nothing.
    pub fn is_held(&self) -> Result<bool> {
        on_etcd!(self.state, lease => lease.is_held());
        if self.state.released.load(Ordering::Acquire) {
            return Ok(false);
        }
        self.state
            .inner
            .is_current(&self.state.name, self.state.token)
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
    /// otherwise as [`Store::put`].
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        on_etcd!(self.state, lease => lease.write(key, Some(value)).map(|_| ()));
        self.state.checked_write(key, Some(value)).map(|_| ())
    }

    /// Deletes `key` with this holder's token, checked like [`Holder::put`]. Returns whether the
    /// key held a value.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        on_etcd!(self.state, lease => lease.write(key, None));
        self.state.checked_write(key, None)
    }

    /// Releases the lease. Takes effect at once for every process, without an fsync. Idempotent;
    /// a stale holder's release never touches its successor's lease.
    ///
    /// # Errors
    ///
    /// [`Error::Forked`] in a child of `fork()` (the lease stays the parent's); [`Error::Io`]
    /// if the kernel refuses to drop the lock.
    pub fn release(&self) -> Result<()> {
        on_etcd!(self.state, lease => lease.release());
        // In a child of fork() the lease and the keep-alive thread belong to the parent: touch
        // neither (unlocking the shared open file would end the parent's lease).
        self.state.inner.check_fork()?;
        if self.state.released.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let state = &self.state;
        let lost = *state.signal.ended.lock();
        if let Err(err) = state.inner.release(&state.name, state.live, state.token) {
            state.released.store(false, Ordering::Release);
            return Err(err);
        }
        state
            .inner
            .released_lease(&state.name, state.kind, state.token, state.granted_ns, lost);
        // The keep-alive thread wakes and exits by itself. It is not joined: it may be waiting
        // for the write lock behind a paused process, and a release must not wait for that. A
        // renewal that lands after the release changes nothing, since the lease's liveness
        // lock is gone.
        self.state.end();
        drop(self.state.keeper.lock().take());
        Ok(())
    }

    /// Keeps the lease alive in a background thread: renews it for `ttl` every third of `ttl`
    /// until it is released or lost. Use [`Holder::wait_lost`] or [`Holder::is_lost`] to learn
    /// of a loss. Calling it again changes nothing.
    pub fn keep_alive(&self, ttl: Duration) -> Result<()> {
        on_etcd!(self.state, lease => lease.keep_alive(ttl));
        use crate::base::limits::{MAX_TTL, MIN_KEEP_ALIVE_TTL};
        if !(MIN_KEEP_ALIVE_TTL..=MAX_TTL).contains(&ttl) {
            return Err(Error::invalid(format!(
                "keep-alive ttl {ttl:?} is outside {MIN_KEEP_ALIVE_TTL:?} to {MAX_TTL:?}"
            )));
        }
        let mut keeper = self.state.keeper.lock();
        if keeper.is_some() || self.is_lost() {
            return Ok(());
        }
        // The thread holds the state only while it renews, so that the holder's drop (and,
        // for the last user of the store, the recording of its releases) does not wait for it.
        let state = Arc::downgrade(&self.state);
        let signal = Arc::clone(&self.state.signal);
        *keeper = Some(
            thread::Builder::new()
                .name(format!("fencelock-keepalive-{}", self.state.token))
                .spawn(move || State::keep_alive(&state, &signal, ttl))?,
        );
        Ok(())
    }

    /// Whether the lease is known to be lost or released: its TTL ran out without a renewal,
    /// an extend or write found it taken over, or it was released. Reads no storage.
    #[must_use]
    pub fn is_lost(&self) -> bool {
        on_etcd!(self.state, lease => lease.is_lost());
        *self.state.signal.ended.lock() || self.remaining().is_zero()
    }

    /// Blocks until the lease is known to be lost or released (as [`Holder::is_lost`] tells),
    /// or `timeout` passes. Returns whether it ended.
    #[must_use]
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        self.wait_lost_inner(timeout, None)
            .expect("a wait without a cancel handle is never cancelled")
    }

    /// Like [`Holder::wait_lost`], and ends within about 10 ms with [`Error::Cancelled`] once
    /// `cancel` fires (from any thread).
    pub fn wait_lost_cancellable(&self, timeout: Duration, cancel: &Cancel) -> Result<bool> {
        self.wait_lost_inner(timeout, Some(cancel))
    }

    fn wait_lost_inner(&self, timeout: Duration, cancel: Option<&Cancel>) -> Result<bool> {
        on_etcd!(self.state, lease => lease.wait_lost(timeout, cancel));
        let deadline =
            clock::now_ns().saturating_add(u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX));
        let mut ended = self.state.signal.ended.lock();
        loop {
            // A renewal moves the expiry on, so the wait is in slices up to the current one.
            let expires = self.state.expires_ns.load(Ordering::Acquire);
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
                slice = slice.min(crate::base::cancel::LOST_POLL);
            }
            let _ = self
                .state
                .signal
                .changed
                .wait_while_for(&mut ended, |ended| !*ended, slice);
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

impl Drop for State {
    fn drop(&mut self) {
        // The last user of a store, holders included, records its releases (history.rs).
        if self.inner.handles.load(Ordering::Acquire) == 0 && Arc::strong_count(&self.inner) == 1 {
            self.inner.record_releases();
        }
    }
}

impl State {
    fn end(&self) {
        *self.signal.ended.lock() = true;
        self.signal.changed.notify_all();
    }

    fn lost(&self) -> Error {
        Error::LockLost {
            token: self.token,
            current: None,
        }
    }

    /// Ends the holder as lost, and tells so once (unless it was released).
    fn lose(&self) {
        {
            let mut ended = self.signal.ended.lock();
            if *ended || self.released.load(Ordering::Acquire) {
                return;
            }
            *ended = true;
        }
        self.signal.changed.notify_all();
        self.inner
            .lost_lease(&self.name, self.kind, self.token, self.granted_ns);
    }

    fn note(&self, err: Error) -> Error {
        // A lease in a replaced store file no longer excludes anyone who opens the path.
        if matches!(err, Error::LockLost { .. } | Error::Replaced(_)) {
            self.lose();
        }
        err
    }

    fn extend(&self, ttl: Duration) -> Result<()> {
        if self.released.load(Ordering::Acquire) {
            return Err(self.lost());
        }
        let inner = &self.inner;
        match inner.counted(inner.extend(&self.name, self.token, ttl)) {
            Ok(expires_ns) => {
                self.expires_ns.store(expires_ns, Ordering::Release);
                Ok(())
            }
            Err(err) => Err(self.note(err)),
        }
    }

    fn checked_write(&self, key: &[u8], value: Option<&[u8]>) -> Result<bool> {
        if self.kind == Kind::Shared {
            return Err(Error::invalid(format!(
                "a shared holder of {} does not write: acquire it exclusively to write",
                self.name
            )));
        }
        if self.released.load(Ordering::Acquire) {
            return Err(self.lost());
        }
        self.inner
            .counted(self.inner.holder_put(&self.name, self.token, key, value))
            .map_err(|err| self.note(err))
    }

    fn keep_alive(state: &Weak<State>, signal: &Signal, ttl: Duration) {
        let period = ttl / 3;
        loop {
            {
                let mut ended = signal.ended.lock();
                let _ = signal
                    .changed
                    .wait_while_for(&mut ended, |ended| !*ended, period);
                if *ended {
                    return;
                }
            }
            // Gone with its holder.
            let Some(state) = state.upgrade() else {
                return;
            };
            match state.extend(ttl) {
                Ok(()) => {}
                Err(Error::LockLost { .. } | Error::Replaced(_)) => return,
                // A passing storage failure: try again until the lease runs out.
                Err(_) => {
                    if state.expires_ns.load(Ordering::Acquire) <= clock::now_ns() {
                        state.lose();
                        return;
                    }
                }
            }
        }
    }
}
