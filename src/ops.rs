//! Write operations as data.
//!
//! Every change to the store is an [`Op`]: a plain value that can be queued, batched with
//! others in one transaction and carried to another process. An operation runs in two steps.
//! [`Op::check`] reads the tables and either refuses or returns a [`Plan`]: the writes to make
//! and the result to report once they commit. [`Plan::apply`] makes the writes and cannot refuse.
//! `check` sees the tables only through `&Tables`, and redb writes only through `&mut Table`, so
//! a refusal writes nothing by construction.

use std::sync::Arc;
use std::time::Duration;

use redb::{ReadableTable, Table, WriteTransaction};

use crate::clock::ProcessId;
use crate::commit::Applied;
use crate::db::{FENCES, LEASES, META, VALUES};
use crate::error::{Error, Result};
use crate::limits::{check_granted, duration_ns};
use crate::record::{decode_value, encode_value, Lease};
use crate::store::Inner;
use crate::tokens::{read_counter, reservation, COUNTER_KEY, RESERVED_KEY};
use crate::values::admit;

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
}

/// What an operation reports once its writes committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Done {
    Granted {
        token: u64,
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
}

/// A table an operation did not say it uses: a defect, reported rather than panicked on.
fn unopened() -> Error {
    Error::Storage("internal error: an operation used a table it did not open".into())
}

impl<'t> Tables<'t> {
    /// Opens the tables that `op` uses (each open costs a lookup).
    pub(crate) fn open(txn: &'t WriteTransaction, op: &Op) -> Result<Tables<'t>> {
        let (meta, leases, values, fences) = match op {
            Op::Acquire { write, .. } => (true, true, write.is_some(), false),
            Op::Extend { .. } => (false, true, false, false),
            Op::Put { lease, .. } => (lease.is_none(), lease.is_some(), true, false),
            Op::Fence { .. } => (true, false, false, true),
        };
        Ok(Tables {
            meta: meta.then(|| txn.open_table(META)).transpose()?,
            leases: leases.then(|| txn.open_table(LEASES)).transpose()?,
            values: values.then(|| txn.open_table(VALUES)).transpose()?,
            fences: fences.then(|| txn.open_table(FENCES)).transpose()?,
        })
    }

    fn meta(&self) -> Result<&Table<'t, &'static str, u64>> {
        self.meta.as_ref().ok_or_else(unopened)
    }

    fn lease(&self, name: &str) -> Result<Option<Lease>> {
        Lease::find(self.leases.as_ref().ok_or_else(unopened)?, name)
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
    Lease(String, Lease),
    /// The encoded record of a fenced value or tombstone.
    Value(Vec<u8>, Vec<u8>),
    Fence(String, u64),
    /// Removes a few dead lease records, sparing the one just granted.
    Prune(String),
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
        inner: &Inner,
        tables: &mut Tables<'_>,
        now: u64,
    ) -> Result<Applied<Done>> {
        for write in self.writes {
            match write {
                Write::Counter(token) => {
                    drop(mut_table(&mut tables.meta)?.insert(COUNTER_KEY, token)?);
                }
                Write::Reserve(bound) => {
                    drop(mut_table(&mut tables.meta)?.insert(RESERVED_KEY, bound)?);
                }
                Write::Lease(name, lease) => {
                    if let Some(journal) = &inner.journal {
                        journal.note(&name, &lease);
                    }
                    let leases = mut_table(&mut tables.leases)?;
                    drop(leases.insert(name.as_str(), lease.encode().as_slice())?);
                }
                Write::Value(key, record) => {
                    drop(mut_table(&mut tables.values)?.insert(key.as_slice(), record.as_slice())?);
                }
                Write::Fence(resource, token) => {
                    drop(mut_table(&mut tables.fences)?.insert(resource.as_str(), token)?)
                }
                Write::Prune(granting) => {
                    inner.prune(mut_table(&mut tables.leases)?, now, &granting)?;
                }
            }
        }
        Ok(Applied {
            value: self.done,
            durable: self.durable,
        })
    }
}

impl Op {
    /// Checks the operation against the tables at `now` (`CLOCK_BOOTTIME` ns): a refusal, or the
    /// plan of its writes. A `rerun` was run before by a combiner that died before it reported
    /// the result, so its first run may have committed.
    pub(crate) fn check(
        &self,
        inner: &Arc<Inner>,
        tables: &Tables<'_>,
        now: u64,
        rerun: bool,
    ) -> Result<Plan> {
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
                if let Some(lease) = &current {
                    // Run again after its grant committed (by a process that died before it
                    // reported it): the same grant, not a second one.
                    if lease.live == *live && lease.holder == *holder {
                        return Ok(Plan::new(Done::Granted {
                            token: lease.token,
                            expires_ns: lease.expires_ns,
                        }));
                    }
                    inner.check_free(lease, now)?;
                }
                inner.check_turn(name, current.as_ref(), *ticket, now)?;
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
                let reserve = if inner.relaxed() {
                    reservation(tables.meta()?, token)?
                } else {
                    None
                };
                plan.durable = write.is_some() || !inner.relaxed() || reserve.is_some();
                plan.writes.push(Write::Counter(token));
                plan.writes.extend(reserve.map(Write::Reserve));
                let lease = Lease {
                    token,
                    holder: *holder,
                    boot_id: inner.boot_id,
                    granted_ns: now,
                    expires_ns,
                    live: *live,
                };
                plan.writes.push(Write::Lease(name.clone(), lease));
                plan.writes.push(Write::Prune(name.clone()));
                Ok(plan)
            }
            Op::Extend { name, token, ttl } => {
                let mut lease = inner.check_current(tables.lease(name)?, *token, now)?;
                lease.expires_ns = now + duration_ns(*ttl);
                let mut plan = Plan::new(Done::Extended {
                    expires_ns: lease.expires_ns,
                });
                plan.durable = false;
                plan.writes.push(Write::Lease(name.clone(), lease));
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
                    Some(name) => match inner.check_current(tables.lease(name)?, *token, now) {
                        Ok(_) => *token,
                        // Its first run committed, and the lease ran out since: that outcome,
                        // not a refusal of a write that landed. (Whether the key held a value
                        // before is not known any more.)
                        Err(_) if rerun && tables.holds(key, *token, value.as_deref())? => {
                            return Ok(Plan::new(Done::Put { existed: true }));
                        }
                        Err(err) => return Err(err),
                    },
                    None => read_counter(tables.meta()?)?,
                };
                let mut plan = Plan::new(Done::Put { existed: false });
                let existed =
                    plan_value(tables, &mut plan, key, value.as_deref(), *token, granted)?;
                plan.done = Done::Put { existed };
                Ok(plan)
            }
            Op::Fence { resource, token } => {
                check_granted(*token, read_counter(tables.meta()?)?)?;
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
        }
    }
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
