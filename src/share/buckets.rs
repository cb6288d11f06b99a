//! The lease records of a store kept in its ring's lease map (`ring/map.rs`) rather than in the
//! store file: what a bucket's blob holds, reading a lock's record, and changing it with one
//! compare-and-swap.
//!
//! A bucket's blob lists the names that hash to it, each with its record (the lease of an
//! exclusive lock, or the grants of a semaphore or shared lock: the same records the store file
//! kept, `rules/record.rs`) and its *tail*: the ends of its leases that a grant judged (who held
//! it, how it ended, `rules/history.rs`) and that are not in the store file's history yet. A
//! name leaves the blob once none of its grants is live and its tail is in the file.
//!
//! Format: `[1][count u16]`, then `count` entries of `[name len u16][name][record len u32]
//! [record][tail count u16]` and `tail count` entries of `[token u64][ended]`. Decoding checks
//! every length: a blob that does not decode is refused as damaged, never trusted.

use crate::base::error::{Error, Result};
use crate::ring::map::{bucket_of, Publish, Snapshot};
use crate::ring::{lock_hash, Live, Ring};
use crate::rules::history::{Ended, Ends, ENTRY_LEN};
use crate::rules::record::Record;

const FORMAT: u8 = 1;

/// One name's entry in a bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) name: String,
    /// `None` for a name whose grants all left, kept for its tail.
    pub(crate) record: Option<Record>,
    /// Ends judged and not yet in the store file's history, oldest first.
    pub(crate) tail: Vec<(u64, Ended)>,
}

fn damaged() -> Error {
    Error::Corrupt("a lease record in the store's shared memory is damaged".into())
}

/// The blob of `entries`; an error, and no blob, for a count or length its field cannot hold.
pub(crate) fn encode(entries: &[Entry]) -> Result<Vec<u8>> {
    if entries.is_empty() {
        return Ok(Vec::new());
    }
    // The blob counts its entries in 16 bits; more names than that in one bucket would need a
    // map far larger than this one anyway.
    let count = u16::try_from(entries.len()).map_err(|_| {
        Error::Storage(
            "the store's shared lease table is full: too many live lock records share one of \
             its buckets"
                .into(),
        )
    })?;
    let beyond =
        |what: &str| Error::Storage(format!("a lease record's {what} is beyond its field"));
    let mut out = vec![FORMAT];
    out.extend_from_slice(&count.to_le_bytes());
    for entry in entries {
        let name_len = u16::try_from(entry.name.len()).map_err(|_| beyond("name"))?;
        out.extend_from_slice(&name_len.to_le_bytes());
        out.extend_from_slice(entry.name.as_bytes());
        let record = entry
            .record
            .as_ref()
            .map(Record::encode)
            .unwrap_or_default();
        let record_len = u32::try_from(record.len()).map_err(|_| beyond("record"))?;
        out.extend_from_slice(&record_len.to_le_bytes());
        out.extend_from_slice(&record);
        let tail_len = u16::try_from(entry.tail.len()).map_err(|_| beyond("tail"))?;
        out.extend_from_slice(&tail_len.to_le_bytes());
        for (token, ended) in &entry.tail {
            out.extend_from_slice(&token.to_le_bytes());
            out.extend_from_slice(&ended.encode());
        }
    }
    Ok(out)
}

pub(crate) fn decode(blob: &[u8]) -> Result<Vec<Entry>> {
    if blob.is_empty() {
        return Ok(Vec::new());
    }
    let mut rest = blob;
    let mut take = |n: usize| super::take(&mut rest, n).ok_or_else(damaged);
    if take(1)? != [FORMAT] {
        return Err(damaged());
    }
    let u16_of = |b: &[u8]| u16::from_le_bytes(b.try_into().expect("2 bytes")) as usize;
    let count = u16_of(take(2)?);
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        let len = u16_of(take(2)?);
        let name = String::from_utf8(take(len)?.to_vec()).map_err(|_| damaged())?;
        let len = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
        let record = match len {
            0 => None,
            len => Some(Record::decode(take(len)?).map_err(|_| damaged())?),
        };
        let ends = u16_of(take(2)?);
        let mut tail = Vec::with_capacity(ends);
        for _ in 0..ends {
            let token = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
            tail.push((
                token,
                Ended::decode(take(ENTRY_LEN)?).map_err(|_| damaged())?,
            ));
        }
        entries.push(Entry { name, record, tail });
    }
    if !rest.is_empty() {
        return Err(damaged());
    }
    Ok(entries)
}

/// The entry of `name` as the map holds it now, if any.
pub(crate) fn entry_of(ring: &Ring, name: &str) -> Result<Option<Entry>> {
    let snapshot = ring.leases().read_bucket(bucket_of(lock_hash(name)));
    ring.intact()?;
    Ok(decode(&snapshot.blob)?
        .into_iter()
        .find(|entry| entry.name == name))
}

/// Every entry of the map, in name order. Each bucket is read consistently; the buckets are
/// read one after the other, as the leases table of a file is read in one transaction would
/// not be, which is what a listing needs.
pub(crate) fn entries(ring: &Ring) -> Result<Vec<Entry>> {
    let mut all = Vec::new();
    for bucket in 0..crate::ring::map::BUCKETS {
        all.extend(decode(&ring.leases().read_bucket(bucket).blob)?);
    }
    ring.intact()?;
    all.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(all)
}

/// What an update does to one name's entry.
pub(crate) enum Change {
    /// Nothing: no write.
    Keep,
    /// The entry becomes this.
    Put(Entry),
}

/// The one rule that keeps a lock's tokens growing in the lease map: a grant publishes a
/// token only at or above the floor of its bucket as it read it after its copy of the bucket
/// (see `ring/map.rs`: the floor is at least every token published in the bucket, also of
/// records that left it). A lock's record alone is not enough: it leaves the bucket once its grants ended,
/// and a grant that took its token before another grant of the lock (and was stopped between
/// the two) would otherwise be published below it. A token taken from the counter after the
/// floor was read is always above it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Floor(u64);

impl Floor {
    /// Whether a grant may publish `token`, which it took, over the copy this floor was read
    /// with. Equal passes: a token is taken once, so the floor reaches it only by its taker's
    /// own raise before a swap that failed, which published nothing.
    pub(crate) fn admits(self, token: u64) -> bool {
        token >= self.0
    }
}

/// Changes the entry of `name` as `decide` says, with one compare-and-swap of its bucket,
/// retried (`decide` runs again, on what is there then) while other writers publish first.
/// `decide` gets the bucket's token [`Floor`], which a grant's token must clear. `settle` sees
/// each other entry of the bucket first, and may end its record (whose grants are no longer
/// live) into its tail; an entry with neither record nor tail leaves. `owner` is the writer's
/// liveness id, which its unpublished blocks carry.
pub(crate) fn update<T>(
    ring: &Ring,
    live: &impl Live,
    owner: u64,
    name: &str,
    mut decide: impl FnMut(Option<&Entry>, Floor) -> Result<(Change, T)>,
    mut settle: impl FnMut(&mut Entry) -> Result<Ends>,
) -> Result<(T, Ends)> {
    let bucket = bucket_of(lock_hash(name));
    loop {
        let snapshot = ring.leases().read_bucket(bucket);
        ring.intact()?;
        // After the copy: it holds every token of a swap the copy saw.
        let floor = Floor(ring.floor(bucket));
        let mut entries = decode(&snapshot.blob)?;
        let at = entries.iter().position(|entry| entry.name == name);
        let (change, value) = decide(at.map(|i| &entries[i]), floor)?;
        let Change::Put(entry) = change else {
            return Ok((value, Ends::default()));
        };
        // Before the swap (see `Floor`); only for a token the floor does not hold yet (a grant:
        // an extend or a withdrawal publishes tokens the floor holds, and pays nothing).
        if let Some(latest) = entry.record.as_ref().and_then(Record::latest) {
            if latest.token > floor.0 {
                ring.raise_floor(bucket, latest.token);
            }
        }
        match at {
            Some(i) => entries[i] = entry,
            None => entries.push(entry),
        }
        let mut settled = Ends::default();
        for entry in &mut entries {
            if entry.name != name {
                settled.merge(&settle(entry)?);
            }
        }
        entries.retain(|entry| entry.record.is_some() || !entry.tail.is_empty());
        if publish(ring, live, owner, bucket, &snapshot, &entries)? {
            // Published into zero pages, or into a file cut short since: no grant.
            ring.intact()?;
            return Ok((value, settled));
        }
    }
}

/// Publishes `entries` as the blob of `bucket` if its word is still the one `read` saw:
/// `false` when another writer published first.
fn publish(
    ring: &Ring,
    live: &impl Live,
    owner: u64,
    bucket: usize,
    read: &Snapshot,
    entries: &[Entry],
) -> Result<bool> {
    let blob = encode(entries)?;
    match ring
        .leases()
        .publish_bucket(bucket, read, &blob, owner, live)
    {
        Publish::Done => Ok(true),
        Publish::Raced => Ok(false),
        Publish::Full => Err(Error::Storage(
            "the store's shared lease table is full: too many lock records are live at once".into(),
        )),
    }
}

/// Rewrites bucket `bucket` after `settle` saw each entry (ending records whose grants are no
/// longer live, dropping tail entries that reached the store file), unless that changed
/// nothing: the pruning of dead records, and the trimming of tails after a flush. Retried
/// while other writers publish first.
pub(crate) fn rewrite(
    ring: &Ring,
    live: &impl Live,
    owner: u64,
    bucket: usize,
    mut settle: impl FnMut(&mut Entry) -> Result<Ends>,
) -> Result<Ends> {
    loop {
        let snapshot = ring.leases().read_bucket(bucket);
        ring.intact()?;
        let entries = decode(&snapshot.blob)?;
        let mut settled = entries.clone();
        let mut ends = Ends::default();
        for entry in &mut settled {
            ends.merge(&settle(entry)?);
        }
        settled.retain(|entry| entry.record.is_some() || !entry.tail.is_empty());
        if settled == entries {
            return Ok(Ends::default());
        }
        if publish(ring, live, owner, bucket, &snapshot, &settled)? {
            ring.intact()?;
            return Ok(ends);
        }
    }
}

/// The entries of bucket `bucket` (for a sweep that visits the map a bucket at a time).
pub(crate) fn bucket_entries(ring: &Ring, bucket: usize) -> Result<Vec<Entry>> {
    let snapshot = ring.leases().read_bucket(bucket);
    ring.intact()?;
    decode(&snapshot.blob)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::clock::ProcessId;
    use crate::rules::history::Ending;
    use crate::rules::kind::Kind;
    use crate::rules::record::{Group, Lease};

    fn lease(token: u64) -> Lease {
        Lease {
            token,
            holder: ProcessId {
                pid: 7,
                start_time: 8,
            },
            boot_id: [1; 16],
            granted_ns: 2,
            expires_ns: 3,
            live: 1 << 50,
        }
    }

    #[test]
    fn entries_round_trip_and_damage_is_refused() {
        let ended = Ended::for_test(Kind::Exclusive, Ending::Released);
        let entries = vec![
            Entry {
                name: "payment-export".into(),
                record: Some(Record::Exclusive(lease(5))),
                tail: vec![(4, ended)],
            },
            Entry {
                name: "gpu".into(),
                record: Some(Record::Group(Group {
                    kind: Kind::Semaphore(2),
                    holders: vec![lease(6), lease(7)],
                })),
                tail: Vec::new(),
            },
            Entry {
                name: "gone".into(),
                record: None,
                tail: vec![(1, ended), (2, ended)],
            },
        ];
        let blob = encode(&entries).unwrap();
        assert_eq!(decode(&blob).unwrap(), entries);
        assert!(decode(&[]).unwrap().is_empty());
        for cut in 1..blob.len() {
            assert!(decode(&blob[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = blob.clone();
        bad[0] = 9;
        assert!(decode(&bad).is_err());
    }
}
