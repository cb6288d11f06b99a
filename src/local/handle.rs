//! A lease a local store granted: its liveness lock, extending, releasing, a holder's checked
//! write, whether it is still current, and waiting for a holder to let go. The rules it
//! follows are in `rules/admit.rs`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread;
use std::time::Duration;

use parking_lot::Mutex;

use crate::base::cancel::Cancel;
use crate::base::clock;
use crate::base::error::{Error, Result};
use crate::base::limits::{check_key, check_ttl, MAX_TTL, MIN_KEEP_ALIVE_TTL};
use crate::engine::{Engine, LeaseHandle, LeaseState, Signal};
use crate::local::LocalEngine;
use crate::rules::admit::{check_current, is_live};
use crate::rules::kind::Kind;
use crate::rules::ops::{unexpected, Done, Op};

/// How often a waiting acquire tests whether the holder of another process let go.
const WAIT_POLL: Duration = Duration::from_millis(1);

pub(crate) struct LocalLease {
    inner: Arc<LocalEngine>,
    pub(crate) state: LeaseState,
    /// The liveness id whose lock this holder holds.
    live: u64,
    /// When it was granted (about: when this process learned of the grant).
    granted_ns: u64,
    keeper: Mutex<Option<thread::JoinHandle<()>>>,
}

impl LocalLease {
    pub(crate) fn new(
        inner: Arc<LocalEngine>,
        name: String,
        kind: Kind,
        token: u64,
        live: u64,
        expires_ns: u64,
    ) -> Arc<LocalLease> {
        Arc::new(LocalLease {
            inner,
            state: LeaseState::new(name, kind, token, expires_ns),
            live,
            granted_ns: clock::now_ns(),
            keeper: Mutex::new(None),
        })
    }

    /// Ends the lease as lost, and tells so once (unless it was released).
    fn lose(&self) {
        if !self.state.released.load(Ordering::Acquire) {
            self.end_lost();
        }
    }

    /// Ends the lease as lost and tells so, unless it had ended before.
    fn end_lost(&self) {
        {
            let mut ended = self.state.signal.ended.lock();
            if *ended {
                return;
            }
            *ended = true;
        }
        self.state.signal.changed.notify_all();
        let state = &self.state;
        self.inner
            .counters
            .lost_lease(&state.name, state.kind, state.token, self.granted_ns);
    }

    /// What a release reports of a lease lost before it: `None` while the lease is current;
    /// [`Error::LockLost`] once it is known lost, or ran out by this holder's clock and the
    /// store agrees (a keep-alive's renewal may land as the holder's clock passes the old
    /// expiry). Reads the store only when the holder's own state says the lease may be lost.
    fn lost_before_release(&self) -> Option<Error> {
        let state = &self.state;
        if !state.is_lost() {
            return None;
        }
        // It ran out by the holder's clock, and a lease known to be lost stays lost.
        let Ok(record) = self.inner.lease_of(&state.name) else {
            return Some(state.lost());
        };
        match check_current(&*self.inner, record.as_ref(), state.token, clock::now_ns()) {
            Ok(_) if !state.signal.is_ended() => None,
            Ok(_) => Some(state.lost()),
            Err(err) => Some(err),
        }
    }

    fn note(&self, err: Error) -> Error {
        // A lease in a replaced store file no longer excludes anyone who opens the path.
        if matches!(err, Error::LockLost { .. } | Error::Replaced(_)) {
            self.lose();
        }
        err
    }

    fn renew(state: &Weak<LocalLease>, signal: &Signal, ttl: Duration) {
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
            let Some(lease) = state.upgrade() else {
                return;
            };
            match lease.extend(ttl, None) {
                Ok(()) => {}
                Err(Error::LockLost { .. } | Error::Replaced(_)) => return,
                // A passing storage failure: try again until the lease runs out.
                Err(_) => {
                    if lease.state.expires_ns.load(Ordering::Acquire) <= clock::now_ns() {
                        lease.lose();
                        return;
                    }
                }
            }
        }
    }
}

impl LeaseHandle for LocalLease {
    fn state(&self) -> &LeaseState {
        &self.state
    }

    fn engine(&self) -> Arc<dyn Engine> {
        Arc::clone(&self.inner) as Arc<dyn Engine>
    }

    fn extend(&self, ttl: Duration, cancel: Option<&Cancel>) -> Result<()> {
        if self.state.released.load(Ordering::Acquire) {
            return Err(self.state.lost());
        }
        let inner = &self.inner;
        match inner
            .counters
            .counted(inner.extend(&self.state.name, self.state.token, ttl, cancel))
        {
            Ok(expires_ns) => {
                self.state.expires_ns.store(expires_ns, Ordering::Release);
                Ok(())
            }
            Err(err) => Err(self.note(err)),
        }
    }

    fn is_held(&self) -> Result<bool> {
        if self.state.released.load(Ordering::Acquire) {
            return Ok(false);
        }
        self.inner.is_current(&self.state.name, self.state.token)
    }

    fn write(&self, key: &[u8], value: Option<&[u8]>, cancel: Option<&Cancel>) -> Result<bool> {
        let state = &self.state;
        if state.kind == Kind::Shared {
            return Err(Error::invalid(format!(
                "a shared holder of {} does not write: acquire it exclusively to write",
                state.name
            )));
        }
        if state.released.load(Ordering::Acquire) {
            return Err(state.lost());
        }
        self.inner
            .counters
            .counted(
                self.inner
                    .holder_put(&state.name, state.token, key, value, cancel),
            )
            .map_err(|err| self.note(err))
    }

    fn release(&self) -> Result<()> {
        // In a child of fork() the lease and the keep-alive thread belong to the parent: touch
        // neither (unlocking the shared open file would end the parent's lease).
        self.inner.check_fork()?;
        let state = &self.state;
        if state.released.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // Judged before the liveness lock is let go, which would end a current lease too.
        let lost = self.lost_before_release();
        if let Err(err) = self.inner.release(&state.name, self.live, state.token) {
            state.released.store(false, Ordering::Release);
            return Err(err);
        }
        self.inner.holds.let_go(state.token);
        if lost.is_some() {
            self.end_lost();
        }
        self.inner.counters.released_lease(
            &state.name,
            state.kind,
            state.token,
            self.granted_ns,
            lost.is_some(),
        );
        // The keep-alive thread wakes and exits by itself. It is not joined: it may be waiting
        // for the write lock behind a paused process, and a release must not wait for that. A
        // renewal that lands after the release changes nothing, since the lease's liveness
        // lock is gone.
        state.signal.end();
        drop(self.keeper.lock().take());
        // Let go of as ever; but a lease kept in shared memory cut short was lost with it.
        self.inner.lease_map.map_intact()?;
        lost.map_or(Ok(()), Err)
    }

    fn keep_alive(self: Arc<Self>, ttl: Duration) -> Result<()> {
        if !(MIN_KEEP_ALIVE_TTL..=MAX_TTL).contains(&ttl) {
            return Err(Error::invalid(format!(
                "keep-alive ttl {ttl:?} is outside {MIN_KEEP_ALIVE_TTL:?} to {MAX_TTL:?}"
            )));
        }
        let mut keeper = self.keeper.lock();
        if keeper.is_some() || self.state.is_lost() {
            return Ok(());
        }
        // The thread holds the lease only while it renews, so that the holder's drop (and,
        // for the last user of the store, the recording of its releases) does not wait for it.
        let lease = Arc::downgrade(&self);
        let signal = Arc::clone(&self.state.signal);
        *keeper = Some(
            thread::Builder::new()
                .name(format!("fencelock-keepalive-{}", self.state.token))
                .spawn(move || LocalLease::renew(&lease, &signal, ttl))?,
        );
        Ok(())
    }
}

impl Drop for LocalLease {
    fn drop(&mut self) {
        self.inner.holds.let_go(self.state.token);
        // The last user of a store, holders included, records its releases (`local/history.rs`),
        // once a background checkpoint of the log ends.
        if self.inner.handles.load(Ordering::Acquire) == 0 {
            if let Some(user) = self.inner.log.get() {
                user.finish_background();
            }
        }
        if self.inner.handles.load(Ordering::Acquire) == 0 && Arc::strong_count(&self.inner) == 1 {
            self.inner.record_releases();
        }
    }
}

impl LocalEngine {
    /// Waits until the liveness lock `live` is free or `until` (boot-time ns) passes;
    /// [`Error::Cancelled`] once `cancel` fires.
    pub(crate) fn wait_until_free(
        &self,
        live: u64,
        until: u64,
        cancel: Option<&Cancel>,
    ) -> Result<()> {
        self.released.wait_while(|| {
            crate::base::cancel::check(cancel)?;
            if !self.live.is_held(live)? {
                return Ok(None);
            }
            let now = clock::now_ns();
            if now >= until {
                return Ok(None);
            }
            Ok(Some(WAIT_POLL.min(Duration::from_nanos(until - now))))
        })
    }

    /// Ends this process's hold of the lease of `name` whose liveness id is `live`, and wakes
    /// the lock's oldest waiter. No write: the record is cleared lazily. The caller has checked
    /// that this is not a child of `fork()`.
    fn release(&self, name: &str, live: u64, token: u64) -> Result<()> {
        // Noted before the lock is let go, so that the grant it lets in knows of it.
        let activity = self.counters.activity();
        self.history.note_release(activity, name, token);
        if let Err(err) = self.live.unlock(live) {
            self.history.unnote_release(activity, token);
            return Err(err.into());
        }
        self.released.tell();
        self.router.wake_waiter(name, &self.live);
        Ok(())
    }

    /// Sets a new expiry for the lease `token` of `name`, if it is still current.
    fn extend(
        &self,
        name: &str,
        token: u64,
        ttl: Duration,
        cancel: Option<&Cancel>,
    ) -> Result<u64> {
        check_ttl(ttl)?;
        if let Some(member) = self.lease_map.member() {
            crate::base::cancel::check(cancel)?;
            if self.read_only {
                return Err(crate::storage::db::read_only());
            }
            self.check_fork()?;
            self.check_file()?;
            let extended = self.lease_map.extend_in_map(self, member, name, token, ttl);
            self.router.make_way(self);
            return extended;
        }
        let op = Op::Extend {
            name: name.to_owned(),
            token,
            ttl,
        };
        match self.router.submit(self, op, Some(self.bounded(cancel)))? {
            Done::Extended { expires_ns } => Ok(expires_ns),
            other => Err(unexpected(&other)),
        }
    }

    /// Whether the lease `token` of `name` is current, from a read transaction (no write).
    fn is_current(&self, name: &str, token: u64) -> Result<bool> {
        // A lease in a file that the path no longer names excludes nobody who opens the path.
        if self.check_file().is_err() {
            return Ok(false);
        }
        match self.lease_of(name)? {
            Some(record) => match record.holder(token) {
                Some(lease) => is_live(self, lease, clock::now_ns()),
                None => Ok(false),
            },
            None => Ok(false),
        }
    }

    /// Writes `value` under `key` with `token`, checking in the same transaction that the lease
    /// `token` of `name` is still current.
    fn holder_put(
        &self,
        name: &str,
        token: u64,
        key: &[u8],
        value: Option<&[u8]>,
        cancel: Option<&Cancel>,
    ) -> Result<bool> {
        check_key(key)?;
        if let Some(value) = value {
            self.check_value(value)?;
        }
        if let Some(user) = self.log.get() {
            crate::base::cancel::check(cancel)?;
            return user.put(self, key, value, token, Some(name), self.bounded(cancel));
        }
        let op = Op::Put {
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
            token,
            lease: Some(name.to_owned()),
        };
        match self.router.submit(self, op, Some(self.bounded(cancel)))? {
            Done::Put { existed } => Ok(existed),
            other => Err(unexpected(&other)),
        }
    }
}
