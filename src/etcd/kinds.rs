//! Semaphores, shared locks and multi-lock acquires on etcd, with the rules of a local file
//! (`rules/kind.rs`).
//!
//! - A semaphore of N keeps its permits under its name, one key a permit,
//!   `P/@/lock/<name>\0permits/<N>/<slot>` (records.rs): N and the slot (0 to N - 1) as four
//!   decimal digits. Every holder key of a name is in the range `[P/@/lock/<name>,
//!   P/@/lock/<name>\1)` (no name holds a NUL), so one range compare of `version == 0` over it
//!   says "no holder of any kind", and the exclusive grant makes it (`mod.rs`).
//! - A permit's grant reads the name's holders, picks a free slot and, in one transaction,
//!   puts that slot's key with a lease of its own while the slot is free, no key of another
//!   kind or count is in the name's range (two range compares around the count's prefix) and
//!   no waiter is queued for the name. A lost race reads the holders again (the refused
//!   transaction's reads) and picks again. Its token is the transaction's revision, as for an
//!   exclusive grant. The count is in every permit's key, so it lives exactly as long as a
//!   permit does; holders of another count refuse the grant with [`Error::PermitsMismatch`].
//! - Shared holders are slots the same way, `P/@/lock/<name>\0shared/<slot>`, up to
//!   [`MAX_HOLDERS`]: a shared grant is a permit grant of a semaphore of that many, which
//!   refuses every other kind of holder as `Locked`. Refused while a waiter is queued, it never
//!   overtakes a queued exclusive waiter (`queue.rs`), whose turn compares the whole range
//!   empty.
//! - An `acquire_all` is one transaction: every name's range empty and no waiter queued for
//!   it, then every lock key put with a lease of its own; refused, it puts nothing. A
//!   transaction has one revision, so the first lock's token is that revision and each later
//!   lock then takes the revision of a transaction of its own, which rewrites `P/@/last` and
//!   the lock's record with that token (records.rs), while the key is still the one the first
//!   transaction created: tokens distinct and increasing in list order, as on a file, each
//!   the revision of a transaction that wrote its lock's key. Until that transaction the
//!   lock's record carries the first lock's token.
//! - A waiting permit, shared or `acquire_all` acquire tries again after a delete of a key
//!   that refused it (a holder's key, or a queued waiter's), outside the queue; one that only
//!   this thread could unblock is refused with [`Error::WouldDeadlock`].

use std::collections::HashSet;
use std::sync::Arc;

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse,
};

use super::records::{client_error, holder_token, token, LockRecord, SAME_REVISION};
use super::{etcd_ttl, header_revision, EtcdEngine, EtcdLease, Grant, Grantee};
use crate::base::cancel::Waiting;
use crate::base::clock;
use crate::base::error::{Error, Result};
use crate::base::limits::{check_key, check_name};
use crate::engine::Acquire;
use crate::rules::kind::{check_kind, Kind, MAX_HOLDERS};

/// The most locks one `acquire_all` names on etcd: its transaction makes two compares a lock,
/// and etcd refuses a transaction of more than 128 (`--max-txn-ops`, by default).
pub(crate) const MAX_ALL: usize = 64;

/// Why a grant did not go through: the keys that refused it and where to watch.
struct Blocked {
    /// The lock that refused it, named in the refusal.
    name: String,
    /// The holder keys that refused it (empty when only queued waiters did).
    holders: Vec<KeyValue>,
    /// Whether every one of them must go for the grant (holders of another kind), or one
    /// (the permits of a full semaphore).
    every: bool,
    /// The key, or range `[key, end)`, whose delete may let it through.
    watch: (Vec<u8>, Option<Vec<u8>>),
    /// The revision the refusal read at.
    revision: i64,
}

impl EtcdEngine {
    /// What the holder keys of `kind` start with, and how many there are at most:
    /// `P/@/lock/<name>\0permits/<N>/` for a semaphore of N permits, `P/@/lock/<name>\0shared/`
    /// for up to [`MAX_HOLDERS`] shared holders.
    fn slots(&self, name: &str, kind: Kind) -> (Vec<u8>, u32) {
        let mut key = self.lock_key(name);
        let (tail, slots) = match kind {
            Kind::Semaphore(permits) => (format!("\0permits/{permits:04}/"), permits),
            _ => ("\0shared/".to_owned(), MAX_HOLDERS),
        };
        key.extend_from_slice(tail.as_bytes());
        (key, slots)
    }

    /// The lock name and kind of the holder key `key`.
    pub(super) fn holder_of_key(&self, key: &[u8]) -> (String, Kind) {
        let rest = &key[self.lock_key("").len().min(key.len())..];
        let (name, tail) = match rest.iter().position(|&b| b == 0) {
            Some(at) => (&rest[..at], &rest[at + 1..]),
            None => (rest, &[][..]),
        };
        let kind = if tail.starts_with(b"shared/") {
            Kind::Shared
        } else {
            tail.strip_prefix(b"permits/")
                .and_then(|count| std::str::from_utf8(count.get(..4)?).ok()?.parse().ok())
                .map_or(Kind::Exclusive, Kind::Semaphore)
        };
        (String::from_utf8_lossy(name).into_owned(), kind)
    }

    /// Every holder key of `name`, and the revision read at.
    fn read_holders(&self, name: &str) -> Result<(Vec<KeyValue>, i64)> {
        let (start, end) = self.holders(name);
        let mut client = self.client();
        let mut response = self.call(async move {
            client
                .get(start, Some(GetOptions::new().with_range(end)))
                .await
        })?;
        let revision = response
            .header()
            .map_or(0, etcd_client::ResponseHeader::revision);
        Ok((response.take_kvs(), revision))
    }

    /// The token of a holder of `name` that the waiting thread (`waiting.thread()`) holds, if
    /// one does: `first` (the holder that refused an exclusive grant), or with holders of other
    /// kinds any of them.
    pub(super) fn own_holder(
        &self,
        name: &str,
        first: Option<&KeyValue>,
        waiting: Waiting<'_>,
    ) -> Result<Option<u64>> {
        let Some(first) = first else {
            return Ok(None);
        };
        let thread = waiting.thread();
        if self.holds.is_mine(holder_token(first), thread) {
            return Ok(Some(holder_token(first)));
        }
        if first.key() == self.lock_key(name).as_slice() {
            return Ok(None);
        }
        Ok(self
            .read_holders(name)?
            .0
            .iter()
            .map(holder_token)
            .find(|&token| self.holds.is_mine(token, thread)))
    }

    /// Every grant of `name`, latest first.
    pub(super) fn holders_of(&self, name: &str) -> Result<Vec<KeyValue>> {
        check_name("lock name", name)?;
        let mut kvs = self.read_holders(name)?.0;
        kvs.sort_by_key(|kv| std::cmp::Reverse(holder_token(kv)));
        Ok(kvs)
    }

    /// Grants a permit of a semaphore, or a shared hold, of `name` (`kind`), tried once or
    /// waited for.
    pub(super) fn acquire_slot(
        &self,
        name: &str,
        kind: Kind,
        request: &Acquire<'_>,
    ) -> Result<Arc<EtcdLease>> {
        check_name("lock name", name)?;
        check_kind(kind)?;
        etcd_ttl(request.ttl)?;
        if let Some((key, value)) = request.write {
            self.check_value(value)?;
            check_key(key)?;
        }
        self.writable()?;
        if let Some(waiting) = request.wait {
            crate::base::cancel::check(waiting.cancel)?;
        }
        loop {
            let blocked = match self.try_slot(name, kind, request)? {
                Ok(lease) => return Ok(lease),
                Err(blocked) => blocked,
            };
            let Some(waiting) = request.wait else {
                return Err(self.locked(&blocked.name, blocked.holders.into_iter().next()));
            };
            self.wait_blocked(blocked, waiting)?;
        }
    }

    /// One permit or shared grant: granted, refused by the holders and waiters it names, or
    /// refused for another count.
    fn try_slot(
        &self,
        name: &str,
        kind: Kind,
        request: &Acquire<'_>,
    ) -> Result<std::result::Result<Arc<EtcdLease>, Blocked>> {
        let (start, end) = self.holders(name);
        let (prefix, permits) = self.slots(name, kind);
        let mut after = prefix.clone();
        *after.last_mut().expect("not empty") += 1;
        let (mut kvs, mut revision) = self.read_holders(name)?;
        loop {
            let others: Vec<KeyValue> = kvs
                .iter()
                .filter(|kv| !kv.key().starts_with(&prefix))
                .cloned()
                .collect();
            for kv in &others {
                if let (Kind::Semaphore(requested), (_, Kind::Semaphore(stored))) =
                    (kind, self.holder_of_key(kv.key()))
                {
                    return Err(Error::PermitsMismatch {
                        permits: stored,
                        requested,
                    });
                }
            }
            if !others.is_empty() || kvs.len() >= permits as usize {
                let every = !others.is_empty();
                let holders = if every { others } else { kvs };
                return Ok(Err(Blocked {
                    name: name.to_owned(),
                    holders,
                    every,
                    watch: (start, Some(end)),
                    revision,
                }));
            }
            let taken: HashSet<&[u8]> = kvs.iter().map(KeyValue::key).collect();
            let slot = (0..permits)
                .map(|slot| {
                    let mut key = prefix.clone();
                    key.extend_from_slice(format!("{slot:04}").as_bytes());
                    key
                })
                .find(|key| !taken.contains(key.as_slice()))
                .expect("fewer holders than permits");
            let (waiters, waiters_end) = self.waiters(name);
            let txn = |lease: i64| {
                let then = self.grant_ops(slot.clone(), request.write, lease);
                Txn::new()
                    .when([
                        Compare::version(start.clone(), CompareOp::Equal, 0)
                            .with_range(prefix.clone()),
                        Compare::version(after.clone(), CompareOp::Equal, 0)
                            .with_range(end.clone()),
                        Compare::version(slot.clone(), CompareOp::Equal, 0),
                        self.none_waiting(name),
                    ])
                    .and_then(then)
                    .or_else([
                        TxnOp::get(
                            start.clone(),
                            Some(GetOptions::new().with_range(end.clone())),
                        ),
                        TxnOp::get(
                            waiters.clone(),
                            Some(
                                GetOptions::new()
                                    .with_range(waiters_end.clone())
                                    .with_limit(1),
                            ),
                        ),
                    ])
            };
            match self.grant_with(request.ttl, &txn, request.cancel)? {
                Grant::Granted(granted) => {
                    return Ok(Ok(self.slot_holder(name, kind, slot, granted)));
                }
                Grant::Refused {
                    ops,
                    revision: read_at,
                } => {
                    if kvs_of(ops.get(1)).next().is_some() {
                        return Ok(Err(Blocked {
                            name: name.to_owned(),
                            holders: Vec::new(),
                            every: true,
                            watch: (waiters, Some(waiters_end)),
                            revision: read_at,
                        }));
                    }
                    // A lost race for the slot, or a holder came: what is there now decides.
                    kvs = kvs_of(ops.first()).cloned().collect();
                    revision = read_at;
                }
            }
        }
    }

    /// Waits (within `waiting`) for a delete that may let a refused grant through; refused with
    /// [`Error::WouldDeadlock`] when only this thread could let go of what refused it: one of
    /// the holders that must all go, or every permit of a full semaphore.
    fn wait_blocked(&self, blocked: Blocked, waiting: Waiting<'_>) -> Result<()> {
        let thread = waiting.thread();
        let mine: Vec<u64> = blocked
            .holders
            .iter()
            .map(holder_token)
            .filter(|&token| self.holds.is_mine(token, thread))
            .collect();
        let deadlock = if blocked.every {
            !mine.is_empty()
        } else {
            !blocked.holders.is_empty() && mine.len() == blocked.holders.len()
        };
        if deadlock {
            let kv = blocked
                .holders
                .iter()
                .find(|kv| holder_token(kv) == mine[0])
                .expect("one of them");
            return Err(Error::WouldDeadlock {
                name: self.holder_of_key(kv.key()).0,
                token: mine[0],
            });
        }
        waiting.step()?;
        let (key, end) = blocked.watch;
        self.wait_deleted(key, end, (blocked.revision + 1, None), waiting)
    }

    /// Grants every lock of `names` exclusively, all or none, tried once or waited for.
    pub(super) fn acquire_all_of(
        &self,
        names: &[&str],
        request: &Acquire<'_>,
    ) -> Result<Vec<Arc<EtcdLease>>> {
        if names.is_empty() || names.len() > MAX_ALL {
            return Err(Error::invalid(format!(
                "an acquire of several locks on etcd names 1 to {MAX_ALL} of them (etcd's limit \
                 of operations a transaction), not {}",
                names.len()
            )));
        }
        for (i, name) in names.iter().enumerate() {
            check_name("lock name", name)?;
            if names[..i].contains(name) {
                return Err(Error::invalid(format!("lock name {name} is given twice")));
            }
        }
        etcd_ttl(request.ttl)?;
        self.writable()?;
        if let Some(waiting) = request.wait {
            crate::base::cancel::check(waiting.cancel)?;
        }
        loop {
            let blocked = match self.try_all(names, request)? {
                Ok(leases) => return Ok(leases),
                Err(blocked) => blocked,
            };
            let Some(waiting) = request.wait else {
                return Err(self.locked(&blocked.name, blocked.holders.into_iter().next()));
            };
            self.wait_blocked(blocked, waiting)?;
        }
    }

    /// One `acquire_all` grant: one transaction, then the later locks' tokens.
    fn try_all(
        &self,
        names: &[&str],
        request: &Acquire<'_>,
    ) -> Result<std::result::Result<Vec<Arc<EtcdLease>>, Blocked>> {
        let ttl = request.ttl;
        let mut compares = Vec::with_capacity(2 * names.len());
        let mut refused = Vec::with_capacity(2 * names.len());
        for name in names {
            compares.push(self.none_held(name));
            compares.push(self.none_waiting(name));
            refused.push(self.first_holder(name));
            let (start, end) = self.waiters(name);
            refused.push(TxnOp::get(
                start,
                Some(GetOptions::new().with_range(end).with_limit(1)),
            ));
        }
        let keys: Vec<Vec<u8>> = names.iter().map(|name| self.lock_key(name)).collect();
        let mut client = self.client();
        let last = self.last_key();
        let granted = self.bounded(request.cancel, async move {
            let mut leases = Vec::with_capacity(keys.len());
            for _ in &keys {
                let asked_ns = clock::now_ns();
                match EtcdEngine::new_lease(&mut client, ttl).await {
                    Ok((lease, secs)) => leases.push((lease, secs, asked_ns)),
                    Err(err) => {
                        revoke(&mut client, &leases).await;
                        return Err(err);
                    }
                }
            }
            let mut then = vec![TxnOp::put(last.clone(), Vec::new(), None)];
            for (key, (lease, _, _)) in keys.iter().zip(&leases) {
                then.push(TxnOp::put(
                    key.clone(),
                    LockRecord::now().encode(),
                    Some(PutOptions::new().with_lease(*lease)),
                ));
            }
            let txn = Txn::new().when(compares).and_then(then).or_else(refused);
            let response = match client.txn(txn).await {
                Ok(response) => response,
                Err(err) => {
                    // The grant may have landed; its leases then end at their TTL if not here.
                    revoke(&mut client, &leases).await;
                    return Err(client_error(err));
                }
            };
            let created = header_revision(&response);
            if !response.succeeded() {
                revoke(&mut client, &leases).await;
                return Ok(Err((response.op_responses(), created)));
            }
            // The later locks' tokens: a transaction each, while the key is still this grant's.
            let mut tokens = vec![token(created)];
            for (key, (lease, _, _)) in keys.iter().zip(&leases).skip(1) {
                let txn = Txn::new()
                    .when([Compare::create_revision(
                        key.clone(),
                        CompareOp::Equal,
                        created,
                    )])
                    .and_then([
                        TxnOp::put(last.clone(), Vec::new(), None),
                        TxnOp::put(
                            key.clone(),
                            LockRecord::with_token(SAME_REVISION).encode(),
                            Some(PutOptions::new().with_lease(*lease)),
                        ),
                    ]);
                match client.txn(txn).await {
                    Ok(response) if response.succeeded() => {
                        tokens.push(token(header_revision(&response)));
                    }
                    other => {
                        revoke(&mut client, &leases).await;
                        other.map_err(client_error)?;
                        return Err(Error::Storage(
                            "etcd ended a lease of an acquire of several locks before its \
                             token was written"
                                .into(),
                        ));
                    }
                }
            }
            Ok(Ok((leases, tokens, created)))
        })?;
        let (leases, tokens, created) = match granted {
            Ok(granted) => granted,
            Err((ops, revision)) => {
                let holders: Vec<KeyValue> = ops
                    .iter()
                    .step_by(2)
                    .filter_map(|op| kvs_of(Some(op)).next().cloned())
                    .collect();
                let (blocked_name, watch) = match holders.first() {
                    Some(kv) => {
                        // The first name with a holder.
                        let held = ops
                            .iter()
                            .step_by(2)
                            .position(|op| kvs_of(Some(op)).next().is_some())
                            .unwrap_or(0);
                        (names[held], (kv.key().to_vec(), None))
                    }
                    None => {
                        // Only queued waiters refused it: the first name that has one.
                        let queued = ops
                            .iter()
                            .skip(1)
                            .step_by(2)
                            .position(|op| kvs_of(Some(op)).next().is_some())
                            .unwrap_or(0);
                        let (start, end) = self.waiters(names[queued]);
                        (names[queued], (start, Some(end)))
                    }
                };
                return Ok(Err(Blocked {
                    name: blocked_name.to_owned(),
                    holders,
                    every: true,
                    watch,
                    revision,
                }));
            }
        };
        Ok(Ok(names
            .iter()
            .zip(leases)
            .zip(tokens)
            .map(|((name, (lease, secs, asked_ns)), token)| {
                let grantee = Grantee {
                    name: (*name).to_owned(),
                    kind: Kind::Exclusive,
                    key: self.lock_key(name),
                    token,
                    created,
                };
                self.holder_of(grantee, (lease, secs), asked_ns, None)
            })
            .collect()))
    }
}

async fn revoke(client: &mut etcd_client::Client, leases: &[(i64, i64, u64)]) {
    for (lease, _, _) in leases {
        let _ = client.lease_revoke(*lease).await;
    }
}

/// The key-value pairs a get of a transaction's branch read.
fn kvs_of(op: Option<&TxnOpResponse>) -> impl Iterator<Item = &KeyValue> {
    let kvs: &[KeyValue] = match op {
        Some(TxnOpResponse::Get(get)) => get.kvs(),
        _ => &[],
    };
    kvs.iter()
}
