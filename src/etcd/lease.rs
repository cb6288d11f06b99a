//! A lease granted by an etcd store: the holder's side of an etcd lease that carries the lock
//! key. The lease, not this process, decides: etcd deletes the lock key when the lease ends,
//! and a keep-alive answered with TTL 0 says it has.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use parking_lot::{Condvar, Mutex};
use tokio::sync::Notify;

use super::records::{client_error, revision, LockRecord};
use super::runtime::{self, block_for};
use super::{etcd_ttl, first_kv, lost, Remote};
use crate::base::cancel::Cancel;
use crate::base::clock;
use crate::base::error::{Error, Result};
use crate::base::limits::duration_ns;

pub(crate) struct EtcdLease {
    pub(crate) remote: Arc<Remote>,
    pub(crate) name: String,
    pub(crate) token: u64,
    /// The etcd lease carrying the lock key; a new one after an extend to another TTL.
    lease: AtomicI64,
    /// Its TTL, in seconds.
    ttl: AtomicI64,
    expires_ns: AtomicU64,
    released: AtomicBool,
    /// Set once the lease is known to be lost or released.
    ended: Mutex<bool>,
    ended_changed: Condvar,
    /// Wakes the keep-alive task when the lease is released.
    stop: Arc<Notify>,
    keeping: AtomicBool,
}

impl EtcdLease {
    pub(crate) fn new(
        remote: Arc<Remote>,
        name: String,
        token: u64,
        lease: i64,
        ttl: i64,
        asked_ns: u64,
    ) -> Arc<EtcdLease> {
        Arc::new(EtcdLease {
            remote,
            name,
            token,
            lease: AtomicI64::new(lease),
            ttl: AtomicI64::new(ttl),
            expires_ns: AtomicU64::new(asked_ns.saturating_add(secs_ns(ttl))),
            released: AtomicBool::new(false),
            ended: Mutex::new(false),
            ended_changed: Condvar::new(),
            stop: Arc::new(Notify::new()),
            keeping: AtomicBool::new(false),
        })
    }

    fn end(&self) {
        *self.ended.lock() = true;
        self.ended_changed.notify_all();
        self.stop.notify_one();
    }

    fn note(&self, err: Error) -> Error {
        if matches!(err, Error::LockLost { .. }) {
            self.end();
        }
        err
    }

    fn released_error(&self) -> Error {
        Error::LockLost {
            token: self.token,
            current: None,
        }
    }

    pub(crate) fn remaining(&self) -> Duration {
        Duration::from_nanos(
            self.expires_ns
                .load(Ordering::Acquire)
                .saturating_sub(clock::now_ns()),
        )
    }

    /// Renews the lease for `ttl` from now. The same TTL as the lease's is one etcd keep-alive;
    /// another TTL moves the lock key onto a new lease of that TTL, in one transaction that
    /// checks the key is still this grant's (its create revision, the token, stays).
    pub(crate) fn extend(&self, ttl: Duration) -> Result<()> {
        let secs = etcd_ttl(ttl)?;
        if self.released.load(Ordering::Acquire) {
            return Err(self.released_error());
        }
        let result = if secs == self.ttl.load(Ordering::Acquire) {
            self.refresh()
        } else {
            self.move_to_new_lease(ttl)
        };
        result.map_err(|err| self.note(err))
    }

    /// One keep-alive of the current lease.
    fn refresh(&self) -> Result<()> {
        block_for(self.remote.timeout, self.refresh_async(&mut None))
    }

    /// One keep-alive of the current lease, on the stream in `stream` if it is the current
    /// lease's (else on a new one, left there for the next round).
    async fn refresh_async(&self, stream: &mut Option<KeepAlive>) -> Result<()> {
        let asked = clock::now_ns();
        let lease = self.lease.load(Ordering::Acquire);
        let ttl = match stream {
            Some((keeper, answers)) if keeper.id() == lease => {
                keeper.keep_alive().await.map_err(client_error)?;
                match answers.message().await.map_err(client_error)? {
                    Some(answer) => answer.ttl(),
                    None => return Err(Error::Storage("etcd closed the keep-alive stream".into())),
                }
            }
            // Opening the stream sends the first keep-alive and reads its answer.
            _ => match self.remote.client().lease_keep_alive(lease).await {
                Ok(opened) => {
                    *stream = Some(opened);
                    self.ttl.load(Ordering::Acquire)
                }
                Err(etcd_client::Error::LeaseKeepAliveError(message))
                    if message == "lease not found" =>
                {
                    0
                }
                Err(err) => return Err(client_error(err)),
            },
        };
        if ttl <= 0 {
            *stream = None;
            // A stream of a lease that an extend replaced meanwhile says nothing of this one.
            if self.lease.load(Ordering::Acquire) != lease {
                return Ok(());
            }
            return Err(lost(self.token, None));
        }
        self.expires_ns
            .store(asked.saturating_add(secs_ns(ttl)), Ordering::Release);
        Ok(())
    }

    fn move_to_new_lease(&self, ttl: Duration) -> Result<()> {
        let asked = clock::now_ns();
        let key = self.remote.lock_key(&self.name);
        let record = LockRecord::now().encode();
        let token = self.token;
        let old = self.lease.load(Ordering::Acquire);
        let mut client = self.remote.client();
        let (lease, secs) = block_for(self.remote.timeout, async move {
            let (lease, secs) = Remote::new_lease(&mut client, ttl).await?;
            let txn = Txn::new()
                .when([Compare::create_revision(
                    key.clone(),
                    CompareOp::Equal,
                    revision(token),
                )])
                .and_then([TxnOp::put(
                    key.clone(),
                    record,
                    Some(PutOptions::new().with_lease(lease)),
                )])
                .or_else([TxnOp::get(key, None)]);
            let response = client.txn(txn).await.map_err(client_error);
            match response {
                Ok(response) if response.succeeded() => {
                    let _ = client.lease_revoke(old).await;
                    Ok((lease, secs))
                }
                other => {
                    let _ = client.lease_revoke(lease).await;
                    let current = other?;
                    Err(lost(token, first_kv(&current.op_responses()).as_ref()))
                }
            }
        })?;
        self.lease.store(lease, Ordering::Release);
        self.ttl.store(secs, Ordering::Release);
        self.expires_ns
            .store(asked.saturating_add(secs_ns(secs)), Ordering::Release);
        Ok(())
    }

    pub(crate) fn is_held(&self) -> Result<bool> {
        if self.released.load(Ordering::Acquire) {
            return Ok(false);
        }
        let key = self.remote.lock_key(&self.name);
        let mut client = self.remote.client();
        let response = self
            .remote
            .call(async move { client.get(key, None).await })?;
        Ok(response
            .kvs()
            .first()
            .is_some_and(|kv| kv.create_revision() == revision(self.token)))
    }

    pub(crate) fn write(&self, key: &[u8], value: Option<&[u8]>) -> Result<bool> {
        if self.released.load(Ordering::Acquire) {
            return Err(self.released_error());
        }
        self.remote
            .holder_write(&self.name, self.token, key, value)
            .map_err(|err| self.note(err))
    }

    /// Revokes the etcd lease, which deletes the lock key at once if it is still this grant's.
    pub(crate) fn release(&self) -> Result<()> {
        if self.released.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let lease = self.lease.load(Ordering::Acquire);
        let mut client = self.remote.client();
        let revoked = block_for(self.remote.timeout, async move {
            match client.lease_revoke(lease).await {
                Ok(_) => Ok(()),
                // Ended already, at its TTL.
                Err(etcd_client::Error::GRpcStatus(status))
                    if status.code() == tonic::Code::NotFound =>
                {
                    Ok(())
                }
                Err(err) => Err(client_error(err)),
            }
        });
        if let Err(err) = revoked {
            self.released.store(false, Ordering::Release);
            return Err(err);
        }
        self.end();
        Ok(())
    }

    /// Keeps the lease alive on the shared runtime: a keep-alive every third of `ttl` until the
    /// lease is released or lost. A TTL other than the lease's is set by an extend first.
    pub(crate) fn keep_alive(self: &Arc<Self>, ttl: Duration) -> Result<()> {
        let secs = etcd_ttl(ttl)?;
        if self.is_lost() || self.keeping.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if secs != self.ttl.load(Ordering::Acquire) {
            if let Err(err) = self.extend(ttl) {
                self.keeping.store(false, Ordering::Release);
                return Err(err);
            }
        }
        // The task holds the lease weakly: a holder dropped without a successful release (the
        // cluster unreachable) stops being renewed, and its lease ends at its TTL.
        let weak = Arc::downgrade(self);
        let stop = Arc::clone(&self.stop);
        runtime::spawn(async move {
            let mut stream = None;
            loop {
                tokio::select! {
                    () = stop.notified() => return,
                    () = tokio::time::sleep(ttl / 3) => {}
                }
                let Some(state) = weak.upgrade() else {
                    return;
                };
                if *state.ended.lock() {
                    return;
                }
                let renewed =
                    tokio::time::timeout(state.remote.timeout, state.refresh_async(&mut stream))
                        .await;
                match renewed {
                    Ok(Ok(())) => {}
                    Ok(Err(Error::LockLost { .. })) => {
                        state.end();
                        return;
                    }
                    // A passing failure: try again, on a new stream, until the lease runs out.
                    _ => {
                        stream = None;
                        if state.remaining().is_zero() {
                            state.end();
                            return;
                        }
                    }
                }
            }
        })?;
        Ok(())
    }

    pub(crate) fn is_lost(&self) -> bool {
        *self.ended.lock() || self.remaining().is_zero()
    }

    pub(crate) fn wait_lost(&self, timeout: Duration, cancel: Option<&Cancel>) -> Result<bool> {
        let deadline = clock::now_ns().saturating_add(duration_ns(timeout));
        let mut ended = self.ended.lock();
        loop {
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
                slice = slice.min(crate::base::cancel::LOST_POLL);
            }
            let _ = self
                .ended_changed
                .wait_while_for(&mut ended, |ended| !*ended, slice);
        }
    }
}

type KeepAlive = (etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream);

fn secs_ns(secs: i64) -> u64 {
    u64::try_from(secs)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
}
