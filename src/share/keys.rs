//! The key index kept in the ring's key map (`ring/map.rs`, `Ring::keys`): for each key written
//! since the last checkpoint (and, in a namespace of their own, each fence resource), its
//! highest accepted token, its version, the log position of its newest record whose fate is
//! known, and the one claim pending on it, if any (docs/design/writes.md, section 3, and the
//! step 4 design it cites). Each change is one compare-and-swap of the entry's bucket, as the
//! lease map's records are (`share/buckets.rs`): no lock is held, and a process stopped at any
//! instruction delays nobody.
//!
//! The fenced writes through the redo log claim and settle their keys here (`share/claims.rs`).
//!
//! Format of a bucket's blob: `[3][count u32]`, then `count` entries of `[namespace u8: 0 a key,
//! 1 a fence resource][key len u32][key][highest u64][before u64][version u64][newest u64]
//! [voided u64][pending u8: 0 none, 1 a claim][pending lsn u64: 0 when none]`, little-endian;
//! an empty bucket is an empty blob. A value has one encoding: decoding refuses a count of 0, an unknown namespace or
//! pending byte, a position without a claim, a key listed twice and trailing bytes, each as
//! damage (a typed error, never a panic).

use std::collections::HashSet;

use crate::base::error::{Error, Result};
use crate::ring::map::{Publish, Region};
use crate::ring::{bytes_hash, Live, Ring};

const FORMAT: u8 = 3;

/// The namespaces of the index: keys of the store's values, and fence resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Space {
    Key = 0,
    Fence = 1,
}

/// What the index holds of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The highest token accepted for the key.
    pub(crate) highest: u64,
    /// The key's highest token before its pending claim raised it (equal to `highest` with
    /// none pending): a claim that settles void puts it back, so that a refusal only ever names
    /// a token that was written, and the floor never drops when the entry leaves the index.
    pub(crate) before: u64,
    /// The key's version: one more at each write.
    pub(crate) version: u64,
    /// The log position of the key's newest record whose fate is known (below the checkpoint:
    /// redb holds it).
    pub(crate) newest: u64,
    /// The log position of the one write claimed on the key and not settled yet.
    pub(crate) pending: Option<u64>,
    /// The log position of the key's latest claim that settled void (0: none): its version
    /// was used, and its record may still be in the log, so the entry stays (and its version
    /// counts on) until a checkpoint passes it ([`prune`]).
    pub(crate) voided: u64,
}

/// One key of a bucket, with its entry; the key borrowed (from the bucket's blob, or the
/// caller's), so that a write's reads and swaps of its bucket copy no key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Keyed<'a> {
    pub(crate) space: Space,
    pub(crate) key: &'a [u8],
    pub(crate) entry: Entry,
}

/// Bytes an entry takes in a blob besides its key: namespace, key length, five words, the
/// pending flag and its position.
const ENTRY_FIXED: usize = 1 + 4 + 5 * 8 + 1 + 8;

fn damaged() -> Error {
    Error::Corrupt("a key index entry in the store's shared memory is damaged".into())
}

/// The blob of a bucket holding `entries` (empty for none).
pub(crate) fn encode(entries: &[Keyed<'_>]) -> Vec<u8> {
    if entries.is_empty() {
        return Vec::new();
    }
    let len = 5 + entries
        .iter()
        .map(|keyed| ENTRY_FIXED + keyed.key.len())
        .sum::<usize>();
    let mut out = Vec::with_capacity(len);
    out.push(FORMAT);
    // A bucket's entries fit its blob, far fewer than 2^32.
    #[allow(clippy::cast_possible_truncation)]
    let count = entries.len() as u32;
    out.extend_from_slice(&count.to_le_bytes());
    for Keyed { space, key, entry } in entries {
        out.push(*space as u8);
        // A key of 4 GiB or more cannot be one: the map holds 8 MiB, and its publish finds too
        // few blocks before anything reads this length.
        #[allow(clippy::cast_possible_truncation)]
        let len = key.len() as u32;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(key);
        for word in [
            entry.highest,
            entry.before,
            entry.version,
            entry.newest,
            entry.voided,
        ] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.push(u8::from(entry.pending.is_some()));
        out.extend_from_slice(&entry.pending.unwrap_or(0).to_le_bytes());
    }
    out
}

/// The entries of a bucket's blob, in their order; damage is refused (see the module's docs).
pub(crate) fn decode(blob: &[u8]) -> Result<Vec<Keyed<'_>>> {
    if blob.is_empty() {
        return Ok(Vec::new());
    }
    let mut rest = blob;
    let mut take = |n: usize| super::take(&mut rest, n).ok_or_else(damaged);
    let u64_of = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    let u32_of = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize;
    if take(1)? != [FORMAT] {
        return Err(damaged());
    }
    let count = u32_of(take(4)?);
    if count == 0 {
        return Err(damaged());
    }
    // Each entry takes at least `ENTRY_FIXED` bytes: a count beyond what the blob holds is
    // damage, not a reason to reserve memory.
    let mut entries = Vec::with_capacity(count.min(blob.len() / ENTRY_FIXED));
    for _ in 0..count {
        let space = match take(1)? {
            [0] => Space::Key,
            [1] => Space::Fence,
            _ => return Err(damaged()),
        };
        let len = u32_of(take(4)?);
        let key = take(len)?;
        let highest = u64_of(take(8)?);
        let before = u64_of(take(8)?);
        let version = u64_of(take(8)?);
        let newest = u64_of(take(8)?);
        let voided = u64_of(take(8)?);
        let flag = take(1)?[0];
        let at = u64_of(take(8)?);
        let pending = match (flag, at) {
            (0, 0) => None,
            (1, at) => Some(at),
            _ => return Err(damaged()),
        };
        let entry = Entry {
            highest,
            before,
            version,
            newest,
            pending,
            voided,
        };
        entries.push(Keyed { space, key, entry });
    }
    if !rest.is_empty() {
        return Err(damaged());
    }
    if listed_twice(&entries) {
        return Err(damaged());
    }
    Ok(entries)
}

/// Whether a key is listed twice: by pairs in a bucket of a few entries (the common case, no
/// allocation), by a set in a larger one.
fn listed_twice(entries: &[Keyed<'_>]) -> bool {
    if entries.len() <= 16 {
        return entries.iter().enumerate().any(|(i, a)| {
            entries[..i]
                .iter()
                .any(|b| a.space == b.space && a.key == b.key)
        });
    }
    let mut seen = HashSet::with_capacity(entries.len());
    !entries.iter().all(|e| seen.insert((e.space, e.key)))
}

/// The bucket of the key map that holds `key` of `space`.
fn bucket_of(map: Region<'_>, space: Space, key: &[u8]) -> usize {
    // The namespace first, so that a key and a resource of the same bytes are two names.
    map.bucket_of(bytes_hash(&[&[space as u8], key]))
}

/// The entry of `key` in `space` as the index holds it now (a consistent copy of its bucket),
/// `None` when the index holds none (redb's record is the key's, if any).
pub(crate) fn entry(ring: &Ring, space: Space, key: &[u8]) -> Result<Option<Entry>> {
    let map = ring.keys();
    let snapshot = map.read_bucket(bucket_of(map, space, key));
    ring.intact()?;
    Ok(decode(&snapshot.blob)?
        .into_iter()
        .find(|keyed| keyed.space == space && keyed.key == key)
        .map(|keyed| keyed.entry))
}

/// Replaces the entry of `key` in `space` by `new` (`None` removes it) if it is still
/// `expected` (`None`: the index holds none), by one compare-and-swap of its bucket: whether it
/// was. Other keys of the bucket may change meanwhile: the bucket is then read again, and the
/// swap retried while the key's own entry is still `expected`. `owner` is the writer's liveness
/// id (`live` its liveness), which its unpublished blocks carry. A full map is a storage error.
pub(crate) fn replace(
    ring: &Ring,
    live: &impl Live,
    owner: u64,
    space: Space,
    key: &[u8],
    expected: Option<&Entry>,
    new: Option<Entry>,
) -> Result<bool> {
    let map = ring.keys();
    let bucket = bucket_of(map, space, key);
    loop {
        let snapshot = map.read_bucket(bucket);
        ring.intact()?;
        let mut entries = decode(&snapshot.blob)?;
        let at = entries
            .iter()
            .position(|keyed| keyed.space == space && keyed.key == key);
        if at.map(|i| &entries[i].entry) != expected {
            return Ok(false);
        }
        if new.as_ref() == expected {
            // Nothing to change: the copy shows the key as `expected`.
            return Ok(true);
        }
        match (at, new) {
            (Some(i), Some(entry)) => entries[i].entry = entry,
            (Some(i), None) => {
                entries.remove(i);
            }
            (None, Some(entry)) => entries.push(Keyed { space, key, entry }),
            (None, None) => unreachable!("`new` equals `expected` when both are none"),
        }
        if publish(map, live, owner, bucket, &snapshot, &entries)? {
            // Published into zero pages, or into a file cut short since: not replaced.
            ring.intact()?;
            return Ok(true);
        }
    }
}

/// Removes every entry with no pending claim whose newest record is below `below` (the
/// position a checkpoint moved into redb), one compare-and-swap per bucket that changes: how
/// many it removed. An entry with a claim pending is kept whatever its position: its fate is
/// not known yet. So is one whose latest void claim is not below `below`: the store file does
/// not know the version that claim used, and a record of it may still be in the log past the
/// checkpoint (skipped: the scan may take it, `LogUser::checkpoint`), so the key's next version
/// must come from the entry, not from the store file.
pub(crate) fn prune(ring: &Ring, live: &impl Live, owner: u64, below: u64) -> Result<usize> {
    let map = ring.keys();
    let mut removed = 0;
    for bucket in 0..map.buckets() {
        if map.bucket_is_empty(bucket) {
            continue;
        }
        loop {
            let snapshot = map.read_bucket(bucket);
            ring.intact()?;
            let mut entries = decode(&snapshot.blob)?;
            let before = entries.len();
            entries.retain(|keyed| {
                let entry = keyed.entry;
                entry.pending.is_some() || entry.newest >= below || entry.voided >= below
            });
            if entries.len() == before {
                break;
            }
            if publish(map, live, owner, bucket, &snapshot, &entries)? {
                ring.intact()?;
                removed += before - entries.len();
                break;
            }
        }
    }
    Ok(removed)
}

/// The keys (of either space) whose entry has a claim pending below `below`: a checkpoint
/// settles them before it retires the log there (docs/design/writes.md, step 4's section).
pub(crate) fn pending_below(ring: &Ring, below: u64) -> Result<Vec<(Space, Vec<u8>)>> {
    let mut found = Vec::new();
    for_each(ring, |keyed| {
        if keyed.entry.pending.is_some_and(|at| at < below) {
            found.push((keyed.space, keyed.key.to_vec()));
        }
    })?;
    Ok(found)
}

/// The keys of `space` under `prefix` that have an entry in the index (a read-only store lays
/// their newest records over the store file's list of keys, `LogUser::keys`).
pub(crate) fn listed(ring: &Ring, space: Space, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut found = Vec::new();
    for_each(ring, |keyed| {
        if keyed.space == space && keyed.key.starts_with(prefix) {
            found.push(keyed.key.to_vec());
        }
    })?;
    Ok(found)
}

/// Calls `f` with each entry of the index, a bucket at a time (each bucket's entries as one
/// snapshot read them).
fn for_each(ring: &Ring, mut f: impl FnMut(&Keyed<'_>)) -> Result<()> {
    let map = ring.keys();
    for bucket in 0..map.buckets() {
        if map.bucket_is_empty(bucket) {
            continue;
        }
        let snapshot = map.read_bucket(bucket);
        ring.intact()?;
        for keyed in decode(&snapshot.blob)? {
            f(&keyed);
        }
    }
    Ok(())
}

/// Publishes `entries` as the blob of `bucket` if its word is still the one `read` saw:
/// `false` when another writer published first.
fn publish(
    map: Region<'_>,
    live: &impl Live,
    owner: u64,
    bucket: usize,
    read: &crate::ring::map::Snapshot,
    entries: &[Keyed<'_>],
) -> Result<bool> {
    match map.publish_bucket(bucket, read, &encode(entries), owner, live) {
        Publish::Done => Ok(true),
        Publish::Raced => Ok(false),
        Publish::Full => Err(Error::Storage(
            "the store's shared key index is full: too many keys were written since the last \
             checkpoint"
                .into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::Stamp;
    use crate::storage::liveness::Liveness;

    const STAMP: Stamp = Stamp {
        boot_id: [5; 16],
        version: 1,
    };
    const ALIVE: u64 = 1 << 50;

    fn ring(dir: &std::path::Path) -> (Ring, Liveness) {
        let path = dir.join("store");
        std::fs::write(&path, b"").unwrap();
        let live = Liveness::shared(&path).unwrap();
        assert!(live.lock(ALIVE).unwrap());
        let meta = std::fs::metadata(&path).unwrap();
        (Ring::open(dir, &meta, None, STAMP).unwrap(), live)
    }

    fn at(version: u64, newest: u64, pending: Option<u64>) -> Entry {
        Entry {
            highest: 40 + version,
            before: 40 + version,
            version,
            newest,
            pending,
            voided: 0,
        }
    }

    fn sample() -> Vec<Keyed<'static>> {
        vec![
            Keyed {
                space: Space::Key,
                key: b"orders/7",
                entry: at(3, 4096, None),
            },
            Keyed {
                space: Space::Fence,
                key: b"orders/7",
                entry: at(1, 0, Some(8192)),
            },
            Keyed {
                space: Space::Key,
                key: b"\0\xff",
                entry: Entry {
                    voided: 72,
                    ..at(9, 24, Some(0))
                },
            },
        ]
    }

    #[test]
    fn entries_round_trip_and_damage_is_refused() {
        let entries = sample();
        let blob = encode(&entries);
        assert_eq!(decode(&blob).unwrap(), entries);
        assert!(encode(&[]).is_empty());
        assert!(decode(&[]).unwrap().is_empty());
        for cut in 1..blob.len() {
            assert!(decode(&blob[..cut]).is_err(), "cut at {cut}");
        }
        let damaged = |change: &dyn Fn(&mut Vec<u8>)| {
            let mut bad = blob.clone();
            change(&mut bad);
            let err = decode(&bad).unwrap_err();
            assert!(matches!(err, Error::Corrupt(_)), "{err:?}");
        };
        damaged(&|b| b[0] = 2); // another format (an earlier one)
        damaged(&|b| b[1..5].copy_from_slice(&0u32.to_le_bytes())); // a count of none
        damaged(&|b| b[1..5].copy_from_slice(&u32::MAX.to_le_bytes())); // more than it holds
        damaged(&|b| b[5] = 2); // no such namespace
        damaged(&|b| b[6..10].copy_from_slice(&u32::MAX.to_le_bytes())); // a key past the end
        let flag = 5 + 1 + 4 + 8 + 40;
        damaged(&|b| b[flag] = 2); // neither a claim nor none
        damaged(&|b| b[flag + 1] = 1); // a position without a claim
        damaged(&|b| b.push(0)); // trailing bytes
                                 // The same key twice.
        let twice = [entries[0].clone(), entries[0].clone()];
        assert!(matches!(decode(&encode(&twice)), Err(Error::Corrupt(_))));
        // In a bucket of many entries too (looked for by a set there, by pairs in a small one).
        let names: Vec<Vec<u8>> = (0..40u8).map(|i| vec![b'k', i]).collect();
        let many: Vec<Keyed<'_>> = names
            .iter()
            .map(|key| Keyed {
                key,
                ..entries[0].clone()
            })
            .collect();
        for len in [16, 17, 40] {
            assert_eq!(decode(&encode(&many[..len])).unwrap(), &many[..len]);
            let mut again = many[..len].to_vec();
            again[len - 1].key = again[0].key;
            assert!(
                matches!(decode(&encode(&again)), Err(Error::Corrupt(_))),
                "{len}"
            );
        }
    }

    #[test]
    fn a_replace_from_what_the_key_holds_wins_and_from_anything_else_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (ring, live) = ring(dir.path());
        let key = b"orders/7";
        assert_eq!(entry(&ring, Space::Key, key).unwrap(), None);
        let first = at(1, 0, Some(64));
        assert!(replace(&ring, &live, ALIVE, Space::Key, key, None, Some(first)).unwrap());
        assert_eq!(entry(&ring, Space::Key, key).unwrap(), Some(first));
        // The same bytes as a fence resource are another name.
        assert_eq!(entry(&ring, Space::Fence, key).unwrap(), None);
        // From a stale entry, or from none: refused, and the entry is as it was.
        let settled = at(1, 64, None);
        for stale in [None, Some(&settled)] {
            assert!(!replace(
                &ring,
                &live,
                ALIVE,
                Space::Key,
                key,
                stale,
                Some(at(2, 0, None))
            )
            .unwrap());
            assert_eq!(entry(&ring, Space::Key, key).unwrap(), Some(first));
        }
        assert!(replace(
            &ring,
            &live,
            ALIVE,
            Space::Key,
            key,
            Some(&first),
            Some(settled)
        )
        .unwrap());
        assert!(replace(&ring, &live, ALIVE, Space::Key, key, Some(&settled), None).unwrap());
        assert_eq!(entry(&ring, Space::Key, key).unwrap(), None);
        assert_eq!(
            ring.keys().blocks_in_use(),
            0,
            "the emptied bucket keeps no block"
        );
    }

    #[test]
    fn claimers_of_one_key_from_the_same_entry_never_both_win() {
        let dir = tempfile::tempdir().unwrap();
        let (ring, live) = ring(dir.path());
        let key = b"contended";
        let mut expected = None;
        for round in 0..200u64 {
            let barrier = std::sync::Barrier::new(4);
            let wins: Vec<Option<Entry>> = std::thread::scope(|scope| {
                let claimers: Vec<_> = (0..4u64)
                    .map(|claimer| {
                        let (ring, live, barrier) = (&ring, &live, &barrier);
                        scope.spawn(move || {
                            let claim = at(round + 1, round, Some(round * 4 + claimer));
                            barrier.wait();
                            replace(
                                ring,
                                live,
                                ALIVE,
                                Space::Key,
                                key,
                                expected.as_ref(),
                                Some(claim),
                            )
                            .unwrap()
                            .then_some(claim)
                        })
                    })
                    .collect();
                claimers.into_iter().map(|c| c.join().unwrap()).collect()
            });
            let won: Vec<Entry> = wins.into_iter().flatten().collect();
            assert_eq!(won.len(), 1, "round {round}: {won:?} all won");
            assert_eq!(entry(&ring, Space::Key, key).unwrap(), Some(won[0]));
            expected = Some(won[0]);
        }
    }

    #[test]
    fn writers_of_different_keys_of_one_bucket_lose_no_update() {
        const WRITES: u64 = 300;
        let dir = tempfile::tempdir().unwrap();
        let (ring, live) = ring(dir.path());
        // Four keys of one bucket (one of them a fence resource).
        let bucket = |space, key: &[u8]| bucket_of(ring.keys(), space, key);
        let mut names = vec![(Space::Fence, b"k0".to_vec())];
        let target = bucket(Space::Fence, b"k0");
        names.extend(
            (1..)
                .map(|i| (Space::Key, format!("k{i}").into_bytes()))
                .filter(|(space, key)| bucket(*space, key) == target)
                .take(3),
        );
        std::thread::scope(|scope| {
            for (space, key) in &names {
                let (ring, live) = (&ring, &live);
                scope.spawn(move || {
                    for _ in 0..WRITES {
                        loop {
                            let read = entry(ring, *space, key).unwrap();
                            let version = read.map_or(0, |e| e.version);
                            let next = at(version + 1, version, None);
                            if replace(ring, live, ALIVE, *space, key, read.as_ref(), Some(next))
                                .unwrap()
                            {
                                break;
                            }
                        }
                    }
                });
            }
        });
        for (space, key) in &names {
            assert_eq!(
                entry(&ring, *space, key).unwrap().map(|e| e.version),
                Some(WRITES)
            );
        }
        let blob = ring.keys().read_bucket(target).blob;
        assert_eq!(decode(&blob).unwrap().len(), 4);
    }

    #[test]
    fn prune_removes_settled_entries_below_the_checkpoint_and_keeps_pending_and_voided_claims() {
        let dir = tempfile::tempdir().unwrap();
        let (ring, live) = ring(dir.path());
        let put = |space, key: &[u8], entry| {
            assert!(replace(&ring, &live, ALIVE, space, key, None, Some(entry)).unwrap());
        };
        put(Space::Key, b"applied", at(1, 10, None));
        put(Space::Fence, b"applied", at(1, 19, None));
        put(Space::Key, b"claimed", at(1, 10, Some(30)));
        put(Space::Key, b"claimed-below", at(1, 0, Some(5)));
        put(Space::Key, b"newer", at(1, 20, None));
        // A claim that settled void past the checkpoint: its version is the entry's to go on
        // from (a record of it may still be in the log), not the store file's.
        let voided = |at_lsn| Entry {
            voided: at_lsn,
            ..at(2, 10, None)
        };
        put(Space::Key, b"voided-past", voided(20));
        put(Space::Key, b"voided-below", voided(15));
        assert_eq!(prune(&ring, &live, ALIVE, 20).unwrap(), 3);
        for (space, key, kept) in [
            (Space::Key, &b"applied"[..], false),
            (Space::Fence, b"applied", false),
            (Space::Key, b"claimed", true),
            (Space::Key, b"claimed-below", true),
            (Space::Key, b"newer", true),
            (Space::Key, b"voided-past", true),
            (Space::Key, b"voided-below", false),
        ] {
            assert_eq!(entry(&ring, space, key).unwrap().is_some(), kept, "{key:?}");
        }
        assert_eq!(prune(&ring, &live, ALIVE, 20).unwrap(), 0);
    }

    #[test]
    fn a_full_key_map_is_a_storage_error_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (ring, live) = ring(dir.path());
        // A key longer than the whole map (8 MiB).
        let huge = vec![7u8; 8 << 20];
        let err = replace(
            &ring,
            &live,
            ALIVE,
            Space::Key,
            &huge,
            None,
            Some(at(1, 0, None)),
        )
        .unwrap_err();
        assert!(matches!(err, Error::Storage(_)), "{err:?}");
        assert_eq!(entry(&ring, Space::Key, &huge).unwrap(), None);
        assert_eq!(
            ring.keys().blocks_in_use(),
            0,
            "the claimed blocks were given back"
        );
    }
}
