//! Write operations as data.
//!
//! Every change to the store is an [`Op`]: a plain value that can be queued, batched with
//! others in one transaction and carried to another process. An operation runs in two steps.
//! [`Op::check`] reads the tables and either refuses or returns a [`Plan`]: the writes to make
//! and the result to report once they commit. [`Plan::apply`] makes the writes and cannot refuse.
//! `check` sees the tables only through `&Tables`, and redb writes only through `&mut Table`, so
//! a refusal writes nothing by construction. The same holds for the lease map in the store's
//! shared memory: `check` sees the engine through [`Context`], which only reads it, and the
//! map's grant is a step of the apply ([`Checked::Grant`]), given the [`LeaseMap`] alone.

use std::time::Duration;

use redb::{ReadableTable, Table, WriteTransaction};

use crate::base::clock::ProcessId;
use crate::base::error::{Error, Result};
use crate::base::limits::{check_granted, duration_ns};
use crate::rules::admit::{
    admit_grant, blocker, check_current, check_join, check_turn, new_lease, prune,
};
use crate::rules::context::{Context, LeaseMap};
use crate::rules::history::{dropped, judge, released_at, Ended, Ends, HistoryTable};
use crate::rules::kind::Kind;
use crate::rules::record::{decode_value, encode_value, Group, Lease, Record};
use crate::rules::tables::{COUNTER_KEY, RESERVED_KEY, SEALED_KEY};
use crate::rules::tables::{FENCES, LEASES, META, VALUES};
use crate::rules::tokens::admit;
use crate::rules::tokens::{read_counter, reservation, Durable};

/// One write operation of the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    /// Grants the lock `name` for `ttl` with the next token to `holder`, which holds the
    /// liveness lock `live`; with `write`, also writes the value `(key, value)` with that token,
    /// all or nothing. `ticket` is the requester's place in the lock's waiting queue when it
    /// waits (`u64::MAX` before it has one): an earlier waiter goes first. A try-once acquire
    /// has none.
    Acquire {
        name: String,
        ttl: Duration,
        write: Option<(Vec<u8>, Vec<u8>)>,
        holder: ProcessId,
        live: u64,
        ticket: Option<u64>,
    },
    /// Grants `name` as `kind` for `ttl` with the next token to `holder` (liveness lock
    /// `live`): one more permit of a semaphore, one more shared holder, or (for an exclusive
    /// kind) the name alone; `ticket` as for `Acquire`. A grant that would hold the name
    /// together with live holders stands behind every queued waiter even when it has no ticket
    /// (a try-once acquire), so that a stream of shared grants never starves a waiting
    /// exclusive acquire.
    AcquireKind {
        name: String,
        kind: Kind,
        ttl: Duration,
        holder: ProcessId,
        live: u64,
        ticket: Option<u64>,
    },
    /// Grants every lock of `names` exclusively for `ttl` to `holder`, all or none, in one
    /// transaction: each its own token (in the order of `names`) and its own liveness lock
    /// (`lives`, one for each name). Never holds some of them while waiting for others.
    AcquireAll {
        names: Vec<String>,
        ttl: Duration,
        holder: ProcessId,
        lives: Vec<u64>,
    },
    /// Moves the expiry of the lease `token` of `name` to `ttl` from now, while it is current.
    Extend {
        name: String,
        token: u64,
        ttl: Duration,
    },
    /// Writes `value` under `key` (deletes it with `None`) with `token`, fenced; with `lease`,
    /// only while the lease `token` of that lock is current.
    Put {
        key: Vec<u8>,
        value: Option<Vec<u8>>,
        token: u64,
        lease: Option<String>,
    },
    /// Records `token` as the highest the external fence `resource` accepted, fenced.
    Fence { resource: String, token: u64 },
    /// Records in the history the releases a process made: `(name, token, released_ns)`, each
    /// unless the lease's end is on record already (`rules/history.rs`).
    RecordReleases { releases: Vec<(String, u64, u64)> },
    /// Records in the history ends already judged, `(name, token, end)`, each unless the lock's
    /// history has it: the tails of the lease records kept in shared memory
    /// (`share/buckets.rs`).
    RecordEnds {
        ends: Vec<(String, u64, Ended)>,
        /// From the last user of the shared memory as it closes it: the last token it handed
        /// out, and the reservation it saw (see `SEALED_KEY`).
        seal: Option<(u64, u64)>,
    },
    /// Reserves tokens durably up to at least `at_least`: no token above the reservation is
    /// handed out, and a store whose shared memory is set up anew starts above it.
    Reserve { at_least: u64 },
}

/// What an operation reports once its writes committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Done {
    Granted {
        token: u64,
        expires_ns: u64,
    },
    /// The grants of `AcquireAll`: tokens `first` to `first + count - 1`, in order.
    GrantedAll {
        first: u64,
        count: u32,
        expires_ns: u64,
    },
    Extended {
        expires_ns: u64,
    },
    /// Whether the key held a value before.
    Put {
        existed: bool,
    },
    Fenced,
    Recorded,
    /// The durable reservation of tokens now.
    Reserved {
        bound: u64,
    },
}

/// What an operation produced in its transaction: its value once committed.
pub(crate) struct Applied<T> {
    pub value: T,
    /// Whether the write must be on disk before it is acknowledged. Grants and extends need not be
    /// where leases need not outlive their process (see `reservation` in `rules/tokens.rs`);
    /// values, fences and token reservations must.
    pub durable: bool,
    /// The leases whose ends it recorded as they left the leases table, to count once the
    /// transaction commits.
    pub ends: Ends,
}

/// Runs `op` in `txn`: checks it, then applies its plan. A `rerun` was run before by a
/// combiner that died before it reported the result.
pub(crate) fn run(
    cx: &dyn Context,
    map: &dyn LeaseMap,
    op: &Op,
    txn: &WriteTransaction,
    rerun: bool,
) -> Result<Applied<Done>> {
    let mut tables = Tables::open(cx, txn, op)?;
    let now = crate::base::clock::now_ns();
    let checked = match op.check(cx, &tables, now, rerun) {
        // Its first run may have committed, and what came since refuses it now: whether it
        // landed cannot be told (one that visibly landed passed its check above). An acquire
        // that writes is refused as stale only so: run again, it finds its grant in the lease
        // map, and its key written with a higher token since (a grant taken now is above
        // every token handed out). Its grant was visible from its first run on.
        Err(Error::StaleToken { .. } | Error::LockLost { .. })
            if rerun
                && matches!(
                    op,
                    Op::Put { .. } | Op::Fence { .. } | Op::Acquire { write: Some(_), .. }
                ) =>
        {
            return Err(Error::timed_out());
        }
        other => other?,
    };
    checked.apply(cx, map, &mut tables, now)
}

/// The error for a result of another kind than the operation's, which would be a defect.
pub(crate) fn unexpected(done: &Done) -> Error {
    Error::Storage(format!("internal error: an operation reported {done:?}"))
}

/// The store's tables, open in one write transaction.
pub(crate) struct Tables<'t> {
    meta: Option<Table<'t, &'static str, u64>>,
    leases: Option<Table<'t, &'static str, &'static [u8]>>,
    values: Option<Table<'t, &'static [u8], &'static [u8]>>,
    fences: Option<Table<'t, &'static str, u64>>,
    history: Option<HistoryTable<'t>>,
}

/// A table an operation did not say it uses: a defect, reported rather than panicked on.
fn unopened() -> Error {
    Error::Storage("internal error: an operation used a table it did not open".into())
}

impl<'t> Tables<'t> {
    /// Opens the tables that `op` uses (each open costs a lookup).
    pub(crate) fn open(cx: &dyn Context, txn: &'t WriteTransaction, op: &Op) -> Result<Tables<'t>> {
        #[allow(clippy::match_same_arms)] // A table: one row for each operation.
        let (meta, leases, values, fences) = match op {
            Op::Acquire { write, .. } => (
                true,
                cx.shared_last_token().is_none(),
                write.is_some(),
                false,
            ),
            Op::AcquireKind { .. } | Op::AcquireAll { .. } => (true, true, false, false),
            Op::Extend { .. } => (false, true, false, false),
            Op::Put { lease, .. } => (lease.is_none(), lease.is_some(), true, false),
            Op::Fence { .. } => (true, false, false, true),
            Op::RecordReleases { .. } => (false, true, false, false),
            Op::RecordEnds { seal, .. } => (seal.is_some(), false, false, false),
            Op::Reserve { .. } => (true, false, false, false),
        };
        // Grants record the ends of the leases they replace.
        let history = cx.keeps_history()
            && matches!(
                op,
                Op::Acquire { .. }
                    | Op::AcquireKind { .. }
                    | Op::AcquireAll { .. }
                    | Op::RecordReleases { .. }
                    | Op::RecordEnds { .. }
            );
        Ok(Tables {
            meta: meta.then(|| txn.open_table(META)).transpose()?,
            leases: leases.then(|| txn.open_table(LEASES)).transpose()?,
            values: values.then(|| txn.open_table(VALUES)).transpose()?,
            fences: fences.then(|| txn.open_table(FENCES)).transpose()?,
            history: history.then(|| HistoryTable::open(txn)).transpose()?,
        })
    }

    fn meta(&self) -> Result<&Table<'t, &'static str, u64>> {
        self.meta.as_ref().ok_or_else(unopened)
    }

    fn lease(&self, name: &str) -> Result<Option<Record>> {
        Record::find(self.leases.as_ref().ok_or_else(unopened)?, name)
    }

    /// The record of the lock `name` a holder's write is checked against: in the store's
    /// shared memory when its leases are kept there, else in the leases table.
    fn current(&self, cx: &dyn Context, name: &str) -> Result<Option<Record>> {
        match cx.shared_lease(name) {
            Some(record) => record,
            None => self.lease(name),
        }
    }

    /// The highest token granted: the counter, or above it the shared memory's own.
    fn granted(&self, cx: &dyn Context) -> Result<u64> {
        Ok(read_counter(self.meta()?)?.max(cx.shared_last_token().unwrap_or(0)))
    }

    /// Whether the key `key` holds exactly `value` (`None`: a tombstone) written with `token`.
    fn holds(&self, key: &[u8], token: u64, value: Option<&[u8]>) -> Result<bool> {
        match self.values.as_ref().ok_or_else(unopened)?.get(key)? {
            Some(record) => Ok(decode_value(record.value())? == (token, value)),
            None => Ok(false),
        }
    }

    /// The token the key `key` last accepted, and whether it holds a value.
    fn value_token(&self, key: &[u8]) -> Result<Option<(u64, bool)>> {
        match self.values.as_ref().ok_or_else(unopened)?.get(key)? {
            Some(record) => {
                let (token, value) = decode_value(record.value())?;
                Ok(Some((token, value.is_some())))
            }
            None => Ok(None),
        }
    }
}

fn mut_table<'a, 't, K: redb::Key + 'static, V: redb::Value + 'static>(
    table: &'a mut Option<Table<'t, K, V>>,
) -> Result<&'a mut Table<'t, K, V>> {
    table.as_mut().ok_or_else(unopened)
}

/// A write that a checked operation makes.
enum Write {
    Counter(u64),
    Reserve(u64),
    Seal(u64),
    Lease(String, Lease),
    /// The record of a name of several holders (or of one, of any kind).
    Record(String, Record),
    /// The encoded record of a fenced value or tombstone.
    Value(Vec<u8>, Vec<u8>),
    Fence(String, u64),
    /// Removes a few dead lease records, sparing the one just granted.
    Prune(String),
    /// Records how the lease `token` of `name` ended, unless that is on record already; with
    /// `true`, counts it too: the lease leaves the leases table (which it does once).
    Close(String, u64, Ended, bool),
}

/// The writes of an operation that passed its checks, and what it reports once they commit.
pub(crate) struct Plan {
    writes: Vec<Write>,
    pub(crate) done: Done,
    /// Whether the writes must be on disk before the result is reported.
    pub(crate) durable: bool,
}

impl Plan {
    fn new(done: Done) -> Plan {
        Plan {
            writes: Vec::new(),
            done,
            durable: true,
        }
    }

    /// Makes the planned writes. Fails only in the storage; that aborts the transaction.
    pub(crate) fn apply(
        self,
        cx: &dyn Context,
        tables: &mut Tables<'_>,
        now: u64,
    ) -> Result<Applied<Done>> {
        let mut ends = Ends::default();
        for write in self.writes {
            match write {
                Write::Counter(token) => {
                    drop(mut_table(&mut tables.meta)?.insert(COUNTER_KEY, token)?);
                }
                Write::Reserve(bound) => {
                    drop(mut_table(&mut tables.meta)?.insert(RESERVED_KEY, bound)?);
                }
                Write::Seal(bound) => {
                    drop(mut_table(&mut tables.meta)?.insert(SEALED_KEY, bound)?);
                }
                Write::Lease(name, lease) => {
                    let leases = mut_table(&mut tables.leases)?;
                    drop(leases.insert(name.as_str(), lease.encode().as_slice())?);
                }
                Write::Record(name, record) => {
                    let leases = mut_table(&mut tables.leases)?;
                    drop(leases.insert(name.as_str(), record.encode().as_slice())?);
                }
                Write::Value(key, record) => {
                    drop(mut_table(&mut tables.values)?.insert(key.as_slice(), record.as_slice())?);
                }
                Write::Fence(resource, token) => {
                    drop(mut_table(&mut tables.fences)?.insert(resource.as_str(), token)?);
                }
                Write::Prune(granting) => {
                    let pruned = prune(cx, mut_table(&mut tables.leases)?, now, &granting)?;
                    for (name, record) in pruned {
                        for lease in record.holders() {
                            let ended = judge(cx, record.kind(), lease, now, false)?;
                            close(cx, tables, &name, lease.token, &ended, Some(&mut ends))?;
                        }
                    }
                }
                Write::Close(name, token, ended, leaves) => {
                    close(
                        cx,
                        tables,
                        &name,
                        token,
                        &ended,
                        leaves.then_some(&mut ends),
                    )?;
                }
            }
        }
        Ok(Applied {
            value: self.done,
            durable: self.durable,
            ends,
        })
    }
}

/// What a check admitted.
pub(crate) enum Checked {
    /// The writes to make in the tables.
    Plan(Plan),
    /// A grant to make in the store's lease map first (an [`Op::Acquire`] where the leases are
    /// kept there), then its value write.
    Grant(MapGrant),
}

/// An exclusive grant in the lease map that a check admitted, with the value to write under the
/// new token: the key admits any token above those handed out at the check.
pub(crate) struct MapGrant {
    name: String,
    ttl: Duration,
    holder: ProcessId,
    live: u64,
    ticket: Option<u64>,
    write: Option<(Vec<u8>, Vec<u8>)>,
}

impl Checked {
    /// Makes the writes: a grant in `map` first, if any, and then the tables'. The map's grant
    /// admits the lock again, as it stands then (the map is not the transaction's: a process
    /// may have granted it since the check), and a refusal there publishes nothing: it comes
    /// before every table write, so that a refusal writes nothing here either. Any other
    /// failure is the storage's, and aborts the transaction.
    pub(crate) fn apply(
        self,
        cx: &dyn Context,
        map: &dyn LeaseMap,
        tables: &mut Tables<'_>,
        now: u64,
    ) -> Result<Applied<Done>> {
        match self {
            Checked::Plan(plan) => plan.apply(cx, tables, now),
            Checked::Grant(grant) => {
                let (token, expires_ns) = map.grant_exclusive(
                    &grant.name,
                    grant.ttl,
                    grant.holder,
                    grant.live,
                    grant.ticket,
                )?;
                let mut plan = Plan::new(Done::Granted { token, expires_ns });
                // Writes of the key take turns on this transaction: no token above this one has
                // written it since the check. (Across a death before the reply, not so: the
                // rerun finds its grant in the map, and `plan_value` may then refuse it as
                // stale, which `run` reports as an unknown outcome; the grant was visible
                // meanwhile. README, limits.)
                if let Some((key, value)) = grant.write {
                    let record = encode_value(token, Some(&value));
                    plan.writes.push(Write::Value(key, record));
                }
                plan.apply(cx, tables, now)
            }
        }
    }
}

impl Op {
    /// Checks the operation against the tables at `now` (`CLOCK_BOOTTIME` ns): a refusal, or what
    /// to write. A `rerun` was run before by a combiner that died before it reported the
    /// result, so its first run may have committed.
    pub(crate) fn check(
        &self,
        cx: &dyn Context,
        tables: &Tables<'_>,
        now: u64,
        rerun: bool,
    ) -> Result<Checked> {
        if let Op::Acquire {
            name,
            ttl,
            write,
            holder,
            live,
            ticket,
        } = self
        {
            // Where the leases are in the store's shared memory, the grant is made there, by
            // the apply step, inside the write transaction that writes the value, so that no
            // token above the new one can have written the key (writes take turns on the
            // transaction). Its requester withdraws it if the transaction then fails. A run
            // again finds its own grant there and writes the value if the key does not hold
            // it yet.
            if let Some(current) = cx.shared_lease(name) {
                let current = current?;
                if let Some(done @ Done::Granted { token, .. }) =
                    regrant(current.as_ref(), *holder, *live)
                {
                    let mut plan = Plan::new(done);
                    if let Some((key, value)) = write {
                        if !(rerun && tables.holds(key, token, Some(value))?) {
                            plan_value(tables, &mut plan, key, Some(value), token, token)?;
                        }
                    }
                    return Ok(Checked::Plan(plan));
                }
                admit_grant(cx, name, current.as_ref(), Kind::Exclusive, *ticket, now)?;
                if let Some((key, _)) = write {
                    // The grant's token will be above every token handed out so far.
                    let next = cx.shared_last_token().unwrap_or(0).saturating_add(1);
                    if let Some((highest, _)) = tables.value_token(key)? {
                        admit(next, Some(highest))?;
                    }
                }
                return Ok(Checked::Grant(MapGrant {
                    name: name.clone(),
                    ttl: *ttl,
                    holder: *holder,
                    live: *live,
                    ticket: *ticket,
                    write: write.clone(),
                }));
            }
        }
        self.plan(cx, tables, now, rerun).map(Checked::Plan)
    }

    /// [`Op::check`] of an operation that writes only the tables: a refusal, or the plan of
    /// its writes.
    fn plan(&self, cx: &dyn Context, tables: &Tables<'_>, now: u64, rerun: bool) -> Result<Plan> {
        match self {
            Op::Acquire {
                name,
                ttl,
                write,
                holder,
                live,
                ticket,
            } => {
                let current = tables.lease(name)?;
                // Run again after its grant committed (by a process that died before it
                // reported it): the same grant, not a second one.
                if let Some(done) = regrant(current.as_ref(), *holder, *live) {
                    return Ok(Plan::new(done));
                }
                check_join(cx, name, current.as_ref(), Kind::Exclusive, now)?;
                let blocker = blocker(cx, current.as_ref(), now)?;
                check_turn(cx, name, blocker.as_ref(), *ticket, now)?;
                let closes = plan_closes(cx, name, current.as_ref(), &[], now)?;
                let token = read_counter(tables.meta()?)?
                    .checked_add(1)
                    .ok_or_else(|| Error::Storage("the token counter is exhausted".into()))?;
                let expires_ns = now + duration_ns(*ttl);
                let mut plan = Plan::new(Done::Granted { token, expires_ns });
                if let Some((key, value)) = write {
                    plan_value(tables, &mut plan, key, Some(value), token, token)?;
                }
                // A lease need not outlive its process, so in single-process mode a grant
                // commits without an fsync; tokens are then reserved durably a block at a time,
                // so that no token is handed out twice after a crash loses the counter's latest
                // value.
                let reserve = if cx.relaxed() {
                    reservation(tables.meta()?, token)?
                } else {
                    None
                };
                plan.durable = write.is_some() || !cx.relaxed() || reserve.is_some();
                plan.writes.push(Write::Counter(token));
                plan.writes.extend(reserve.map(Write::Reserve));
                let lease = Lease {
                    token,
                    holder: *holder,
                    boot_id: cx.boot_id(),
                    granted_ns: now,
                    expires_ns,
                    live: *live,
                };
                plan.writes.push(Write::Lease(name.clone(), lease));
                plan.writes.extend(closes);
                plan.writes.push(Write::Prune(name.clone()));
                Ok(plan)
            }
            Op::AcquireKind {
                name,
                kind,
                ttl,
                holder,
                live,
                ticket,
            } => {
                let current = tables.lease(name)?;
                if let Some(done) = regrant(current.as_ref(), *holder, *live) {
                    return Ok(Plan::new(done));
                }
                let mut holders = admit_grant(cx, name, current.as_ref(), *kind, *ticket, now)?;
                let closes = plan_closes(cx, name, current.as_ref(), &holders, now)?;
                let (token, mut plan) = plan_tokens(cx, tables, 1)?;
                plan.writes.extend(closes);
                let lease = new_lease(cx, token, *holder, *live, now, *ttl);
                plan.done = Done::Granted {
                    token,
                    expires_ns: lease.expires_ns,
                };
                holders.push(lease);
                let record = match kind {
                    Kind::Exclusive => Record::Exclusive(lease),
                    Kind::Shared | Kind::Semaphore(_) => Record::Group(Group {
                        kind: *kind,
                        holders,
                    }),
                };
                plan.writes.push(Write::Record(name.clone(), record));
                plan.writes.push(Write::Prune(name.clone()));
                Ok(plan)
            }
            Op::AcquireAll {
                names,
                ttl,
                holder,
                lives,
            } => {
                if names.len() != lives.len() || names.is_empty() {
                    return Err(Error::Storage(
                        "internal error: an acquire of several locks without a liveness id each"
                            .into(),
                    ));
                }
                let mut records = Vec::with_capacity(names.len());
                for name in names {
                    records.push(tables.lease(name)?);
                }
                // Run again after its grant committed: every name still holds its grant.
                let again: Option<Vec<Done>> = records
                    .iter()
                    .zip(lives)
                    .map(|(record, live)| regrant(record.as_ref(), *holder, *live))
                    .collect();
                if let Some(Done::Granted { token, expires_ns }) =
                    again.as_deref().and_then(<[Done]>::first)
                {
                    return Ok(Plan::new(Done::GrantedAll {
                        first: *token,
                        count: u32::try_from(names.len()).unwrap_or(u32::MAX),
                        expires_ns: *expires_ns,
                    }));
                }
                // Every name is checked before anything is planned: all or none.
                let mut closes = Vec::new();
                for (record, name) in records.iter().zip(names) {
                    check_join(cx, name, record.as_ref(), Kind::Exclusive, now)?;
                    closes.extend(plan_closes(cx, name, record.as_ref(), &[], now)?);
                }
                let count = u32::try_from(names.len())
                    .map_err(|_| Error::invalid("too many locks in one acquire"))?;
                let (first, mut plan) = plan_tokens(cx, tables, u64::from(count))?;
                let expires_ns = now + duration_ns(*ttl);
                plan.done = Done::GrantedAll {
                    first,
                    count,
                    expires_ns,
                };
                // Recorded before any pruning, which could take another of the names' records
                // out and judge it without knowing it is being taken over.
                plan.writes.extend(closes);
                for ((name, live), token) in names.iter().zip(lives).zip(first..) {
                    let lease = new_lease(cx, token, *holder, *live, now, *ttl);
                    plan.writes.push(Write::Lease(name.clone(), lease));
                    plan.writes.push(Write::Prune(name.clone()));
                }
                Ok(plan)
            }
            Op::Extend { name, token, ttl } => {
                let current = tables.lease(name)?;
                let mut lease = check_current(cx, current.as_ref(), *token, now)?;
                lease.expires_ns = now + duration_ns(*ttl);
                let mut plan = Plan::new(Done::Extended {
                    expires_ns: lease.expires_ns,
                });
                plan.durable = false;
                match current {
                    Some(Record::Group(mut group)) => {
                        for held in &mut group.holders {
                            if held.token == *token {
                                *held = lease;
                            }
                        }
                        plan.writes
                            .push(Write::Record(name.clone(), Record::Group(group)));
                    }
                    _ => plan.writes.push(Write::Lease(name.clone(), lease)),
                }
                Ok(plan)
            }
            Op::Put {
                key,
                value,
                token,
                lease,
            } => {
                // A holder's write: its own token is granted, if its lease is current.
                let granted = match lease {
                    Some(name) => {
                        match check_current(cx, tables.current(cx, name)?.as_ref(), *token, now) {
                            Ok(_) => *token,
                            // Its first run committed, and the lease ran out since: that outcome,
                            // not a refusal of a write that landed. (Whether the key held a value
                            // before is not known any more.)
                            Err(_) if rerun && tables.holds(key, *token, value.as_deref())? => {
                                return Ok(Plan::new(Done::Put { existed: true }));
                            }
                            Err(err) => return Err(err),
                        }
                    }
                    None => tables.granted(cx)?,
                };
                let mut plan = Plan::new(Done::Put { existed: false });
                let existed =
                    plan_value(tables, &mut plan, key, value.as_deref(), *token, granted)?;
                plan.done = Done::Put { existed };
                Ok(plan)
            }
            Op::Fence { resource, token } => {
                check_granted(*token, tables.granted(cx)?)?;
                let highest = tables
                    .fences
                    .as_ref()
                    .ok_or_else(unopened)?
                    .get(resource.as_str())?
                    .map(|h| h.value());
                admit(*token, highest)?;
                let mut plan = Plan::new(Done::Fenced);
                if highest != Some(*token) {
                    plan.writes.push(Write::Fence(resource.clone(), *token));
                }
                Ok(plan)
            }
            Op::RecordReleases { releases } => {
                let mut plan = Plan::new(Done::Recorded);
                // Without a history to record into, the grants count these ends themselves.
                if !cx.keeps_history() {
                    return Ok(plan);
                }
                // A record of what happened, not a write anyone was promised: no fsync of
                // its own.
                plan.durable = false;
                for (name, token, at) in releases {
                    let Some(record) = tables.lease(name)? else {
                        continue;
                    };
                    // A lease whose liveness lock is still held was not released.
                    if let Some(lease) = record
                        .holder(*token)
                        .filter(|lease| !cx.is_held(lease.live).unwrap_or(true))
                    {
                        let (ending, at) = released_at(lease, *at);
                        let ended = Ended::new(cx, record.kind(), lease, ending, at);
                        // The lease stays in the table until a grant or the pruning takes it
                        // out: they count it.
                        plan.writes
                            .push(Write::Close(name.clone(), *token, ended, false));
                    }
                }
                Ok(plan)
            }
            Op::RecordEnds { ends, seal } => {
                let mut plan = Plan::new(Done::Recorded);
                if let Some((last, seen)) = seal {
                    let before = Durable::read(tables.meta()?)?;
                    let after = before.seal(*last, *seen);
                    if after.counter != before.counter {
                        plan.writes.push(Write::Counter(after.counter));
                    }
                    if after.sealed != before.sealed {
                        plan.writes.push(Write::Seal(after.sealed));
                    }
                }
                // Durable, although a record of what happened rather than a write anyone was
                // promised: a server (exclusive mode) would otherwise commit it without an fsync,
                // and its death would lose it.
                if cx.keeps_history() {
                    for (name, token, ended) in ends {
                        plan.writes
                            .push(Write::Close(name.clone(), *token, *ended, false));
                    }
                }
                Ok(plan)
            }
            Op::Reserve { at_least } => {
                let before = Durable::read(tables.meta()?)?;
                let after = before.reserve(*at_least);
                let mut plan = Plan::new(Done::Reserved {
                    bound: after.reserved,
                });
                if after.reserved != before.reserved {
                    plan.writes.push(Write::Reserve(after.reserved));
                }
                // Breaks a seal (`Durable::reserve`).
                if after.sealed != before.sealed {
                    plan.writes.push(Write::Seal(after.sealed));
                }
                Ok(plan)
            }
        }
    }
}

/// The grant that `current` already holds for the requester `holder` with liveness id `live`:
/// a request run again after its grant committed (by a process that died before it reported
/// it) gets the same grant, not a second one.
fn regrant(current: Option<&Record>, holder: ProcessId, live: u64) -> Option<Done> {
    current?
        .holders()
        .iter()
        .find(|lease| lease.live == live && lease.holder == holder)
        .map(|lease| Done::Granted {
            token: lease.token,
            expires_ns: lease.expires_ns,
        })
}

/// Records the end of the lease `token` of `name` (unless the store keeps no history, or it is
/// on record already); counts it into `ends` when the lease leaves the leases table now (which
/// it does once).
fn close(
    cx: &dyn Context,
    tables: &mut Tables<'_>,
    name: &str,
    token: u64,
    ended: &Ended,
    ends: Option<&mut Ends>,
) -> Result<()> {
    if let Some(history) = tables.history.as_mut() {
        history.record(cx, name, token, ended)?;
    }
    if let Some(ends) = ends {
        ends.add(ended.ending());
    }
    Ok(())
}

/// Plans recording the ends of the leases of `current`, the record of `name` that a grant is
/// replacing now, other than those it keeps (`kept`, live ones it joins).
fn plan_closes(
    cx: &dyn Context,
    name: &str,
    current: Option<&Record>,
    kept: &[Lease],
    now: u64,
) -> Result<Vec<Write>> {
    let mut closes = Vec::new();
    let kind = current.map_or(Kind::Exclusive, Record::kind);
    for lease in dropped(current, kept) {
        let ended = judge(cx, kind, lease, now, true)?;
        closes.push(Write::Close(name.to_owned(), lease.token, ended, true));
    }
    Ok(closes)
}

/// Plans taking `count` tokens from the counter: the first of them, and a plan with the
/// counter's writes. As for `Acquire`: in single-process mode a grant commits without an fsync
/// unless it passes the durable reservation of tokens.
fn plan_tokens(cx: &dyn Context, tables: &Tables<'_>, count: u64) -> Result<(u64, Plan)> {
    let counter = read_counter(tables.meta()?)?;
    let exhausted = || Error::Storage("the token counter is exhausted".into());
    let first = counter.checked_add(1).ok_or_else(exhausted)?;
    let last = counter.checked_add(count).ok_or_else(exhausted)?;
    let reserve = if cx.relaxed() {
        reservation(tables.meta()?, last)?
    } else {
        None
    };
    let mut plan = Plan::new(Done::Fenced);
    plan.durable = !cx.relaxed() || reserve.is_some();
    plan.writes.push(Write::Counter(last));
    plan.writes.extend(reserve.map(Write::Reserve));
    Ok((first, plan))
}

/// Plans writing (or, with `None`, deleting) `key` with `token` if no higher token was accepted
/// for it. `granted` is the highest token granted; a token above it is a forgery. Returns
/// whether the key held a value before.
fn plan_value(
    tables: &Tables<'_>,
    plan: &mut Plan,
    key: &[u8],
    value: Option<&[u8]>,
    token: u64,
    granted: u64,
) -> Result<bool> {
    check_granted(token, granted)?;
    let existed = match tables.value_token(key)? {
        Some((highest, present)) => {
            admit(token, Some(highest))?;
            present
        }
        None => false,
    };
    plan.writes
        .push(Write::Value(key.to_vec(), encode_value(token, value)));
    Ok(existed)
}
