//! Fair waiting: the waiting acquires of one lock are granted in the order they began to wait,
//! across hosts, as etcd's own `concurrency.Mutex` grants them.
//!
//! - A waiting acquire that finds the lock taken joins the queue: it puts the waiter key
//!   `P/@/waiters/<name>\0<lease>` (records.rs) with the lease it will hold the lock with. The
//!   key's create revision is its place; no name holds a NUL, so a name's waiters are exactly
//!   the keys under `P/@/waiters/<name>\0`.
//! - Its grant is one transaction: the lock key absent and no waiter key of the name created
//!   before its own, then the lock key put with its lease and its waiter key deleted. Refused,
//!   it watches for the delete of the key just ahead of it: the waiter with the next lower
//!   create revision, or the lock key when none is ahead. The watch starts when it is made
//!   (which etcd answers at once) and the key is read once after that, in case it went in
//!   between (`EtcdEngine::wait_deleted`).
//! - A waiter whose lease ended (its process died, or was cut off past the TTL) loses its key
//!   with it, and the one behind it moves up. A wait that is cancelled or runs out revokes its
//!   lease, which deletes its key. While it waits its lease is kept alive every third of the
//!   TTL, and the grant renews it as a pooled lease is renewed (`pool.rs`).
//! - A grant that does not wait (or the first try of one that does) puts the lock key only while
//!   no waiter is queued, so that it never overtakes them.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse,
};
use tokio::sync::Notify;

use super::pool::secs_ns;
use super::records::{client_error, token};
use super::runtime::{self, block_for};
use super::{etcd_ttl, header_revision, EtcdEngine, EtcdLease, Granted};
use crate::base::cancel::Waiting;
use crate::base::clock;
use crate::base::error::{Error, Result};

impl EtcdEngine {
    /// The range of the waiter keys of `name`: `[start, end)`.
    pub(super) fn waiters(&self, name: &str) -> (Vec<u8>, Vec<u8>) {
        let mut start = self.key("waiters", name.as_bytes());
        start.push(0);
        let mut end = start.clone();
        *end.last_mut().expect("not empty") = 1;
        (start, end)
    }

    /// The compare of a grant that does not wait: no waiter of `name` is queued.
    pub(super) fn none_waiting(&self, name: &str) -> Compare {
        let (start, end) = self.waiters(name);
        Compare::version(start, CompareOp::Equal, 0).with_range(end)
    }

    /// Waits in the queue of `name` until it is this waiter's turn and the lock is free.
    pub(super) fn wait_in_queue(
        &self,
        name: &str,
        ttl: Duration,
        write: Option<(&[u8], &[u8])>,
        waiting: Waiting<'_>,
    ) -> Result<Arc<EtcdLease>> {
        let secs = etcd_ttl(ttl)?;
        let lease = match self.pool.take(secs) {
            Some(pooled) => pooled.id,
            None => {
                let mut client = self.client();
                block_for(self.timeout, async move {
                    EtcdEngine::new_lease(&mut client, ttl).await
                })?
                .0
            }
        };
        let stop = self.keep_waiting(lease, secs);
        let waited = self.wait_with(name, lease, secs, write, waiting);
        stop.notify_one();
        if waited.is_err() {
            // Leaves the queue: the lease's end deletes the waiter key.
            let mut client = self.client();
            let _ = block_for(self.timeout, async move {
                client.lease_revoke(lease).await.map_err(client_error)
            });
        }
        waited
    }

    fn wait_with(
        &self,
        name: &str,
        lease: i64,
        secs: i64,
        write: Option<(&[u8], &[u8])>,
        waiting: Waiting<'_>,
    ) -> Result<Arc<EtcdLease>> {
        let (start, end) = self.waiters(name);
        let mut me = start.clone();
        me.extend_from_slice(format!("{lease:016x}").as_bytes());
        let mut client = self.client();
        let key = me.clone();
        let joined = self.call(async move {
            let options = PutOptions::new().with_lease(lease);
            client.put(key, Vec::new(), Some(options)).await
        })?;
        let place = joined
            .header()
            .map_or(0, etcd_client::ResponseHeader::revision);
        let lock_key = self.lock_key(name);
        loop {
            waiting.step()?;
            let txn = Txn::new()
                .when([
                    self.none_held(name),
                    Compare::create_revision(start.clone(), CompareOp::Greater, place - 1)
                        .with_range(end.clone()),
                ])
                .and_then({
                    let mut then = self.grant_ops(lock_key.clone(), write, lease);
                    then.push(TxnOp::delete(me.clone(), None));
                    then
                })
                .or_else([
                    self.first_holder(name),
                    TxnOp::get(
                        start.clone(),
                        Some(
                            GetOptions::new()
                                .with_range(end.clone())
                                .with_max_create_revision(place - 1)
                                .with_sort(SortTarget::Create, SortOrder::Descend)
                                .with_limit(1),
                        ),
                    ),
                ]);
            let (mut client, mut keeper) = (self.client(), self.background());
            let asked_ns = clock::now_ns();
            let (renewed, response) = block_for(self.timeout, async move {
                Ok(tokio::join!(
                    keeper.lease_keep_alive(lease),
                    client.txn(txn)
                ))
            })?;
            let response = response.map_err(client_error)?;
            let stream = match renewed {
                Ok(stream) => stream,
                Err(etcd_client::Error::LeaseKeepAliveError(message))
                    if message == "lease not found" =>
                {
                    return Err(Error::Storage(
                        "etcd ended the lease of a waiting acquire before its turn".into(),
                    ));
                }
                Err(err) => return Err(client_error(err)),
            };
            let revision = header_revision(&response);
            if response.succeeded() {
                let granted = Granted {
                    token: token(revision),
                    lease,
                    ttl: secs,
                    asked_ns,
                    stream: Some(stream),
                };
                return Ok(self.holder(name, granted));
            }
            let ops = response.op_responses();
            let (holder, ahead) = (kv_of(ops.first()), kv_of(ops.get(1)));
            if let Some(token) = self.own_holder(name, holder.as_ref(), waiting)? {
                return Err(Error::WouldDeadlock {
                    name: name.to_owned(),
                    token,
                });
            }
            // The waiter just ahead; with none ahead, the holder key that refused the grant.
            let (watched, seen) = ahead.or(holder).map_or_else(
                || (lock_key.clone(), None),
                |kv| (kv.key().to_vec(), Some(kv.create_revision())),
            );
            self.wait_deleted(watched, None, (revision + 1, seen), waiting)?;
        }
    }

    /// Keeps the waiter's lease alive every third of its TTL until `notify_one` on the answer.
    fn keep_waiting(&self, lease: i64, secs: i64) -> Arc<Notify> {
        let stop = Arc::new(Notify::new());
        let stopped = Arc::clone(&stop);
        let mut client = self.background();
        let every = Duration::from_nanos(secs_ns(secs) / 3);
        let _ = runtime::spawn(async move {
            let renewing = async {
                let Ok((mut keeper, mut answers)) = client.lease_keep_alive(lease).await else {
                    return;
                };
                loop {
                    tokio::time::sleep(every).await;
                    if keeper.keep_alive().await.is_err() {
                        return;
                    }
                    match answers.message().await {
                        Ok(Some(answer)) if answer.ttl() > 0 => {}
                        _ => return,
                    }
                }
            };
            tokio::select! {
                () = stopped.notified() => {}
                () = renewing => {}
            }
        });
        stop
    }
}

/// The key-value pair a get of a transaction's branch read, if any.
fn kv_of(op: Option<&TxnOpResponse>) -> Option<KeyValue> {
    match op? {
        TxnOpResponse::Get(get) => get.kvs().first().cloned(),
        _ => None,
    }
}
