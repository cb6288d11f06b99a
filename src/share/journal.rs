//! A server's lease journal: what lets a server commit leases without an fsync, and still lose
//! none when it dies.
//!
//! A server (`local/serve.rs`) commits a batch that only grants and extends leases with
//! `Durability::None` (one that writes a value or a fence, or reserves a block of tokens,
//! commits with an fsync, which makes every earlier batch durable too). Such a commit is lost
//! if the server dies, while its holders live on: the lease records would go back to older
//! ones, and a lock could be granted twice. So before each such commit the server appends the
//! batch's lease records to the journal, in the ring's shared memory, which outlives it; once
//! the commit returns it counts them as committed, before any reply is published. A durable
//! commit empties the journal.
//!
//! The next process to open the file for writing after the server's death (the next server,
//! or a store using the file itself) restores the journal's records before anything else, in
//! one durable transaction: a record is written unless the file holds a newer one of that lock
//! (a higher token, or the same token expiring later), so that restoring twice, or after newer
//! grants, changes nothing. Tokens need nothing of the journal: they are reserved durably a
//! block at a time, and an open moves the counter past the reservation (`rules/tokens.rs`).
//!
//! The ring, and with it the journal, lives in `/dev/shm`: a reboot ends it, and every lease
//! with it (a lease records its boot). The last process using the ring removes it; a holder's
//! process uses it as long as it holds a lease, so no live lease's record is lost that way.

use parking_lot::Mutex;
use redb::{Database, ReadableDatabase, ReadableTable};

use crate::base::cancel::Waiting;

use crate::base::error::{Error, Result};
use crate::ring::Ring;
use crate::rules::record::Record;
use crate::rules::tables::{LEASES, META};
use crate::storage::commit::CommitHook;

/// The key in the meta table that marks the store as served by a server that has not stopped
/// cleanly (1), so that its journal may hold leases the file does not.
const SERVED_KEY: &str = "served";

/// Whether a server of the store may have left leases in its journal.
pub(crate) fn marked(db: &Database) -> Result<bool> {
    let txn = db.begin_read()?;
    let meta = txn.open_table(META)?;
    let marked = meta.get(SERVED_KEY)?.is_some_and(|v| v.value() != 0);
    Ok(marked)
}

/// Marks the store durably as served, or not any more (which persists every commit before).
pub(crate) fn mark_served(db: &Database, served: bool) -> Result<()> {
    let txn = db.begin_write()?;
    txn.open_table(META)?
        .insert(SERVED_KEY, u64::from(served))?;
    txn.commit()?;
    Ok(())
}

/// The lease records a server's current batch wrote, in journal form, until it commits.
#[derive(Default)]
pub(crate) struct Journal {
    pending: Mutex<Pending>,
}

#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    /// The journal's length once the batch commits (its entries staged after the committed
    /// ones).
    staged: Option<usize>,
}

/// An entry: the record's length-prefixed lock name, then the encoded record (an exclusive
/// lease, or the grants of a semaphore or shared lock).
fn encode(out: &mut Vec<u8>, name: &str, record: &Record) {
    let record = record.encode();
    out.extend_from_slice(&(name.len() as u32).to_le_bytes());
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&(record.len() as u32).to_le_bytes());
    out.extend_from_slice(&record);
}

/// The entries in `bytes`; an error for a damaged journal.
fn decode(bytes: &[u8]) -> Result<Vec<(String, Record)>> {
    let damaged = || Error::Storage("the lease journal in the shared ring is damaged".into());
    let mut rest = bytes;
    let mut take = |n: usize| -> Result<&[u8]> {
        if rest.len() < n {
            return Err(damaged());
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    let mut entries = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let len = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
        let name = String::from_utf8(take(len)?.to_vec()).map_err(|_| damaged())?;
        let record_len = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
        let record = Record::decode(take(record_len)?).map_err(|_| damaged())?;
        entries.push((name, record));
        at += 8 + len + record_len;
    }
    Ok(entries)
}

impl Journal {
    /// Notes a lease record the batch writes.
    pub(crate) fn note(&self, name: &str, record: &Record) {
        encode(&mut self.pending.lock().bytes, name, record);
    }

    /// The journal as the commits of a server's batches, in `ring`, hook it in.
    pub(crate) fn hook<'a>(&'a self, ring: &'a Ring) -> Staging<'a> {
        Staging {
            journal: self,
            ring,
        }
    }

    /// Before a commit: stages the batch's records in the journal for a non-durable commit.
    /// Returns whether the commit must be durable after all (the journal is full).
    fn before_commit(&self, ring: &Ring, durable: bool) -> bool {
        let mut pending = self.pending.lock();
        if durable || pending.bytes.is_empty() {
            return durable;
        }
        let at = ring.journal_len();
        if ring.write_journal(at, &pending.bytes) {
            pending.staged = Some(at + pending.bytes.len());
            false
        } else {
            true
        }
    }

    /// After a commit (`committed`, durably or not): counts the staged records as committed,
    /// or empties the journal after a durable commit. Before any reply is published.
    fn after_commit(&self, ring: &Ring, durable: bool, committed: bool) {
        let mut pending = self.pending.lock();
        if committed {
            if durable {
                ring.set_journal_len(0);
            } else if let Some(len) = pending.staged {
                ring.set_journal_len(len);
            }
        }
        pending.bytes.clear();
        pending.staged = None;
    }
}

/// The journal of a server's batch, hooked into its commit.
pub(crate) struct Staging<'a> {
    journal: &'a Journal,
    ring: &'a Ring,
}

impl CommitHook for Staging<'_> {
    fn before_commit(&self, durable: bool) -> bool {
        self.journal.before_commit(self.ring, durable)
    }

    fn after_commit(&self, durable: bool, committed: bool) {
        self.journal.after_commit(self.ring, durable, committed);
    }
}

/// Restores the lease records of a dead server's journal into `db`, then empties it (see the
/// module's documentation). Called by whoever opens the file for writing while no server
/// serves it.
pub(crate) fn restore(db: &Database, ring: Option<&Ring>, waiting: Waiting<'_>) -> Result<()> {
    if ring.is_none_or(|ring| ring.journal_len() == 0) && !marked(db)? {
        return Ok(());
    }
    let Some(ring) = ring else {
        return Err(Error::Storage(
            "a server of this store stopped without making its leases durable, and its journal \
             (the store's ring in /dev/shm) cannot be read here: open the store with shared \
             commits as the store's owner, or start its server again, to restore them first"
                .into(),
        ));
    };
    // Within the busy timeout: another process may be paused inside a commit.
    let txn = loop {
        match db.try_begin_write() {
            Err(redb::TransactionError::WouldBlock) => {
                waiting.step()?;
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            other => break other?,
        }
    };
    // Read under the write lock: another process may have restored it just before.
    let len = ring.journal_len();
    let entries = decode(&ring.journal(len))?;
    {
        let mut meta = txn.open_table(META)?;
        if meta.get(SERVED_KEY)?.is_some_and(|v| v.value() != 0) {
            meta.insert(SERVED_KEY, 0)?;
        }
        let mut leases = txn.open_table(LEASES)?;
        for (name, record) in entries {
            let newer = match Record::find(&leases, &name)? {
                Some(current) => order(&record) > order(&current),
                None => true,
            };
            if newer {
                leases.insert(name.as_str(), record.encode().as_slice())?;
            }
        }
    }
    txn.commit()?;
    ring.clear_journal(len);
    Ok(())
}

/// How records of one lock are ordered in time: by their highest token (a grant), then by how
/// late their grants expire (an extend). For one lease, its token, then its expiry. An extend of
/// one permit to a shorter time than it had may be taken for older: the record then keeps the
/// longer expiry, which holds the lock longer rather than giving it away early.
fn order(record: &Record) -> (u64, u128) {
    let holders = record.holders();
    let latest = holders.iter().map(|lease| lease.token).max().unwrap_or(0);
    let expiries = holders
        .iter()
        .map(|lease| u128::from(lease.expires_ns))
        .sum();
    (latest, expiries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::clock::ProcessId;
    use crate::rules::record::Lease;

    #[test]
    fn entries_round_trip_and_a_cut_journal_is_refused() {
        let lease = Lease {
            token: 9,
            holder: ProcessId {
                pid: 1,
                start_time: 2,
            },
            boot_id: [1; 16],
            granted_ns: 3,
            expires_ns: 4,
            live: 1 << 50,
        };
        let mut bytes = Vec::new();
        encode(&mut bytes, "a", &Record::Exclusive(lease));
        let boundary = bytes.len();
        let group = Record::Group(crate::rules::record::Group {
            kind: crate::rules::kind::Kind::Semaphore(2),
            holders: vec![lease, lease],
        });
        encode(&mut bytes, "payment-export", &group);
        let entries = decode(&bytes).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0], ("a".to_owned(), Record::Exclusive(lease)));
        assert_eq!(entries[1], ("payment-export".to_owned(), group));
        for cut in 1..bytes.len() {
            if cut == boundary {
                continue; // the boundary between the two entries
            }
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }
}
