//! The lease rules, admission first (`admit_grant`): when a lease still excludes others, what a
//! new grant of each kind must find in the name's record, whose turn a waiting acquire's is,
//! whether a holder's lease is still current, what state a record tells of, and the pruning of
//! dead records.
//!
//! Every grant of any kind is a lease of its own: its own token from the store's one counter, its
//! own liveness id and TTL. Holders of a semaphore or shared lock share one record of the name
//! (`rules/record.rs`, format 3); a grant that is no longer live (released, expired, holder dead)
//! frees its place at once and is dropped from the record when it is next written.

use std::ops::Bound;
use std::time::{Duration, SystemTime};

use redb::{ReadableTable, Table};

use crate::base::clock::ProcessId;
use crate::base::error::{Error, Result};
use crate::base::limits::duration_ns;
use crate::rules::context::Context;
use crate::rules::info::{LockInfo, LockState};
use crate::rules::kind::{Kind, MAX_HOLDERS};
use crate::rules::record::{Lease, Record};

/// Lease records examined for pruning by each grant; two per grant keeps dead records from
/// outnumbering the grants that made them.
const PRUNE_PER_GRANT: usize = 2;

/// Whether `lease` still excludes others: granted in this boot, not expired, and its holder
/// still holds the liveness lock.
pub(crate) fn is_live(cx: &dyn Context, lease: &Lease, now: u64) -> Result<bool> {
    Ok(lease.boot_id == cx.boot_id() && now < lease.expires_ns && cx.is_held(lease.live)?)
}

/// The live grants of `current` (the name's record) that a new grant of `kind` would hold the
/// name together with, or the refusal: [`Error::Locked`] when a live grant excludes it (an
/// exclusive holder, a shared holder for an exclusive acquire, every permit taken, a lock of
/// another kind), [`Error::PermitsMismatch`] when live permits of the name were granted with
/// another count.
pub(crate) fn check_join(
    cx: &dyn Context,
    name: &str,
    current: Option<&Record>,
    kind: Kind,
    now: u64,
) -> Result<Vec<Lease>> {
    let Some(record) = current else {
        return Ok(Vec::new());
    };
    let mut live = Vec::new();
    for lease in record.holders() {
        if is_live(cx, lease, now)? {
            live.push(*lease);
        }
    }
    // The grant that frees its place first, named in a refusal.
    let Some(first) = live.iter().min_by_key(|lease| lease.expires_ns).copied() else {
        return Ok(live);
    };
    let locked = || Error::Locked {
        name: name.to_owned(),
        token: first.token,
        pid: first.holder.pid,
        remaining: Duration::from_nanos(first.expires_ns - now),
    };
    match (record.kind(), kind) {
        (Kind::Semaphore(permits), Kind::Semaphore(requested)) if permits != requested => {
            Err(Error::PermitsMismatch { permits, requested })
        }
        (Kind::Semaphore(permits), Kind::Semaphore(_)) if live.len() >= permits as usize => {
            Err(locked())
        }
        (Kind::Semaphore(_), Kind::Semaphore(_)) => Ok(live),
        (Kind::Shared, Kind::Shared) if live.len() < MAX_HOLDERS as usize => Ok(live),
        _ => Err(locked()),
    }
}

/// Admits a grant of `name` as `kind` beside `record`: returns the live holders it would hold
/// the name with ([`check_join`]) once it is its turn ([`check_turn`]). A grant that would hold
/// the name together with live holders waits its turn behind every queued waiter, also when it
/// only tries once.
pub(crate) fn admit_grant(
    cx: &dyn Context,
    name: &str,
    record: Option<&Record>,
    kind: Kind,
    ticket: Option<u64>,
    now: u64,
) -> Result<Vec<Lease>> {
    let joined = check_join(cx, name, record, kind, now)?;
    // Beside live holders, a refusal for a queued waiter names the one of them that frees its
    // place first, as `check_join` found them: asked again, a holder that died since (its
    // process killed between the two looks) would leave none, and the refusal would name
    // token 0.
    let (ticket, current) = match joined.iter().min_by_key(|lease| lease.expires_ns) {
        None => (ticket, blocker(cx, record, now)?),
        Some(first) => (Some(ticket.unwrap_or(u64::MAX)), Some(*first)),
    };
    check_turn(cx, name, current.as_ref(), ticket, now)?;
    Ok(joined)
}

/// A lease granted now to `holder` (liveness id `live`) for `ttl`, on this boot.
pub(crate) fn new_lease(
    cx: &dyn Context,
    token: u64,
    holder: ProcessId,
    live: u64,
    now: u64,
    ttl: Duration,
) -> Lease {
    Lease {
        token,
        holder,
        boot_id: cx.boot_id(),
        granted_ns: now,
        expires_ns: now + duration_ns(ttl),
        live,
    }
}

/// The live grant of `record` that a waiter of the name waits on: the one that frees its place
/// first; an exclusive record's lease itself, live or not (the wait tests it).
pub(crate) fn blocker(
    cx: &dyn Context,
    record: Option<&Record>,
    now: u64,
) -> Result<Option<Lease>> {
    match record {
        None => Ok(None),
        Some(Record::Exclusive(lease)) => Ok(Some(*lease)),
        Some(Record::Group(group)) => {
            let mut first: Option<Lease> = None;
            for lease in &group.holders {
                if is_live(cx, lease, now)? && first.is_none_or(|f| lease.expires_ns < f.expires_ns)
                {
                    first = Some(*lease);
                }
            }
            Ok(first)
        }
    }
}

/// Refuses a waiting acquire of `name` (whose record's blocking lease is `current`) with
/// [`Error::Locked`] while a waiter with an earlier ticket than `ticket` waits for it, so that
/// waiting acquires are granted in the order they began to wait, and none starves while others
/// cycle. A try-once acquire (`None`) takes a free lock even while waiters queue, as a fair
/// lock's `tryLock` does in Java; it never stands in a waiter's way for long, since a release
/// wakes the oldest waiter at once.
pub(crate) fn check_turn(
    cx: &dyn Context,
    name: &str,
    current: Option<&Lease>,
    ticket: Option<u64>,
    now: u64,
) -> Result<()> {
    match ticket {
        Some(ticket) if cx.waits_before(name, ticket, now) => Err(Error::Locked {
            name: name.to_owned(),
            token: current.map_or(0, |lease| lease.token),
            pid: current.map_or(0, |lease| lease.holder.pid),
            remaining: Duration::ZERO,
        }),
        _ => Ok(()),
    }
}

/// Checks that the lease `token` is held by the lock's current record, `current` (as its one
/// lease, or as one of its grants), and unexpired.
pub(crate) fn check_current(
    cx: &dyn Context,
    current: Option<&Record>,
    token: u64,
    now: u64,
) -> Result<Lease> {
    match current.and_then(|record| record.holder(token)) {
        Some(lease) if lease.boot_id == cx.boot_id() && now < lease.expires_ns => Ok(*lease),
        _ => Err(Error::LockLost {
            token,
            current: current
                .and_then(Record::latest)
                .map(|lease| lease.token)
                .filter(|&t| t != token),
        }),
    }
}

/// What `record` tells of the name: one entry a grant it holds, latest first. A record of
/// several holders lists every grant it still holds, live or not.
pub(crate) fn describe_record(
    cx: &dyn Context,
    name: &str,
    record: &Record,
    now: u64,
) -> Result<Vec<LockInfo>> {
    let mut holders = record.holders().to_vec();
    holders.sort_by_key(|lease| std::cmp::Reverse(lease.token));
    holders
        .iter()
        .map(|lease| describe(cx, name, record.kind(), lease, now))
        .collect()
}

fn describe(cx: &dyn Context, name: &str, kind: Kind, lease: &Lease, now: u64) -> Result<LockInfo> {
    let this_boot = lease.boot_id == cx.boot_id();
    let state = if !this_boot {
        LockState::HolderDead
    } else if !cx.is_held(lease.live)? {
        if lease.holder.is_alive() {
            LockState::Released
        } else {
            LockState::HolderDead
        }
    } else if now >= lease.expires_ns {
        LockState::Expired
    } else {
        LockState::Held
    };
    let wall = SystemTime::now();
    let at = |ns: u64| {
        if ns >= now {
            wall + Duration::from_nanos(ns - now)
        } else {
            wall - Duration::from_nanos(now - ns)
        }
    };
    Ok(LockInfo {
        name: name.to_owned(),
        token: lease.token,
        pid: lease.holder.pid,
        granted_at: at(lease.granted_ns),
        expires_at: at(lease.expires_ns),
        remaining: if this_boot {
            Duration::from_nanos(lease.expires_ns.saturating_sub(now))
        } else {
            Duration::ZERO
        },
        state,
        kind,
    })
}

/// Removes dead lease records, a few per grant, resuming where the last grant stopped, so that
/// released and expired records do not pile up. Returns the records it removed.
pub(crate) fn prune(
    cx: &dyn Context,
    leases: &mut Table<&str, &[u8]>,
    now: u64,
    granting: &str,
) -> Result<Vec<(String, Record)>> {
    let mut cursor = cx.prune_cursor().lock();
    let mut dead = Vec::new();
    let mut seen = 0;
    for entry in leases.range::<&str>((Bound::Excluded(cursor.as_str()), Bound::Unbounded))? {
        let (name, record) = entry?;
        seen += 1;
        let name = name.value().to_owned();
        if name != granting {
            let record = Record::decode(record.value())?;
            let mut live = false;
            for lease in record.holders() {
                live |= is_live(cx, lease, now)?;
            }
            if !live {
                dead.push((name.clone(), record));
            }
        }
        *cursor = name;
        if seen == PRUNE_PER_GRANT {
            break;
        }
    }
    if seen < PRUNE_PER_GRANT {
        cursor.clear();
    }
    for (name, _) in &dead {
        leases.remove(name.as_str())?;
    }
    Ok(dead)
}

/// The token of a live lease of `record` that is the waiting thread's own (`mine`), when a wait
/// for the name as `kind` could end only with that lease's end: refused at once as
/// [`Error::WouldDeadlock`] rather than waited for. A permit of a semaphore waits for any one
/// permit of it to end, so it is refused only when every live permit is the thread's own; any
/// other wait (exclusive, shared behind an exclusive holder or a queued exclusive waiter, any
/// kind behind holders of another kind) needs every lease of the record gone, so one of the
/// thread's own refuses it.
pub(crate) fn own_blocker(
    cx: &dyn Context,
    record: Option<&Record>,
    kind: Kind,
    mine: &dyn Fn(u64) -> bool,
    now: u64,
) -> Result<Option<u64>> {
    let Some(record) = record else {
        return Ok(None);
    };
    let mut own = None;
    let mut others = false;
    for lease in record.holders() {
        if !is_live(cx, lease, now)? {
            continue;
        }
        if mine(lease.token) {
            own = own.or(Some(lease.token));
        } else {
            others = true;
        }
    }
    let one_permit_frees_it = matches!(
        (kind, record.kind()),
        (Kind::Semaphore(_), Kind::Semaphore(_))
    );
    Ok(if one_permit_frees_it && others {
        None
    } else {
        own
    })
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::rules::context::TestHost;
    use crate::rules::record::Group;

    /// A permit tried once beside a live holder, while a waiter is queued: refused, naming that
    /// holder, also when the holder's process is killed between the two looks at it (the
    /// torture run's `locked 0`, `--write-log --seed 44`).
    #[test]
    fn a_refusal_for_a_queued_waiter_names_the_live_holder_it_found() {
        let holder = Lease {
            token: 7,
            holder: ProcessId {
                pid: 42,
                start_time: 1,
            },
            boot_id: [0; 16],
            granted_ns: 0,
            expires_ns: 1_000,
            live: 3,
        };
        let kind = Kind::Semaphore(3);
        let record = Record::Group(Group {
            kind,
            holders: vec![holder],
        });
        // The holder's process is killed right after the first look at its liveness lock.
        let cx = TestHost {
            held: Cell::new(1),
            waiting: true,
            ..TestHost::default()
        };
        match admit_grant(&cx, "sem", Some(&record), kind, None, 10) {
            Err(Error::Locked { token, pid, .. }) => assert_eq!((token, pid), (7, 42)),
            other => panic!("{other:?}"),
        }
    }
}
