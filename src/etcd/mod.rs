//! The store on an etcd v3 cluster: the same [`Store`] and [`Holder`] as on a local file, on
//! etcd's leases, revisions and transactions (`records.rs` lists the keys).
//!
//! - A grant is one transaction that finds the lock key absent and puts it with an etcd
//!   lease of the TTL; the token is that transaction's revision (the key's create revision):
//!   strictly increasing across the cluster, never reused.
//! - A fenced write is one transaction that compares the key's recorded token with the
//!   writer's; a holder's write compares, in the same transaction, the lock key's create
//!   revision with the holder's token. An acquire-and-put is the grant's transaction.
//! - A semaphore's permits and a lock's shared holders are keys of their own under the name,
//!   and an `acquire_all` is one transaction for every lock, whose later locks then take tokens
//!   of their own (`kinds.rs`). Every grant compares the range of the name's holder keys, so
//!   the kinds exclude each other.
//! - A waiting acquire queues behind the earlier ones, as etcd's `concurrency.Mutex` does
//!   (`queue.rs`), and watches for the delete of the key just ahead of it; extend and
//!   keep-alive are etcd keep-alives, and a keep-alive answered with TTL 0 tells the holder its
//!   lease is lost.
//!
//! Every call is refused or applied as a whole: the checks are compares of the transaction that
//! writes. An answer lost with the connection leaves the outcome unknown, as on any network
//! store: a retried write with the same token is safe, a retried grant takes a new token.
//!
//! Layer 6: an engine ([`crate::engine::Engine`]) beside the local one. Imports the base, the
//! rules and the engine layer; nothing of the local engine.

mod handle;
mod kinds;
mod pool;
mod queue;
mod records;
mod runtime;
pub(crate) mod url;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, KeyValue, PutOptions, Txn,
    TxnOp, TxnOpResponse, TxnResponse, WatchFilterType, WatchOptions, WatchStream,
};

use crate::base::cancel::{Cancel, Waiting};
use crate::base::clock;
use crate::base::error::{io_error, Error, Result};
use crate::base::limits::{
    check_granted, check_key, check_name, check_token, MAX_NAME_LEN, MAX_TTL, MAX_VALUE_LEN_LIMIT,
};
use crate::engine::holds::Holds;
use crate::engine::options::{Mode, Options};
use crate::engine::{Acquire, Engine, LeaseHandle, Locks};
use crate::rules::info::{Fenced, LockInfo, LockState, StoreInfo};
use crate::rules::kind::Kind;
use crate::rules::tokens::admit;
use records::{
    client_error, decode_fence, decode_value, encode_value, holder_token, revision, token,
    LockRecord,
};
use runtime::{block_for, Conn};

pub(crate) use handle::EtcdLease;
use handle::Grantee;
use handle::KeepAlive;
use pool::{Pool, Pooled};

/// How often an etcd connection with open streams is pinged: twice etcd's default
/// `--grpc-keepalive-min-time` of 5 s, the least it accepts before it closes the connection.
const KEEP_ALIVE_PING: Duration = Duration::from_secs(10);

/// The shortest TTL etcd keeps as asked: with its default timing (100 ms heartbeat, 1 s
/// election timeout) etcd raises every lease below 1.5 s, and TTLs are whole seconds.
pub const ETCD_MIN_TTL: Duration = Duration::from_secs(2);

/// The schema an etcd store reports in [`StoreInfo::schema_version`]: 2 since the keys moved
/// under `PREFIX/@/` (records.rs).
const SCHEMA: u64 = 2;

/// An open etcd store.
pub(crate) struct EtcdEngine {
    /// This engine, for the leases it grants.
    this: Weak<EtcdEngine>,
    text: PathBuf,
    /// What every key of the store starts with, `PREFIX/@/` (records.rs).
    root: Vec<u8>,
    /// The connection of the engine's calls, which their callers drive (`runtime.rs`).
    client: Client,
    /// The connection of its streams and background tasks: keep-alives, watches, the pool.
    background: Client,
    read_only: bool,
    max_value_len: usize,
    /// Each call's limit, the store's busy timeout.
    timeout: Duration,
    /// The thread each live lease of this engine was granted to (`engine/holds.rs`).
    pub(crate) holds: Holds,
    /// Leases obtained ahead of need (`pool.rs`).
    pool: Pool,
}

/// A grant that went through: its token, and its lease as last asked for or renewed.
struct Granted {
    token: u64,
    lease: i64,
    ttl: i64,
    /// `CLOCK_BOOTTIME` ns before the lease was asked for or renewed.
    asked_ns: u64,
    /// The keep-alive stream a pooled lease was renewed on.
    stream: Option<KeepAlive>,
}

/// A grant's transaction: granted with its token, or refused with what it read.
#[allow(clippy::large_enum_variant)] // one lives for one call; the stream is moved on at once
enum Grant {
    Granted(Granted),
    /// Refused: what the transaction's `or_else` branch read.
    Refused {
        ops: Vec<TxnOpResponse>,
        /// The revision the transaction read at.
        revision: i64,
    },
}

impl EtcdEngine {
    /// Opens the etcd store named by `text` (`etcd://host:port,.../prefix`), checking that the
    /// cluster answers within the busy timeout.
    pub(crate) fn open(text: &str, options: &Options) -> Result<Arc<EtcdEngine>> {
        let url = url::parse(text)?;
        if options.mode == Mode::SingleProcess {
            return Err(Error::invalid(
                "single-process mode is for a local file; an etcd store is shared by every client",
            ));
        }
        if options.max_value_len > MAX_VALUE_LEN_LIMIT {
            return Err(Error::invalid(format!(
                "max_value_len {} exceeds the limit of {MAX_VALUE_LEN_LIMIT} bytes",
                options.max_value_len
            )));
        }
        crate::base::cancel::check(options.cancel.as_ref())?;
        let timeout = options.busy_timeout;
        // HTTP/2 pings no more often than etcd accepts: a server closes a connection that
        // pings more often than its --grpc-keepalive-min-time (5 s by default), or at all while
        // no stream is open, and a wait's watch then ended with an error after about 9 s. A
        // call's own limit is the busy timeout; the pings only find a dead connection sooner.
        let connect = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_keep_alive(KEEP_ALIVE_PING, Duration::from_secs(5))
            .with_keep_alive_while_idle(false);
        let open = |on| {
            let connect = connect.clone();
            let endpoints = &url.endpoints;
            runtime::block_on(on, async move {
                tokio::time::timeout(timeout, Client::connect(endpoints, Some(connect)))
                    .await
                    .map_or(Err(Error::timed_out()), |client| {
                        client.map_err(client_error)
                    })
            })?
            .map_err(|err| unreachable(text, &err))
        };
        let mut client = open(Conn::Callers)?;
        // A first read: an open that returns has reached the cluster, and found no store of
        // the first layout under the prefix, whose locks it would grant a second time.
        let first_layout = records::first_layout_last(&url.prefix);
        let probe = first_layout.clone();
        let found = block_for(timeout, async {
            client
                .get(probe, Some(GetOptions::new().with_count_only()))
                .await
                .map_err(client_error)
        })
        .map_err(|err| unreachable(text, &err))?;
        if found.count() > 0 {
            return Err(Error::NotAStore(format!(
                "{text}: the key {} is of the etcd layout of fencelock before its keys moved \
                 under {}, which this version does not read; once no program of that \
                 version uses the prefix, delete the key (see the README), or choose another \
                 prefix",
                String::from_utf8_lossy(&first_layout),
                String::from_utf8_lossy(&url.root()),
            )));
        }
        let background = open(Conn::Background)?;
        Ok(Arc::new_cyclic(|this| EtcdEngine {
            this: this.clone(),
            text: PathBuf::from(text),
            root: url.root(),
            pool: Pool::new(background.clone(), timeout),
            client,
            background,
            read_only: options.read_only,
            max_value_len: options.max_value_len,
            timeout,
            holds: Holds::new(options.refuse_own_waits),
        }))
    }

    fn key(&self, kind: &str, name: &[u8]) -> Vec<u8> {
        let mut key = self.root.clone();
        key.extend_from_slice(kind.as_bytes());
        key.push(b'/');
        key.extend_from_slice(name);
        key
    }

    fn lock_key(&self, name: &str) -> Vec<u8> {
        self.key("lock", name.as_bytes())
    }

    /// The range of every holder key of `name`, `[start, end)`: the exclusive holder's
    /// `P/@/lock/<name>` and the keys under `P/@/lock/<name>\0` (no name holds a NUL).
    fn holders(&self, name: &str) -> (Vec<u8>, Vec<u8>) {
        let start = self.lock_key(name);
        let mut end = start.clone();
        end.push(1);
        (start, end)
    }

    /// The compare that no key of `name` is held, of any kind.
    fn none_held(&self, name: &str) -> Compare {
        let (start, end) = self.holders(name);
        Compare::version(start, CompareOp::Equal, 0).with_range(end)
    }

    /// A read of the first holder key of `name`, for a refusal.
    fn first_holder(&self, name: &str) -> TxnOp {
        let (start, end) = self.holders(name);
        TxnOp::get(start, Some(GetOptions::new().with_range(end).with_limit(1)))
    }

    fn last_key(&self) -> Vec<u8> {
        let mut key = self.root.clone();
        key.extend_from_slice(b"last");
        key
    }

    /// The connection for a call, answered while its caller waits.
    fn client(&self) -> Client {
        self.client.clone()
    }

    /// The connection for a stream, or for a task that runs while no caller waits.
    fn background(&self) -> Client {
        self.background.clone()
    }

    /// Runs one etcd call within the busy timeout.
    fn call<T: Send>(
        &self,
        f: impl std::future::Future<Output = std::result::Result<T, etcd_client::Error>> + Send,
    ) -> Result<T> {
        self.call_bounded(None, f)
    }

    /// Runs one etcd call of a call given `cancel`, as [`EtcdEngine::bounded`].
    fn call_bounded<T: Send>(
        &self,
        cancel: Option<&Cancel>,
        f: impl std::future::Future<Output = std::result::Result<T, etcd_client::Error>> + Send,
    ) -> Result<T> {
        self.bounded(cancel, async { f.await.map_err(client_error) })
    }

    /// Runs `future` until the deadline of `cancel` (without one, the busy timeout), ended
    /// within about a millisecond when `cancel` fires (at once, when it fired before). As at the
    /// busy timeout, a request already sent may have been applied.
    pub(crate) fn bounded<F, T>(&self, cancel: Option<&Cancel>, future: F) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>> + Send,
        T: Send,
    {
        crate::base::cancel::check(cancel)?;
        if cancel.is_none() {
            return block_for(self.timeout, future);
        }
        let waiting = Waiting::bounded(self.timeout, cancel);
        runtime::block(async move {
            tokio::pin!(future);
            loop {
                tokio::select! {
                    done = &mut future => return done,
                    () = tokio::time::sleep(crate::base::cancel::POLL) => waiting.step()?,
                }
            }
        })?
    }

    fn writable(&self) -> Result<()> {
        if self.read_only {
            return Err(crate::storage::db::read_only());
        }
        Ok(())
    }

    fn check_value(&self, value: &[u8]) -> Result<()> {
        if value.len() > self.max_value_len {
            return Err(Error::invalid(format!(
                "value is {} bytes; the limit is {}",
                value.len(),
                self.max_value_len
            )));
        }
        Ok(())
    }

    /// Grants `request`: one exclusive lock, tried once (with its write) or waited for.
    fn acquire_one(&self, name: &str, request: &Acquire<'_>) -> Result<Arc<EtcdLease>> {
        let ttl = request.ttl;
        if let Some((key, value)) = request.write {
            self.check_value(value)?;
            check_key(key)?;
        }
        let Some(waiting) = request.wait else {
            let grant = self.grant(name, ttl, request.write, request.cancel)?;
            return self
                .granted(name, grant)
                .map_err(|holder| self.locked(name, holder));
        };
        crate::base::cancel::check(waiting.cancel)?;
        // A first try, behind whoever is queued; then the queue (queue.rs). Either grant
        // writes the request's value in its own transaction.
        let grant = self.grant(name, ttl, request.write, request.cancel)?;
        match self.granted(name, grant) {
            Ok(lease) => return Ok(lease),
            Err(holder) => {
                waiting.step()?;
                // A lock key of a lease this thread holds through this engine ends only
                // with that lease.
                if let Some(token) = self.own_holder(name, holder.as_ref(), waiting)? {
                    return Err(Error::WouldDeadlock {
                        name: name.to_owned(),
                        token,
                    });
                }
            }
        }
        self.wait_in_queue(name, ttl, request.write, waiting)
    }

    /// The holder of a grant that went through; the lock key that refused it otherwise.
    fn granted(
        &self,
        name: &str,
        grant: Grant,
    ) -> std::result::Result<Arc<EtcdLease>, Option<KeyValue>> {
        match grant {
            Grant::Granted(granted) => Ok(self.holder(name, granted)),
            Grant::Refused { ops, .. } => Err(first_kv(&ops)),
        }
    }

    /// The exclusive holder of `name` a grant made.
    fn holder(&self, name: &str, granted: Granted) -> Arc<EtcdLease> {
        self.slot_holder(name, Kind::Exclusive, self.lock_key(name), granted)
    }

    /// The holder of `kind` whose key `key` (the lock key, or a slot's) a grant put.
    fn slot_holder(
        &self,
        name: &str,
        kind: Kind,
        key: Vec<u8>,
        granted: Granted,
    ) -> Arc<EtcdLease> {
        let grantee = Grantee {
            name: name.to_owned(),
            kind,
            key,
            token: granted.token,
            created: revision(granted.token),
        };
        let lease = (granted.lease, granted.ttl);
        self.holder_of(grantee, lease, granted.asked_ns, granted.stream)
    }

    fn holder_of(
        &self,
        grantee: Grantee,
        (lease, ttl): (i64, i64),
        asked_ns: u64,
        stream: Option<KeepAlive>,
    ) -> Arc<EtcdLease> {
        // Counted from before the lease was asked for or renewed: never later than etcd's own
        // expiry, which counts from when etcd handled the request.
        EtcdLease::new(self.arc(), grantee, (lease, ttl), asked_ns, stream)
    }

    fn arc(&self) -> Arc<EtcdEngine> {
        self.this
            .upgrade()
            .expect("an engine is alive while one of its methods runs")
    }

    /// Asks etcd for a lease of `ttl`, refusing TTLs that etcd would not keep as asked.
    async fn new_lease(client: &mut Client, ttl: Duration) -> Result<(i64, i64)> {
        let secs = etcd_ttl(ttl)?;
        let granted = client.lease_grant(secs, None).await.map_err(client_error)?;
        if granted.ttl() != secs {
            let _ = client.lease_revoke(granted.id()).await;
            return Err(Error::invalid(format!(
                "etcd granted a {} s lease for a ttl of {secs} s (the cluster's minimum TTL is \
                 higher); use a longer ttl",
                granted.ttl()
            )));
        }
        Ok((granted.id(), secs))
    }

    /// One grant attempt: one transaction that puts the lock key with a lease only while the
    /// key is absent (and the acquire-and-put's value with the same token). The lease is a
    /// pooled one, renewed by a keep-alive sent with the transaction (one round trip,
    /// `pool.rs`), or else a new one asked for first.
    /// Its etcd calls are bounded by `cancel` (see [`EtcdEngine::bounded`]).
    fn grant(
        &self,
        name: &str,
        ttl: Duration,
        write: Option<(&[u8], &[u8])>,
        cancel: Option<&Cancel>,
    ) -> Result<Grant> {
        check_name("lock name", name)?;
        self.grant_with(ttl, &|lease| self.grant_txn(name, write, lease), cancel)
    }

    /// One grant attempt of the transaction `txn` makes with a lease: a pooled one, or else a
    /// new one asked for first (as [`EtcdEngine::grant`]).
    fn grant_with(
        &self,
        ttl: Duration,
        txn: &(dyn Fn(i64) -> Txn + Sync),
        cancel: Option<&Cancel>,
    ) -> Result<Grant> {
        let secs = etcd_ttl(ttl)?;
        self.writable()?;
        // A pooled lease that etcd ended all the same (revoked by hand) is passed over.
        for _ in 0..3 {
            let Some(pooled) = self.pool.take(secs) else {
                break;
            };
            let txn = txn(pooled.id);
            if let Some(grant) = self.bounded(cancel, self.grant_pooled(txn, pooled))? {
                return Ok(grant);
            }
        }
        let mut client = self.client();
        self.bounded(cancel, async move {
            let asked_ns = clock::now_ns();
            let (lease, secs) = EtcdEngine::new_lease(&mut client, ttl).await?;
            let response = match client.txn(txn(lease)).await {
                Ok(response) => response,
                Err(err) => {
                    // The grant may have landed; its lease then ends at its TTL if not here.
                    let _ = client.lease_revoke(lease).await;
                    return Err(client_error(err));
                }
            };
            let revision = header_revision(&response);
            if response.succeeded() {
                return Ok(Grant::Granted(Granted {
                    token: token(revision),
                    lease,
                    ttl: secs,
                    asked_ns,
                    stream: None,
                }));
            }
            let _ = client.lease_revoke(lease).await;
            Ok(Grant::Refused {
                ops: response.op_responses(),
                revision,
            })
        })
    }

    /// The grant's transaction with `lease`: the lock key put with it while absent, the last
    /// grant rewritten, the acquire-and-put's value; or the key read.
    fn grant_txn(&self, name: &str, write: Option<(&[u8], &[u8])>, lease: i64) -> Txn {
        Txn::new()
            .when([self.none_held(name), self.none_waiting(name)])
            .and_then(self.grant_ops(self.lock_key(name), write, lease))
            .or_else([self.first_holder(name)])
    }

    /// What a grant of every kind writes: the last grant rewritten, the acquire-and-put's
    /// value, and the holder key `holder` put with `lease`.
    fn grant_ops(&self, holder: Vec<u8>, write: Option<(&[u8], &[u8])>, lease: i64) -> Vec<TxnOp> {
        let mut then = vec![TxnOp::put(self.last_key(), Vec::new(), None)];
        if let Some((key, value)) = write {
            then.push(TxnOp::put(
                self.key("value", key),
                encode_value(None, Some(value)),
                None,
            ));
        }
        then.push(TxnOp::put(
            holder,
            LockRecord::now().encode(),
            Some(PutOptions::new().with_lease(lease)),
        ));
        then
    }

    /// A grant's transaction with the pooled lease `pooled`, alone while the lease is young,
    /// else with a keep-alive of the lease sent at the same time, so that the holder's lease
    /// counts from before both were sent (`pool.rs`). `None` when etcd had ended the lease (the
    /// grant tries again); a refused grant puts the lease back.
    async fn grant_pooled(&self, txn: Txn, mut pooled: Pooled) -> Result<Option<Grant>> {
        let (mut client, mut keeper) = (self.client(), self.background());
        let asked_ns = clock::now_ns();
        let (renewed, response) = if pooled.is_young(asked_ns) {
            (None, client.txn(txn).await)
        } else {
            let (renewed, response) =
                tokio::join!(keeper.lease_keep_alive(pooled.id), client.txn(txn));
            (Some(renewed), response)
        };
        let response = match response {
            Ok(response) => response,
            Err(etcd_client::Error::GRpcStatus(status))
                if status.code() == tonic::Code::NotFound =>
            {
                return Ok(None);
            }
            Err(err) => {
                // The grant may have landed; its lease then ends at its TTL if not here.
                let _ = client.lease_revoke(pooled.id).await;
                return Err(client_error(err));
            }
        };
        let revision = header_revision(&response);
        if !response.succeeded() {
            // Renewed or young, the lease goes back for the next grant; else it is revoked.
            match renewed {
                None => self.pool.put_back(pooled),
                Some(Ok(_)) => {
                    pooled.asked_ns = asked_ns;
                    self.pool.put_back(pooled);
                }
                Some(Err(_)) => self.pool.discard(pooled),
            }
            return Ok(Some(Grant::Refused {
                ops: response.op_responses(),
                revision,
            }));
        }
        let (asked_ns, stream) = match renewed {
            None => (pooled.asked_ns, None),
            Some(Ok(stream)) => (asked_ns, Some(stream)),
            // Ended after the transaction put the lock key with it, and the key with it.
            Some(Err(etcd_client::Error::LeaseKeepAliveError(message)))
                if message == "lease not found" =>
            {
                return Ok(None);
            }
            Some(Err(err)) => {
                // Not renewed: the lease may have less time left than asked; undone.
                let _ = client.lease_revoke(pooled.id).await;
                return Err(client_error(err));
            }
        };
        Ok(Some(Grant::Granted(Granted {
            token: token(revision),
            lease: pooled.id,
            ttl: pooled.secs,
            asked_ns,
            stream,
        })))
    }

    /// The refusal of a grant while `holder` holds the lock: its token, pid and time left.
    fn locked(&self, name: &str, holder: Option<KeyValue>) -> Error {
        let Some(kv) = holder else {
            // Free, but waiters are queued for it (queue.rs): the first of them takes it next.
            return Error::Locked {
                name: name.to_owned(),
                token: 0,
                pid: 0,
                remaining: Duration::ZERO,
            };
        };
        let pid = LockRecord::decode(&kv).map_or(0, |record| record.pid);
        Error::Locked {
            name: name.to_owned(),
            token: holder_token(&kv),
            pid,
            remaining: self.remaining(kv.lease()).unwrap_or(Duration::ZERO),
        }
    }

    /// Time left on the etcd lease `lease`.
    fn remaining(&self, lease: i64) -> Result<Duration> {
        let mut client = self.client();
        let ttl = self.call(async move { client.lease_time_to_live(lease, None).await })?;
        Ok(Duration::from_secs(u64::try_from(ttl.ttl()).unwrap_or(0)))
    }

    /// Waits until `key` (a lock key, or a waiter's), or with `end` a key of `[key, end)`, is
    /// deleted at or after revision `from`: released, or its lease ended.
    ///
    /// etcd answers a watch that starts in the past only when it next catches up such watchers,
    /// every 100 ms, so a wait that hands a busy lock over would take that long. A single key
    /// whose create revision `seen` the caller read at `from - 1` is therefore watched from now,
    /// which etcd answers at once, and read once after the watch exists if anything was written
    /// since `from - 1`: gone, or created again, it was deleted meanwhile.
    fn wait_deleted(
        &self,
        key: Vec<u8>,
        end: Option<Vec<u8>>,
        (from, seen): (i64, Option<i64>),
        waiting: Waiting<'_>,
    ) -> Result<()> {
        let seen = seen.filter(|_| end.is_none());
        let (mut client, mut reader) = (self.background(), self.client());
        runtime::block(async move {
            let mut options = WatchOptions::new().with_filters([WatchFilterType::NoPut]);
            if seen.is_none() {
                options = options.with_start_revision(from);
            }
            if let Some(end) = end {
                options = options.with_range(end);
            }
            let mut stream = watch_within(&mut client, key.clone(), options, &waiting).await?;
            loop {
                tokio::select! {
                    message = stream.message() => {
                        let Some(response) = message.map_err(client_error)? else {
                            return Ok(());
                        };
                        // A compacted start revision cancels the watch: try the grant again.
                        if response.canceled()
                            || response.events().iter().any(|e| e.event_type() == EventType::Delete)
                        {
                            return Ok(());
                        }
                        if let (true, Some(created)) = (response.created(), seen) {
                            let at = response.header().map_or(i64::MAX, etcd_client::ResponseHeader::revision);
                            if at >= from {
                                let now = reader.get(key.clone(), None).await.map_err(client_error)?;
                                if now.kvs().first().map(KeyValue::create_revision) != Some(created) {
                                    return Ok(());
                                }
                            }
                        }
                    }
                    () = tokio::time::sleep(crate::base::cancel::POLL) => waiting.step()?,
                }
            }
        })?
    }

    /// The revision of the store now: the mark of its values for [`Engine::wait_values`].
    fn values_revision(&self, prefix: &[u8]) -> Result<u64> {
        let key = self.key("value", prefix);
        let mut client = self.client();
        let response = self.call(async move {
            let options = GetOptions::new().with_prefix().with_count_only();
            client.get(key, Some(options)).await
        })?;
        Ok(response
            .header()
            .map_or(0, |header| u64::try_from(header.revision()).unwrap_or(0)))
    }

    /// Watches the values under `prefix` from the revision after `mark` for the first change
    /// (a compacted start revision, which cancels the watch, counts as one).
    fn watch_values(
        &self,
        prefix: &[u8],
        mark: u64,
        timeout: Duration,
        cancel: Option<&Cancel>,
    ) -> Result<bool> {
        let key = self.key("value", prefix);
        let from = i64::try_from(mark).unwrap_or(i64::MAX).saturating_add(1);
        let waiting = Waiting::new(timeout, cancel);
        let mut client = self.background();
        let changed: Result<()> = runtime::block(async move {
            let options = WatchOptions::new().with_prefix().with_start_revision(from);
            let mut stream = watch_within(&mut client, key, options, &waiting).await?;
            loop {
                tokio::select! {
                    message = stream.message() => {
                        let Some(response) = message.map_err(client_error)? else {
                            return Ok(());
                        };
                        if response.canceled() || !response.events().is_empty() {
                            return Ok(());
                        }
                    }
                    () = tokio::time::sleep(crate::base::cancel::LOST_POLL) => waiting.step()?,
                }
            }
        })?;
        match changed {
            Ok(()) => Ok(true),
            Err(Error::Timeout { .. }) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// A write fenced by `token` alone, which must not be above the store's last grant.
    fn fenced_write(
        &self,
        key: &[u8],
        value: Option<&[u8]>,
        token: u64,
        cancel: Option<&Cancel>,
    ) -> Result<bool> {
        self.writable()?;
        let last = self.last_key();
        let granted = Compare::mod_revision(last.clone(), CompareOp::Greater, revision(token) - 1);
        let txn = Txn::new()
            .when([granted])
            .and_then([TxnOp::txn(self.value_txn(key, value, token))])
            .or_else([TxnOp::get(last, None)]);
        let mut client = self.client();
        let response = self.call_bounded(cancel, async move { client.txn(txn).await })?;
        let ops = response.op_responses();
        if !response.succeeded() {
            let highest = first_kv(&ops).map_or(0, |kv| records::token(kv.mod_revision()));
            check_granted(token, highest)?;
            return Err(Error::Storage(format!(
                "etcd refused token {token} below the last grant {highest}"
            )));
        }
        value_outcome(nested(&ops)?, token)
    }

    /// The transaction that writes `key` with `token` unless its record has a higher one:
    /// absent, or its token is below `token + 1`, or the record's token is its own revision
    /// (an acquire-and-put's) and that is below `token + 1`. Otherwise it reads the record.
    fn value_txn(&self, key: &[u8], value: Option<&[u8]>, token: u64) -> Txn {
        let (put, lower) = self.value_put(key, value, token);
        let key = self.key("value", key);
        let same_revision = Txn::new()
            .when([
                Compare::value(
                    key.clone(),
                    CompareOp::Greater,
                    (u64::MAX - 1).to_be_bytes().to_vec(),
                ),
                Compare::mod_revision(
                    key.clone(),
                    CompareOp::Less,
                    revision(token).saturating_add(1),
                ),
            ])
            .and_then([put.clone()])
            .or_else([TxnOp::get(key.clone(), None)]);
        let lower = Txn::new()
            .when([lower])
            .and_then([put.clone()])
            .or_else([TxnOp::txn(same_revision)]);
        Txn::new()
            .when([Compare::version(key, CompareOp::Equal, 0)])
            .and_then([put])
            .or_else([TxnOp::txn(lower)])
    }

    /// A fenced write's put of `key`'s record with `token`, answered with the record it
    /// replaced, and the compare that the key's record is of a lower token (false for an absent
    /// key, as a value compare is).
    fn value_put(&self, key: &[u8], value: Option<&[u8]>, token: u64) -> (TxnOp, Compare) {
        let key = self.key("value", key);
        let next = token.saturating_add(1).to_be_bytes().to_vec();
        let lower = Compare::value(key.clone(), CompareOp::Less, next);
        let record = encode_value(Some(token), value);
        let put = TxnOp::put(key, record, Some(PutOptions::new().with_prev_key()));
        (put, lower)
    }

    /// The checks of a holder's write before its transaction.
    pub(crate) fn check_write(&self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        check_key(key)?;
        if let Some(value) = value {
            self.check_value(value)?;
        }
        self.writable()
    }

    /// A holder's write: `value_txn`, only while the lock key's create revision is `token`.
    pub(crate) fn holder_write(
        &self,
        lock_key: &[u8],
        created: i64,
        token: u64,
        key: &[u8],
        value: Option<&[u8]>,
        cancel: Option<&Cancel>,
    ) -> Result<bool> {
        self.check_write(key, value)?;
        let lock_key = lock_key.to_vec();
        let held = || Compare::create_revision(lock_key.clone(), CompareOp::Equal, created);
        let full = Txn::new()
            .when([held()])
            .and_then([TxnOp::txn(self.value_txn(key, value, token))])
            .or_else([TxnOp::get(lock_key.clone(), None)]);
        // A key's usual case first, in one level: still held, and the key's record of a lower
        // token; every other case (an absent key among them) is `full`.
        let (put, lower) = self.value_put(key, value, token);
        let txn = Txn::new()
            .when([held(), lower])
            .and_then([put])
            .or_else([TxnOp::txn(full)]);
        let mut client = self.client();
        let response = self.call_bounded(cancel, async move { client.txn(txn).await })?;
        let ops = response.op_responses();
        if response.succeeded() {
            return value_outcome(nested(&ops)?, token);
        }
        let Some(TxnOpResponse::Txn(full)) = ops.first() else {
            return Err(Error::Storage(
                "etcd answered a holder's write without its outcome".into(),
            ));
        };
        let ops = full.op_responses();
        if !full.succeeded() {
            return Err(lost(token, first_kv(&ops).as_ref()));
        }
        value_outcome(nested(&ops)?, token)
    }

    fn get_value(&self, key: &[u8]) -> Result<Option<Fenced>> {
        check_key(key)?;
        let key = self.key("value", key);
        let mut client = self.client();
        let response = self.call(async move { client.get(key, None).await })?;
        let Some(kv) = response.kvs().first() else {
            return Ok(None);
        };
        let (token, value) = decode_value(kv)?;
        Ok(value.map(|value| Fenced {
            value: value.to_vec(),
            token,
        }))
    }

    fn list_keys(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        if prefix.len() > MAX_NAME_LEN {
            return Err(Error::invalid(format!(
                "prefix is {} bytes; the limit is {MAX_NAME_LEN}",
                prefix.len()
            )));
        }
        let strip = self.key("value", b"").len();
        let mut keys = Vec::new();
        for kv in self.range(self.key("value", prefix))? {
            if decode_value(&kv)?.1.is_some() {
                keys.push(kv.key()[strip..].to_vec());
            }
        }
        Ok(keys)
    }

    /// Every key starting with `prefix`, in byte order.
    fn range(&self, prefix: Vec<u8>) -> Result<Vec<KeyValue>> {
        let mut client = self.client();
        let mut response = self.call(async move {
            let options = GetOptions::new().with_prefix();
            client.get(prefix, Some(options)).await
        })?;
        Ok(response.take_kvs())
    }

    fn fence_checked(&self, resource: &str, token: u64, cancel: Option<&Cancel>) -> Result<()> {
        check_name("fence resource", resource)?;
        check_token(token)?;
        self.writable()?;
        let key = self.key("fence", resource.as_bytes());
        let record = token.to_be_bytes().to_vec();
        let put = || TxnOp::put(key.clone(), record.clone(), None);
        // Written only when higher than the record: an equal token passes without a write.
        let higher = Txn::new()
            .when([Compare::value(key.clone(), CompareOp::Less, record.clone())])
            .and_then([put()])
            .or_else([TxnOp::get(key.clone(), None)]);
        let fenced = Txn::new()
            .when([Compare::version(key.clone(), CompareOp::Equal, 0)])
            .and_then([put()])
            .or_else([TxnOp::txn(higher)]);
        let last = self.last_key();
        let txn = Txn::new()
            .when([Compare::mod_revision(
                last.clone(),
                CompareOp::Greater,
                revision(token) - 1,
            )])
            .and_then([TxnOp::txn(fenced)])
            .or_else([TxnOp::get(last, None)]);
        let mut client = self.client();
        let response = self.call_bounded(cancel, async move { client.txn(txn).await })?;
        let ops = response.op_responses();
        if !response.succeeded() {
            let highest = first_kv(&ops).map_or(0, |kv| records::token(kv.mod_revision()));
            check_granted(token, highest)?;
            return Err(Error::Storage(format!(
                "etcd refused token {token} below the last grant {highest}"
            )));
        }
        match nested(&ops)? {
            Outcome::Written(_) => Ok(()),
            Outcome::Refused(kv) => admit(token, Some(decode_fence(&kv)?)),
        }
    }

    fn read_fence(&self, resource: &str) -> Result<Option<u64>> {
        check_name("fence resource", resource)?;
        let key = self.key("fence", resource.as_bytes());
        let mut client = self.client();
        let response = self.call(async move { client.get(key, None).await })?;
        response.kvs().first().map(decode_fence).transpose()
    }

    /// Every holder key, in name order (a name's permits in slot order).
    fn list_locks(&self) -> Result<Vec<LockInfo>> {
        self.range(self.key("lock", b""))?
            .iter()
            .map(|kv| self.describe(kv))
            .collect()
    }

    /// Every holder of `name`, latest first.
    fn lock_grants(&self, name: &str) -> Result<Vec<LockInfo>> {
        self.holders_of(name)?
            .iter()
            .map(|kv| self.describe(kv))
            .collect()
    }

    /// A holder key as [`LockInfo`]: etcd keeps a holder's key only while its lease lives, so
    /// every record is held, or expired in the moment before etcd deletes it.
    fn describe(&self, kv: &KeyValue) -> Result<LockInfo> {
        let (name, kind) = self.holder_of_key(kv.key());
        let record = LockRecord::decode(kv)?;
        let remaining = self.remaining(kv.lease())?;
        let now = SystemTime::now();
        Ok(LockInfo {
            name,
            token: holder_token(kv),
            pid: record.pid,
            granted_at: UNIX_EPOCH + Duration::from_nanos(record.granted_unix_ns),
            expires_at: now + remaining,
            remaining,
            state: if remaining.is_zero() {
                LockState::Expired
            } else {
                LockState::Held
            },
            kind,
        })
    }

    fn read_info(&self) -> Result<StoreInfo> {
        let mut client = self.client();
        let status = self.call(async move { client.status().await })?;
        let mut client = self.client();
        let last = self.last_key();
        let last = self.call(async move { client.get(last, None).await })?;
        let mut keys = 0;
        for kv in self.range(self.key("value", b""))? {
            if decode_value(&kv)?.1.is_some() {
                keys += 1;
            }
        }
        Ok(StoreInfo {
            path: self.text.clone(),
            file_size: u64::try_from(status.db_size()).unwrap_or(0),
            schema_version: SCHEMA,
            last_token: last.kvs().first().map_or(0, |kv| token(kv.mod_revision())),
            lock_records: self.range(self.key("lock", b""))?.len() as u64,
            keys,
            fences: self.range(self.key("fence", b""))?.len() as u64,
        })
    }

    fn check_records(&self) -> Result<()> {
        let last = self.read_info()?.last_token;
        let above = |what: &str, kv: &KeyValue, token: u64| {
            Error::Corrupt(format!(
                "{what} {:?} carries token {token} above the last grant {last}",
                String::from_utf8_lossy(kv.key())
            ))
        };
        for kv in self.range(self.key("lock", b""))? {
            LockRecord::decode(&kv)?;
            if holder_token(&kv) > last {
                return Err(above("lock", &kv, holder_token(&kv)));
            }
        }
        for kv in self.range(self.key("value", b""))? {
            let (token, _) = decode_value(&kv)?;
            if token > last || token == 0 {
                return Err(above("key", &kv, token));
            }
        }
        for kv in self.range(self.key("fence", b""))? {
            let token = decode_fence(&kv)?;
            if token > last || token == 0 {
                return Err(above("fence", &kv, token));
            }
        }
        Ok(())
    }
}

/// The lease TTL of `ttl` in etcd's whole seconds; TTLs etcd cannot keep as asked are refused.
pub(crate) fn etcd_ttl(ttl: Duration) -> Result<i64> {
    if ttl < ETCD_MIN_TTL || ttl > MAX_TTL {
        return Err(Error::invalid(format!(
            "ttl {ttl:?} is outside {ETCD_MIN_TTL:?} to {MAX_TTL:?}: etcd leases have a minimum TTL"
        )));
    }
    if ttl.subsec_nanos() != 0 {
        return Err(Error::invalid(format!(
            "ttl {ttl:?} is not a whole number of seconds, as etcd leases are"
        )));
    }
    Ok(i64::try_from(ttl.as_secs()).expect("at most MAX_TTL"))
}

fn unreachable(text: &str, err: &Error) -> Error {
    match err {
        Error::Timeout { .. } => Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("{text}: no etcd endpoint answered within the busy timeout"),
        )),
        other => Error::Io(io_error(
            std::io::ErrorKind::Other,
            format!("{text}: {other}"),
            other.raw_os_error(),
        )),
    }
}

/// Creates a watch of `key`, waiting for etcd to confirm it within the wait's deadline and
/// cancel handle (a watch is created by a round trip that a lost server would hold forever).
async fn watch_within(
    client: &mut Client,
    key: Vec<u8>,
    options: WatchOptions,
    waiting: &Waiting<'_>,
) -> Result<WatchStream> {
    let watch = client.watch(key, Some(options));
    tokio::pin!(watch);
    loop {
        tokio::select! {
            created = &mut watch => return created.map_err(client_error),
            () = tokio::time::sleep(crate::base::cancel::POLL) => waiting.step()?,
        }
    }
}

fn header_revision(response: &TxnResponse) -> i64 {
    response
        .header()
        .map_or(0, etcd_client::ResponseHeader::revision)
}

/// The first key-value pair a transaction's branch read.
fn first_kv(ops: &[TxnOpResponse]) -> Option<KeyValue> {
    ops.iter().find_map(|op| match op {
        TxnOpResponse::Get(get) => get.kvs().first().cloned(),
        _ => None,
    })
}

/// How a chain of nested fenced-write transactions ended.
enum Outcome {
    /// Written; the record it replaced, if any.
    Written(Option<KeyValue>),
    /// Refused; the record with the higher token.
    Refused(KeyValue),
}

/// Follows the nested transactions of `ops` to the branch that ran.
fn nested(ops: &[TxnOpResponse]) -> Result<Outcome> {
    for op in ops {
        match op {
            TxnOpResponse::Txn(txn) => return nested(&txn.op_responses()),
            TxnOpResponse::Put(put) => return Ok(Outcome::Written(put.prev_key().cloned())),
            TxnOpResponse::Get(get) => {
                if let Some(kv) = get.kvs().first() {
                    return Ok(Outcome::Refused(kv.clone()));
                }
            }
            TxnOpResponse::Delete(_) => {}
        }
    }
    Err(Error::Storage(
        "etcd answered a fenced write without its outcome".into(),
    ))
}

/// A fenced value write's result: whether the key held a value, or the refusal.
fn value_outcome(outcome: Outcome, token: u64) -> Result<bool> {
    match outcome {
        Outcome::Written(None) => Ok(false),
        Outcome::Written(Some(previous)) => Ok(decode_value(&previous)?.1.is_some()),
        Outcome::Refused(kv) => {
            let (highest, _) = decode_value(&kv)?;
            admit(token, Some(highest))?;
            Err(Error::Storage(format!(
                "etcd refused token {token} for a record of token {highest}"
            )))
        }
    }
}

fn lost(token: u64, now: Option<&KeyValue>) -> Error {
    Error::LockLost {
        token,
        current: now.map(holder_token),
    }
}

impl Engine for EtcdEngine {
    fn path(&self) -> &Path {
        &self.text
    }

    fn acquire(&self, request: &Acquire<'_>) -> Result<Vec<Arc<dyn LeaseHandle>>> {
        crate::base::cancel::check(request.cancel)?;
        let leases = match (request.locks, request.kind) {
            (Locks::One(name), kind @ (Kind::Semaphore(_) | Kind::Shared)) => {
                vec![self.acquire_slot(name, kind, request)?]
            }
            (Locks::All(names), _) => self.acquire_all_of(names, request)?,
            (Locks::One(name), Kind::Exclusive) => vec![self.acquire_one(name, request)?],
        };
        let thread = request.thread();
        for lease in &leases {
            self.holds.granted(lease.state().token, thread);
        }
        Ok(leases
            .into_iter()
            .map(|lease| lease as Arc<dyn LeaseHandle>)
            .collect())
    }

    /// The store's revision: a watch from the next one sees every change after it.
    fn values_mark(&self, prefix: &[u8]) -> Result<u64> {
        self.values_revision(prefix)
    }

    fn wait_values(
        &self,
        prefix: &[u8],
        mark: u64,
        timeout: Duration,
        cancel: Option<&Cancel>,
    ) -> Result<bool> {
        self.watch_values(prefix, mark, timeout, cancel)
    }

    fn write(
        &self,
        key: &[u8],
        value: Option<&[u8]>,
        token: u64,
        cancel: Option<&Cancel>,
    ) -> Result<bool> {
        check_key(key)?;
        if let Some(value) = value {
            self.check_value(value)?;
        }
        check_token(token)?;
        self.fenced_write(key, value, token, cancel)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Fenced>> {
        self.get_value(key)
    }

    fn keys(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.list_keys(prefix)
    }

    fn fence(&self, resource: &str, token: u64, cancel: Option<&Cancel>) -> Result<()> {
        self.fence_checked(resource, token, cancel)
    }

    fn fence_token(&self, resource: &str) -> Result<Option<u64>> {
        self.read_fence(resource)
    }

    fn locks(&self) -> Result<Vec<LockInfo>> {
        self.list_locks()
    }

    fn lock_holders(&self, name: &str) -> Result<Vec<LockInfo>> {
        self.lock_grants(name)
    }

    fn info(&self) -> Result<StoreInfo> {
        self.read_info()
    }

    fn verify(&self) -> Result<()> {
        self.check_records()
    }

    fn handle_opened(&self) {
        self.pool.handle_opened();
    }

    fn handle_dropped(&self) {
        self.pool.handle_dropped();
    }
}
