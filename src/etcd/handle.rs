//! A lease granted by an etcd store: the holder's side of an etcd lease that carries the lock
//! key. The lease, not this process, decides: etcd deletes the lock key when the lease ends,
//! and a keep-alive answered with TTL 0 says it has.
//!
//! The holder learns of a loss before anyone else can be granted the lock: it counts its lease
//! from when the grant, keep-alive or extend that set it was *sent* (plus the TTL that request
//! was granted, minus [`margin`]), never from when the answer came. etcd counts the same lease
//! from when it handled the request, which is later, so etcd's expiry, and with it every later
//! grant of the lock, comes after the holder's. An answer late or never (a partition) therefore
//! moves nothing: the lease ends on this side at its deadline, the keep-alive task ends it
//! there even while a renewal is still unanswered, and a lease known to be lost stays lost.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::pool::{secs_ns, Pooled};
use super::records::{client_error, holder_token, revision, LockRecord};
use super::runtime::{self, block_for};
use super::{etcd_ttl, first_kv, lost, EtcdEngine};
use crate::base::cancel::Cancel;
use crate::base::clock;
use crate::base::error::{Error, Result};
use crate::engine::{Engine, LeaseHandle, LeaseState};
use crate::rules::kind::Kind;

/// What a grant gave one holder: the lock, its kind, the key it holds and its token.
pub(crate) struct Grantee {
    pub(crate) name: String,
    pub(crate) kind: Kind,
    /// The holder key: `P/@/lock/<name>`, or a permit's key (records.rs).
    pub(crate) key: Vec<u8>,
    pub(crate) token: u64,
    /// The revision that created the key: the token, but for the later locks of an
    /// `acquire_all`, whose keys its first revision created (records.rs).
    pub(crate) created: i64,
}

pub(crate) struct EtcdLease {
    remote: Arc<EtcdEngine>,
    state: LeaseState,
    /// The holder key and the revision that created it, which every check of this grant
    /// compares.
    key: Vec<u8>,
    created: i64,
    /// The etcd lease carrying the lock key; a new one after an extend to another TTL.
    lease: AtomicI64,
    /// Its TTL, in seconds.
    ttl: AtomicI64,
    /// Wakes the keep-alive task when the lease is released.
    stop: Arc<Notify>,
    keeping: AtomicBool,
    /// The keep-alive stream the grant renewed a pooled lease on, for the keep-alive task.
    stream: Mutex<Option<KeepAlive>>,
}

impl EtcdLease {
    pub(crate) fn new(
        remote: Arc<EtcdEngine>,
        grantee: Grantee,
        (lease, ttl): (i64, i64),
        asked_ns: u64,
        stream: Option<KeepAlive>,
    ) -> Arc<EtcdLease> {
        let token = grantee.token;
        Arc::new(EtcdLease {
            remote,
            state: LeaseState::new(grantee.name, grantee.kind, token, deadline(asked_ns, ttl)),
            key: grantee.key,
            created: grantee.created,
            lease: AtomicI64::new(lease),
            ttl: AtomicI64::new(ttl),
            stop: Arc::new(Notify::new()),
            keeping: AtomicBool::new(false),
            stream: Mutex::new(stream),
        })
    }

    /// The refusal of an extend or write once this holder's own clock says the lease ran out:
    /// a lease known to be lost stays lost, although etcd may not have ended it yet (etcd's
    /// lease runs from after this holder's clock started, and etcd looks twice a second).
    /// `current` names the holder that took the lock over, if one did.
    fn lost_now(&self) -> Error {
        let key = self.key.clone();
        let mut client = self.remote.client();
        let current = self
            .remote
            .call(async move { client.get(key, None).await })
            .ok()
            .and_then(|response| response.kvs().first().map(holder_token));
        self.note(Error::LockLost {
            token: self.state.token,
            current: current.filter(|&token| token != self.state.token),
        })
    }

    fn end(&self) {
        self.state.signal.end();
        self.stop.notify_one();
    }

    fn note(&self, err: Error) -> Error {
        if matches!(err, Error::LockLost { .. }) {
            self.end();
        }
        err
    }

    /// Renews the lease for `ttl` from now. The same TTL as the lease's is one etcd keep-alive;
    /// another TTL moves the lock key onto a new lease of that TTL, in one transaction that
    /// checks the key is still this grant's (its create revision, the token, stays).
    fn extend_now(&self, ttl: Duration, cancel: Option<&Cancel>) -> Result<()> {
        let secs = etcd_ttl(ttl)?;
        if self.state.released.load(Ordering::Acquire) {
            return Err(self.state.lost());
        }
        if self.state.is_lost() {
            return Err(self.lost_now());
        }
        let result = if secs == self.ttl.load(Ordering::Acquire) {
            self.refresh(cancel)
        } else {
            self.move_to_new_lease(ttl, cancel)
        };
        result.map_err(|err| self.note(err))
    }

    /// One keep-alive of the current lease, bounded by `cancel` ([`EtcdEngine::bounded`]).
    fn refresh(&self, cancel: Option<&Cancel>) -> Result<()> {
        self.remote.bounded(cancel, self.refresh_async(&mut None))
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
            _ => match self.remote.background().lease_keep_alive(lease).await {
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
            return Err(lost(self.state.token, None));
        }
        self.state
            .expires_ns
            .store(deadline(asked, ttl), Ordering::Release);
        Ok(())
    }

    fn move_to_new_lease(&self, ttl: Duration, cancel: Option<&Cancel>) -> Result<()> {
        let asked = clock::now_ns();
        let key = self.key.clone();
        let token = self.state.token;
        let created = self.created;
        // A token that is not the key's create revision stays written in the record.
        let record = if revision(token) == created {
            LockRecord::now()
        } else {
            LockRecord::with_token(token.to_be_bytes())
        }
        .encode();
        let old = self.lease.load(Ordering::Acquire);
        let mut client = self.remote.client();
        let (lease, secs) = self.remote.bounded(cancel, async move {
            let (lease, secs) = EtcdEngine::new_lease(&mut client, ttl).await?;
            let txn = Txn::new()
                .when([Compare::create_revision(
                    key.clone(),
                    CompareOp::Equal,
                    created,
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
        self.state
            .expires_ns
            .store(deadline(asked, secs), Ordering::Release);
        Ok(())
    }

    fn is_held_now(&self) -> Result<bool> {
        if self.state.released.load(Ordering::Acquire) {
            return Ok(false);
        }
        let key = self.key.clone();
        let mut client = self.remote.client();
        let response = self
            .remote
            .call(async move { client.get(key, None).await })?;
        Ok(response
            .kvs()
            .first()
            .is_some_and(|kv| kv.create_revision() == self.created))
    }

    fn write_now(&self, key: &[u8], value: Option<&[u8]>, cancel: Option<&Cancel>) -> Result<bool> {
        if self.state.kind == Kind::Shared {
            return Err(Error::invalid(format!(
                "a shared holder of {} does not write: acquire it exclusively to write",
                self.state.name
            )));
        }
        if self.state.released.load(Ordering::Acquire) {
            return Err(self.state.lost());
        }
        if self.state.is_lost() {
            self.remote.check_write(key, value)?;
            return Err(self.lost_now());
        }
        self.remote
            .holder_write(
                &self.key,
                self.created,
                self.state.token,
                key,
                value,
                cancel,
            )
            .map_err(|err| self.note(err))
    }

    /// Deletes the lock key while it is still this grant's, in one transaction, and gives the
    /// etcd lease, which then carries nothing, back to the engine's pool (`pool.rs`).
    /// [`Error::LockLost`] when the lease was lost before: known lost, run out by this holder's
    /// clock (a lease known to be lost stays lost, as for an extend), or ended in etcd already.
    fn release_now(&self) -> Result<()> {
        if self.state.released.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let known_lost = self.state.is_lost();
        let lease = self.lease.load(Ordering::Acquire);
        let secs = self.ttl.load(Ordering::Acquire);
        let key = self.key.clone();
        let txn = Txn::new()
            .when([Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                self.created,
            )])
            .and_then([TxnOp::delete(key, None)]);
        let mut client = self.remote.client();
        let deleted = block_for(self.remote.timeout, async move {
            let response = client.txn(txn).await.map_err(client_error)?;
            Ok(response.succeeded())
        });
        let lost = match deleted {
            Ok(deleted) => known_lost || !deleted,
            Err(err) => {
                self.state.released.store(false, Ordering::Release);
                return Err(err);
            }
        };
        let pooled = Pooled {
            id: lease,
            secs,
            asked_ns: asked_at(self.state.expires_ns.load(Ordering::Acquire), secs),
        };
        if lost {
            self.remote.pool.discard(pooled);
        } else {
            self.remote.pool.put_back(pooled);
        }
        self.remote.holds.let_go(self.state.token);
        let refusal = lost.then(|| self.lost_now());
        self.end();
        refusal.map_or(Ok(()), Err)
    }

    /// Keeps the lease alive on the background runtime (`runtime.rs`): a keep-alive every third
    /// of `ttl` until the lease is released or lost. A TTL other than the lease's is set by an
    /// extend first.
    fn keep_alive_now(self: Arc<Self>, ttl: Duration) -> Result<()> {
        let secs = etcd_ttl(ttl)?;
        if self.state.is_lost() || self.keeping.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if secs != self.ttl.load(Ordering::Acquire) {
            if let Err(err) = self.extend_now(ttl, None) {
                self.keeping.store(false, Ordering::Release);
                return Err(err);
            }
        }
        // The task holds the lease weakly: a holder dropped without a successful release (the
        // cluster unreachable) stops being renewed, and its lease ends at its TTL.
        let weak = Arc::downgrade(&self);
        let stop = Arc::clone(&self.stop);
        let mut stream = self.stream.lock().take();
        runtime::spawn(async move {
            loop {
                tokio::select! {
                    () = stop.notified() => return,
                    () = tokio::time::sleep(ttl / 3) => {}
                }
                let Some(state) = weak.upgrade() else {
                    return;
                };
                if state.state.is_lost() {
                    state.end();
                    return;
                }
                // Waited for until the lease's deadline at most: an answer after it moves
                // nothing, so the lease ends on this side then, answered or not.
                let left = state.state.remaining();
                let renewed = tokio::time::timeout(
                    state.remote.timeout.min(left),
                    state.refresh_async(&mut stream),
                )
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
                        if state.state.remaining().is_zero() {
                            state.end();
                            return;
                        }
                    }
                }
            }
        })?;
        Ok(())
    }
}

impl Drop for EtcdLease {
    fn drop(&mut self) {
        self.remote.holds.let_go(self.state.token);
    }
}

pub(crate) type KeepAlive = (etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream);

/// How much sooner than etcd a holder ends its lease, beyond counting from the request's send:
/// 100 ms for the holder to act on the loss, and a thousandth of the TTL for a clock of
/// etcd's that runs faster than this host's.
fn margin(secs: i64) -> u64 {
    100_000_000 + secs_ns(secs) / 1000
}

/// When a lease of `secs` asked for or renewed at `asked_ns` ends on the holder's side.
fn deadline(asked_ns: u64, secs: i64) -> u64 {
    asked_ns
        .saturating_add(secs_ns(secs))
        .saturating_sub(margin(secs))
}

/// When a lease of `secs` whose holder's side ends at `deadline_ns` was last asked for or
/// renewed: [`deadline`] undone, so that a released lease goes back to the pool as old as it
/// is, and not a margin older at each grant (it was then renewed every few grants, each time
/// on a keep-alive stream of its own).
fn asked_at(deadline_ns: u64, secs: i64) -> u64 {
    deadline_ns
        .saturating_add(margin(secs))
        .saturating_sub(secs_ns(secs))
}

impl LeaseHandle for EtcdLease {
    fn state(&self) -> &LeaseState {
        &self.state
    }

    fn engine(&self) -> Arc<dyn Engine> {
        Arc::clone(&self.remote) as Arc<dyn Engine>
    }

    fn extend(&self, ttl: Duration, cancel: Option<&Cancel>) -> Result<()> {
        self.extend_now(ttl, cancel)
    }

    fn is_held(&self) -> Result<bool> {
        self.is_held_now()
    }

    fn write(&self, key: &[u8], value: Option<&[u8]>, cancel: Option<&Cancel>) -> Result<bool> {
        self.write_now(key, value, cancel)
    }

    fn release(&self) -> Result<()> {
        self.release_now()
    }

    fn keep_alive(self: Arc<Self>, ttl: Duration) -> Result<()> {
        self.keep_alive_now(ttl)
    }
}

#[cfg(test)]
mod tests {
    use super::{asked_at, deadline};

    #[test]
    fn a_released_lease_goes_back_to_the_pool_as_old_as_it_is() {
        for secs in [2, 30, 3600] {
            let asked = 5_000_000_000_000;
            assert_eq!(asked_at(deadline(asked, secs), secs), asked);
        }
    }
}
