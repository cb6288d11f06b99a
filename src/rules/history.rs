//! The grant history of each lock: who held it, with which token, from when to when, and how
//! the lease ended. It answers the operator's question "who held payment-export at 03:12, and
//! why did the next job wait?".
//!
//! A lease's entry is written when its end is known, in the transaction that learns it: the
//! grant that replaces the lease (or drops it from a group), the pruning of a dead record, or
//! the note of the releases a process made, which it writes as it closes the store (a release
//! itself writes nothing to the file). Until then the lease is in the leases table, and a read
//! of the history adds it with its state at that moment. Each lock keeps its latest
//! [`HISTORY_PER_LOCK`] entries, and the store the histories of at most [`HISTORY_LOCKS`]
//! locks.
//!
//! How a lease ended is judged from what is known when its entry is written: the store's recent
//! releases (`ring/activity.rs`), its holder's liveness lock, whether its process still runs, and
//! its expiry.

use std::ops::Bound;
use std::time::{Duration, SystemTime};

use redb::{ReadableTable, ReadableTableMetadata, Table};

use crate::base::error::{Error, Result};
use crate::rules::context::Context;
use crate::rules::kind::Kind;
use crate::rules::metrics::{unix_ns_at, unix_ns_now, Counter};
use crate::rules::record::{Lease, Record};

/// Entries kept for each lock, its latest.
pub const HISTORY_PER_LOCK: usize = 32;
/// Locks whose history the store keeps: past it, a grant removes the history of a lock whose
/// last entry is among the oldest, so that locks named once each (one per job) cannot grow the
/// file without bound.
pub const HISTORY_LOCKS: u64 = 10_000;

/// How a lease ended, or that it has not.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use fencelock::Ending;
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// # let store = fencelock::Store::open(&path)?;
/// store.acquire("nightly", Duration::from_secs(30))?.release()?;
/// let _next = store.acquire("nightly", Duration::from_secs(30))?;
/// let endings: Vec<Ending> = store.history("nightly")?.iter().map(|e| e.ending).collect();
/// assert_eq!(endings, [Ending::Released, Ending::Held]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ending {
    /// Still held: live and unexpired.
    Held,
    /// Its holder released it.
    Released,
    /// Its TTL ran out before its holder let go, and no later grant took it over meanwhile.
    Expired,
    /// A later grant took the lock after the TTL ran out, while the holder still held on (a
    /// paused or stuck holder: the case fencing tokens are for).
    TakenOver,
    /// Its holder's process ended without a release on record (or the host restarted).
    HolderDied,
}

impl Ending {
    /// `held`, `released`, `expired`, `taken-over` or `holder-died`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(fencelock::Ending::TakenOver.as_str(), "taken-over");
    /// ```
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Ending::Held => "held",
            Ending::Released => "released",
            Ending::Expired => "expired",
            Ending::TakenOver => "taken-over",
            Ending::HolderDied => "holder-died",
        }
    }

    fn code(self) -> u8 {
        match self {
            Ending::Held => 0,
            Ending::Released => 1,
            Ending::Expired => 2,
            Ending::TakenOver => 3,
            Ending::HolderDied => 4,
        }
    }

    fn from_code(code: u8) -> Result<Ending> {
        Ok(match code {
            1 => Ending::Released,
            2 => Ending::Expired,
            3 => Ending::TakenOver,
            4 => Ending::HolderDied,
            _ => return Err(Error::Corrupt("malformed history entry".into())),
        })
    }
}

/// One grant of a lock, as [`crate::Store::history`] tells it.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use fencelock::Kind;
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// # let store = fencelock::Store::open(&path)?;
/// let holder = store.acquire("nightly", Duration::from_secs(30))?;
/// let entry = store.history("nightly")?.pop().expect("the current grant");
/// assert_eq!((entry.token, entry.kind), (holder.token(), Kind::Exclusive));
/// assert_eq!(entry.pid, std::process::id());
/// assert!(entry.granted.is_some() && entry.ended.is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HistoryEntry {
    /// The lock's name.
    pub name: String,
    /// The grant's token.
    pub token: u64,
    /// The kind it was granted as.
    pub kind: Kind,
    /// The holder's process id.
    pub pid: u32,
    /// When it was granted; `None` when not known (granted before the host restarted).
    pub granted: Option<SystemTime>,
    /// When the lease expires or expired, as last extended.
    pub expires: Option<SystemTime>,
    /// How it ended, or [`Ending::Held`] while it lasts.
    pub ending: Ending,
    /// When it ended, where that is known: the time of the release, the expiry of an expired
    /// lease, the grant that took it over. `None` for a held lease, and where the store cannot
    /// know (a holder's death; a release older than the store's memory of releases).
    pub ended: Option<SystemTime>,
    /// When the store recorded the end; `None` for a lease still in the leases table.
    pub recorded: Option<SystemTime>,
}

fn time(unix_ns: u64) -> Option<SystemTime> {
    (unix_ns != 0).then(|| SystemTime::UNIX_EPOCH + Duration::from_nanos(unix_ns))
}

/// The stored form of an ended lease (the name and token are its key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::struct_field_names)] // `ended` is when, as `granted` and `recorded` are.
pub(crate) struct Ended {
    kind: Kind,
    pid: u32,
    /// Unix ns; 0 when not known.
    granted: u64,
    expires: u64,
    ending: Ending,
    ended: u64,
    recorded: u64,
}

const ENTRY_FORMAT: u8 = 1;
/// The length of an encoded [`Ended`].
pub(crate) const ENTRY_LEN: usize = 1 + 1 + 4 + 4 + 8 + 8 + 1 + 8 + 8;

impl Ended {
    /// The end of `lease`, held as `kind`, judged `ending` (ended at `ended_ns`, boot time, 0
    /// when not known), recorded now.
    pub(crate) fn new(
        cx: &dyn Context,
        kind: Kind,
        lease: &Lease,
        ending: Ending,
        ended_ns: u64,
    ) -> Ended {
        let this_boot = lease.boot_id == cx.boot_id();
        let unix = |ns: u64| {
            if this_boot && ns != 0 {
                unix_ns_at(ns)
            } else {
                0
            }
        };
        Ended {
            kind,
            pid: lease.holder.pid,
            granted: unix(lease.granted_ns),
            expires: unix(lease.expires_ns),
            ending,
            ended: unix(ended_ns),
            recorded: unix_ns_now(),
        }
    }

    pub(crate) fn encode(&self) -> [u8; ENTRY_LEN] {
        let (kind, permits) = match self.kind {
            Kind::Exclusive => (0u8, 0u32),
            Kind::Shared => (1, 0),
            Kind::Semaphore(n) => (2, n),
        };
        let mut out = [0u8; ENTRY_LEN];
        out[0] = ENTRY_FORMAT;
        out[1] = kind;
        out[2..6].copy_from_slice(&permits.to_le_bytes());
        out[6..10].copy_from_slice(&self.pid.to_le_bytes());
        out[10..18].copy_from_slice(&self.granted.to_le_bytes());
        out[18..26].copy_from_slice(&self.expires.to_le_bytes());
        out[26] = self.ending.code();
        out[27..35].copy_from_slice(&self.ended.to_le_bytes());
        out[35..43].copy_from_slice(&self.recorded.to_le_bytes());
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Ended> {
        let malformed = || Error::Corrupt("malformed history entry".into());
        if bytes.len() != ENTRY_LEN || bytes[0] != ENTRY_FORMAT {
            return Err(malformed());
        }
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let kind = match (bytes[1], u32_at(2)) {
            (0, 0) => Kind::Exclusive,
            (1, 0) => Kind::Shared,
            (2, n) if n > 0 => Kind::Semaphore(n),
            _ => return Err(malformed()),
        };
        Ok(Ended {
            kind,
            pid: u32_at(6),
            granted: u64_at(10),
            expires: u64_at(18),
            ending: Ending::from_code(bytes[26])?,
            ended: u64_at(27),
            recorded: u64_at(35),
        })
    }

    pub(crate) fn ending(&self) -> Ending {
        self.ending
    }

    /// An end of `kind` judged `ending`, with made-up times, for tests of what carries it.
    #[cfg(test)]
    pub(crate) fn for_test(kind: Kind, ending: Ending) -> Ended {
        Ended {
            kind,
            pid: 42,
            granted: 1,
            expires: 2,
            ending,
            ended: 3,
            recorded: 4,
        }
    }

    pub(crate) fn entry(&self, name: &str, token: u64) -> HistoryEntry {
        HistoryEntry {
            name: name.to_owned(),
            token,
            kind: self.kind,
            pid: self.pid,
            granted: time(self.granted),
            expires: time(self.expires),
            ending: self.ending,
            ended: time(self.ended),
            recorded: time(self.recorded),
        }
    }
}

/// The stored history of a lock: `[format]`, then up to [`HISTORY_PER_LOCK`] entries of
/// `[token u64][entry]`, in the order they were recorded.
const HISTORY_FORMAT: u8 = 1;
const SLOT_LEN: usize = 8 + ENTRY_LEN;

/// The entries of a stored history: (token, entry bytes), in the order they were recorded.
pub(crate) fn slots(blob: &[u8]) -> Result<impl Iterator<Item = (u64, &[u8])>> {
    if blob.first() != Some(&HISTORY_FORMAT) || (blob.len() - 1) % SLOT_LEN != 0 {
        return Err(Error::Corrupt("malformed lock history".into()));
    }
    Ok(blob[1..].chunks_exact(SLOT_LEN).map(|slot| {
        let token = u64::from_le_bytes(slot[..8].try_into().expect("8 bytes"));
        (token, &slot[8..])
    }))
}

/// The history table, open in a write transaction.
pub(crate) struct HistoryTable<'t>(Table<'t, &'static str, &'static [u8]>);

impl<'t> HistoryTable<'t> {
    pub(crate) fn open(txn: &'t redb::WriteTransaction) -> Result<HistoryTable<'t>> {
        Ok(HistoryTable(txn.open_table(crate::rules::tables::HISTORY)?))
    }

    /// Writes the entry of the lease `token` of `name`, unless it has one, letting go of the
    /// lock's oldest entry past [`HISTORY_PER_LOCK`], and of another lock's history past
    /// [`HISTORY_LOCKS`]. Returns whether it wrote it.
    pub(crate) fn record(
        &mut self,
        cx: &dyn Context,
        name: &str,
        token: u64,
        ended: &Ended,
    ) -> Result<bool> {
        let mut blob = match self.0.get(name)? {
            Some(stored) => stored.value().to_vec(),
            None => vec![HISTORY_FORMAT],
        };
        if slots(&blob)?.any(|(recorded, _)| recorded == token) {
            return Ok(false);
        }
        blob.extend_from_slice(&token.to_le_bytes());
        blob.extend_from_slice(&ended.encode());
        if (blob.len() - 1) / SLOT_LEN > HISTORY_PER_LOCK {
            blob.drain(1..=SLOT_LEN);
        }
        drop(self.0.insert(name, blob.as_slice())?);
        if self.0.len()? > HISTORY_LOCKS {
            self.sweep(cx, name)?;
        }
        Ok(true)
    }

    /// Removes the history of one lock other than `keep`: of those a few past the sweep's
    /// cursor, the one whose last entry is the oldest.
    fn sweep(&mut self, cx: &dyn Context, keep: &str) -> Result<()> {
        let mut cursor = cx.history_cursor().lock();
        let mut oldest: Option<(u64, String)> = None;
        let mut seen = 0;
        let mut last = cursor.clone();
        for entry in self
            .0
            .range::<&str>((Bound::Excluded(cursor.as_str()), Bound::Unbounded))?
        {
            let (name, blob) = entry?;
            seen += 1;
            let name = name.value().to_owned();
            let recorded = slots(blob.value())?
                .last()
                .map_or(Ok(0), |(_, entry)| Ended::decode(entry).map(|e| e.recorded))?;
            if name != keep && oldest.as_ref().is_none_or(|(at, _)| recorded < *at) {
                oldest = Some((recorded, name.clone()));
            }
            last = name;
            if seen == SWEEP_PER_GRANT {
                break;
            }
        }
        *cursor = if seen < SWEEP_PER_GRANT {
            String::new()
        } else {
            last
        };
        if let Some((_, name)) = oldest {
            self.0.remove(name.as_str())?;
        }
        Ok(())
    }
}

/// Histories the sweep looks at per grant, when there are too many.
const SWEEP_PER_GRANT: usize = 8;

/// The stored entries of `name`, as (token, entry bytes).
pub(crate) fn stored(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    name: &str,
) -> Result<Vec<(u64, Vec<u8>)>> {
    match table.get(name)? {
        Some(blob) => Ok(slots(blob.value())?
            .map(|(token, entry)| (token, entry.to_vec()))
            .collect()),
        None => Ok(Vec::new()),
    }
}

/// Checks every stored history, and that no entry carries a token above `last`.
pub(crate) fn verify(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    last: u64,
) -> Result<()> {
    for entry in table.iter()? {
        let (name, blob) = entry?;
        for (token, entry) in slots(blob.value())? {
            Ended::decode(entry)?;
            if token > last || token == 0 {
                return Err(Error::Corrupt(format!(
                    "the history of {} carries token {token} above the counter {last}",
                    name.value()
                )));
            }
        }
    }
    Ok(())
}

/// The end of `lease` (not live at `now`), held as `kind`, as it is recorded: judged by
/// [`ending`].
pub(crate) fn judge(
    cx: &dyn Context,
    kind: Kind,
    lease: &Lease,
    now: u64,
    taken: bool,
) -> Result<Ended> {
    let (ending, at) = ending(cx, lease, now, taken)?;
    Ok(Ended::new(cx, kind, lease, ending, at))
}

/// How `lease` (not live at `now`) ended; `taken` when a grant is replacing it now. Also when
/// it ended (boot ns), or 0 when that is not known.
pub(crate) fn ending(
    cx: &dyn Context,
    lease: &Lease,
    now: u64,
    taken: bool,
) -> Result<(Ending, u64)> {
    if lease.boot_id != cx.boot_id() {
        return Ok((Ending::HolderDied, 0));
    }
    if let Some(at) = cx.released_at(lease.token) {
        return Ok(released_at(lease, at));
    }
    if cx.is_held(lease.live)? {
        // Its holder holds on past the TTL.
        return Ok(if taken {
            (Ending::TakenOver, now)
        } else {
            (Ending::Expired, lease.expires_ns)
        });
    }
    if lease.holder.is_alive() {
        // Released longer ago than the store's memory of releases reaches.
        Ok((Ending::Released, 0))
    } else {
        Ok((Ending::HolderDied, 0))
    }
}

/// How a lease released at `at` ended: released, or expired first.
pub(crate) fn released_at(lease: &Lease, at: u64) -> (Ending, u64) {
    if at < lease.expires_ns {
        (Ending::Released, at)
    } else {
        (Ending::Expired, lease.expires_ns)
    }
}

/// How many leases ended in each way, counted in the transaction that took them out of the
/// leases table and added to the store's counters once it commits (dropped if it does not).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Ends {
    released: u64,
    expired: u64,
    taken_over: u64,
    holder_died: u64,
    /// Ends counted but not kept for the history: the shared memory's pending ends were at
    /// their bound (flushes could not commit), and history gives way to grants.
    unrecorded: u64,
}

impl Ends {
    pub(crate) fn add(&mut self, ending: Ending) {
        match ending {
            Ending::Held => {}
            Ending::Released => self.released += 1,
            Ending::Expired => self.expired += 1,
            Ending::TakenOver => self.taken_over += 1,
            Ending::HolderDied => self.holder_died += 1,
        }
    }

    /// Counts an end that was not kept for the history.
    pub(crate) fn unrecorded(&mut self) {
        self.unrecorded += 1;
    }

    /// Adds the counts of `other`.
    pub(crate) fn merge(&mut self, other: &Ends) {
        self.released += other.released;
        self.expired += other.expired;
        self.taken_over += other.taken_over;
        self.holder_died += other.holder_died;
        self.unrecorded += other.unrecorded;
    }

    /// How many ends there were, of every way.
    pub(crate) fn total(&self) -> u64 {
        self.released + self.expired + self.taken_over + self.holder_died
    }

    /// Each count with the store counter it goes to.
    pub(crate) fn counts(&self) -> [(Counter, u64); 5] {
        [
            (Counter::EndedReleased, self.released),
            (Counter::EndedExpired, self.expired),
            (Counter::EndedTakenOver, self.taken_over),
            (Counter::EndedHolderDied, self.holder_died),
            (Counter::HistoryDropped, self.unrecorded),
        ]
    }
}

/// The ends a record's dropped leases had: for each lease of `before` not in `kept`.
pub(crate) fn dropped<'a>(
    before: Option<&'a Record>,
    kept: &'a [Lease],
) -> impl Iterator<Item = &'a Lease> + 'a {
    before
        .map(Record::holders)
        .unwrap_or_default()
        .iter()
        .filter(move |lease| !kept.iter().any(|k| k.token == lease.token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_damage_is_refused() {
        for kind in [Kind::Exclusive, Kind::Shared, Kind::Semaphore(4)] {
            for ending in [
                Ending::Released,
                Ending::Expired,
                Ending::TakenOver,
                Ending::HolderDied,
            ] {
                let ended = Ended {
                    kind,
                    pid: 42,
                    granted: 1,
                    expires: 2,
                    ending,
                    ended: 0,
                    recorded: 4,
                };
                let bytes = ended.encode();
                assert_eq!(Ended::decode(&bytes).unwrap(), ended);
                assert!(Ended::decode(&bytes[1..]).is_err());
            }
        }
        let mut held = Ended::decode(
            &Ended {
                kind: Kind::Exclusive,
                pid: 1,
                granted: 1,
                expires: 1,
                ending: Ending::Released,
                ended: 1,
                recorded: 1,
            }
            .encode(),
        )
        .unwrap()
        .encode();
        held[26] = 0;
        assert!(Ended::decode(&held).is_err(), "a stored entry has ended");
    }
}
